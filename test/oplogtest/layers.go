// Package oplogtest holds what the cross-backend tests share: a default layer stack over any storage
// with checks of what it holds, and a sweep rig over it.
package oplogtest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// Layers is a default stack (primary → compressed level 1 → blob level 0) and what it sits on.
type Layers struct {
	St    is.Storage
	Blobs archive.BlobStore
	Stack *oplog.Stack
	Blob  oplog.Layer // blob level 0: an *archive.Packed, or an *archive.Blob in the chunk layout
}

// NewLayers is NewLayersIn the default (packed) blob layout.
func NewLayers(t testing.TB, st is.Storage, blobs archive.BlobStore) *Layers {
	t.Helper()
	return NewLayersIn(t, st, blobs, archive.LayoutPacked)
}

// NewLayersIn builds the default stack over st and blobs (a memory blob store when nil), its blob
// level in layout.
func NewLayersIn(t testing.TB, st is.Storage, blobs archive.BlobStore, layout string) *Layers {
	t.Helper()
	if blobs == nil {
		blobs = memory.NewBlobStore()
	}
	stack, err := archive.DefaultStack(st, blobs, &archive.StackOptions{BlobLayout: layout})
	if err != nil {
		t.Fatal(err)
	}
	layers := stack.Layers()
	return &Layers{St: st, Blobs: blobs, Stack: stack, Blob: layers[len(layers)-1]}
}

// Chunks is the blob level of a stack in the chunk layout; it fails the test for another layout.
func (l *Layers) Chunks(t testing.TB) *archive.Blob {
	t.Helper()
	b, ok := l.Blob.(*archive.Blob)
	if !ok {
		t.Fatalf("blob level is a %T, this test needs the chunk layout", l.Blob)
	}
	return b
}

// payload is entry i's content: its index, padded to a size that varies with it.
func Payload(i oplog.Index) []byte {
	return []byte(fmt.Sprintf("entry %d;%s", i, strings.Repeat("x", int(i%13))))
}

func EntriesRange(from oplog.Index, n int) []oplog.Entry {
	out := make([]oplog.Entry, n)
	for i := range out {
		idx := from + oplog.Index(i)
		out[i] = oplog.Entry{Index: idx, Payload: Payload(idx)}
	}
	return out
}

// write appends entries from..from+n-1 the way an executor would: durable agents in batches, ephemeral
// agents as a chunk per invocation step of random size.
func (l *Layers) Write(t testing.TB, agent oplog.AgentID, mode oplog.Mode, from oplog.Index, n int, rng *rand.Rand) {
	t.Helper()
	for n > 0 {
		size := min(n, 1000)
		if mode == oplog.Ephemeral {
			size = min(n, 1+rng.IntN(700))
		}
		if err := l.Stack.Append(t.Context(), agent, mode, EntriesRange(from, size)); err != nil {
			t.Fatalf("append %d..%d to %s: %v", from, from+oplog.Index(size)-1, agent, err)
		}
		from += oplog.Index(size)
		n -= size
	}
}

// requireExact checks Stack.Read returns exactly indices 1..n with their payloads, once each.
func (l *Layers) RequireExact(t testing.TB, agent oplog.AgentID, mode oplog.Mode, n int) {
	t.Helper()
	next := oplog.Index(1)
	for {
		entries, err := l.Stack.Read(t.Context(), agent, mode, next, 1000)
		if err != nil {
			t.Fatalf("read %s from %d: %v", agent, next, err)
		}
		if len(entries) == 0 {
			break
		}
		for _, e := range entries {
			if e.Index != next {
				t.Fatalf("%s: read index %d where %d was expected", agent, e.Index, next)
			}
			if !bytes.Equal(e.Payload, Payload(e.Index)) {
				t.Fatalf("%s: entry %d has payload %q", agent, e.Index, e.Payload)
			}
			next++
		}
	}
	if got := int(next) - 1; got != n {
		t.Fatalf("%s: read back %d entries, want %d", agent, got, n)
	}
}

// requireDrained checks the oplog lives in the blob layer alone: the primary and compressed indexes are
// gone from storage, and the blob chunks cover 1..n exactly once, in order.
func (l *Layers) RequireDrained(t testing.TB, agent oplog.AgentID, mode oplog.Mode, n int) {
	t.Helper()
	ctx := t.Context()
	for _, ns := range []string{oplog.PrimaryNamespace(mode), oplog.CompressedNamespace(mode, 1)} {
		if ok, err := l.St.Exists(ctx, ns, agent.StoredKey()); ok || err != nil {
			t.Fatalf("%s: %s still exists after the drain (%v)", agent, ns, err)
		}
	}
	covered := l.BlobCoverage(t, agent, mode)
	if !slices.Equal(covered, SpanIndexes(1, n)) {
		t.Fatalf("%s: blob chunks cover %d indices (%v…), want exactly 1..%d once each", agent, len(covered), Head(covered), n)
	}
}

// BlobCoverage decodes every blob chunk of the agent and returns the indices they hold, in order,
// duplicates kept (BlobChunks).
func (l *Layers) BlobCoverage(t testing.TB, agent oplog.AgentID, mode oplog.Mode) []oplog.Index {
	t.Helper()
	chunks, err := l.BlobChunks(t.Context(), agent, mode)
	if err != nil {
		t.Fatal(err)
	}
	var covered []oplog.Index
	for _, c := range chunks {
		for i := c.First; i <= c.Last; i++ {
			covered = append(covered, i)
		}
	}
	return covered
}

// BlobChunk is one chunk of the blob level as BlobChunks found it.
type BlobChunk struct {
	Where       string // its blob's path (a segment's, in the packed layout)
	First, Last oplog.Index
}

