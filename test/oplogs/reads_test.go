package oplogs_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stratalog/strata/archive"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
)

// dropAfterFirst returns st such that drop runs once, right after the first call of op returns: a
// concurrent archive step dropping part of what a reader is walking, between two of its calls.
func dropAfterFirst(st is.Storage, op is.Operation, drop func()) is.Storage {
	var once sync.Once
	return is.Intercept(st, func(ctx context.Context, o is.Operation, do func(context.Context) error) error {
		err := do(ctx)
		if o == op {
			once.Do(drop)
		}
		return err
	})
}

// requireRun checks entries are exactly from..to, contiguous, with their payloads.
func requireRun(t *testing.T, what string, entries []oplog.Entry, from, to oplog.Index) {
	t.Helper()
	for i, e := range entries {
		if e.Index != from+oplog.Index(i) || string(e.Payload) != string(oplogtest.Payload(e.Index)) {
			t.Fatalf("%s: entry %d of %d is index %d where %d was expected (a gap was handed on)", what, i, len(entries), e.Index, from+oplog.Index(i))
		}
	}
	if len(entries) != int(to-from+1) {
		t.Fatalf("%s: %d entries, want %d..%d", what, len(entries), from, to)
	}
}

func TestRead_ABatchRacingADropIsContiguous(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		ctx := t.Context()
		st := b.Open(t)
		agent := oplogtest.AgentNamed("read-racing-drop")
		mode := oplog.Ephemeral

		// Compressed: ten chunks of 100; 101..500 are dropped after the reader found the first chunk.
		c1, err := archive.NewCompressed(st, 1)
		if err != nil {
			t.Fatal(err)
		}
		for first := oplog.Index(1); first <= 1000; first += 100 {
			if err := c1.Append(ctx, agent, mode, oplogtest.EntriesRange(first, 100)); err != nil {
				t.Fatal(err)
			}
		}
		ns := oplog.CompressedNamespace(mode, 1)
		raced, err := archive.NewCompressed(dropAfterFirst(st, is.OpClosest, func() {
			if _, err := st.DropPrefix(ctx, ns, agent.StoredKey(), 500); err != nil {
				t.Error(err)
			}
		}), 1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := raced.Read(ctx, agent, mode, 1, 1000, oplog.ChunkLimit)
		if err != nil {
			t.Fatal(err)
		}
		requireRun(t, "compressed read racing a drop", got, 1, 100)
		got, err = raced.Read(ctx, agent, mode, 101, 1000, oplog.ChunkLimit)
		if err != nil {
			t.Fatal(err)
		}
		requireRun(t, "compressed read on after the run", got, 501, 1000)

		// Primary: reads of 256 ids at a time; 1..600 are dropped after the first.
		mode = oplog.Durable
		if err := oplog.NewPrimary(st).Append(ctx, agent, mode, oplogtest.EntriesRange(1, 1000)); err != nil {
			t.Fatal(err)
		}
		primary := oplog.NewPrimary(dropAfterFirst(st, is.OpRead, func() {
			if _, err := st.DropPrefix(ctx, oplog.PrimaryNamespace(mode), agent.StoredKey(), 600); err != nil {
				t.Error(err)
			}
		}))
		got, err = primary.Read(ctx, agent, mode, 1, 1000, oplog.ChunkLimit)
		if err != nil {
			t.Fatal(err)
		}
		requireRun(t, "primary read racing a drop", got, 1, 256)
		got, err = primary.Read(ctx, agent, mode, 257, 1000, oplog.ChunkLimit)
		if err != nil {
			t.Fatal(err)
		}
		requireRun(t, "primary read on after the run", got, 601, 1000)
	})
}

// An archive step reads its source from index 1 (section 5): on a primary archived up to a million,
// that must not walk the empty ids one window at a time.
func TestRead_PrimaryReadFromOneSkipsAnArchivedPrefixInOneCall(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		ctx := t.Context()
		st := b.Open(t)
		agent := oplogtest.AgentNamed("long-lived")
		const first = 1_000_001
		if err := oplog.NewPrimary(st).Append(ctx, agent, oplog.Durable, oplogtest.EntriesRange(first, 300)); err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		counted := is.Intercept(st, func(ctx context.Context, _ is.Operation, do func(context.Context) error) error {
			calls.Add(1)
			return do(ctx)
		})
		got, err := oplog.NewPrimary(counted).Read(ctx, agent, oplog.Durable, 1, first+299, oplog.ChunkLimit)
		if err != nil {
			t.Fatal(err)
		}
		requireRun(t, "primary read from 1", got, first, first+299)
		// An empty window, the jump to the first entry, then the windows that hold the 300 entries.
		if n := calls.Load(); n > 4 {
			t.Fatalf("read from 1 made %d storage calls, want at most 4", n)
		}
	})
}
