package sweeps_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
)

// meeting holds each party that arrives at a point until a second one arrives there too: two drains of
// one agent forced to the same step at once.
type meeting struct {
	mu     sync.Mutex
	points map[string]chan struct{}
	missed []string // points where the second party never came
}

func (m *meeting) meet(ctx context.Context, point string) {
	m.mu.Lock()
	ch, ok := m.points[point]
	if ok {
		close(ch) // the second party: both go on
		delete(m.points, point)
		m.mu.Unlock()
		return
	}
	ch = make(chan struct{})
	m.points[point] = ch
	m.mu.Unlock()
	// Bounded, so that a drain that never comes (a regression) fails the test instead of hanging it.
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	select {
	case <-ch:
	case <-ctx.Done():
	case <-timeout.C:
		m.mu.Lock()
		m.missed = append(m.missed, point)
		delete(m.points, point)
		m.mu.Unlock()
	}
}

// handOff is storage under one sidecar's stack: its archive reads of compressed level 1 (the drain's
// first read, with the gate's re-check) and its drops there meet the other sidecar's for the same
// agent, so both read each agent's chunk and last index before either appends it below, and both
// drop it at once: the interleaving of a hand-off that counted archived twice.
type handOff struct {
	is.Storage
	ns   string
	meet *meeting
	// read is set once the sidecar's first archive read met the other's: in the packed layout the
	// sidecar whose index rows lose the race reads the source again (the hop's retry) while the
	// other waits at the drop, so only the first read is a meeting point.
	read atomic.Bool
}

func (h *handOff) Capabilities() is.Capabilities { return is.CapabilitiesOf(h.Storage) }

func (h *handOff) ClosestLast(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, uint64, bool, error) {
	e, found, last, exists, err := is.ClosestLast(ctx, h.Storage, ns, key, id)
	if ns == h.ns && h.read.CompareAndSwap(false, true) {
		h.meet.meet(ctx, "read "+key)
	}
	return e, found, last, exists, err
}

func (h *handOff) DropPrefix(ctx context.Context, ns, key string, upTo uint64) (uint64, error) {
	if ns == h.ns {
		h.meet.meet(ctx, "drop "+key)
	}
	return h.Storage.DropPrefix(ctx, ns, key, upTo)
}

// ClosestLastMany and DropPrefixMany meet as the per-key forms do, once a batch: both sidecars' batches
// hold the same agents (all of them fit one), in whatever order their walks found them.
func (h *handOff) ClosestLastMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.ClosestLastResult, error) {
	out, err := is.ClosestLastMany(ctx, h.Storage, ns, reqs)
	if ns == h.ns && h.read.CompareAndSwap(false, true) {
		h.meet.meet(ctx, "read "+batchKeys(reqs))
	}
	return out, err
}

func (h *handOff) DropPrefixMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.DropResult, error) {
	if ns == h.ns {
		h.meet.meet(ctx, "drop "+batchKeys(reqs))
	}
	return is.DropPrefixMany(ctx, h.Storage, ns, reqs)
}

// batchKeys names a batch by its keys, sorted.
func batchKeys(reqs []is.KeyID) string {
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = r.Key
	}
	slices.Sort(keys)
	return strings.Join(keys, ",")
}

