package archive_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

func TestParseSegmentPath_IsSegmentPathsInverse(t *testing.T) {
	times := []time.Time{time.Unix(0, 0), time.Unix(1_800_000_000, 123_456_789), time.Unix(0, 1<<63-1), time.Unix(-5, 0)}
	for _, mode := range oplog.Modes {
		for _, level := range []int{0, 1, 9, 10, 123456} {
			for _, at := range times {
				for _, nonce := range []uint64{0, 1, 0xdeadbeef, 1<<64 - 1} {
					path := archive.SegmentPath(mode, level, at, nonce)
					m, l, created, ok := archive.ParseSegmentPath(path)
					want := time.Unix(0, max(at.UnixNano(), 0))
					if !ok || m != mode || l != level || !created.Equal(want) {
						t.Fatalf("ParseSegmentPath(%q) = %q %d %v %v, want %q %d %v", path, m, l, created, ok, mode, level, want)
					}
				}
			}
		}
	}
}

func TestParseSegmentPath_RefusesWhatSegmentPathNeverMakes(t *testing.T) {
	good := archive.SegmentPath(oplog.Ephemeral, 0, time.Unix(1_800_000_000, 0), 0xabc)
	if _, _, _, ok := archive.ParseSegmentPath(good); !ok {
		t.Fatalf("%q does not parse", good)
	}
	for _, bad := range []string{
		"",
		"ephemeral/0/segments/",
		"ephemeral/0/segments/README",
		"other/0/segments/01800000000000000000-0000000000000abc",         // unknown mode
		"ephemeral/00/segments/01800000000000000000-0000000000000abc",    // level not in Itoa form
		"ephemeral/-1/segments/01800000000000000000-0000000000000abc",    // negative level
		"ephemeral/+1/segments/01800000000000000000-0000000000000abc",    // signed level
		"ephemeral/0/segment/01800000000000000000-0000000000000abc",      // not "segments"
		"ephemeral/0/segments/1800000000000000000-0000000000000abc",      // 19 digits
		"ephemeral/0/segments/001800000000000000000-0000000000000abc",    // 21 digits
		"ephemeral/0/segments/01800000000000000000-0000000000000ABC",     // upper-case hex
		"ephemeral/0/segments/01800000000000000000-000000000000abc",      // 15 hex digits
		"ephemeral/0/segments/01800000000000000000_0000000000000abc",     // not '-'
		"ephemeral/0/segments/99999999999999999999-0000000000000abc",     // past int64
		"ephemeral/0/segments/01800000000000000000-0000000000000abc/x",   // deeper
		"ephemeral/0/segments/01800000000000000000-0000000000000abc.tmp", // a suffix
		"/ephemeral/0/segments/01800000000000000000-0000000000000abc",    // a leading slash
		"ephemeral/0/segments/0180000000000000000a-0000000000000abc",     // a letter among the digits
	} {
		if m, l, c, ok := archive.ParseSegmentPath(bad); ok {
			t.Errorf("ParseSegmentPath(%q) = %q %d %v, want ok false", bad, m, l, c)
		}
	}
}

// Whatever parses is exactly what SegmentPath makes of what it parsed to, and whatever SegmentPath
// makes parses back.
func FuzzParseSegmentPath(f *testing.F) {
	f.Add("ephemeral/0/segments/01800000000000000000-0000000000000abc", 0, int64(0), uint64(0))
	f.Add("durable/12/segments/00000000000000000000-ffffffffffffffff", 3, int64(1<<62), uint64(7))
	f.Add("ephemeral/0/segments/x", -1, int64(-1), uint64(1<<63))
	f.Fuzz(func(t *testing.T, path string, level int, nanos int64, nonce uint64) {
		if m, l, created, ok := archive.ParseSegmentPath(path); ok {
			n, err := strconv.ParseUint(path[len(path)-16:], 16, 64)
			if err != nil {
				t.Fatalf("%q parsed but its nonce does not: %v", path, err)
			}
			if again := archive.SegmentPath(m, l, created, n); again != path {
				t.Fatalf("%q parsed to %q %d %v, which SegmentPath makes %q", path, m, l, created, again)
			}
		}
		level &= 1<<31 - 1
		at := time.Unix(0, nanos)
		made := archive.SegmentPath(oplog.Ephemeral, level, at, nonce)
		m, l, created, ok := archive.ParseSegmentPath(made)
		if !ok || m != oplog.Ephemeral || l != level || !created.Equal(time.Unix(0, max(nanos, 0))) {
			t.Fatalf("%q parsed to %q %d %v %v", made, m, l, created, ok)
		}
	})
}

