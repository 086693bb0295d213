package archive_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/faults"
)

// retentionRig is a stack primary → compressed-1 → packed blob-0 whose segment names read a clock the
// test moves, filled with agents archived at two times: see newRetentionRig.
type retentionRig struct {
	st     is.Storage
	blobs  archive.BlobStore
	packed *archive.Packed
	stack  *oplog.Stack
	now    time.Time
	want   map[int][]oplog.Entry // what each agent must read back while it is kept
}

// The agents: 0 and 1 archived at T0 alone; 2 and 3 archived at T0 in one batch (one segment), then 3
// again at T0+3h; 4 archived at T0 and written again since (its newest entries still in compressed-1);
// 5 archived at T0+3h. With a retention of 2h at T0+3h, 0, 1 and 2 expire; 3 and 5 are young; 4 is
// kept whole because a layer above holds it.
const (
	rigExpired = 3
	rigYoung   = 2
	rigAbove   = 1
)

func newRetentionRig(t *testing.T, st is.Storage, blobs archive.BlobStore) *retentionRig {
	t.Helper()
	r := &retentionRig{st: st, blobs: blobs, now: time.Unix(1_800_000_000, 0), want: map[int][]oplog.Entry{}}
	r.packed = newPacked(t, st, blobs, &archive.PackedOptions{Now: func() time.Time { return r.now }})
	compressed, err := archive.NewCompressed(st, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.stack, err = oplog.NewStack(oplog.NewPrimary(st), compressed, r.packed); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	write := func(i int, first oplog.Index, n int) {
		e := entriesFrom(first, n, i)
		if err := r.stack.Append(ctx, agentN(i), oplog.Ephemeral, e); err != nil {
			t.Fatal(err)
		}
		r.want[i] = append(r.want[i], e...)
	}
	drain := func(agents ...int) {
		seen := make([]oplog.Seen, len(agents))
		for k, i := range agents {
			seen[k] = oplog.Seen{Agent: agentN(i), Index: r.want[i][len(r.want[i])-1].Index}
		}
		res, err := r.stack.DrainSeenMany(ctx, oplog.Ephemeral, 1, seen)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range res {
			if d.Err != nil {
				t.Fatal(d.Err)
			}
		}
	}
	for i := range 5 {
		write(i, 1, 10+i)
	}
	drain(0)
	drain(1)
	drain(2, 3)
	drain(4)
	r.now = r.now.Add(3 * time.Hour)
	write(3, 14, 5)
	write(4, 15, 3) // stays in compressed-1
	write(5, 1, 7)
	drain(3)
	drain(5)
	return r
}

func (r *retentionRig) expire(t *testing.T, dryRun bool) (archive.ExpireReport, error) {
	t.Helper()
	return r.packed.Expire(t.Context(), r.stack.Layers()[:2], oplog.Ephemeral,
		archive.ExpireOptions{Retention: 2 * time.Hour, Grace: time.Hour, Now: func() time.Time { return r.now }, DryRun: dryRun})
}

// requireKept checks what a reader gets: nothing of an expired agent, every entry of every other.
func (r *retentionRig) requireKept(t *testing.T, expired ...int) {
	t.Helper()
	for i, want := range r.want {
		got, err := r.stack.Read(t.Context(), agentN(i), oplog.Ephemeral, 1, 1000)
		if err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
		if slices.Contains(expired, i) {
			want = nil
		}
		if len(got) != len(want) || (len(want) > 0 && (got[0].Index != want[0].Index || got[len(got)-1].Index != want[len(want)-1].Index)) {
			t.Fatalf("agent %d reads %d entries, want %d (expired: %v)", i, len(got), len(want), expired)
		}
	}
}

func (r *retentionRig) segments(t *testing.T) []string {
	t.Helper()
	paths, err := r.blobs.List(t.Context(), archive.SegmentsPrefix(oplog.Ephemeral, 0))
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

func TestPacked_ExpireRemovesWholeOplogsOlderThanTheRetentionAndTheirSegments(t *testing.T) {
	r := newRetentionRig(t, memory.New(), memory.NewBlobStore())
	before := r.segments(t) // 0, 1, 2+3, 4 at T0; 3, 5 at T0+3h
	if len(before) != 6 {
		t.Fatalf("%d segments, want 6", len(before))
	}
	dry, err := r.expire(t, true)
	if err != nil || dry.Expired != rigExpired || dry.Young != rigYoung || dry.Above != rigAbove || dry.Segments.Removed != 0 {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	r.requireKept(t)
	if got := r.segments(t); len(got) != len(before) {
		t.Fatalf("a dry run removed segments: %d left of %d", len(got), len(before))
	}

	rep, err := r.expire(t, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Examined != 6 || rep.Expired != rigExpired || rep.Young != rigYoung || rep.Above != rigAbove || rep.Chunks != 3 {
		t.Fatalf("report %+v", rep)
	}
	// 0's and 1's segments held only expired chunks; 2's is 3's too, which is young.
	if s := rep.Segments; s.Removed != 2 || s.Referenced != 1 || len(r.segments(t)) != 4 {
		t.Fatalf("segments: %+v, %d left", s, len(r.segments(t)))
	}
	r.requireKept(t, 0, 1, 2)

	again, err := r.expire(t, false)
	if err != nil || again.Expired != 0 || again.Examined != 3 {
		t.Fatalf("a second run: %+v, %v; want nothing more expired", again, err)
	}
}

// A run cut at any storage or blob call (before it reaches the store, and after) loses nothing that is
// not expired, and a run after it finishes the work.
func TestPacked_ExpireInterruptedAtEveryCallLosesNothingYounger(t *testing.T) {
	in := &faults.Injector{}
	probe := newRetentionRig(t, in.Storage(memory.New()), in.Blobs(memory.NewBlobStore()))
	in.Count()
	if _, err := probe.expire(t, false); err != nil {
		t.Fatal(err)
	}
	calls, _ := in.Calls()
	t.Logf("a clean run makes %d calls", calls)
	for k := 1; k <= calls; k++ {
		for _, when := range []faults.When{faults.Before, faults.After} {
			in.Count()
			r := newRetentionRig(t, in.Storage(memory.New()), in.Blobs(memory.NewBlobStore()))
			in.Arm(k, when)
			_, err := r.expire(t, false)
			in.Count()
			// A fault in the collector's second look at a removed segment is absorbed (it puts the
			// segment back and reports it failed): no error, and nothing lost either.
			if err != nil && !errors.Is(err, faults.ErrInjected) {
				t.Fatalf("call %d (%s): %v, want the injected fault or none", k, when, err)
			}
			r.requireKept(t, r.expiredSoFar(t)...)
			if rep, err := r.expire(t, false); err != nil || rep.Young != rigYoung || rep.Above != rigAbove {
				t.Fatalf("call %d (%s): the run after: %+v, %v", k, when, rep, err)
			}
			r.requireKept(t, 0, 1, 2)
			// A run cut between an agent's rows and its segments leaves orphans: the collector's.
			if _, err := archive.CollectSegments(t.Context(), r.st, r.blobs, oplog.Ephemeral, 0,
				archive.CollectOptions{Grace: time.Hour, Now: func() time.Time { return r.now }}); err != nil {
				t.Fatal(err)
			}
			if n := len(r.segments(t)); n != 4 {
				t.Fatalf("call %d (%s): %d segments after the second run and the collector, want 4", k, when, n)
			}
		}
	}
}

// expiredSoFar lists the rig's agents whose blob index is gone (a cut run removed them whole).
func (r *retentionRig) expiredSoFar(t *testing.T) []int {
	t.Helper()
	var out []int
	for i := range r.want {
		if _, ok, err := r.packed.LastIndex(t.Context(), agentN(i), oplog.Ephemeral); err != nil {
			t.Fatal(err)
		} else if !ok {
			out = append(out, i)
		}
	}
	return out
}
