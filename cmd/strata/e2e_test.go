package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/fsblob"
	"github.com/stratalog/strata/backends/sqlite"
	"github.com/stratalog/strata/config"
	"github.com/stratalog/strata/internal/sidecar"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/strataproc"
)

var binary string

// TestMain builds the strata binary once; the end-to-end tests run it as an operator would.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "strata-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if binary, err = strataproc.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// deployment is a data directory with a config file for it.
type deployment struct {
	dir, config string
}

// newDeployment writes a config with sweepExtra added to [sweep] and httpExtra to [http].
func newDeployment(t *testing.T, sweepExtra, httpExtra string) deployment {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`[storage]
url = "sqlite://%[1]s/strata.db"
[schedule]
url = "sqlite://%[1]s/strata.db"
[blob]
url = "fs://%[1]s/blobs"
[http]
listen = "127.0.0.1:0"
%[3]s
[sweep]
interval = "1h"  # ticks come from POST /v1/sweep in these tests
%[2]s
`, dir, sweepExtra, httpExtra)
	path := filepath.Join(dir, "strata.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return deployment{dir: dir, config: path}
}

// stack opens the deployment's stores from the test process, beside the running binary.
func (d deployment) stack(t *testing.T) *oplog.Stack {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(d.dir, "strata.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs, err := fsblob.Open(filepath.Join(d.dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	stack, err := sidecar.BuildStack(st, blobs, 1)
	if err != nil {
		t.Fatal(err)
	}
	return stack
}

func payloadOf(a oplog.AgentID, i int) []byte { return fmt.Appendf(nil, "%s#%d", a.Name, i) }

func strandAgents(t *testing.T, stack *oplog.Stack, n, entries int) []oplog.AgentID {
	t.Helper()
	var agents []oplog.AgentID
	for i := range n {
		a := oplog.AgentID{Component: "shop", Name: fmt.Sprintf("cart/%03d", i)}
		batch := make([]oplog.Entry, entries)
		for j := range batch {
			batch[j] = oplog.Entry{Index: oplog.Index(j + 1), Payload: payloadOf(a, j+1)}
		}
		if err := stack.Append(t.Context(), a, oplog.Ephemeral, batch); err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
	}
	return agents
}

// requireWhole checks every agent reads back exactly 1..entries and lives in one layer or the other,
// never half moved.
func requireWhole(t *testing.T, stack *oplog.Stack, agents []oplog.AgentID, entries int) (archived int) {
	t.Helper()
	ctx := t.Context()
	for _, a := range agents {
		got, err := stack.Read(ctx, a, oplog.Ephemeral, 1, entries+5)
		if err != nil || len(got) != entries {
			t.Fatalf("%s: read %d entries, %v", a, len(got), err)
		}
		for i, e := range got {
			if e.Index != oplog.Index(i+1) || !bytes.Equal(e.Payload, payloadOf(a, i+1)) {
				t.Fatalf("%s: entry %d is %d %q", a, i+1, e.Index, e.Payload)
			}
		}
		_, inL1, _ := stack.Archives()[0].LastIndex(ctx, a, oplog.Ephemeral)
		_, inBlob, _ := stack.Archives()[1].LastIndex(ctx, a, oplog.Ephemeral)
		if inL1 && inBlob {
			t.Fatalf("%s is half moved: entries in compressed level 1 and in the blob layer", a)
		}
		if inBlob {
			archived++
		}
	}
	return archived
}

// start runs the binary over the deployment with env added to the test's environment.
func start(t *testing.T, d deployment, env ...string) *strataproc.Process {
	t.Helper()
	return strataproc.Start(t, binary, d.config, env...)
}

// feed gives the process the single shard, with a lease, and an empty resident set.
func feed(t *testing.T, p *strataproc.Process, token string) {
	t.Helper()
	if code, body := p.Call(t, "PUT", "/v1/assignment", token, `{"shard_count":1,"shards":[0],"lease_seconds":600}`); code != 200 {
		t.Fatalf("assignment: %d %s", code, body)
	}
	if code, body := p.Call(t, "PUT", "/v1/residency", token, `{"agents":[]}`); code != 200 {
		t.Fatalf("residency: %d %s", code, body)
	}
}

func TestBinary_StrandedOplogsAreArchivedAfterTwoSweeps(t *testing.T) {
	d := newDeployment(t, "", "")
	stack := d.stack(t)
	agents := strandAgents(t, stack, 6, 20)
	p := start(t, d)
	feed(t, p, "")
	var report map[string]any
	for range 2 {
		code, body := p.Call(t, "POST", "/v1/sweep", "", "")
		if code != 200 || json.Unmarshal([]byte(body), &report) != nil {
			t.Fatalf("sweep: %d %s", code, body)
		}
	}
	if n := report["outcomes"].(map[string]any)["archived"]; n != float64(6) {
		t.Fatalf("second sweep archived %v, want 6: %v", n, report)
	}
	if got := requireWhole(t, stack, agents, 20); got != 6 {
		t.Fatalf("%d of 6 agents in the blob layer", got)
	}
	_, metrics := p.Call(t, "GET", "/metrics", "", "")
	m := regexp.MustCompile(`(?m)^oplog_sweep_outcome_total\{[^}]*outcome="archived"[^}]*\} (\d+)`).FindStringSubmatch(metrics)
	if m == nil || m[1] != "6" {
		t.Fatalf("oplog_sweep_outcome_total{outcome=\"archived\"} = %v, want 6", m)
	}
	if code := p.Stop(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM\n%s", code, p.Log())
	}
}

func TestBinary_SIGTERMDuringATickExitsZeroAndLeavesNoAgentHalfMoved(t *testing.T) {
	d := newDeployment(t, "max_concurrency = 1", "")
	stack := d.stack(t)
	const entries = 9000 // three chunks, two hops' worth of work per agent
	agents := strandAgents(t, stack, 40, entries)
	p := start(t, d)
	feed(t, p, "")
	if code, body := p.Call(t, "POST", "/v1/sweep", "", ""); code != 200 {
		t.Fatalf("first sweep: %d %s", code, body)
	}
	sweeping := make(chan string, 1)
	go func() {
		_, body := p.Call(t, "POST", "/v1/sweep", "", "")
		sweeping <- body
	}()
	// Signal once the tick is archiving: the first agent has left compressed level 1.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, ok, _ := stack.Archives()[0].LastIndex(t.Context(), agents[0], oplog.Ephemeral); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the tick never started archiving")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if code := p.Stop(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM during a tick\n%s", code, p.Log())
	}
	body := <-sweeping
	archived := requireWhole(t, stack, agents, entries)
	t.Logf("archived %d of %d agents before the shutdown stopped the tick", archived, len(agents))
	if !strings.Contains(body, "shutdown") && archived < len(agents) {
		t.Fatalf("the interrupted tick's report does not say shutdown: %.500s", body)
	}
}