// segmentChunk is a chunk to put in a test segment: an agent's stored key and its span.
type segmentChunk struct {
	key         string
	first, last oplog.Index
}

// putSegment writes a segment of chunks at path and returns its footer's entries.
func putSegment(t *testing.T, blobs archive.BlobStore, path string, chunks ...segmentChunk) []archive.PackedChunk {
	t.Helper()
	in := make([]archive.SegmentChunk, len(chunks))
	for i, c := range chunks {
		entries := make([]oplog.Entry, 0, c.last-c.first+1)
		for idx := c.first; idx <= c.last; idx++ {
			entries = append(entries, oplog.Entry{Index: idx, Payload: fmt.Appendf(nil, "%s %d", c.key, idx)})
		}
		data, err := archive.EncodeChunk(entries)
		if err != nil {
			t.Fatal(err)
		}
		in[i] = archive.SegmentChunk{Key: c.key, Chunk: data}
	}
	data, listed, err := archive.EncodeSegment(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := blobs.Put(t.Context(), path, data); err != nil {
		t.Fatal(err)
	}
	return listed
}

// indexChunk writes the blob index row of c, pointing into segment.
func indexChunk(t *testing.T, st is.Storage, segment string, c archive.PackedChunk) {
	t.Helper()
	ref := archive.SegmentRef{Segment: segment, First: c.First, Offset: c.Offset, Length: c.Length, CRC: c.CRC}
	if err := st.Append(t.Context(), oplog.BlobIndexNamespace(oplog.Ephemeral, 0), c.Key, uint64(c.Last), archive.EncodeSegmentRef(ref)); err != nil {
		t.Fatal(err)
	}
}

var collectEpoch = time.Unix(1_800_000_000, 0)

// segmentAt is the path of a segment of ephemeral level 0 made age before collectEpoch.
func segmentAt(age time.Duration, nonce uint64) string {
	return archive.SegmentPath(oplog.Ephemeral, 0, collectEpoch.Add(-age), nonce)
}

func runCollector(t *testing.T, st is.Storage, blobs archive.BlobStore, opts archive.CollectOptions) archive.CollectReport {
	t.Helper()
	if opts.Now == nil {
		opts.Now = func() time.Time { return collectEpoch }
	}
	report, err := archive.CollectSegments(t.Context(), st, blobs, oplog.Ephemeral, 0, opts)
	if err != nil {
		t.Fatalf("CollectSegments: %v (report %+v)", err, report)
	}
	return report
}

func requireBlobs(t *testing.T, blobs archive.BlobStore, want ...string) {
	t.Helper()
	got, err := blobs.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("blobs %q, want %q", got, want)
	}
}

