package archive_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/faults"
)

// compactRig is newRetentionRig's stack with tombstones, holding agents 0, 1 and 2 archived in one
// batch (one segment) and agent 3 alone, two hours before now.
type compactRig struct{ *retentionRig }

func newCompactRig(t *testing.T, st is.Storage, blobs archive.BlobStore) compactRig {
	t.Helper()
	r := &retentionRig{st: st, blobs: blobs, now: time.Unix(1_800_000_000, 0), want: map[int][]oplog.Entry{}}
	r.packed = newPacked(t, st, blobs, &archive.PackedOptions{Now: func() time.Time { return r.now }})
	compressed, err := archive.NewCompressed(st, 1)
	if err != nil {
		t.Fatal(err)
	}
	stack, err := oplog.NewStack(oplog.NewPrimary(st), compressed, r.packed)
	if err != nil {
		t.Fatal(err)
	}
	r.stack = stack.WithTombstones(st)
	ctx := t.Context()
	var seen []oplog.Seen
	for i := range 4 {
		e := entriesFrom(1, 20+i, i)
		if err := r.stack.Append(ctx, agentN(i), oplog.Ephemeral, e); err != nil {
			t.Fatal(err)
		}
		r.want[i] = e
		seen = append(seen, oplog.Seen{Agent: agentN(i), Index: e[len(e)-1].Index})
	}
	for _, batch := range [][]oplog.Seen{seen[:3], seen[3:]} {
		res, err := r.stack.DrainSeenMany(ctx, oplog.Ephemeral, 1, batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range res {
			if d.Err != nil {
				t.Fatal(d.Err)
			}
		}
	}
	r.now = r.now.Add(2 * time.Hour)
	return compactRig{r}
}

func (r compactRig) erase(t *testing.T, i int) {
	t.Helper()
	if _, err := r.stack.Erase(t.Context(), agentN(i), oplog.Ephemeral); err != nil {
		t.Fatal(err)
	}
	delete(r.want, i)
}

func (r compactRig) compact(t *testing.T) (archive.CompactReport, error) {
	t.Helper()
	return archive.CompactSegments(t.Context(), r.st, r.blobs, oplog.Ephemeral, 0,
		archive.CompactOptions{Grace: time.Hour, Now: func() time.Time { return r.now }})
}

func (r compactRig) collect(t *testing.T) archive.CollectReport {
	t.Helper()
	rep, err := archive.CollectSegments(t.Context(), r.st, r.blobs, oplog.Ephemeral, 0,
		archive.CollectOptions{Grace: time.Hour, Now: func() time.Time { return r.now }})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestCompactSegments_RewritesSegmentsHoldingErasedChunksAndReadersFollow(t *testing.T) {
	r := newCompactRig(t, memory.New(), memory.NewBlobStore())
	if rep, err := r.compact(t); err != nil || rep.Whole != 2 || rep.Compacted != 0 {
		t.Fatalf("nothing erased yet: %+v, %v; want both segments whole", rep, err)
	}
	r.erase(t, 0)
	rep, err := r.compact(t)
	if err != nil || rep.Compacted != 1 || rep.Whole != 1 || rep.DeadChunks != 1 || len(rep.Written) != 1 {
		t.Fatalf("after erasing agent 0: %+v, %v; want its segment rewritten without its chunk", rep, err)
	}
	r.requireKept(t)
	if got := r.segments(t); len(got) != 2 {
		t.Fatalf("%d segments after compaction, want 2 (the old one deleted)", len(got))
	}
	// Verification follows the move: the rows naming the deleted segment find their chunks.
	if v, err := archive.Verify(t.Context(), r.st, r.blobs, oplog.Ephemeral, 0, archive.VerifyOptions{Grace: time.Hour,
		Now: func() time.Time { return r.now }}); err != nil || len(v.Findings) != 0 || v.Chunks != 3 {
		t.Fatalf("verify after compaction: %+v, %v; want 3 chunks and no finding", v, err)
	}
	// The new segment is referenced through the move: the collector, long past the grace, keeps it.
	r.now = r.now.Add(3 * time.Hour)
	if c := r.collect(t); c.Removed != 0 || c.Referenced != 2 {
		t.Fatalf("collector after compaction: %+v, want both segments referenced", c)
	}
	r.requireKept(t)
	// Again, on the rewritten segment: a chain of two moves.
	r.erase(t, 1)
	if rep, err := r.compact(t); err != nil || rep.Compacted != 1 || rep.DeadChunks != 1 {
		t.Fatalf("after erasing agent 1: %+v, %v", rep, err)
	}
	r.requireKept(t)
	r.now = r.now.Add(3 * time.Hour)
	if c := r.collect(t); c.Removed != 0 {
		t.Fatalf("collector after the second compaction removed %d segments", c.Removed)
	}
	r.requireKept(t)
	// Erasing the last live chunk leaves the segment dead: compaction leaves it, the collector removes it.
	r.erase(t, 2)
	if rep, err := r.compact(t); err != nil || rep.Dead != 1 || rep.Compacted != 0 {
		t.Fatalf("after erasing agent 2: %+v, %v; want its segment dead", rep, err)
	}
	if c := r.collect(t); c.Removed != 1 {
		t.Fatalf("collector: %+v, want the dead segment removed", c)
	}
	r.requireKept(t)
}

// A compaction cut at any call (before the store sees it, and after) loses no live chunk, and a run
// after it, then the collector, converge to the compacted state.
func TestCompactSegments_InterruptedAtEveryCallLosesNothing(t *testing.T) {
	in := &faults.Injector{}
	probe := newCompactRig(t, in.Storage(memory.New()), in.Blobs(memory.NewBlobStore()))
	probe.erase(t, 1)
	in.Count()
	if _, err := probe.compact(t); err != nil {
		t.Fatal(err)
	}
	calls, _ := in.Calls()
	t.Logf("a compaction makes %d calls", calls)
	for k := 1; k <= calls; k++ {
		for _, when := range []faults.When{faults.Before, faults.After} {
			in.Count()
			r := newCompactRig(t, in.Storage(memory.New()), in.Blobs(memory.NewBlobStore()))
			r.erase(t, 1)
			in.Arm(k, when)
			_, err := r.compact(t)
			in.Count()
			if err != nil && !errors.Is(err, faults.ErrInjected) {
				t.Fatalf("call %d (%s): %v", k, when, err)
			}
			r.requireKept(t)
			if _, err := r.compact(t); err != nil {
				t.Fatalf("call %d (%s): the run after: %v", k, when, err)
			}
			r.now = r.now.Add(3 * time.Hour)
			r.collect(t)
			r.requireKept(t)
			if n := len(r.segments(t)); n != 2 {
				t.Fatalf("call %d (%s): %d segments after a second run and the collector, want 2", k, when, n)
			}
		}
	}
}

// Retention after a compaction removes the rewritten segment too: the rows name the old one, and the
// expiry follows the move.
func TestPacked_ExpireAfterACompactionRemovesTheRewrittenSegment(t *testing.T) {
	r := newCompactRig(t, memory.New(), memory.NewBlobStore())
	r.erase(t, 0)
	if rep, err := r.compact(t); err != nil || rep.Compacted != 1 {
		t.Fatalf("compaction: %+v, %v", rep, err)
	}
	r.now = r.now.Add(3 * time.Hour)
	rep, err := r.packed.Expire(t.Context(), r.stack.Layers()[:2], oplog.Ephemeral,
		archive.ExpireOptions{Retention: time.Hour, Grace: time.Hour, Now: func() time.Time { return r.now }})
	if err != nil || rep.Expired != 3 {
		t.Fatalf("expire: %+v, %v; want the three agents left expired", rep, err)
	}
	r.requireKept(t, 1, 2, 3)
	if left := r.segments(t); len(left) != 0 {
		t.Fatalf("segments left after everything expired: %q", left)
	}
}