func TestBinary_TokenBodiesAndBadJSON(t *testing.T) {
	d := newDeployment(t, "", "token = \"s3cret\"\nmax_body_bytes = 512")
	p := start(t, d)
	if code, _ := p.Call(t, "PUT", "/v1/assignment", "", `{"shard_count":1,"shards":[0]}`); code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", code)
	}
	if code, body := p.Call(t, "PUT", "/v1/residency", "s3cret", `{"agents":["`+strings.Repeat("x", 2000)+`"]}`); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized: %d %s", code, body)
	}
	if code, body := p.Call(t, "PUT", "/v1/assignment", "s3cret", `{"shard_count":`); code != http.StatusBadRequest || !strings.Contains(body, "bad JSON") {
		t.Fatalf("malformed: %d %s", code, body)
	}
	_, status := p.Call(t, "GET", "/v1/status", "s3cret", "")
	if !strings.Contains(status, `"assignment": null`) {
		t.Fatalf("refused writes changed the feed: %s", status)
	}
	if code := p.Stop(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func runBinary(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		exitErr, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatal(err)
		}
		code = exitErr.ExitCode()
	}
	return code, stdout.String(), stderr.String()
}

func TestBinary_DemoRunsTwiceOnOneDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fresh")
	for run := 1; run <= 2; run++ {
		code, out, errOut := runBinary(t, nil, "demo", "--dir", dir, "--invocations", "60")
		if code != 0 || !strings.Contains(out, "verified: 60/60 invocations read back exactly once") {
			t.Fatalf("demo run %d: exit %d\n%s\n%s", run, code, out, errOut)
		}
	}
}

