package selftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/indexedstorage/storagetest"
)

// envMutant names the mutant a subprocess runs the suite on.
const envMutant = "STRATA_MUTANT"

// envTimeout overrides mutantTimeout (a time.ParseDuration string), for a slow machine or -race.
const envTimeout = "STRATA_SELFTEST_TIMEOUT"

// envRepeat runs every mutant that many times (default 1), each run required to kill it.
const envRepeat = "STRATA_SELFTEST_REPEAT"

// mutantTimeout bounds one subprocess: the suite takes a few seconds at most on the reference (under
// -race too), so a mutant still running after this long has hung the suite. That counts as killing
// it, and is reported as a hang, since the suite should fail with a message instead.
const mutantTimeout = 90 * time.Second

// parallelMutants is how many subprocesses run at once.
const parallelMutants = 2

func harness(b bug) storagetest.Harness {
	return storagetest.Harness{
		New: func(tb testing.TB) is.Storage {
			st := newStore(b)
			tb.Cleanup(func() { st.Close() })
			return shapeErrors(st, b)
		},
		// Small model counts keep one run of the suite to seconds (the suite's defaults are 2000 and
		// 500); the racing checks run long enough that an in-process lock bug fails every run. A
		// history costs well under a millisecond here, and the nonLinearizableDelete mutant, whose
		// window is two lock acquisitions wide, survived 3 of 30 runs at the default 200 histories, 3
		// of 20 at 2000 on a loaded machine, and none of 20 at 5000.
		ModelSinglePages:      300,
		ModelWalks:            60,
		LinearizableHistories: 5000,
		RaceRounds:            2000,
		Poison: func(tb testing.TB, st is.Storage, ns, key string) {
			storeOf(st).poison(tb, ns, key)
		},
		Reopen: func(tb testing.TB, st is.Storage) is.Storage {
			again := storeOf(st).reopen()
			tb.Cleanup(func() { again.Close() })
			return shapeErrors(again, b)
		},
	}
}

// TestReference runs the suite on the store with no bug: it must pass, so that a mutant's failure is
// its bug's doing.
func TestReference(t *testing.T) {
	if os.Getenv(envMutant) != "" {
		t.Skip("inside a mutant's subprocess")
	}
	storagetest.Run(t, harness(""))
}

// TestReferenceFallback runs the suite on the store with no bug behind perKey, which hides ClosestLast
// and the batch operations: what is checked then is the per-key fallbacks of is.ClosestLast,
// is.ClosestLastMany and is.DropPrefixMany, which a backend without those methods relies on.
func TestReferenceFallback(t *testing.T) {
	if os.Getenv(envMutant) != "" {
		t.Skip("inside a mutant's subprocess")
	}
	h := harness("")
	h.New = func(tb testing.TB) is.Storage { return perKey{harness("").New(tb)} }
	h.Reopen = func(tb testing.TB, st is.Storage) is.Storage { return perKey{harness("").Reopen(tb, st)} }
	storagetest.Run(t, h)
}

// TestMutant runs the suite on the mutant STRATA_MUTANT names, as a subtest of that name; it is what
// TestMutantsAreKilled re-executes the test binary for. Without the variable it skips.
func TestMutant(t *testing.T) {
	name := os.Getenv(envMutant)
	if name == "" {
		t.Skip(envMutant + " is not set: TestMutantsAreKilled runs this test once per mutant, in a subprocess")
	}
	b, ok := lookup(name)
	if !ok {
		t.Fatalf("%s=%q names no mutant", envMutant, name)
	}
	t.Run(name, func(t *testing.T) { storagetest.Run(t, harness(b)) })
}

// outcome is what one subprocess showed.
type outcome struct {
	name     string
	passed   bool          // exit status 0 and the suite ran
	hung     bool          // killed by -test.timeout
	raced    bool          // the race detector reported a race
	failedIn string        // the first failing check, relative to the mutant's subtest
	message  string        // that check's failure message
	tail     string        // the last lines of the output
	elapsed  time.Duration // how long the subprocess ran
	err      error         // the subprocess could not be run or its result not read
}

