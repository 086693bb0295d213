package archive

import (
	"context"
	"slices"
	"sort"
	"testing"

	"github.com/stratalog/strata/oplog"
)

// fakeChunks is a chunk layer in memory whose next can run a hook (a concurrent drop) before it looks.
type fakeChunks struct {
	t      *testing.T
	chunks map[oplog.Index][]byte // by last index
	calls  int
	before func(call int) // runs before call number call (1-based) of next
}

func (f *fakeChunks) put(first oplog.Index, n int) {
	data, err := EncodeChunk(entriesFrom(first, n, 1))
	if err != nil {
		f.t.Fatal(err)
	}
	f.chunks[first+oplog.Index(n)-1] = data
}

func (f *fakeChunks) dropUpTo(upTo oplog.Index) {
	for last := range f.chunks {
		if last <= upTo {
			delete(f.chunks, last)
		}
	}
}

func (f *fakeChunks) next(_ context.Context, from oplog.Index) (oplog.Index, []byte, bool, error) {
	f.calls++
	if f.before != nil {
		f.before(f.calls)
	}
	lasts := make([]oplog.Index, 0, len(f.chunks))
	for last := range f.chunks {
		lasts = append(lasts, last)
	}
	slices.Sort(lasts)
	i := sort.Search(len(lasts), func(i int) bool { return lasts[i] >= from })
	if i == len(lasts) {
		return 0, nil, false, nil
	}
	return lasts[i], f.chunks[lasts[i]], true, nil
}

func indices(entries []oplog.Entry) []oplog.Index {
	out := make([]oplog.Index, len(entries))
	for i, e := range entries {
		out[i] = e.Index
	}
	return out
}

func span(from, to oplog.Index) []oplog.Index {
	var out []oplog.Index
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func TestReadChunks_ADropBetweenTwoChunksEndsTheRunInsteadOfLeavingAGap(t *testing.T) {
	f := &fakeChunks{t: t, chunks: map[oplog.Index][]byte{}}
	for first := oplog.Index(1); first <= 300; first += 100 {
		f.put(first, 100)
	}
	// A concurrent step moves 101..200 below and drops it after the first chunk was read.
	f.before = func(call int) {
		if call == 2 {
			f.dropUpTo(200)
		}
	}
	agent := oplog.AgentID{Component: "c", Name: "n"}
	got, err := readChunks(t.Context(), "fake", agent, 1, 300, oplog.ChunkLimit, f.next)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(indices(got), span(1, 100)) {
		t.Fatalf("read %d entries %v…%v, want the contiguous run 1..100", len(got), indices(got)[:1], indices(got)[len(got)-1:])
	}
	// Reading on from the end of the run finds what is left: a first chunk may start above from.
	got, err = readChunks(t.Context(), "fake", agent, 101, 300, oplog.ChunkLimit, f.next)
	if err != nil || !slices.Equal(indices(got), span(201, 300)) {
		t.Fatalf("read on from 101: %d entries, %v; want 201..300", len(got), err)
	}
}

func TestReadChunks_OverlappingChunksAreOneContiguousRun(t *testing.T) {
	f := &fakeChunks{t: t, chunks: map[oplog.Index][]byte{}}
	f.put(1, 100)
	f.put(51, 100) // 51..150: overlaps the first (two archivers raced)
	f.put(151, 50)
	got, err := readChunks(t.Context(), "fake", oplog.AgentID{Component: "c", Name: "n"}, 20, 200, oplog.ChunkLimit, f.next)
	if err != nil || !slices.Equal(indices(got), span(20, 200)) {
		t.Fatalf("read %d entries, %v; want 20..200 once each", len(got), err)
	}
}