// BlobChunks returns the agent's chunks in the blob level, in order of their last index, each read and
// checked: in the packed layout those the blob index's rows point to (each read from its segment and
// checked against its row), in the chunk layout the blobs listed under the agent's path (each stored
// under its own last index).
func (l *Layers) BlobChunks(ctx context.Context, agent oplog.AgentID, mode oplog.Mode) ([]BlobChunk, error) {
	var out []BlobChunk
	switch b := l.Blob.(type) {
	case *archive.Packed:
		rows, err := l.St.Read(ctx, oplog.BlobIndexNamespace(mode, b.Level()), agent.StoredKey(), 1, is.MaxID)
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			ref, err := archive.DecodeSegmentRef(row.Value, oplog.Index(row.ID))
			if err == nil {
				var data []byte
				if data, err = archive.GetRange(ctx, l.Blobs, ref.Segment, int64(ref.Offset), int64(ref.Length)); err == nil {
					_, err = archive.PackedChunkBytes(ref.Chunk(agent.StoredKey(), oplog.Index(row.ID)), data)
				}
			}
			if err != nil {
				return nil, fmt.Errorf("%s: blob index row %d: %w", agent, row.ID, err)
			}
			out = append(out, BlobChunk{Where: ref.Segment, First: ref.First, Last: oplog.Index(row.ID)})
		}
	case *archive.Blob:
		paths, err := l.Blobs.List(ctx, b.Dir(agent, mode))
		if err != nil {
			return nil, err
		}
		for _, p := range paths {
			data, err := l.Blobs.Get(ctx, p)
			if err != nil {
				return nil, err
			}
			first, last, err := archive.ChunkSpan(data)
			if err != nil {
				return nil, fmt.Errorf("blob %s: %w", p, err)
			}
			if want := fmt.Sprintf("%020d", last); !strings.HasSuffix(p, want) {
				return nil, fmt.Errorf("blob %s holds a chunk ending at %d", p, last)
			}
			out = append(out, BlobChunk{Where: p, First: first, Last: last})
		}
	default:
		return nil, fmt.Errorf("blob level is a %T", l.Blob)
	}
	return out, nil
}

// CorruptBlobChunk flips one byte of the agent's blob chunk that ends at last, in either layout.
func (l *Layers) CorruptBlobChunk(t testing.TB, agent oplog.AgentID, mode oplog.Mode, last oplog.Index) {
	t.Helper()
	ctx := t.Context()
	path, at := "", 3
	switch b := l.Blob.(type) {
	case *archive.Packed:
		row, ok, err := l.St.Closest(ctx, oplog.BlobIndexNamespace(mode, b.Level()), agent.StoredKey(), uint64(last))
		if err != nil || !ok || row.ID != uint64(last) {
			t.Fatalf("%s: no blob index row of %d (%v)", agent, last, err)
		}
		ref, err := archive.DecodeSegmentRef(row.Value, last)
		if err != nil {
			t.Fatal(err)
		}
		path, at = ref.Segment, int(ref.Offset)+3
	default:
		path = l.Chunks(t).ChunkPath(agent, mode, last)
	}
	data, err := l.Blobs.Get(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	data[at] ^= 0x01
	if err := l.Blobs.Put(ctx, path, data); err != nil {
		t.Fatal(err)
	}
}

func SpanIndexes(from, to int) []oplog.Index {
	var out []oplog.Index
	for i := from; i <= to; i++ {
		out = append(out, oplog.Index(i))
	}
	return out
}

func Head(s []oplog.Index) []oplog.Index { return s[:min(len(s), 8)] }

func AgentNamed(name string) oplog.AgentID {
	return oplog.AgentID{Component: "component-1", Name: name}
}

func Seeded(t testing.TB) *rand.Rand {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 0))
}

// drain runs Stack.Drain and fails the test on an error.
func (l *Layers) Drain(t testing.TB, agent oplog.AgentID, mode oplog.Mode) oplog.Drained {
	t.Helper()
	d, err := l.Stack.Drain(t.Context(), agent, mode)
	if err != nil {
		t.Fatalf("drain %s: %v", agent, err)
	}
	return d
}

// StrandedCount returns how many of the agents compressed level 1 still holds.
func (l *Layers) StrandedCount(t testing.TB, agents []oplog.AgentID) int {
	t.Helper()
	n := 0
	for _, a := range agents {
		ok, err := l.St.Exists(t.Context(), oplog.CompressedNamespace(oplog.Ephemeral, 1), a.StoredKey())
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			n++
		}
	}
	return n
}

// RequireErased checks no layer holds any entry of the agent's oplog in mode: each layer's first and
// last index are absent, a read of the whole stack is empty, and the blob level has no chunk of it.
func (l *Layers) RequireErased(t testing.TB, agent oplog.AgentID, mode oplog.Mode) {
	t.Helper()
	ctx := t.Context()
	for _, layer := range l.Stack.Layers() {
		first, okFirst, err := layer.FirstIndex(ctx, agent, mode)
		if err != nil {
			t.Fatal(err)
		}
		last, okLast, err := layer.LastIndex(ctx, agent, mode)
		if err != nil {
			t.Fatal(err)
		}
		if okFirst || okLast {
			t.Fatalf("%s: %s still holds %d..%d after the erasure", agent, layer.Name(), first, last)
		}
	}
	entries, err := l.Stack.Read(ctx, agent, mode, 1, 1000)
	if err != nil || len(entries) > 0 {
		t.Fatalf("%s: a read after the erasure returned %d entries (%v)", agent, len(entries), err)
	}
	chunks, err := l.BlobChunks(ctx, agent, mode)
	if err != nil || len(chunks) > 0 {
		t.Fatalf("%s: the blob level still has %d chunks after the erasure (%v)", agent, len(chunks), err)
	}
}
