package archive_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/oplogtest"
)

// verifyRig is a default stack over memory storage and a blob kind, in a layout, with six agents
// archived in two batches (two segments in the packed layout).
type verifyRig struct {
	l      *oplogtest.Layers
	layout string
	agents []oplog.AgentID
}

func newVerifyRig(t *testing.T, k oplogtest.BlobKind, layout string) verifyRig {
	t.Helper()
	l := oplogtest.NewLayersIn(t, memory.New(), k.Open(t), layout)
	r := verifyRig{l: l, layout: layout}
	for i := range 6 {
		a := oplogtest.AgentNamed(fmt.Sprintf("verify-%d", i))
		r.agents = append(r.agents, a)
		l.Write(t, a, oplog.Ephemeral, 1, 2100+i, oplogtest.Seeded(t)) // at least three chunks each
	}
	for _, batch := range [][]oplog.AgentID{r.agents[:3], r.agents[3:]} {
		out, err := l.Stack.DrainMany(t.Context(), oplog.Ephemeral, batch)
		if err != nil {
			t.Fatal(err)
		}
		for i, res := range out {
			if res.Err != nil || res.Moved < 2100 {
				t.Fatalf("drain %s: moved %d entries (%v), want every one", batch[i], res.Moved, res.Err)
			}
		}
	}
	return r
}

func (r verifyRig) verify(t *testing.T) archive.VerifyReport {
	t.Helper()
	rep, err := archive.Verify(t.Context(), r.l.St, r.l.Blobs, oplog.Ephemeral, 0, archive.VerifyOptions{Layout: r.layout, Grace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// requireOnly checks the report holds findings of kind alone, want of them (want < 0: at least one).
func requireOnly(t *testing.T, rep archive.VerifyReport, kind string, want int) {
	t.Helper()
	got := rep.Count(kind)
	if got != len(rep.Findings) || (want >= 0 && got != want) || (want < 0 && got == 0) {
		t.Fatalf("findings %+v: want only %s (%d)", rep.Findings, kind, want)
	}
}

func chunksOf(t *testing.T, r verifyRig, a oplog.AgentID) []oplogtest.BlobChunk {
	t.Helper()
	c, err := r.l.BlobChunks(t.Context(), a, oplog.Ephemeral)
	if err != nil || len(c) < 3 {
		t.Fatalf("%s: %d chunks (%v), want several", a, len(c), err)
	}
	return c
}

func TestVerify_FindsEveryPlantedFaultAndNothingElse(t *testing.T) {
	kinds := []oplogtest.BlobKind{oplogtest.PackedBlobKinds[0], oplogtest.PackedBlobKinds[1]} // fs, the local S3 server
	for _, k := range kinds {
		for _, layout := range []string{archive.LayoutPacked, archive.LayoutChunks} {
			t.Run(k.Name+"/"+layout, func(t *testing.T) {
				ctx := t.Context()
				clean := newVerifyRig(t, k, layout)
				if rep := clean.verify(t); len(rep.Findings) != 0 || rep.Agents != 6 || rep.Chunks < 18 {
					t.Fatalf("a clean store: %+v", rep)
				}

				t.Run("deleted object", func(t *testing.T) {
					r := newVerifyRig(t, k, layout)
					c := chunksOf(t, r, r.agents[1])[1]
					if err := r.l.Blobs.Delete(ctx, c.Where); err != nil {
						t.Fatal(err)
					}
					if layout == archive.LayoutPacked {
						requireOnly(t, r.verify(t), archive.FindingMissing, -1) // every row into the segment
					} else {
						requireOnly(t, r.verify(t), archive.FindingGap, 1) // the chunk layout has no index
					}
				})
				t.Run("flipped byte", func(t *testing.T) {
					r := newVerifyRig(t, k, layout)
					r.l.CorruptBlobChunk(t, r.agents[2], oplog.Ephemeral, chunksOf(t, r, r.agents[2])[0].Last)
					requireOnly(t, r.verify(t), archive.FindingCorrupt, 1)
				})
				t.Run("truncated object", func(t *testing.T) {
					r := newVerifyRig(t, k, layout)
					c := chunksOf(t, r, r.agents[4])[0]
					data, err := r.l.Blobs.Get(ctx, c.Where)
					if err != nil {
						t.Fatal(err)
					}
					if err := r.l.Blobs.Put(ctx, c.Where, data[:len(data)-7]); err != nil {
						t.Fatal(err)
					}
					requireOnly(t, r.verify(t), archive.FindingCorrupt, -1)
				})
				t.Run("orphan", func(t *testing.T) {
					r := newVerifyRig(t, k, layout)
					chunk, err := archive.EncodeChunk(oplogtest.EntriesRange(1, 3))
					if err != nil {
						t.Fatal(err)
					}
					path := fmt.Sprintf("ephemeral/0/%s", "stray-object")
					data := chunk
					if layout == archive.LayoutPacked {
						path = archive.SegmentPath(oplog.Ephemeral, 0, time.Now().Add(-2*time.Hour), 7)
						if data, _, err = archive.EncodeSegment([]archive.SegmentChunk{{Key: "nobody", Chunk: chunk}}); err != nil {
							t.Fatal(err)
						}
					}
					if err := r.l.Blobs.Put(ctx, path, data); err != nil {
						t.Fatal(err)
					}
					requireOnly(t, r.verify(t), archive.FindingOrphaned, 1)
				})
				t.Run("gap", func(t *testing.T) {
					r := newVerifyRig(t, k, layout)
					// Indices 2200..2210 archived after 1..2103 with nothing between.
					a := r.agents[3]
					if err := r.l.Blob.Append(ctx, a, oplog.Ephemeral, oplogtest.EntriesRange(2200, 11)); err != nil {
						t.Fatal(err)
					}
					requireOnly(t, r.verify(t), archive.FindingGap, 1)
				})
				if layout != archive.LayoutPacked {
					return
				}
				t.Run("row past the segment's end", func(t *testing.T) {
					r := newVerifyRig(t, k, layout)
					c := chunksOf(t, r, r.agents[0])[0]
					data, err := r.l.Blobs.Get(ctx, c.Where)
					if err != nil {
						t.Fatal(err)
					}
					ref := archive.SegmentRef{Segment: c.Where, First: 1, Offset: uint64(len(data)) + 10, Length: 20, CRC: 1}
					stray := oplogtest.AgentNamed("stray")
					if err := r.l.St.Append(ctx, oplog.BlobIndexNamespace(oplog.Ephemeral, 0), stray.StoredKey(), 5, archive.EncodeSegmentRef(ref)); err != nil {
						t.Fatal(err)
					}
					requireOnly(t, r.verify(t), archive.FindingDangling, 1)
				})
				t.Run("the object store restarted empty", func(t *testing.T) {
					r := newVerifyRig(t, k, layout)
					paths, err := r.l.Blobs.List(ctx, "")
					if err != nil {
						t.Fatal(err)
					}
					for _, p := range paths {
						if err := r.l.Blobs.Delete(ctx, p); err != nil {
							t.Fatal(err)
						}
					}
					rep := r.verify(t)
					requireOnly(t, rep, archive.FindingMissing, rep.Chunks)
					missing := map[string]bool{}
					for _, f := range rep.Findings {
						missing[f.Agent] = true
					}
					if len(missing) != len(r.agents) {
						t.Fatalf("missing reported for %d agents, want all %d", len(missing), len(r.agents))
					}
				})
			})
		}
	}
}