// Every orphan older than the grace goes; every segment an index row points into stays, even one of
// whose chunks only the last is still indexed; orphans younger than the grace and names that are not
// segments stay.
func TestCollectSegments_RemovesOrphansOlderThanTheGraceOnly(t *testing.T) {
	st, blobs := memory.New(), memory.NewBlobStore()
	const grace = time.Hour
	oldOrphan1, oldOrphan2 := segmentAt(grace+time.Nanosecond, 1), segmentAt(30*grace, 2)
	youngOrphan, atTheGrace := segmentAt(grace/2, 3), segmentAt(grace, 4)
	referenced, partly := segmentAt(2*grace, 5), segmentAt(3*grace, 6)
	foreign := "ephemeral/0/segments/notes.txt"

	size := 0
	for _, orphan := range []string{oldOrphan1, oldOrphan2} {
		putSegment(t, blobs, orphan, segmentChunk{"k-" + orphan[len(orphan)-1:], 1, 3})
		data, _ := blobs.Get(t.Context(), orphan)
		size += len(data)
	}
	putSegment(t, blobs, youngOrphan, segmentChunk{"young", 1, 1})
	putSegment(t, blobs, atTheGrace, segmentChunk{"edge", 1, 1})
	for _, c := range putSegment(t, blobs, referenced, segmentChunk{"a", 1, 2}, segmentChunk{"b", 1, 5}) {
		indexChunk(t, st, referenced, c)
	}
	// Agent "c" has three chunks in one segment and only its last is still indexed; "d"'s rows are gone.
	listed := putSegment(t, blobs, partly, segmentChunk{"c", 1, 2}, segmentChunk{"c", 3, 4}, segmentChunk{"c", 5, 9}, segmentChunk{"d", 1, 1})
	indexChunk(t, st, partly, listed[2])
	if err := blobs.Put(t.Context(), foreign, []byte("not a segment")); err != nil {
		t.Fatal(err)
	}

	report := runCollector(t, st, blobs, archive.CollectOptions{Grace: grace})
	requireBlobs(t, blobs, youngOrphan, atTheGrace, referenced, partly, foreign)
	want := archive.CollectReport{Mode: oplog.Ephemeral, Examined: 6, Young: 2, Referenced: 2, Removed: 2,
		RemovedBytes: int64(size), Foreign: 1}
	if report.Examined != want.Examined || report.Young != want.Young || report.Referenced != want.Referenced ||
		report.Removed != want.Removed || report.RemovedBytes != want.RemovedBytes || report.Foreign != want.Foreign ||
		len(report.Corrupt)+len(report.Failed)+report.Vanished != 0 || report.Next != "" {
		t.Fatalf("report %+v, want %+v", report, want)
	}
	if !slices.Equal(report.RemovedPaths, []string{oldOrphan2, oldOrphan1}) {
		t.Fatalf("removed %q, want the two old orphans, oldest first", report.RemovedPaths)
	}

	// Idempotent: a second run finds nothing more to remove.
	if again := runCollector(t, st, blobs, archive.CollectOptions{Grace: grace}); again.Removed != 0 || again.Referenced != 2 {
		t.Fatalf("second run %+v", again)
	}
}

// A row for the same (key, last index) that names another segment (the chunk was indexed from another
// step's segment) does not keep this one.
func TestCollectSegments_ARowNamingAnotherSegmentDoesNotReferenceThisOne(t *testing.T) {
	st, blobs := memory.New(), memory.NewBlobStore()
	const grace = time.Hour
	loser, winner := segmentAt(2*grace, 1), segmentAt(2*grace, 2)
	putSegment(t, blobs, loser, segmentChunk{"a", 1, 4})
	for _, c := range putSegment(t, blobs, winner, segmentChunk{"a", 1, 4}) {
		indexChunk(t, st, winner, c)
	}
	report := runCollector(t, st, blobs, archive.CollectOptions{Grace: grace})
	requireBlobs(t, blobs, winner)
	if report.Removed != 1 || report.Referenced != 1 {
		t.Fatalf("report %+v, want the loser removed and the winner referenced", report)
	}
}

// A segment whose footer does not decode is kept and named: nothing says which rows point into it.
func TestCollectSegments_KeepsACorruptSegment(t *testing.T) {
	st, blobs := memory.New(), memory.NewBlobStore()
	const grace = time.Hour
	corrupt, truncated, orphan := segmentAt(2*grace, 1), segmentAt(2*grace, 2), segmentAt(2*grace, 3)
	if err := blobs.Put(t.Context(), corrupt, []byte("garbage, no trailer")); err != nil {
		t.Fatal(err)
	}
	putSegment(t, blobs, truncated, segmentChunk{"a", 1, 1})
	data, _ := blobs.Get(t.Context(), truncated)
	if err := blobs.Put(t.Context(), truncated, data[:len(data)-1]); err != nil {
		t.Fatal(err)
	}
	putSegment(t, blobs, orphan, segmentChunk{"b", 1, 1})
	report := runCollector(t, st, blobs, archive.CollectOptions{Grace: grace})
	requireBlobs(t, blobs, corrupt, truncated)
	if !slices.Equal(report.Corrupt, []string{corrupt, truncated}) || report.Removed != 1 {
		t.Fatalf("report %+v, want both corrupt segments named and kept, the orphan removed", report)
	}
}

// faultyIndex is a storage whose ClosestLastMany can fail a key's part or the whole call, and counts
// its calls.
type faultyIndex struct {
	is.Storage
	mu        sync.Mutex
	calls     int
	failKey   string // this key's part fails
	failCall  int    // this call (1-based) fails whole
	callSizes []int
}

