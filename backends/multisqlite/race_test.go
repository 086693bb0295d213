package multisqlite

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
)

// The cross-process race: this test process drains and removes agents while a second process (this
// test binary again, running TestHelperProcess_Writer) appends to them and so re-creates them. Every
// append the writer saw succeed must be read back at the end or have been read by the drainer before a
// drop that covered it; an append that landed in a removed file is in neither.
//
// STRATA_MSQ_RACE_UNSAFE=1 takes the protocol's locks out of both processes (unsafeNoLock): the same
// run then loses appends, which shows what the locks prevent and that the check can fail. The test
// fails in that mode as in any other when anything is lost.
const (
	envHelper = "STRATA_MSQ_HELPER"
	envDir    = "STRATA_MSQ_DIR"
	envLog    = "STRATA_MSQ_LOG"
	envRounds = "STRATA_MSQ_ROUNDS"
	envUnsafe = "STRATA_MSQ_RACE_UNSAFE"
)

// raceBurst is how many appends in a row the writer makes to one agent.
const raceBurst = 10

// raceAgents are the agents of the race: two buckets, so that directories are removed and made again
// too, and a long key, whose file is named by a hash.
func raceAgents() []string {
	var out []string
	for i := range 2 {
		out = append(out, is.BucketPrefix(100+i%2)+fmt.Sprintf("c:agent-%d", i))
	}
	return append(out, is.BucketPrefix(101)+"c:"+strings.Repeat("long", 80))
}

func TestRemoval_CrossProcessRaceLosesNothing(t *testing.T) {
	testenv.SkipUnlessLong(t, "the cross-process race (a few seconds)")
	unsafe := os.Getenv(envUnsafe) == "1"
	rounds := 200
	if n, err := strconv.Atoi(os.Getenv(envRounds)); err == nil && n > 0 {
		rounds = n
	}
	dir := t.TempDir()
	logPath := filepath.Join(t.TempDir(), "acked")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess_Writer$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHelper+"=writer", envDir+"="+dir, envLog+"="+logPath, envRounds+"="+strconv.Itoa(rounds))
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	st := open(t, dir, Options{})
	st.unsafeNoLock = unsafe
	ctx := t.Context()
	agents := raceAgents()
	drained := map[string]map[uint64]bool{}
	for _, a := range agents {
		drained[a] = map[uint64]bool{}
	}
	uncertain, drains := 0, 0
	// drain reads what an agent holds and drops exactly that: ids are appended in increasing order, so
	// nothing the read did not see lies at or below its last id.
	drain := func(a string) {
		entries, err := st.Read(ctx, testNS, a, 0, is.MaxID)
		if err != nil {
			uncertain++
			t.Logf("drainer: read %s: %v", a, err)
			return
		}
		if len(entries) == 0 {
			return
		}
		upTo := entries[len(entries)-1].ID
		n, err := st.DropPrefix(ctx, testNS, a, upTo)
		if err != nil {
			uncertain++
			t.Logf("drainer: drop %s up to %d: %v", a, upTo, err)
			return
		}
		if n != uint64(len(entries)) {
			t.Errorf("drainer: a drop of %s up to %d dropped %d entries, the read before it saw %d", a, upTo, n, len(entries))
		}
		for _, e := range entries {
			if drained[a][e.ID] {
				t.Errorf("%s: id %d read and dropped twice", a, e.ID)
			}
			drained[a][e.ID] = true
		}
		drains++
	}
	var werr error
	for running := true; running; {
		select {
		case werr = <-done:
			running = false
		default:
		}
		for _, a := range agents {
			drain(a)
		}
	}
	if werr != nil {
		t.Fatalf("writer process: %v\n%s", werr, stderr.String())
	}
	remaining := map[string]map[uint64]bool{}
	for _, a := range agents {
		remaining[a] = map[uint64]bool{}
		for _, id := range ids(t, st, a) {
			remaining[a][id] = true
		}
	}

	acked, wUncertain := readAcked(t, logPath)
	lost, total := 0, 0
	for a, as := range acked {
		for id := range as {
			total++
			if !drained[a][id] && !remaining[a][id] {
				lost++
				if lost <= 10 {
					t.Logf("lost: %s id %d", a, id)
				}
			}
		}
		for id := range drained[a] {
			if !as[id] && !wUncertain[a][id] {
				t.Errorf("%s: id %d was read but never appended", a, id)
			}
		}
	}
	t.Logf("unsafe=%v: %d appends acknowledged, %d uncertain (writer), %d uncertain (drainer), %d drains, %d files removed, %d lost",
		unsafe, total, countAll(wUncertain), uncertain, drains, st.Stats().FilesRemoved, lost)
	if lost != 0 {
		t.Fatalf("%d of %d acknowledged appends lost", lost, total)
	}
	if total != rounds*raceBurst*len(agents) {
		t.Fatalf("the writer acknowledged %d appends of %d", total, rounds*len(agents))
	}
	// The race must have happened: agents were removed and created again many times.
	if st.Stats().FilesRemoved < int64(len(agents)) {
		t.Fatalf("only %d files removed: the drainer never raced the writer", st.Stats().FilesRemoved)
	}
	if uncertain != 0 || countAll(wUncertain) != 0 {
		t.Fatalf("operations failed (drainer %d, writer %d): see the log", uncertain, countAll(wUncertain))
	}
}

func countAll(m map[string]map[uint64]bool) int {
	n := 0
	for _, s := range m {
		n += len(s)
	}
	return n
}

// readAcked reads the writer's log: "ok <key> <id>" for an append that returned nil, "err <key> <id>"
// for one that failed (it may or may not have been committed).
func readAcked(t *testing.T, path string) (acked, uncertain map[string]map[uint64]bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	acked, uncertain = map[string]map[uint64]bool{}, map[string]map[uint64]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			t.Fatalf("writer log line %q", sc.Text())
		}
		id, err := strconv.ParseUint(fields[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		m := acked
		if fields[0] != "ok" {
			m = uncertain
		}
		if m[fields[1]] == nil {
			m[fields[1]] = map[uint64]bool{}
		}
		m[fields[1]][id] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return acked, uncertain
}

// TestHelperProcess_Writer is the writer of the cross-process race, run by it in a process of its own.
func TestHelperProcess_Writer(t *testing.T) {
	if os.Getenv(envHelper) != "writer" {
		t.Skip("the writer process of TestRemoval_CrossProcessRaceLosesNothing")
	}
	rounds, err := strconv.Atoi(os.Getenv(envRounds))
	if err != nil {
		t.Fatal(err)
	}
	st, err := New(context.Background(), os.Getenv(envDir), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.unsafeNoLock = os.Getenv(envUnsafe) == "1"
	f, err := os.Create(os.Getenv(envLog))
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	agents := raceAgents()
	next := make([]uint64, len(agents))
	for range rounds {
		for i, a := range agents {
			// A burst to one agent: appends on an open file, which the drainer empties and removes
			// under them.
			for range raceBurst {
				next[i]++
				status := "ok"
				if err := st.Append(context.Background(), testNS, a, next[i], []byte("v")); err != nil {
					status = "err"
					fmt.Fprintf(os.Stderr, "writer: append %s %d: %v\n", a, next[i], err)
				}
				fmt.Fprintf(w, "%s %s %d\n", status, a, next[i])
			}
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
