package load_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/fsblob"
	"github.com/stratalog/strata/config"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/sidecar"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
)

const (
	loadShards  = 4
	loadEntries = 3 // per agent: one small chunk
)

// loadSidecarShards is the assignment of each sidecar: two sidecars, two shards each.
var loadSidecarShards = [][]int{{0, 1}, {2, 3}}

// loadAgents is STRATA_LOAD_AGENTS, 5,000 by default so that CI stays fast; the figure the load test
// exists for is 100,000.
func loadAgents(t *testing.T) int {
	return testenv.PositiveInt(t, "STRATA_LOAD_AGENTS", 5000)
}

func loadPayload(a oplog.AgentID, i oplog.Index) []byte {
	return fmt.Appendf(nil, "%s#%d", a.Name, i)
}

func TestLoad_TwoSidecarsDrainStrandedAgentsOnce(t *testing.T) {
	testenv.SkipUnlessLong(t, "the two-sidecar load run")
	n := loadAgents(t)
	t.Run("postgres", func(t *testing.T) {
		st := backendtest.Postgres().Open(t)
		runLoad(t, "postgres", st, backendtest.URL(t, st), n)
	})
	t.Run("redis", func(t *testing.T) {
		st := backendtest.Redis().Open(t)
		runLoad(t, "redis", st, backendtest.URL(t, st), n)
	})
}

// runLoad strands n ephemeral agents through st (the test's own handle on the storage the sidecars are
// configured with by storageURL), runs two sidecars over them, each owning two of the four shards,
// until every agent has been archived, and checks that each was archived once, by its shard's owner,
// whole, into exactly one blob chunk.
func runLoad(t *testing.T, backend string, st is.Storage, storageURL string, n int) {
	ctx := t.Context()
	blobDir := filepath.Join(t.TempDir(), "blobs")
	blobs, err := fsblob.New(ctx, blobDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := oplogtest.NewLayers(t, st, blobs)

	agents := make([]oplog.AgentID, n)
	for i := range agents {
		agents[i] = oplog.AgentID{Component: "load", Name: fmt.Sprintf("agent-%06d", i)}
	}
	began := time.Now()
	loadParallel(t, n, 8, func(i int) error {
		a := agents[i]
		batch := make([]oplog.Entry, loadEntries)
		for j := range batch {
			idx := oplog.Index(j + 1)
			batch[j] = oplog.Entry{Index: idx, Payload: loadPayload(a, idx)}
		}
		return l.Stack.Append(ctx, a, oplog.Ephemeral, batch)
	})
	perShard := make([]int, loadShards)
	for _, a := range agents {
		perShard[a.Shard(loadShards)]++
	}
	t.Logf("%s: stranded %d agents (per shard %v) in %s", backend, n, perShard, time.Since(began).Round(time.Millisecond))

	// Two sidecars as two processes would run them: each opens the storage and the blob directory
	// itself (its own connection pool), owns two shards, and is told nothing is resident.
	sidecars := make([]*sidecar.Sidecar, len(loadSidecarShards))
	for k, shards := range loadSidecarShards {
		cfg := config.Default()
		cfg.Storage.URL = storageURL
		cfg.Blob.URL = "fs://" + blobDir
		cfg.Schedule.URL = "memory://" // the scheduler is not run here
		cfg.HTTP.Listen = "127.0.0.1:0"
		cfg.Sweep.Interval = 100 * time.Millisecond
		cfg.Residency.TTL = time.Hour
		log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})).With("sidecar", k)
		sc, err := sidecar.Open(ctx, cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sc.Close() })
		sc.SetAssignment(sweeper.Assignment{ShardCount: loadShards, Shards: shards})
		sc.SetResident(nil)
		sidecars[k] = sc
	}

	// Each sidecar's sweep ticks in its own goroutine, as Sweeper.Run does, keeping each tick's report:
	// Report.Archived names the agents the tick drained to the bottom layer.
	var (
		mu       sync.Mutex
		by       = make(map[oplog.AgentID][]int, n) // agent → the sidecars that archived it
		archived = make([]int, len(sidecars))
		ticks    = make([]int, len(sidecars))
		errs     = make([]int, len(sidecars))
		done     = make(chan struct{})
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	began = time.Now()
	for k, sc := range sidecars {
		wg.Go(func() {
			for {
				rep := sc.Sweeper().SweepOnce(runCtx)
				mu.Lock()
				ticks[k]++
				for _, rr := range rep.Routes {
					errs[k] += rr.Errors
				}
				for _, a := range rep.Archived() {
					archived[k]++
					by[a] = append(by[a], k)
				}
				if len(by) == n {
					select {
					case <-done:
					default:
						close(done)
					}
				}
				mu.Unlock()
				if runCtx.Err() != nil {
					return
				}
				select {
				case <-runCtx.Done():
					return
				case <-time.After(rep.NextWait):
				}
			}
		})
	}
	bound := 3*time.Minute + time.Duration(n)*10*time.Millisecond
	select {
	case <-done:
	case <-time.After(bound):
	}
	drainTime := time.Since(began)
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(by) < n {
		t.Fatalf("%s: after %s the sidecars had archived %d of %d agents (ticks %v, storage errors %v)", backend, bound, len(by), n, ticks, errs)
	}

	// Archived once each, by the sidecar owning the agent's shard, and the counts add up.
	twice := 0
	for _, a := range agents {
		ks := by[a]
		switch {
		case len(ks) == 0:
			t.Errorf("%s: %s was never reported archived", backend, a)
		case len(ks) > 1:
			twice++
			if twice <= 10 {
				t.Errorf("%s: %s was archived %d times, by sidecars %v", backend, a, len(ks), ks)
			}
		case !slices.Contains(loadSidecarShards[ks[0]], a.Shard(loadShards)):
			t.Errorf("%s: %s of shard %d was archived by sidecar %d, which owns %v", backend, a, a.Shard(loadShards), ks[0], loadSidecarShards[ks[0]])
		}
	}
	if len(by) != n {
		t.Errorf("%s: the sidecars reported %d distinct agents archived, %d were stranded", backend, len(by), n)
	}
	if sum := archived[0] + archived[1]; sum != n || twice > 0 {
		t.Fatalf("%s: sidecars archived %v (sum %d) for %d agents; %d archived more than once", backend, archived, sum, n, twice)
	}

	// What the layers hold: nothing left above the blob layer, and in the blob layer exactly one chunk
	// per agent, covering 1..loadEntries once, which reads back whole.
	for _, ns := range []string{oplog.CompressedNamespace(oplog.Ephemeral, 1), oplog.PrimaryNamespace(oplog.Ephemeral)} {
		if keys := loadKeys(t, st, ns); len(keys) > 0 {
			t.Fatalf("%s: %d agents still in %s after the drain, e.g. %q", backend, len(keys), ns, keys[:min(5, len(keys))])
		}
	}
	// Packed: the agents' chunks share segments, so there are far fewer blobs than agents.
	paths, err := blobs.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) >= n {
		t.Fatalf("%s: %d blobs for %d agents: the chunks were not packed into segments", backend, len(paths), n)
	}
	t.Logf("%s: %d segments for %d agents", backend, len(paths), n)
	loadParallel(t, n, 8, func(i int) error {
		a := agents[i]
		chunks, err := l.BlobChunks(ctx, a, oplog.Ephemeral)
		if err != nil {
			return err
		}
		if len(chunks) != 1 || chunks[0].First != 1 || chunks[0].Last != loadEntries {
			return fmt.Errorf("%s: its blob chunks are %v, want one covering 1..%d", a, chunks, loadEntries)
		}
		got, err := l.Stack.Read(ctx, a, oplog.Ephemeral, 1, loadEntries+5)
		if err != nil {
			return fmt.Errorf("%s: read: %w", a, err)
		}
		if len(got) != loadEntries {
			return fmt.Errorf("%s: read back %d entries, want %d", a, len(got), loadEntries)
		}
		for j, e := range got {
			if idx := oplog.Index(j + 1); e.Index != idx || string(e.Payload) != string(loadPayload(a, idx)) {
				return fmt.Errorf("%s: entry %d read back as %d %q", a, idx, e.Index, e.Payload)
			}
		}
		return nil
	})

	// The storage operations the sidecars made, from their own metrics.
	ops := map[string]int{}
	total := 0
	for _, sc := range sidecars {
		for op, c := range loadStorageOps(t, sc) {
			ops[op] += c
			total += c
		}
	}
	var breakdown []string
	for _, op := range slices.Sorted(maps.Keys(ops)) {
		breakdown = append(breakdown, fmt.Sprintf("%s %.2f", op, float64(ops[op])/float64(n)))
	}
	t.Logf("%s: sidecar 0 (shards %v) archived %d in %d ticks, sidecar 1 (shards %v) archived %d in %d ticks; storage errors %v",
		backend, loadSidecarShards[0], archived[0], ticks[0], loadSidecarShards[1], archived[1], ticks[1], errs)
	t.Logf("%s: indexed-storage operations per archived agent: %s", backend, strings.Join(breakdown, ", "))
	t.Logf("LOAD %s: %d agents over %d shards, 2 sidecars: drained in %s (%.0f agents/s), %.2f indexed-storage ops and 1 blob chunk per archived agent; 0 lost, 0 archived twice",
		backend, n, loadShards, drainTime.Round(time.Millisecond), float64(n)/drainTime.Seconds(), float64(total)/float64(n))
}