func (f *faultyIndex) ClosestLastMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.ClosestLastResult, error) {
	f.mu.Lock()
	f.calls++
	call := f.calls
	f.callSizes = append(f.callSizes, len(reqs))
	f.mu.Unlock()
	if call == f.failCall {
		return nil, fmt.Errorf("injected: %w", is.ErrTransient)
	}
	out, err := is.ClosestLastMany(ctx, f.Storage, ns, reqs)
	for i, r := range reqs {
		if err == nil && r.Key == f.failKey {
			out[i] = is.ClosestLastResult{Err: errors.New("injected: a poisoned row")}
		}
	}
	return out, err
}

// A segment whose lookup failed for one of its keys is kept and its failure reported; the run goes
// on with the others.
func TestCollectSegments_KeepsASegmentWhoseLookupFailed(t *testing.T) {
	mem, blobs := memory.New(), memory.NewBlobStore()
	st := &faultyIndex{Storage: mem, failKey: "poisoned"}
	const grace = time.Hour
	unsure, orphan := segmentAt(2*grace, 1), segmentAt(2*grace, 2)
	putSegment(t, blobs, unsure, segmentChunk{"fine", 1, 1}, segmentChunk{"poisoned", 1, 1})
	putSegment(t, blobs, orphan, segmentChunk{"other", 1, 1})
	report := runCollector(t, st, blobs, archive.CollectOptions{Grace: grace})
	requireBlobs(t, blobs, unsure)
	if len(report.Failed) != 1 || report.Failed[0].Segment != unsure || report.Removed != 1 {
		t.Fatalf("report %+v, want %s kept as failed and the orphan removed", report, unsure)
	}
}

// A storage error ends the run with the error and a report of what was done before it; nothing after
// it is removed.
func TestCollectSegments_AStorageErrorEndsTheRunWithWhatWasDone(t *testing.T) {
	mem, blobs := memory.New(), memory.NewBlobStore()
	st := &faultyIndex{Storage: mem, failCall: 3} // the first segment's lookup and second look, then the second's lookup
	const grace = time.Hour
	first, second, third := segmentAt(3*grace, 1), segmentAt(2*grace, 2), segmentAt(2*grace, 3)
	for i, p := range []string{first, second, third} {
		putSegment(t, blobs, p, segmentChunk{fmt.Sprint("k", i), 1, 1})
	}
	report, err := archive.CollectSegments(t.Context(), st, blobs, oplog.Ephemeral, 0,
		archive.CollectOptions{Grace: grace, Now: func() time.Time { return collectEpoch }})
	if !errors.Is(err, is.ErrTransient) {
		t.Fatalf("err %v, want the storage's", err)
	}
	if report.Removed != 1 || !slices.Equal(report.RemovedPaths, []string{first}) || report.Examined != 2 {
		t.Fatalf("report %+v, want the first removed, the second examined", report)
	}
	requireBlobs(t, blobs, second, third)
}

// A segment's chunks are looked up in as few calls as the keys allow: one per chunk of the agent with
// the most chunks in it, each call taking a key once (and once more after the delete).
func TestCollectSegments_LooksUpASegmentsChunksInFewCalls(t *testing.T) {
	mem, blobs := memory.New(), memory.NewBlobStore()
	st := &faultyIndex{Storage: mem}
	const grace = time.Hour
	chunks := []segmentChunk{{"multi", 1, 1}, {"multi", 2, 2}, {"multi", 3, 3}}
	for i := range 100 {
		chunks = append(chunks, segmentChunk{fmt.Sprint("single-", i), 1, 1})
	}
	putSegment(t, blobs, segmentAt(2*grace, 1), chunks...)
	report := runCollector(t, st, blobs, archive.CollectOptions{Grace: grace})
	if report.Removed != 1 || !slices.Equal(st.callSizes, []int{101, 1, 1, 101, 1, 1}) {
		t.Fatalf("report %+v, ClosestLastMany calls of %v keys; want the orphan removed in calls of 101, 1, 1, twice", report, st.callSizes)
	}
}

func TestCollectSegments_DryRunRemovesNothing(t *testing.T) {
	st, blobs := memory.New(), memory.NewBlobStore()
	const grace = time.Hour
	orphan := segmentAt(2*grace, 1)
	putSegment(t, blobs, orphan, segmentChunk{"a", 1, 1})
	report := runCollector(t, st, blobs, archive.CollectOptions{Grace: grace, DryRun: true})
	requireBlobs(t, blobs, orphan)
	if !report.DryRun || report.Removed != 1 || !slices.Equal(report.RemovedPaths, []string{orphan}) {
		t.Fatalf("dry run %+v, want the orphan reported and kept", report)
	}
}