// Two sidecars that both own the same shards during a hand-off drain the same stranded agents at
// once, each after its own quiet gate: both read each agent's chunk, both find the blob layer
// empty, both write the chunk there (in the packed layout one's index rows land and the other's
// conflict: it reads again, finds the chunk below and compares it) and both drop it from compressed
// level 1 at once.
// Exactly one drop removes it, so exactly one sidecar counts the agent archived (and calls
// OnDrained); the other counts it declined. Every entry reads back once, from the blob layer alone.
func TestSweep_TwoSidecarsDrainingTheSameAgentsCountEachArchivedOnce(t *testing.T) {
	const agents, entries = 12, 3
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		st, blobs := b.Open(t), memory.NewBlobStore()
		meet := &meeting{points: map[string]chan struct{}{}}
		ns := oplog.CompressedNamespace(oplog.Ephemeral, 1)
		cfg := oplogtest.SweepConfig()
		cfg.MaxConcurrency = 4
		whole := sweeper.Assignment{ShardCount: 1, Shards: []int{0}}
		sidecars := []*oplogtest.SweepRig{
			oplogtest.NewSweepRigOwning(t, oplogtest.NewLayers(t, &handOff{Storage: st, ns: ns, meet: meet}, blobs), cfg, whole),
			oplogtest.NewSweepRigOwning(t, oplogtest.NewLayers(t, &handOff{Storage: st, ns: ns, meet: meet}, blobs), cfg, whole),
		}
		stranded := sidecars[0].StrandAgents(t, "handed-off", agents, entries)
		for i, sc := range sidecars { // the first pass of each: every agent waits at the gate
			if rep := sc.Sweeper.SweepOnce(t.Context()); rep.Outcomes[sweeper.OutcomeWaiting] != agents {
				t.Fatalf("sidecar %d, first pass: %+v", i, rep.Outcomes)
			}
		}
		reports := make([]sweeper.Report, len(sidecars))
		var wg sync.WaitGroup
		for i, sc := range sidecars {
			wg.Go(func() { reports[i] = sc.Sweeper.SweepOnce(t.Context()) })
		}
		wg.Wait()
		if len(meet.missed) > 0 {
			t.Fatalf("the two drains did not meet at %q", meet.missed)
		}

		archivedBy := map[oplog.AgentID]int{}
		archived, declined := 0, 0
		for i, rep := range reports {
			t.Logf("sidecar %d: %+v", i, rep.Outcomes)
			archived += rep.Outcomes[sweeper.OutcomeArchived]
			declined += rep.Outcomes[sweeper.OutcomeDeclined]
			for _, a := range rep.Archived() {
				archivedBy[a]++
			}
		}
		if archived != agents || declined != agents {
			t.Fatalf("the two sidecars counted %d archived and %d declined for %d stranded agents; want %d of each",
				archived, declined, agents, agents)
		}
		for _, a := range stranded {
			if archivedBy[a] != 1 {
				t.Errorf("%s listed archived by %d sidecars", a, archivedBy[a])
			}
		}
		if drained := sidecars[0].Drained.Load() + sidecars[1].Drained.Load(); drained != agents {
			t.Errorf("OnDrained fired %d times for %d agents", drained, agents)
		}
		plain := oplogtest.NewLayers(t, st, blobs)
		for _, a := range stranded {
			plain.RequireExact(t, a, oplog.Ephemeral, entries)
			plain.RequireDrained(t, a, oplog.Ephemeral, entries)
		}
	})
}

// The same hand-off over agents of several chunks each, not forced: two sidecars' ticks run side by
// side over the same stranded agents until none is left, and the archived counts of the two add up to
// the number of agents whatever the interleavings.
func TestSweep_TwoSidecarsRacingOverMultiChunkAgentsCountEachArchivedOnce(t *testing.T) {
	const agents = 16
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		st, blobs := b.Open(t), memory.NewBlobStore()
		cfg := oplogtest.SweepConfig()
		whole := sweeper.Assignment{ShardCount: 1, Shards: []int{0}}
		sidecars := []*oplogtest.SweepRig{
			oplogtest.NewSweepRigOwning(t, oplogtest.NewLayers(t, st, blobs), cfg, whole),
			oplogtest.NewSweepRigOwning(t, oplogtest.NewLayers(t, st, blobs), cfg, whole),
		}
		sizes := map[oplog.AgentID]int{}
		for i := range agents {
			a := oplogtest.AgentNamed(fmt.Sprintf("handed-off-long-%02d", i))
			n := 50 + 97*i
			// Appended in pieces of 40: a drain of one agent reads, puts and drops many chunks.
			for from := 1; from <= n; from += 40 {
				if err := sidecars[0].Stack.Append(t.Context(), a, oplog.Ephemeral, oplogtest.EntriesRange(oplog.Index(from), min(40, n-from+1))); err != nil {
					t.Fatal(err)
				}
			}
			sizes[a] = n
		}
		archived := 0
		for round := 0; round < 10; round++ {
			reports := make([]sweeper.Report, len(sidecars))
			var wg sync.WaitGroup
			for i, sc := range sidecars {
				wg.Go(func() { reports[i] = sc.Sweeper.SweepOnce(t.Context()) })
			}
			wg.Wait()
			for _, rep := range reports {
				archived += rep.Outcomes[sweeper.OutcomeArchived]
				if n := rep.Outcomes[sweeper.OutcomeArchiveFailed]; n > 0 {
					t.Fatalf("round %d: %d archives failed", round, n)
				}
			}
		}
		if archived != agents {
			t.Fatalf("the two sidecars counted %d archived for %d stranded agents", archived, agents)
		}
		plain := oplogtest.NewLayers(t, st, blobs)
		for a, n := range sizes {
			plain.RequireExact(t, a, oplog.Ephemeral, n)
		}
	})
}