// TestMutantsAreKilled runs the suite on every mutant, each in a subprocess (the test binary again,
// with STRATA_MUTANT set and -test.run selecting TestMutant), and fails for every mutant that survives,
// that is whose suite run passes. The reference runs the same way first and must pass, which proves
// the subprocess runs the suite at all: without that control a broken invocation would "kill" every
// mutant.
func TestMutantsAreKilled(t *testing.T) {
	if os.Getenv(envMutant) != "" {
		t.Skip("inside a mutant's subprocess")
	}
	timeout := mutantTimeout
	if s := os.Getenv(envTimeout); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s=%q: %v", envTimeout, s, err)
		}
		timeout = d
	}
	if deadline, ok := t.Deadline(); ok {
		// Leave room for the summary: a hang must end the subprocess, not this test.
		if left := time.Until(deadline) - 30*time.Second; left < timeout {
			timeout = max(left, 10*time.Second)
		}
	}

	artifacts := t.TempDir()
	control := runSuite(t, referenceName, timeout, artifacts)
	if control.err != nil || !control.passed {
		t.Fatalf("the reference store fails the suite in a subprocess, so no mutant's failure means anything (err %v, failed in %q: %s)\n%s",
			control.err, control.failedIn, control.message, control.tail)
	}

	// Every run of a mutant must kill it: a racing check that catches a lock bug in some runs only
	// leaves CI green by luck. STRATA_SELFTEST_REPEAT runs each mutant that many times to measure it.
	repeat := 1
	if s := os.Getenv(envRepeat); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a count of at least 1", envRepeat, s)
		}
		repeat = n
	}
	results := make([][]outcome, len(mutants))
	sem := make(chan struct{}, parallelMutants)
	var wg sync.WaitGroup
	for i, m := range mutants {
		results[i] = make([]outcome, repeat)
		for r := range repeat {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				results[i][r] = runSuite(t, string(m.bug), timeout, artifacts)
			})
		}
	}
	wg.Wait()

	var survivors []string
	for i, m := range mutants {
		passed := 0
		for _, r := range results[i] {
			if r.err != nil {
				t.Errorf("mutant %s: %v", m.bug, r.err)
			}
			if r.passed {
				passed++
			}
		}
		runs := ""
		if repeat > 1 {
			runs = fmt.Sprintf(" in %d of %d runs", passed, repeat)
			if passed == 0 {
				runs = fmt.Sprintf(" (all %d runs)", repeat)
			}
		}
		if passed > 0 {
			survivors = append(survivors, string(m.bug))
			var last outcome
			for _, r := range results[i] {
				if r.passed {
					last = r
				}
			}
			t.Errorf("mutant %s SURVIVED%s: the suite passes on a backend where %s\nlast lines of its run:\n%s", m.bug, runs, m.what, last.tail)
			continue
		}
		// Name what killed it in each distinct way, the first run's message for each.
		var ways []string
		seen := map[string]bool{}
		for _, r := range results[i] {
			way := r.failedIn
			switch {
			case r.err != nil:
				continue
			case r.hung:
				way = "a HANG (killed by the timeout) in " + r.failedIn
			case r.raced:
				way += " (the race detector reported a race)"
			}
			if !seen[way] {
				seen[way] = true
				if r.message != "" && !r.hung {
					way += ": " + r.message
				}
				ways = append(ways, way)
			}
		}
		t.Logf("%-28s killed%s in %.1fs by %s", m.bug, runs, results[i][0].elapsed.Seconds(), strings.Join(ways, "; or by "))
	}
	t.Logf("reference passes in %.1fs; %d of %d mutants killed", control.elapsed.Seconds(), len(mutants)-len(survivors), len(mutants))
	if len(survivors) > 0 {
		t.Errorf("%d surviving mutants: %s", len(survivors), strings.Join(survivors, ", "))
	}
}