// MaxSegments bounds the segments a run reads (young ones cost nothing), and Next resumes.
func TestCollectSegments_MaxSegmentsBoundsARunAndNextResumes(t *testing.T) {
	st, blobs := memory.New(), memory.NewBlobStore()
	const grace = time.Hour
	var orphans []string
	for i := range 5 {
		orphans = append(orphans, segmentAt(time.Duration(10-i)*grace, uint64(i)))
		putSegment(t, blobs, orphans[i], segmentChunk{"a", 1, 1})
	}
	young := segmentAt(0, 9)
	putSegment(t, blobs, young, segmentChunk{"a", 1, 1})
	report := runCollector(t, st, blobs, archive.CollectOptions{Grace: grace, MaxSegments: 2})
	if report.Removed != 2 || report.Next != orphans[1] {
		t.Fatalf("report %+v, want two removed and Next %s", report, orphans[1])
	}
	report = runCollector(t, st, blobs, archive.CollectOptions{Grace: grace, MaxSegments: 3, After: report.Next})
	if report.Removed != 3 || report.Next != "" || report.Young != 1 {
		t.Fatalf("report %+v, want the other three removed, the young one kept, and the walk done", report)
	}
	requireBlobs(t, blobs, young)
}

func TestCollectSegments_RefusesAGraceThatIsNotPositive(t *testing.T) {
	st, blobs := memory.New(), memory.NewBlobStore()
	orphan := segmentAt(time.Hour, 1)
	putSegment(t, blobs, orphan, segmentChunk{"a", 1, 1})
	for _, grace := range []time.Duration{0, -time.Second} {
		_, err := archive.CollectSegments(t.Context(), st, blobs, oplog.Ephemeral, 0, archive.CollectOptions{Grace: grace})
		if !errors.Is(err, is.ErrInvalidArgument) {
			t.Fatalf("grace %v: %v, want ErrInvalidArgument", grace, err)
		}
	}
	requireBlobs(t, blobs, orphan)
}

// A collector that runs between an archive step's segment and its rows, the segment younger than the
// grace, keeps it; once the rows are in, the segment is referenced whatever its age.
func TestCollectSegments_ARunBetweenASegmentAndItsRowsKeepsIt(t *testing.T) {
	st, blobs := memory.New(), memory.NewBlobStore()
	clk := &clock{now: collectEpoch}
	const grace = time.Hour
	p := newPacked(t, st, blobs, &archive.PackedOptions{Grace: grace, Now: clk.Now})
	var during archive.CollectReport
	archive.SetBeforeRows(p, func([]string) {
		// The segment is written, its rows are not: the collector runs now, as late as a step may be.
		clk.add(grace / 2)
		var err error
		during, err = archive.CollectSegments(t.Context(), st, blobs, oplog.Ephemeral, 0, archive.CollectOptions{Grace: grace, Now: clk.Now})
		if err != nil {
			t.Error(err)
		}
	})
	a := agentN(1)
	if err := p.Append(t.Context(), a, oplog.Ephemeral, entriesFrom(1, 10, 1)); err != nil {
		t.Fatal(err)
	}
	if during.Examined != 1 || during.Young != 1 || during.Removed != 0 {
		t.Fatalf("the run between segment and rows: %+v, want the segment seen young and kept", during)
	}
	clk.add(10 * grace)
	after := runCollector(t, st, blobs, archive.CollectOptions{Grace: grace, Now: clk.Now})
	if after.Referenced != 1 || after.Removed != 0 {
		t.Fatalf("the run after the rows: %+v, want the segment referenced", after)
	}
	requireRead(t, p, a, entriesFrom(1, 10, 1))

	// Once the layer drops the agent's rows, the segment is an orphan and goes.
	if _, err := p.DropPrefix(t.Context(), a, oplog.Ephemeral, 10); err != nil {
		t.Fatal(err)
	}
	if last := runCollector(t, st, blobs, archive.CollectOptions{Grace: grace, Now: clk.Now}); last.Removed != 1 {
		t.Fatalf("the run after the drop: %+v, want the segment removed", last)
	}
	requireBlobs(t, blobs)
}

