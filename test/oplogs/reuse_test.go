package oplogs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
)

// secondLife is what an agent writes under a reused index: not what its first life wrote there.
func secondLife(from oplog.Index, n int) []oplog.Entry {
	out := oplogtest.EntriesRange(from, n)
	for i := range out {
		out[i].Payload = fmt.Appendf(nil, "second life %d", out[i].Index)
	}
	return out
}

// requireLayerHolds checks layer holds exactly want, read on to the end.
func requireLayerHolds(t *testing.T, layer oplog.Layer, agent oplog.AgentID, mode oplog.Mode, want []oplog.Entry) {
	t.Helper()
	var got []oplog.Entry
	for next := oplog.Index(1); ; {
		batch, err := layer.Read(t.Context(), agent, mode, next, 1<<62, oplog.ChunkLimit)
		if err != nil {
			t.Fatalf("read %s of %s: %v", layer.Name(), agent, err)
		}
		if len(batch) == 0 {
			break
		}
		got = append(got, batch...)
		next = batch[len(batch)-1].Index + 1
	}
	if len(got) != len(want) {
		t.Fatalf("%s holds %d entries of %s, want %d", layer.Name(), len(got), agent, len(want))
	}
	for i := range got {
		if got[i].Index != want[i].Index || !bytes.Equal(got[i].Payload, want[i].Payload) {
			t.Fatalf("%s: entry %d of %s is %d %q, want %d %q", layer.Name(), i, agent, got[i].Index, got[i].Payload, want[i].Index, want[i].Payload)
		}
	}
}

func requireIndexReused(t *testing.T, err error, agent oplog.AgentID, indices string) {
	t.Helper()
	if !errors.Is(err, oplog.ErrIndexReused) {
		t.Fatalf("drain of a reused index: %v, want ErrIndexReused", err)
	}
	if msg := err.Error(); !strings.Contains(msg, agent.Key()) || !strings.Contains(msg, indices) {
		t.Fatalf("error %q does not name the agent %s and the indices %s", msg, agent, indices)
	}
}

func TestOplog_IndexReusedAfterArchiveFailsTheDrainAndLosesNothing(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		l := oplogtest.NewLayers(t, b.Open(t), nil)
		c1, err := archive.NewCompressed(l.St, 1)
		if err != nil {
			t.Fatal(err)
		}
		const n, again = 5000, 300
		for _, mode := range oplog.Modes {
			agent := oplogtest.AgentNamed("reused-" + string(mode))
			l.Write(t, agent, mode, 1, n, oplogtest.Seeded(t))
			l.Drain(t, agent, mode)
			// The agent is written again from index 1, as if it were new.
			if err := l.Stack.Append(t.Context(), agent, mode, secondLife(1, again)); err != nil {
				t.Fatal(err)
			}
			for range 2 { // a second drain finds the same: the first changed nothing
				_, err := l.Stack.Drain(t.Context(), agent, mode)
				requireIndexReused(t, err, agent, fmt.Sprintf("1..%d", again))
				// Ephemeral entries were written to compressed-1 and stay there; durable ones moved
				// one hop, from the primary to an empty compressed-1, which nothing could refuse.
				requireLayerHolds(t, c1, agent, mode, secondLife(1, again))
				requireLayerHolds(t, l.Blob, agent, mode, oplogtest.EntriesRange(1, n))
				if covered := l.BlobCoverage(t, agent, mode); len(covered) != n {
					t.Fatalf("%s: blob chunks cover %d indices, want %d", agent, len(covered), n)
				}
			}
			if ok, err := l.St.Exists(t.Context(), oplog.PrimaryNamespace(mode), agent.StoredKey()); ok || err != nil {
				t.Fatalf("%s: the primary holds entries (%v)", agent, err)
			}
		}
	})
}

// A reused index whose entries already sit beside others in the source: the whole step fails, the
// entries above the target's last index are not moved either.
func TestOplog_IndexReusedStepMovesNothingAboveTheTarget(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		l := oplogtest.NewLayers(t, b.Open(t), nil)
		c1, err := archive.NewCompressed(l.St, 1)
		if err != nil {
			t.Fatal(err)
		}
		agent, mode := oplogtest.AgentNamed("reused-straddling"), oplog.Ephemeral
		l.Write(t, agent, mode, 1, 100, oplogtest.Seeded(t))
		l.Drain(t, agent, mode)
		reused := secondLife(1, 4500) // 1..100 reused, 101..4500 above the blob's last index
		if err := l.Stack.Append(t.Context(), agent, mode, reused); err != nil {
			t.Fatal(err)
		}
		_, err = l.Stack.Drain(t.Context(), agent, mode)
		requireIndexReused(t, err, agent, "1..100")
		requireLayerHolds(t, c1, agent, mode, reused)
		requireLayerHolds(t, l.Blob, agent, mode, oplogtest.EntriesRange(1, 100))
	})
}

// An interrupted step appended below and stopped before its drop: what the source holds at or below
// the target's last index is what the target holds, and the next drain drops it and moves the rest.
func TestOplog_IdenticalOverlapWithTheTargetConverges(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		l := oplogtest.NewLayers(t, b.Open(t), nil)
		ctx := t.Context()
		const n = 9000
		for _, below := range []int{3000, n} { // part of the source below, or all of it
			agent := oplogtest.AgentNamed(fmt.Sprint("overlap-", below))
			l.Write(t, agent, oplog.Ephemeral, 1, n, oplogtest.Seeded(t))
			for from := 1; from <= below; from += oplog.MaxChunkEntries {
				if err := l.Blob.Append(ctx, agent, oplog.Ephemeral, oplogtest.EntriesRange(oplog.Index(from), min(oplog.MaxChunkEntries, below-from+1))); err != nil {
					t.Fatal(err)
				}
			}
			d := l.Drain(t, agent, oplog.Ephemeral)
			if d.Moved != n-below {
				t.Fatalf("%s: drain moved %d entries, want %d", agent, d.Moved, n-below)
			}
			l.RequireExact(t, agent, oplog.Ephemeral, n)
			l.RequireDrained(t, agent, oplog.Ephemeral, n)
		}
	})
}

