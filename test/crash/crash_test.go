package crash_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/cloudblob"
	"github.com/stratalog/strata/backends/fsblob"
	"github.com/stratalog/strata/internal/s3local"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
	"github.com/stratalog/strata/test/strataproc"
)

// The crash test strands crashAgents ephemeral oplogs of crashEntries entries each, written as an
// executor's invocation steps would write them (a chunk per step, of seeded random size up to
// crashMaxStep entries), runs `strata run` over them and kills it with SIGKILL at random moments while
// it sweeps. A drain of one agent reads level 1 across several stored chunks in two batches, puts two
// blob chunks and drops two prefixes (the first usually stops inside a stored chunk, whose head is then
// in both layers until the second): every one of those storage calls is a place a kill can land.
const (
	crashAgents  = 120
	crashEntries = 5000
	crashMaxStep = 700
	// crashMaxWait is the upper bound of the random delay between feeding a started process and
	// killing it.
	crashMaxWait = 500 * time.Millisecond
)

// crashIterations is STRATA_CRASH_ITERATIONS, 50 by default.
func crashIterations(t *testing.T) int {
	return testenv.PositiveInt(t, "STRATA_CRASH_ITERATIONS", 50)
}

// crashSeed is STRATA_CRASH_SEED when set (to replay a failure), a random seed otherwise; logged.
func crashSeed(t *testing.T) *rand.Rand {
	t.Helper()
	seed := rand.Uint64()
	if raw := os.Getenv("STRATA_CRASH_SEED"); raw != "" {
		var err error
		if seed, err = strconv.ParseUint(raw, 10, 64); err != nil {
			t.Fatalf("STRATA_CRASH_SEED=%q: %v", raw, err)
		}
	}
	t.Logf("seed %d (STRATA_CRASH_SEED=%d replays the chunk sizes and the kill delays)", seed, seed)
	return rand.New(rand.NewPCG(seed, 0))
}

// crashPayload is entry i's payload: the agent's name and the index, so that an entry read back under
// another agent or index shows, padded with crashPad bytes that vary with the index.
func crashPayload(a oplog.AgentID, i oplog.Index) []byte {
	return appendCrashPayload(nil, a, i)
}

const (
	crashPad      = 96
	crashAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
)

var crashPadding = strings.Repeat(crashAlphabet, crashPad/len(crashAlphabet)+2)

func appendCrashPayload(buf []byte, a oplog.AgentID, i oplog.Index) []byte {
	buf = append(append(buf, a.Name...), '#')
	buf = append(strconv.AppendUint(buf, uint64(i), 10), ';')
	off := int(uint64(i) % uint64(len(crashAlphabet)))
	return append(buf, crashPadding[off:off+crashPad]...)
}

func TestCrash_SIGKILLWhileSweepingLosesAndDoublesNothing(t *testing.T) {
	testenv.SkipUnlessLong(t, "the SIGKILL loop")
	bin := crashBinary(t)
	iterations := crashIterations(t)
	t.Run("sqlite", func(t *testing.T) {
		st := backendtest.SQLite().Open(t)
		u := backendtest.URL(t, st)
		blobs, blobURL := crashBlobs(t)
		runCrash(t, bin, oplogtest.NewLayers(t, st, blobs), u, u, blobURL, iterations)
	})
	// The packed layout's segments and ranged reads over the S3 protocol: a server in this process,
	// which outlives every kill of the binary.
	t.Run("sqlite-s3", func(t *testing.T) {
		st := backendtest.SQLite().Open(t)
		u := backendtest.URL(t, st)
		testenv.S3LocalEnv() // the binary inherits the credentials
		srv, err := s3local.Start("127.0.0.1:0", true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		blobURL := srv.BucketURL("crash", "strata")
		blobs, err := cloudblob.Open(t.Context(), blobURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { blobs.Close() })
		runCrash(t, bin, oplogtest.NewLayers(t, st, blobs), u, u, blobURL, iterations)
	})
	t.Run("postgres", func(t *testing.T) {
		st := backendtest.Postgres().Open(t)
		u := backendtest.URL(t, st)
		blobs, blobURL := crashBlobs(t)
		runCrash(t, bin, oplogtest.NewLayers(t, st, blobs), u, u, blobURL, iterations)
	})
	// The scheduled rows of the stores without a schedule store of their own live in a SQLite file.
	t.Run("multisqlite", func(t *testing.T) {
		st := backendtest.MultiSQLite().Open(t)
		blobs, blobURL := crashBlobs(t)
		runCrash(t, bin, oplogtest.NewLayers(t, st, blobs), backendtest.URL(t, st), scheduleFile(t), blobURL, iterations)
	})
	t.Run("redis", func(t *testing.T) {
		st := backendtest.Redis().Open(t)
		blobs, blobURL := crashBlobs(t)
		runCrash(t, bin, oplogtest.NewLayers(t, st, blobs), backendtest.URL(t, st), scheduleFile(t), blobURL, iterations)
	})
}

func scheduleFile(t *testing.T) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "schedule.db")
}