// hookedDelete runs before just before each Delete of its store.
type hookedDelete struct {
	archive.BlobStore
	before func(path string)
}

func (h *hookedDelete) Delete(ctx context.Context, path string) error {
	if h.before != nil {
		h.before(path)
	}
	return h.BlobStore.Delete(ctx, path)
}

// Rows that land between the collector's lookup and its delete (a step that outran the grace) find
// their segment back when the run ends: the collector looks again after the delete.
func TestCollectSegments_PutsBackASegmentWhoseRowsLandedDuringItsRemoval(t *testing.T) {
	st := memory.New()
	blobs := &hookedDelete{BlobStore: memory.NewBlobStore()}
	const grace = time.Hour
	late := segmentAt(2*grace, 1)
	listed := putSegment(t, blobs, late, segmentChunk{"slow", 1, 3})
	original, _ := blobs.Get(t.Context(), late)
	blobs.before = func(path string) {
		if path == late {
			indexChunk(t, st, late, listed[0]) // the step's rows, just after the lookup found none
		}
	}
	report := runCollector(t, st, blobs, archive.CollectOptions{Grace: grace})
	if report.Removed != 0 || report.Referenced != 1 || report.PutBack != 1 {
		t.Fatalf("report %+v, want the segment put back and counted referenced", report)
	}
	if data, err := blobs.Get(t.Context(), late); err != nil || string(data) != string(original) {
		t.Fatalf("the segment after the run: %d bytes, %v; want it back as it was", len(data), err)
	}
}

// When the second look fails, the segment is put back too: nothing says no row appeared.
func TestCollectSegments_PutsBackARemovedSegmentWhenTheSecondLookFails(t *testing.T) {
	st := &faultyIndex{Storage: memory.New(), failCall: 2}
	blobs := memory.NewBlobStore()
	const grace = time.Hour
	orphan := segmentAt(2*grace, 1)
	putSegment(t, blobs, orphan, segmentChunk{"a", 1, 1})
	report := runCollector(t, st, blobs, archive.CollectOptions{Grace: grace})
	if report.Removed != 0 || report.PutBack != 1 || len(report.Failed) != 1 {
		t.Fatalf("report %+v, want the segment put back and counted failed", report)
	}
	requireBlobs(t, blobs, orphan)
}

// A windowed run reads only the segments that crossed the grace within the window, and lists only the
// names of the window's times: an orphan from long before it stays for a full run (strata gc) to find.
func TestCollectSegments_AWindowedRunReadsTheSegmentsThatCrossedTheGraceLately(t *testing.T) {
	st := memory.New()
	blobs := newCountingBlobs()
	const grace, window = time.Hour, 30 * time.Minute
	old := segmentAt(grace+10*window, 1)   // settled long ago
	recent := segmentAt(grace+window/2, 2) // crossed the grace within the window
	young := segmentAt(grace/2, 3)
	for _, p := range []string{old, recent, young} {
		putSegment(t, blobs, p, segmentChunk{key: "111e/c:a", first: 1, last: 3})
	}
	blobs.reset()
	var listed []string
	blobs.before = func(op, path string) {
		if op == "list" {
			listed = append(listed, path)
		}
	}
	rep := runCollector(t, st, blobs, archive.CollectOptions{Grace: grace, Window: window})
	if rep.Removed != 1 || rep.RemovedPaths[0] != recent {
		t.Fatalf("windowed run %+v, want the recent orphan removed", rep)
	}
	if calls := blobs.reset(); calls["get"] != 1 {
		t.Fatalf("blob calls %v: a windowed run read %d segments, want 1", calls, calls["get"])
	}
	prefix := archive.SegmentsPrefix(oplog.Ephemeral, 0)
	if len(listed) != 1 || len(listed[0]) <= len(prefix)+5 {
		t.Fatalf("listed %q: want one listing narrowed by the window's time digits", listed)
	}
	blobs.before = nil
	rep = runCollector(t, st, blobs, archive.CollectOptions{Grace: grace})
	if rep.Removed != 1 || rep.RemovedPaths[0] != old {
		t.Fatalf("full run %+v, want the settled orphan removed", rep)
	}
	requireBlobs(t, blobs.BlobStore, young)
}
