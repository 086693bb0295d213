package oplogs_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/faults"
	"github.com/stratalog/strata/test/oplogtest"
)

// eraseRace runs drain with an erasure of victim forced in at every storage call a clean run of it
// makes, on both sides of the call (DESIGN §14): the erasure runs on a stack over the same stores, its
// calls uncounted. Whatever the drain returns, the victim is in no layer afterwards, nor after another
// drain of it, and every other agent of the batch reads back whole and drains to the bottom.
func eraseRace(t *testing.T, in *faults.Injector, l, eraser *oplogtest.Layers, mode oplog.Mode,
	write func(prefix string) []oplog.AgentID, drain func(agents []oplog.AgentID) []error) {
	t.Helper()
	probe := write("probe")
	in.Count()
	if err := errors.Join(drain(probe)...); err != nil {
		t.Fatalf("clean drain: %v", err)
	}
	calls, _ := in.Calls()
	t.Logf("%s: a clean drain of %d agents makes %d storage calls", mode, len(probe), calls)
	for k := 1; k <= calls; k++ {
		for _, when := range []faults.When{faults.Before, faults.After} {
			agents := write(fmt.Sprintf("erase-%d-%s", k, when))
			victim := agents[len(agents)-1]
			var erased oplog.Erased
			var eraseErr error
			in.ArmHook(k, when, func() { erased, eraseErr = eraser.Stack.Erase(t.Context(), victim, mode) })
			errs := drain(agents)
			in.Count()
			if eraseErr != nil {
				t.Fatalf("call %d (%s): the erasure failed: %v", k, when, eraseErr)
			}
			if erased.Agent != victim {
				t.Fatalf("call %d (%s): the erasure never ran", k, when)
			}
			for i, a := range agents {
				switch {
				case a == victim && errs[i] != nil && !errors.Is(errs[i], oplog.ErrErased):
					t.Fatalf("call %d (%s): the erased agent's drain failed with %v", k, when, errs[i])
				case a != victim && errs[i] != nil:
					t.Fatalf("call %d (%s): %s, not erased, failed with %v", k, when, a, errs[i])
				}
			}
			l.RequireErased(t, victim, mode)
			if _, err := l.Stack.Drain(t.Context(), victim, mode); err != nil {
				t.Fatalf("call %d (%s): draining the erased agent again: %v", k, when, err)
			}
			l.RequireErased(t, victim, mode)
			for i, a := range agents[:len(agents)-1] {
				l.RequireExact(t, a, mode, batchSizes[i])
				l.Drain(t, a, mode)
				l.RequireDrained(t, a, mode, batchSizes[i])
			}
		}
	}
}

// An erasure racing an archive step, forced in at every storage call of the step, on every backend and
// blob layout, in a batch drain (the sweep's) and a drain of the agent alone (a teardown's): the erased
// agent never comes back in any layer, and no other agent is touched.
func TestOplog_EraseRacingADrainNeverBringsTheAgentBack(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		if b.Name != "memory" {
			testenv.SkipUnlessLong(t, "erasures racing drains on engines other than memory")
		}
		// The blob store is not what an erasure races on: the engines run over the file system, memory
		// over every kind.
		kinds := crashBlobKinds(b)
		if b.Name != "memory" {
			kinds = oplogtest.PackedBlobKinds[:1]
		}
		oplogtest.EachBlobKind(t, kinds, func(t *testing.T, k oplogtest.BlobKind) {
			in, l := injectedLayers(t, b, k)
			eraser := oplogtest.NewLayersIn(t, l.St, l.Blobs, k.Layout)
			fixed := func() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }
			for _, mode := range oplog.Modes {
				t.Run(string(mode)+"/batch", func(t *testing.T) {
					eraseRace(t, in, l, eraser, mode,
						func(prefix string) []oplog.AgentID { return writeBatch(t, l, mode, prefix, fixed) },
						func(agents []oplog.AgentID) []error {
							res, err := batchDrain(t, l, mode, agents)()
							if err != nil {
								t.Fatalf("batch drain: %v", err)
							}
							return errs(res)
						})
				})
				t.Run(string(mode)+"/alone", func(t *testing.T) {
					eraseRace(t, in, l, eraser, mode,
						func(prefix string) []oplog.AgentID {
							a := oplogtest.AgentNamed(prefix + "-alone-" + string(mode))
							l.Write(t, a, mode, 1, batchSizes[len(batchSizes)-1], fixed())
							return []oplog.AgentID{a}
						},
						func(agents []oplog.AgentID) []error {
							_, err := l.Stack.Drain(t.Context(), agents[0], mode)
							return []error{err}
						})
				})
			}
		})
	})
}