// loadParallel runs fn(0..n-1) on workers goroutines and fails the test with the errors it returned
// (the first few).
func loadParallel(t *testing.T, n, workers int, fn func(i int) error) {
	t.Helper()
	next := make(chan int)
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d failed: %v", len(errs), errors.Join(errs[:min(10, len(errs))]...))
	}
}

// loadKeys walks every key of ns.
func loadKeys(t *testing.T, st is.Storage, ns string) []string {
	t.Helper()
	var keys []string
	var from is.Resume
	for {
		page, err := st.ScanStable(t.Context(), ns, is.AllKeys, from, 1000)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, page.Keys...)
		if page.Done {
			return keys
		}
		from = page.Next
	}
}

var storageOpCount = regexp.MustCompile(`(?m)^strata_storage_operation_duration_seconds_count\{([^}]*)\} (\d+)$`)
var operationLabel = regexp.MustCompile(`operation="([^"]*)"`)

// loadStorageOps reads the indexed-storage operations the sidecar made, by operation, from its own
// /metrics (every operation is timed, so the histogram's count is the number of calls).
func loadStorageOps(t *testing.T, sc *sidecar.Sidecar) map[string]int {
	t.Helper()
	rec := httptest.NewRecorder()
	// The Host a loopback listener accepts (httptest's default, example.com, is refused as DNS rebinding).
	sc.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	ops := map[string]int{}
	for _, m := range storageOpCount.FindAllStringSubmatch(rec.Body.String(), -1) {
		op := operationLabel.FindStringSubmatch(m[1])
		c, err := strconv.Atoi(m[2])
		if op == nil || err != nil {
			t.Fatalf("metrics line %q", m[0])
		}
		ops[op[1]] += c
	}
	if len(ops) == 0 {
		t.Fatalf("no strata_storage_operation_duration_seconds in /metrics:\n%.2000s", rec.Body.String())
	}
	return ops
}