func TestBinary_BadConfigurationNamesTheKey(t *testing.T) {
	d := newDeployment(t, "page_size = -1", "")
	code, _, errOut := runBinary(t, nil, "run", "--config", d.config)
	if code != 1 || !strings.Contains(errOut, "sweep.page_size") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	d = newDeployment(t, "", "")
	code, _, errOut = runBinary(t, []string{"STRATA_SWEEP_MAX_TICK_DURATION=soon"}, "run", "--config", d.config)
	if code != 1 || !strings.Contains(errOut, "STRATA_SWEEP_MAX_TICK_DURATION") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

func TestBinary_ConfigDefaultsParseBack(t *testing.T) {
	code, out, _ := runBinary(t, nil, "config", "defaults")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	cfg, err := config.Parse([]byte(out), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sweep.PageSize != config.Default().Sweep.PageSize || !strings.Contains(out, "untuned") {
		t.Fatalf("defaults: %+v", cfg.Sweep)
	}
}

func TestBinary_InspectAndScanShowWhereEntriesLive(t *testing.T) {
	d := newDeployment(t, "", "")
	stack := d.stack(t)
	agents := strandAgents(t, stack, 2, 5000)
	if _, err := stack.Drain(t.Context(), agents[1], oplog.Ephemeral); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runBinary(t, nil, "inspect", "--config", d.config, agents[0].Key())
	if code != 0 || !regexp.MustCompile(`compressed-1\s+1\s+5000\s+5000`).MatchString(out) || !regexp.MustCompile(`blob-0\s+-\s+-\s+0`).MatchString(out) {
		t.Fatalf("inspect %s: exit %d\n%s%s", agents[0], code, out, errOut)
	}
	_, out, _ = runBinary(t, nil, "inspect", "--config", d.config, agents[1].Key())
	if !regexp.MustCompile(`blob-0\s+1\s+5000\s+5000`).MatchString(out) {
		t.Fatalf("inspect of a drained agent:\n%s", out)
	}
	code, out, _ = runBinary(t, nil, "scan", "--config", d.config)
	if code != 0 || !strings.Contains(out, agents[0].Key()+"  5000") || strings.Contains(out, agents[1].Key()) {
		t.Fatalf("scan: exit %d\n%s", code, out)
	}
	if code, _, errOut := runBinary(t, nil, "inspect", "--config", d.config, "no-colon"); code != 2 || !strings.Contains(errOut, "no-colon") {
		t.Fatalf("inspect of a bad key: %d %s", code, errOut)
	}
}

func TestBinary_SweepOnceArchivesWhatStayedQuietAcrossItsTwoPasses(t *testing.T) {
	d := newDeployment(t, "", "")
	stack := d.stack(t)
	agents := strandAgents(t, stack, 4, 30)
	code, out, errOut := runBinary(t, nil, "sweep", "--once", "--gap", "100ms", "--config", d.config)
	if code != 0 || !strings.Contains(out, "archived 4 agents") {
		t.Fatalf("sweep --once: exit %d\n%s%s", code, out, errOut)
	}
	if got := requireWhole(t, stack, agents, 30); got != 4 {
		t.Fatalf("%d of 4 agents in the blob layer", got)
	}
	code, out, _ = runBinary(t, nil, "sweep", "--once", "--json", "--gap", "100ms", "--config", d.config)
	var line map[string]any
	if code != 0 || json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &line) != nil || line["routes"] == nil {
		t.Fatalf("sweep --once --json: exit %d\n%s", code, out)
	}
	if code, _, errOut := runBinary(t, nil, "sweep", "--config", d.config); code != 2 || !strings.Contains(errOut, "--once") {
		t.Fatalf("sweep without --once: exit %d %s", code, errOut)
	}
}

func TestBench_AnUnknownScenarioIsAUsageError(t *testing.T) {
	var out, errOut strings.Builder
	if code := run([]string{"bench", "chaos", "--scenarios", "C"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `--scenarios "C": want A, B or AB`) {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
}