// deepLayers is primary → compressed-1 → compressed-2 → blob-0 over st.
func deepLayers(t *testing.T, st is.Storage) (*oplogtest.Layers, *archive.Compressed, *archive.Compressed) {
	t.Helper()
	blobs := memory.NewBlobStore()
	stack, err := archive.DefaultStack(st, blobs, &archive.StackOptions{CompressedLevels: 2})
	if err != nil {
		t.Fatal(err)
	}
	layers := stack.Layers()
	return &oplogtest.Layers{St: st, Blobs: blobs, Stack: stack, Blob: layers[3]},
		layers[1].(*archive.Compressed), layers[2].(*archive.Compressed)
}

func TestOplog_IndexReusedBetweenCompressedLevelsFailsAndLosesNothing(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		l, c1, c2 := deepLayers(t, b.Open(t))
		ctx := t.Context()
		agent, mode := oplogtest.AgentNamed("reused-deep"), oplog.Ephemeral
		l.Write(t, agent, mode, 1, 5000, oplogtest.Seeded(t))
		if _, err := l.Stack.ArchiveStep(ctx, agent, mode); err != nil { // compressed-1 → compressed-2 only
			t.Fatal(err)
		}
		if err := l.Stack.Append(ctx, agent, mode, secondLife(1, 200)); err != nil {
			t.Fatal(err)
		}
		_, err := l.Stack.Drain(ctx, agent, mode)
		requireIndexReused(t, err, agent, "1..200")
		requireLayerHolds(t, c1, agent, mode, secondLife(1, 200))
		requireLayerHolds(t, c2, agent, mode, oplogtest.EntriesRange(1, 5000))
		requireLayerHolds(t, l.Blob, agent, mode, nil)
	})
}

// An interrupted hop left compressed-1 holding 1..n, all of it already below, while a drain of the next
// hop moved part of it on from compressed-2 to the blob: what compressed-2 lacks is found further down.
func TestOplog_IdenticalOverlapMovedFurtherDownConverges(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		l, _, c2 := deepLayers(t, b.Open(t))
		ctx := t.Context()
		agent, mode := oplogtest.AgentNamed("overlap-deep"), oplog.Ephemeral
		const n, moved = 6000, 4096
		l.Write(t, agent, mode, 1, n, oplogtest.Seeded(t))
		if err := l.Blob.Append(ctx, agent, mode, oplogtest.EntriesRange(1, moved)); err != nil {
			t.Fatal(err)
		}
		if err := c2.Append(ctx, agent, mode, oplogtest.EntriesRange(moved+1, n-moved)); err != nil {
			t.Fatal(err)
		}
		l.Drain(t, agent, mode)
		l.RequireExact(t, agent, mode, n)
		l.RequireDrained(t, agent, mode, n)
		requireLayerHolds(t, c2, agent, mode, nil)
	})
}

// A second drain of the same agent appended the batch to compressed-1 first: the target refuses the
// append (ErrConflict), and the step converges instead of failing.
func TestOplog_ConcurrentDrainThatMovedTheBatchFirstIsNoError(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		st := b.Open(t)
		plain := oplogtest.NewLayers(t, st, nil)
		ctx := t.Context()
		agent, mode := oplogtest.AgentNamed("drained-twice"), oplog.Durable
		const n = 10_000
		plain.Write(t, agent, mode, 1, n, nil)
		c1, err := archive.NewCompressed(st, 1)
		if err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		raced := is.Intercept(st, func(ctx context.Context, op is.Operation, do func(context.Context) error) error {
			if op == is.OpAppendMany {
				// The other drain read the same first batch and appended it a moment earlier.
				once.Do(func() {
					if err := c1.Append(ctx, agent, mode, oplogtest.EntriesRange(1, oplog.MaxChunkEntries)); err != nil {
						t.Error(err)
					}
				})
			}
			return do(ctx)
		})
		l := oplogtest.NewLayers(t, raced, plain.Blobs)
		l.St = st
		d := l.Drain(t, agent, mode)
		if d.Moved != n-oplog.MaxChunkEntries+n {
			t.Fatalf("drain moved %d entries, want %d (the other drain moved %d of the first hop)", d.Moved, 2*n-oplog.MaxChunkEntries, oplog.MaxChunkEntries)
		}
		l.RequireExact(t, agent, mode, n)
		l.RequireDrained(t, agent, mode, n)

		// And truly concurrent drains of durable agents, both hops.
		for i := range 5 {
			agent := oplogtest.AgentNamed(fmt.Sprint("drained-concurrently-", i))
			plain.Write(t, agent, mode, 1, n, nil)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for j := range errs {
				wg.Go(func() { _, errs[j] = plain.Stack.Drain(ctx, agent, mode) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("%s: concurrent drains: %v", agent, err)
			}
			plain.RequireExact(t, agent, mode, n)
			for _, ns := range []string{oplog.PrimaryNamespace(mode), oplog.CompressedNamespace(mode, 1)} {
				if ok, err := st.Exists(ctx, ns, agent.StoredKey()); ok || err != nil {
					t.Fatalf("%s: %s still holds entries after both drains (%v)", agent, ns, err)
				}
			}
		}
	})
}