// runSuite re-executes the test binary to run the suite on the named mutant and reads the outcome.
func runSuite(t *testing.T, name string, timeout time.Duration, artifacts string) outcome {
	ctx, cancel := context.WithTimeout(t.Context(), timeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0],
		"-test.run=^TestMutant$/^"+name+"$",
		"-test.count=1",
		"-test.v",
		"-test.failfast",
		"-test.timeout="+timeout.String(),
	)
	// The suite writes what it can of a failure (porcupine's visualisation) to STRATA_ARTIFACTS; a
	// mutant's failures are expected, so they go to a directory the test removes.
	// The suite runs at its full depth (storagetest.LongEnv) whatever this run's mode: what is measured
	// is what the suite catches as a backend's CI runs it, not its quick mode's tenth of the random cases.
	cmd.Env = append(os.Environ(), envMutant+"="+name, "STRATA_ARTIFACTS="+artifacts, storagetest.LongEnv+"=1")
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	o := outcome{name: name, elapsed: time.Since(start)}
	out := output.String()
	o.tail = lastLines(out, 15)
	o.raced = strings.Contains(out, "WARNING: DATA RACE")
	var exit *exec.ExitError
	switch {
	case err == nil:
		if !strings.Contains(out, "--- PASS: TestMutant/"+name+" ") {
			o.err = fmt.Errorf("the subprocess exited 0 without running the suite on it:\n%s", o.tail)
		}
		o.passed = true
		return o
	case !errors.As(err, &exit):
		o.err = fmt.Errorf("running the subprocess: %v\n%s", err, o.tail)
		return o
	case ctx.Err() != nil:
		o.err = fmt.Errorf("the subprocess outlived its own -test.timeout of %v and was killed\n%s", timeout, o.tail)
		return o
	}
	o.hung = strings.Contains(out, "panic: test timed out after")
	o.failedIn, o.message = firstFailure(out, name)
	if o.hung {
		o.failedIn = runningTest(out, name)
	}
	if o.failedIn == "" && !o.hung {
		// A crash before any test reported: still a failure of the run, but say what it was.
		o.failedIn, o.message = "(no failing test reported)", firstLine(o.tail)
	}
	return o
}

// firstFailure returns the innermost "--- FAIL" test of the output (with -test.v the results come
// parent first, after the log lines of the failing check) and the log lines printed just before the
// first result line: the check's failure message.
func firstFailure(out, name string) (test, message string) {
	lines := strings.Split(out, "\n")
	first := -1
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if !strings.HasPrefix(trimmed, "--- FAIL: ") {
			continue
		}
		t := strings.TrimPrefix(trimmed, "--- FAIL: ")
		if j := strings.LastIndex(t, " ("); j >= 0 {
			t = t[:j]
		}
		if first < 0 || strings.Count(t, "/") > strings.Count(test, "/") {
			test = t
		}
		if first < 0 {
			first = i
		}
	}
	if first < 0 {
		return "", ""
	}
	for j := first - 1; j >= 0; j-- {
		if strings.HasPrefix(strings.TrimSpace(lines[j]), "=== ") {
			break
		}
		if l := strings.TrimSpace(lines[j]); logLine.MatchString(lines[j]) && !strings.Contains(l, "rerun with STRATA_MODEL_SEED") {
			message = l
			break
		}
	}
	if len(message) > 240 {
		message = strings.ToValidUTF8(message[:240], "") + " …"
	}
	return strings.TrimPrefix(test, "TestMutant/"+name+"/"), message
}

// logLine is the first line of a t.Log or t.Fatal message: "file.go:123: text", indented.
var logLine = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: `)

// runningTest returns the innermost test a -test.timeout panic lists as running.
func runningTest(out, name string) string {
	_, after, ok := strings.Cut(out, "running tests:\n")
	if !ok {
		return "(unknown test)"
	}
	deepest := ""
	for _, line := range strings.Split(after, "\n") {
		l := strings.TrimSpace(line)
		if !strings.HasPrefix(l, "Test") {
			break
		}
		if j := strings.LastIndex(l, " ("); j >= 0 {
			l = l[:j]
		}
		if len(l) > len(deepest) {
			deepest = l
		}
	}
	return strings.TrimPrefix(deepest, "TestMutant/"+name+"/")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
