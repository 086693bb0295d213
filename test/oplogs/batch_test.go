package oplogs_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/faults"
	"github.com/stratalog/strata/test/oplogtest"
)

// batchSizes are the agents of one batch drain: a tiny one, a small one, and one spanning two chunks,
// which goes on in a second round of the batch after the others are done.
var batchSizes = []int{1, 3, 4096 + 2500}

// batchDrain drains agents of mode in one batch: DrainSeenMany from compressed level 1 for ephemeral
// agents (the sweep's, with seen their last index there), DrainMany for durable ones (the durable
// route's and a teardown's). seen is read before the drain, so a fault counter armed after it counts
// only the drain.
func batchDrain(t *testing.T, l *oplogtest.Layers, mode oplog.Mode, agents []oplog.AgentID) func() ([]oplog.DrainResult, error) {
	t.Helper()
	if mode == oplog.Durable {
		return func() ([]oplog.DrainResult, error) { return l.Stack.DrainMany(t.Context(), mode, agents) }
	}
	seen := make([]oplog.Seen, len(agents))
	for i, a := range agents {
		last, _, err := l.Stack.Layers()[1].LastIndex(t.Context(), a, mode)
		if err != nil {
			t.Fatal(err)
		}
		seen[i] = oplog.Seen{Agent: a, Index: last}
	}
	return func() ([]oplog.DrainResult, error) { return l.Stack.DrainSeenMany(t.Context(), mode, 1, seen) }
}

// writeBatch writes one agent of each of batchSizes, named after prefix.
func writeBatch(t *testing.T, l *oplogtest.Layers, mode oplog.Mode, prefix string, rng func() *rand.Rand) []oplog.AgentID {
	t.Helper()
	agents := make([]oplog.AgentID, len(batchSizes))
	for i, n := range batchSizes {
		agents[i] = oplogtest.AgentNamed(fmt.Sprintf("%s-%s-%d", prefix, mode, i))
		l.Write(t, agents[i], mode, 1, n, rng())
	}
	return agents
}

func TestOplog_BatchDrainMovesEveryAgentToTheBottomOnce(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		l := oplogtest.NewLayers(t, b.Open(t), nil)
		rng := oplogtest.Seeded(t)
		for _, mode := range oplog.Modes {
			agents := writeBatch(t, l, mode, "batch", func() *rand.Rand { return rng })
			res, err := batchDrain(t, l, mode, agents)()
			if err != nil {
				t.Fatal(err)
			}
			wantHops := map[oplog.Mode]int{oplog.Durable: 2, oplog.Ephemeral: 1}[mode]
			for i, a := range agents {
				if r := res[i]; r.Err != nil || r.Hops != wantHops || r.Moved != batchSizes[i]*wantHops {
					t.Fatalf("%s: %+v, want %d hops moving %d entries each", a, r, wantHops, batchSizes[i])
				}
				l.RequireExact(t, a, mode, batchSizes[i])
				l.RequireDrained(t, a, mode, batchSizes[i])
			}
		}
	})
}