// crashBlobs is a blob directory of the test's own and its URL.
func crashBlobs(t *testing.T) (*fsblob.Store, string) {
	t.Helper()
	blobs, err := fsblob.New(t.Context(), filepath.Join(t.TempDir(), "blobs"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return blobs, "fs://" + blobs.Root()
}

// runCrash strands the agents through l (the test's own handle on the storage and blob directory the
// binary is configured with), kills the binary iterations times while it sweeps, checking every oplog
// after every kill, then lets it converge and checks the drained state.
func runCrash(t *testing.T, bin string, l *oplogtest.Layers, storageURL, scheduleURL, blobURL string, iterations int) {
	ctx := t.Context()
	cfg := writeCrashConfig(t, storageURL, scheduleURL, blobURL)
	rng := crashSeed(t)

	agents := make([]oplog.AgentID, crashAgents)
	chunks := 0
	for i := range agents {
		a := oplog.AgentID{Component: "crash", Name: fmt.Sprintf("agent/%03d", i)}
		agents[i] = a
		for from := 1; from <= crashEntries; {
			n := min(crashEntries-from+1, 1+rng.IntN(crashMaxStep))
			batch := make([]oplog.Entry, n)
			for j := range batch {
				idx := oplog.Index(from + j)
				batch[j] = oplog.Entry{Index: idx, Payload: crashPayload(a, idx)}
			}
			if err := l.Stack.Append(ctx, a, oplog.Ephemeral, batch); err != nil {
				t.Fatal(err)
			}
			from += n
			chunks++
		}
	}
	t.Logf("stranded %d agents of %d entries in %d chunks in compressed level 1", crashAgents, crashEntries, chunks)
	before := crashCheck(t, l, agents)
	if n := before.inLevel1(); n != crashAgents {
		t.Fatalf("%d of %d agents stranded in compressed level 1 before the first start", n, crashAgents)
	}

	began := time.Now()
	withWork, moved, cutDrain := 0, 0, 0
	for i := 1; i <= iterations; i++ {
		p := strataproc.Start(t, bin, cfg)
		feed(t, p)
		wait := time.Duration(rng.Int64N(int64(crashMaxWait) + 1))
		time.Sleep(wait)
		p.Kill(t)

		after := crashCheck(t, l, agents)
		remaining, cut := after.inLevel1(), after.cutSince(before)
		if remaining > 0 {
			withWork++
		}
		if !slices.Equal(after, before) {
			moved++
		}
		if cut > 0 {
			cutDrain++
		}
		t.Logf("kill %2d after %3dms: %2d agents left in compressed level 1, %2d drained, %d drain(s) left half done by this kill",
			i, wait.Milliseconds(), remaining, crashAgents-remaining, cut)
		before = after
	}
	t.Logf("%d kills in %s: %d landed while agents remained in compressed level 1, %d ended a process that had moved entries, %d left a drain half done",
		iterations, time.Since(began).Round(time.Millisecond), withWork, moved, cutDrain)
	// A kill of an idle process proves nothing: most kills must have found agents still to archive.
	if want := iterations * 4 / 5; withWork < want {
		t.Errorf("only %d of %d kills landed while agents remained in compressed level 1, want at least %d: the sweep finished too early for the kills to mean much", withWork, iterations, want)
	}

	// Restart once more and let the sweep converge.
	p := strataproc.Start(t, bin, cfg)
	feed(t, p)
	converging := time.Now()
	for deadline := converging.Add(3 * time.Minute); ; {
		n := l.StrandedCount(t, agents)
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			p.Kill(t)
			t.Fatalf("%d agents still in compressed level 1 after 3 minutes of sweeping\n%s", n, p.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := p.Stop(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM\n%s", code, p.Log())
	}
	t.Logf("the last start drained the rest in %s", time.Since(converging).Round(time.Millisecond))
	for _, a := range agents {
		l.RequireDrained(t, a, oplog.Ephemeral, crashEntries)
	}
	if n := crashCheck(t, l, agents).inLevel1(); n != 0 {
		t.Fatalf("%d agents back in compressed level 1", n)
	}
}

// crashAgentState is where one agent's entries were found: how many the blob layer holds (always a
// prefix 1..blob), and whether compressed level 1 holds any, from index first.
type crashAgentState struct {
	blob    int
	inL1    bool
	l1First oplog.Index
}

// halfMoved: a drain of the agent stopped part way (some entries are below, some still above).
func (s crashAgentState) halfMoved() bool { return s.inL1 && s.blob > 0 }

// crashState is what a check found, agent by agent.
type crashState []crashAgentState

func (s crashState) inLevel1() int {
	n := 0
	for _, a := range s {
		if a.inL1 {
			n++
		}
	}
	return n
}

// cutSince counts the agents the last process moved part of and left half moved: drains the kill cut
// after their first write below. (A kill while a drain is still reading leaves no trace to count.)
func (s crashState) cutSince(before crashState) int {
	n := 0
	for i, a := range s {
		if a.halfMoved() && a != before[i] {
			n++
		}
	}
	return n
}

// crashCheck reads every oplog back through the stack, as a reader would, and fails unless each returns
// exactly 1..crashEntries with its payloads. It also fails unless the blob layer holds a prefix of the
// oplog with each index once (an interrupted archive step may leave an entry in both layers, which
// Read hides, but the blob layer itself must never hold an entry twice), and unless an agent gone from
// compressed level 1 is whole in the blob layer. Agents are checked by a few goroutines at once.
func crashCheck(t *testing.T, l *oplogtest.Layers, agents []oplog.AgentID) crashState {
	t.Helper()
	state := make(crashState, len(agents))
	errs := make([]error, len(agents))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(4, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for i := range next {
				state[i], errs[i] = crashCheckAgent(t.Context(), l, agents[i])
			}
		})
	}
	for i := range agents {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return state
}

func crashCheckAgent(ctx context.Context, l *oplogtest.Layers, a oplog.AgentID) (crashAgentState, error) {
	var state crashAgentState
	got, err := l.Stack.Read(ctx, a, oplog.Ephemeral, 1, crashEntries+10)
	if err != nil {
		return state, fmt.Errorf("%s: read: %w", a, err)
	}
	if len(got) != crashEntries {
		return state, fmt.Errorf("%s: read back %d entries, want %d", a, len(got), crashEntries)
	}
	var buf []byte
	for i, e := range got {
		want := oplog.Index(i + 1)
		if buf = appendCrashPayload(buf[:0], a, want); e.Index != want || !bytes.Equal(e.Payload, buf) {
			return state, fmt.Errorf("%s: entry %d read back as index %d, payload %q", a, want, e.Index, e.Payload)
		}
	}

	chunks, err := l.BlobChunks(ctx, a, oplog.Ephemeral)
	if err != nil {
		return state, err
	}
	for _, c := range chunks {
		first, last := c.First, c.Last
		if first != oplog.Index(state.blob)+1 {
			return state, fmt.Errorf("%s: blob chunk in %s holds %d..%d after blob chunks covering 1..%d: an index is held twice or skipped", a, c.Where, first, last, state.blob)
		}
		state.blob = int(last)
	}

	first, inL1, err := l.Stack.Archives()[0].FirstIndex(ctx, a, oplog.Ephemeral)
	if err != nil {
		return state, err
	}
	state.inL1, state.l1First = inL1, first
	switch {
	case inL1 && first > oplog.Index(state.blob)+1:
		return state, fmt.Errorf("%s: the blob layer holds 1..%d and compressed level 1 starts at %d", a, state.blob, first)
	case !inL1 && state.blob != crashEntries:
		return state, fmt.Errorf("%s: gone from compressed level 1 with %d of %d entries in the blob layer", a, state.blob, crashEntries)
	}
	return state, nil
}

// writeCrashConfig writes the binary's config: the sweep ticks by itself every 100 ms (the smallest
// interval), archiving one batch of two agents per tick (a kill inside a batch cuts both drains at
// once, at whichever round each is in), so that however fast the machine, a process archives only a
// few agents in the ≤ 500 ms it lives and the work outlasts most of the kills (a tick of the packed
// layout writes one segment a round, not a file a chunk, so it no longer takes longer than the interval); the residency feed never
// goes stale during the test.
func writeCrashConfig(t *testing.T, storageURL, scheduleURL, blobURL string) string {
	t.Helper()
	return strataproc.WriteConfig(t, t.TempDir(), storageURL, scheduleURL, blobURL, `[sweep]
interval = "100ms"
max_concurrency = 1
max_archives_per_tick = 2
archive_batch = 2
[residency]
ttl = "1h"
`)
}
