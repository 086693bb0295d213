package archive_test

import (
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/oplog"
)

// Both blob layouts pass the same layer checks: what a reader gets back after appends, reads from the
// middle and under a limit, the first and last index, a drop of whole chunks only (each counted by
// the drop that removed it), a repeated append of identical entries, and a delete.
func TestBlobLayouts_PassTheSameLayerChecks(t *testing.T) {
	for _, layout := range []string{archive.LayoutPacked, archive.LayoutChunks} {
		t.Run(layout, func(t *testing.T) {
			ctx := t.Context()
			l, err := archive.NewBlobLayer(memory.New(), memory.NewBlobStore(), 0, layout, nil)
			if err != nil {
				t.Fatal(err)
			}
			a, mode := agentN(1), oplog.Ephemeral
			if _, ok, err := l.LastIndex(ctx, a, mode); ok || err != nil {
				t.Fatalf("LastIndex of nothing: %v %v", ok, err)
			}
			all := entriesFrom(1, 5000, 1) // two chunks: 1..4096, 4097..5000
			if err := l.Append(ctx, a, mode, all[:4500]); err != nil {
				t.Fatal(err)
			}
			if err := l.Append(ctx, a, mode, all[4500:]); err != nil {
				t.Fatal(err)
			}
			requireRead(t, l, a, all)
			got, err := l.Read(ctx, a, mode, 4000, 4600, oplog.ReadLimit{Entries: 200})
			if err != nil || len(got) != 200 || got[0].Index != 4000 || got[199].Index != 4199 {
				t.Fatalf("read 4000..4600 limited to 200: %d entries, %v", len(got), err)
			}
			first, ok, err := l.FirstIndex(ctx, a, mode)
			if err != nil || !ok || first != 1 {
				t.Fatalf("FirstIndex %d %v %v", first, ok, err)
			}
			last, ok, err := l.LastIndex(ctx, a, mode)
			if err != nil || !ok || last != 5000 {
				t.Fatalf("LastIndex %d %v %v", last, ok, err)
			}
			// An append of entries the layer holds already, byte for byte, changes nothing.
			if err := l.Append(ctx, a, mode, all[4500:]); err != nil {
				t.Fatalf("append of identical entries: %v", err)
			}
			requireRead(t, l, a, all)
			// A drop covers whole chunks only: 1..4096 is one, 4097..4500 is the head of the next.
			if n, err := l.DropPrefix(ctx, a, mode, 4200); err != nil || n != 1 {
				t.Fatalf("DropPrefix(4200): %d %v, want the one whole chunk", n, err)
			}
			if n, err := l.DropPrefix(ctx, a, mode, 4200); err != nil || n != 0 {
				t.Fatalf("DropPrefix(4200) again: %d %v, want 0", n, err)
			}
			if first, _, _ := l.FirstIndex(ctx, a, mode); first != 4097 {
				t.Fatalf("FirstIndex after the drop: %d, want 4097", first)
			}
			requireReadFrom(t, l, a, all[4096:])
			if err := l.Delete(ctx, a, mode); err != nil {
				t.Fatal(err)
			}
			if got, err := l.Read(ctx, a, mode, 1, 10_000, oplog.ChunkLimit); err != nil || len(got) != 0 {
				t.Fatalf("read after Delete: %d entries, %v", len(got), err)
			}
			if _, ok, err := l.LastIndex(ctx, a, mode); ok || err != nil {
				t.Fatalf("LastIndex after Delete: %v %v", ok, err)
			}
		})
	}
}

func requireReadFrom(t *testing.T, l oplog.Layer, agent oplog.AgentID, want []oplog.Entry) {
	t.Helper()
	got, err := l.Read(t.Context(), agent, oplog.Ephemeral, 1, 1<<40, oplog.ReadLimit{Entries: 1 << 20, Bytes: 1 << 30})
	if err != nil || len(got) != len(want) || got[0].Index != want[0].Index || got[len(got)-1].Index != want[len(want)-1].Index {
		t.Fatalf("%s: read %d entries (%v), want %d..%d", agent, len(got), err, want[0].Index, want[len(want)-1].Index)
	}
}