// Inside a batch each agent has its own outcome, as DrainSeen gives it alone: one whose layer moved on
// since the gate, one the layer no longer holds, one whose index was reused, one twice in the batch
// and one that cannot be addressed fail or pass alone; the others are drained, one whose gate read no
// index (Seen.Index 0) up to the last index its first read finds.
func TestOplog_BatchDrainGivesEachAgentItsOwnOutcome(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		l := oplogtest.NewLayers(t, b.Open(t), nil)
		rng := oplogtest.Seeded(t)
		mode := oplog.Ephemeral
		plain, movedOn, gone, reused := oplogtest.AgentNamed("plain"), oplogtest.AgentNamed("moved-on"),
			oplogtest.AgentNamed("gone"), oplogtest.AgentNamed("reused")
		unread := oplogtest.AgentNamed("unread") // a gate that read no index (stamps): Seen.Index 0
		for _, a := range []oplog.AgentID{plain, movedOn, gone, reused, unread} {
			l.Write(t, a, mode, 1, 5, rng)
		}
		// reused: its first life is archived, and its second writes indices 1..3 again.
		l.Drain(t, reused, mode)
		if err := l.Stack.Append(t.Context(), reused, mode, secondLife(1, 3)); err != nil {
			t.Fatal(err)
		}
		seen := []oplog.Seen{{Agent: plain, Index: 5}, {Agent: movedOn, Index: 5}, {Agent: gone, Index: 5},
			{Agent: reused, Index: 3}, {Agent: plain, Index: 5}, {Agent: oplog.AgentID{}, Index: 1}, {Agent: unread}}
		l.Write(t, movedOn, mode, 6, 1, rng) // written since the gate saw 5
		l.Write(t, unread, mode, 6, 1, rng)  // nothing to re-check: the drain takes what its read finds
		l.Drain(t, gone, mode)               // a teardown drain took it first
		res, err := l.Stack.DrainSeenMany(t.Context(), mode, 1, seen)
		if err != nil {
			t.Fatal(err)
		}
		if r := res[0]; r.Err != nil || !r.Finished(1) || r.Moved != 5 {
			t.Fatalf("plain: %+v", r)
		}
		l.RequireDrained(t, plain, mode, 5)
		var mo *oplog.MovedOnError
		if r := res[1]; !errors.As(r.Err, &mo) || mo.Seen != 5 || mo.Last != 6 || r.Moved != 0 {
			t.Fatalf("moved on: %+v, want MovedOnError 5 → 6 and nothing moved", r)
		}
		l.RequireExact(t, movedOn, mode, 6)
		if r := res[2]; r.Err != nil || r.Finished(1) || r.Moved != 0 {
			t.Fatalf("gone: %+v, want no hop and no error", r)
		}
		requireIndexReused(t, res[3].Err, reused, "1..3")
		requireLayerHolds(t, l.Stack.Layers()[1], reused, mode, secondLife(1, 3))
		if res[4].Err == nil || errors.Is(res[4].Err, oplog.ErrIndexReused) {
			t.Fatalf("the second copy of plain in the batch: %v, want an error of its own", res[4].Err)
		}
		if res[5].Err == nil {
			t.Fatal("the zero agent drained without an error")
		}
		if r := res[6]; r.Err != nil || !r.Finished(1) || r.Moved != 6 {
			t.Fatalf("unread: %+v, want its 6 entries moved", r)
		}
		l.RequireDrained(t, unread, mode, 6)
	})
}

// partFailing is a storage whose ClosestLastMany fails the part of one key (a key its store cannot
// read: a corrupt file, a key of another type), or the whole call.
type partFailing struct {
	is.Storage
	failKey   string
	failWith  error // the failed part's error; nil: a key that cannot be read
	failWhole bool
}

func (p *partFailing) ClosestLastMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.ClosestLastResult, error) {
	if p.failWhole {
		return nil, fmt.Errorf("injected: %w", is.ErrTransient)
	}
	out, err := is.ClosestLastMany(ctx, p.Storage, ns, reqs)
	for i, r := range reqs {
		if err == nil && r.Key == p.failKey {
			out[i] = is.ClosestLastResult{Err: cmp.Or(p.failWith, errors.New("injected: this key cannot be read"))}
		}
	}
	return out, err
}

