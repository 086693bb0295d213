package oplog_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/faults"
	"github.com/stratalog/strata/test/oplogtest"
)

// tombstoneKinds returns the first byte of each row of the agent's tombstone, in order.
func tombstoneKinds(t *testing.T, st is.Storage, agent oplog.AgentID, mode oplog.Mode) string {
	t.Helper()
	rows, err := st.Read(t.Context(), oplog.ErasedNamespace(mode), agent.StoredKey(), 1, is.MaxID)
	if err != nil {
		t.Fatal(err)
	}
	kinds := ""
	for _, r := range rows {
		kinds += string(r.Value[:1])
	}
	return kinds
}

func TestStack_EraseRemovesEveryLayerAndReportsWhatEachHeld(t *testing.T) {
	st := memory.New()
	l := oplogtest.NewLayersIn(t, st, nil, archive.LayoutPacked)
	ctx := t.Context()
	agent, other := oplogtest.AgentNamed("erased"), oplogtest.AgentNamed("kept")
	mode := oplog.Durable
	for _, a := range []oplog.AgentID{agent, other} {
		if err := l.Stack.Append(ctx, a, mode, entries(1, 10)); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Stack.ArchiveStep(ctx, a, mode); err != nil { // 1..10 to compressed level 1
			t.Fatal(err)
		}
		if err := l.Stack.Append(ctx, a, mode, entries(11, 5)); err != nil {
			t.Fatal(err)
		}
	}
	erased, err := l.Stack.Erase(ctx, agent, mode)
	if err != nil {
		t.Fatal(err)
	}
	want := []oplog.ErasedLayer{{Layer: "primary", Held: true, First: 11, Last: 15},
		{Layer: "compressed-1", Held: true, First: 1, Last: 10}, {Layer: "blob-0"}}
	if fmt.Sprint(erased.Layers) != fmt.Sprint(want) || erased.Entries() != 15 || erased.Agent != agent {
		t.Fatalf("erasure report %+v (%d entries), want layers %+v and 15 entries", erased, erased.Entries(), want)
	}
	l.RequireErased(t, agent, mode)
	if got, err := l.Stack.Read(ctx, other, mode, 1, 100); err != nil || len(got) != 15 {
		t.Fatalf("the other agent reads %d entries (%v), want its 15", len(got), err)
	}
	if kinds := tombstoneKinds(t, st, agent, mode); kinds != "sf" {
		t.Fatalf("tombstone rows %q, want started then finished", kinds)
	}
	// Erasing again (a retry after a crash, or an agent never written) finds nothing and is no error.
	again, err := l.Stack.Erase(ctx, agent, mode)
	if err != nil || again.Entries() != 0 || len(again.Layers) != 3 {
		t.Fatalf("a second erasure: %+v, %v; want three layers holding nothing", again, err)
	}
	if kinds := tombstoneKinds(t, st, agent, mode); kinds != "sfsf" {
		t.Fatalf("tombstone rows %q after a second erasure, want sfsf", kinds)
	}
}

func TestStack_EraseWithoutTombstonesIsRefusedAndDeletesNothing(t *testing.T) {
	st := memory.New()
	compressed, err := archive.NewCompressed(st, 1)
	if err != nil {
		t.Fatal(err)
	}
	stack, err := oplog.NewStack(oplog.NewPrimary(st), compressed)
	if err != nil {
		t.Fatal(err)
	}
	agent := oplogtest.AgentNamed("kept")
	if err := stack.Append(t.Context(), agent, oplog.Durable, entries(1, 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := stack.Erase(t.Context(), agent, oplog.Durable); !errors.Is(err, oplog.ErrNoTombstones) {
		t.Fatalf("erase without tombstones: %v, want ErrNoTombstones", err)
	}
	if got, err := stack.Read(t.Context(), agent, oplog.Durable, 1, 10); err != nil || len(got) != 3 {
		t.Fatalf("after a refused erasure the agent reads %d entries (%v), want 3", len(got), err)
	}
}

// An agent key used again after its erasure finished is an oplog like any other: a drain of it that
// finds its source emptied by a concurrent drain (a forced interleaving at every call) looks at the old
// tombstone, sees the erasure finished before the drain could have started, and deletes nothing. Within
// EraseClockSkew of the erasure's end the drain would honour it (the documented limit on reusing an
// erased key at once).
func TestStack_AKeyUsedAgainAfterItsErasureIsArchivedNotErased(t *testing.T) {
	for _, mode := range oplog.Modes {
		t.Run(string(mode), func(t *testing.T) {
			in, st, blobs := &faults.Injector{}, memory.New(), memory.NewBlobStore()
			l := oplogtest.NewLayersIn(t, in.Storage(st), in.Blobs(blobs), archive.LayoutPacked)
			l.St, l.Blobs = st, blobs
			plain := oplogtest.NewLayersIn(t, st, blobs, archive.LayoutPacked)
			now := time.Unix(1_800_000_000, 0)
			clock := func() time.Time { return now }
			oplog.SetTombstoneClock(l.Stack, clock)
			oplog.SetTombstoneClock(plain.Stack, clock)
			ctx := t.Context()

			probe := oplogtest.AgentNamed("probe")
			l.Write(t, probe, mode, 1, 300, oplogtest.Seeded(t))
			in.Count()
			l.Drain(t, probe, mode)
			calls, _ := in.Calls()
			for k := 1; k <= calls; k++ {
				agent := oplogtest.AgentNamed(fmt.Sprintf("reused-%d", k))
				l.Write(t, agent, mode, 1, 50, oplogtest.Seeded(t))
				if _, err := plain.Stack.Erase(ctx, agent, mode); err != nil {
					t.Fatal(err)
				}
				now = now.Add(oplog.EraseClockSkew + time.Second)
				l.Write(t, agent, mode, 1, 300, oplogtest.Seeded(t)) // its second life
				in.ArmHook(k, faults.After, func() {
					if _, err := plain.Stack.Drain(ctx, agent, mode); err != nil {
						t.Errorf("call %d: the concurrent drain: %v", k, err)
					}
				})
				if _, err := l.Stack.Drain(ctx, agent, mode); err != nil {
					t.Fatalf("call %d: drain of the second life: %v", k, err)
				}
				in.Count()
				l.RequireExact(t, agent, mode, 300)
				l.RequireDrained(t, agent, mode, 300)
			}
		})
	}
}