// An agent whose part of the batch's first read fails gets an UnreadableError, and nothing of it
// moves, while the batch's other agents drain (the sweep counts it unreadable, as when the gate's read
// fails); a failure of the whole read, or a part the drain's context cut, is no agent's UnreadableError.
func TestOplog_BatchDrainNamesTheAgentItCouldNotRead(t *testing.T) {
	st := &partFailing{Storage: memory.New()}
	l := oplogtest.NewLayers(t, st, nil)
	rng := oplogtest.Seeded(t)
	mode := oplog.Ephemeral
	fine, poisoned := oplogtest.AgentNamed("fine"), oplogtest.AgentNamed("poisoned")
	for _, a := range []oplog.AgentID{fine, poisoned} {
		l.Write(t, a, mode, 1, 3, rng)
	}
	st.failKey = poisoned.StoredKey()
	res, err := l.Stack.DrainSeenMany(t.Context(), mode, 1, []oplog.Seen{{Agent: fine}, {Agent: poisoned}})
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.Err != nil || r.Moved != 3 {
		t.Fatalf("fine: %+v, want its 3 entries moved", r)
	}
	l.RequireDrained(t, fine, mode, 3)
	var unread *oplog.UnreadableError
	if r := res[1]; !errors.As(r.Err, &unread) || r.Moved != 0 {
		t.Fatalf("poisoned: %+v, want an UnreadableError and nothing moved", r)
	}
	st.failWith = fmt.Errorf("injected: %w", context.DeadlineExceeded)
	res, err = l.Stack.DrainSeenMany(t.Context(), mode, 1, []oplog.Seen{{Agent: poisoned}})
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.Err == nil || errors.As(r.Err, &unread) {
		t.Fatalf("a part cut by a deadline: %v, want an error that is not an UnreadableError", r.Err)
	}
	st.failKey, st.failWith, st.failWhole = "", nil, true
	res, err = l.Stack.DrainSeenMany(t.Context(), mode, 1, []oplog.Seen{{Agent: poisoned}})
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.Err == nil || errors.As(r.Err, &unread) {
		t.Fatalf("a failed read of the whole batch: %v, want an error that is not an UnreadableError", r.Err)
	}
	st.failWhole = false
	l.RequireExact(t, poisoned, mode, 3)
}

// A crash can stop a batch drain between any two storage calls. For every call k a clean batch drain
// makes, fail the k-th (before it reaches the store, and after the store applied it): the failure is
// some agents' (or the call's), every entry of every agent still reads back exactly once, and draining
// each agent again converges with nothing lost or doubled.
func TestOplog_BatchDrainInterruptedAtEveryStorageCallConverges(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		if b.Name != "memory" {
			testenv.SkipUnlessLong(t, "the crash windows of batch drains on engines other than memory")
		}
		oplogtest.EachBlobKind(t, crashBlobKinds(b), func(t *testing.T, k oplogtest.BlobKind) {
			in, l := injectedLayers(t, b, k)
			fixed := func() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }
			for _, mode := range oplog.Modes {
				probe := writeBatch(t, l, mode, "probe", fixed)
				drain := batchDrain(t, l, mode, probe)
				in.Count()
				if res, err := drain(); err != nil || errors.Join(errs(res)...) != nil {
					t.Fatalf("clean batch drain: %v %v", err, errs(res))
				}
				calls, _ := in.Calls()
				t.Logf("%s: a clean batch drain of %d agents makes %d storage calls", mode, len(probe), calls)
				for k := 1; k <= calls; k++ {
					for _, when := range []faults.When{faults.Before, faults.After} {
						agents := writeBatch(t, l, mode, fmt.Sprintf("crash-%d-%s", k, when), fixed)
						drain := batchDrain(t, l, mode, agents)
						in.Arm(k, when)
						res, err := drain()
						in.Count()
						injected := errors.Is(err, faults.ErrInjected)
						for i, e := range errs(res) {
							if e != nil && !errors.Is(e, faults.ErrInjected) {
								t.Fatalf("call %d (%s): %s failed with %v, not the injected fault", k, when, agents[i], e)
							}
							injected = injected || e != nil
						}
						if !injected {
							t.Fatalf("call %d (%s): the batch drain returned no injected fault", k, when)
						}
						for i, a := range agents {
							l.RequireExact(t, a, mode, batchSizes[i])
							l.Drain(t, a, mode)
							l.RequireExact(t, a, mode, batchSizes[i])
							l.RequireDrained(t, a, mode, batchSizes[i])
						}
					}
				}
			}
		})
	})
}

func errs(res []oplog.DrainResult) []error {
	out := make([]error, len(res))
	for i, r := range res {
		out[i] = r.Err
	}
	return out
}
