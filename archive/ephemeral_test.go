package archive_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// untouchable is a primary layer that counts every call: an ephemeral oplog must make none.
type untouchable struct {
	oplog.Layer
	calls atomic.Int64
}

func (u *untouchable) touch() { u.calls.Add(1) }

func (u *untouchable) Read(ctx context.Context, a oplog.AgentID, m oplog.Mode, from, to oplog.Index, l oplog.ReadLimit) ([]oplog.Entry, error) {
	u.touch()
	return u.Layer.Read(ctx, a, m, from, to, l)
}
func (u *untouchable) FirstIndex(ctx context.Context, a oplog.AgentID, m oplog.Mode) (oplog.Index, bool, error) {
	u.touch()
	return u.Layer.FirstIndex(ctx, a, m)
}
func (u *untouchable) LastIndex(ctx context.Context, a oplog.AgentID, m oplog.Mode) (oplog.Index, bool, error) {
	u.touch()
	return u.Layer.LastIndex(ctx, a, m)
}
func (u *untouchable) Append(ctx context.Context, a oplog.AgentID, m oplog.Mode, e []oplog.Entry) error {
	u.touch()
	return u.Layer.Append(ctx, a, m, e)
}
func (u *untouchable) DropPrefix(ctx context.Context, a oplog.AgentID, m oplog.Mode, upTo oplog.Index) (uint64, error) {
	u.touch()
	return u.Layer.DropPrefix(ctx, a, m, upTo)
}

// counted counts the indexed-storage calls under the archive layers, by operation.
func counted(st is.Storage, calls map[is.Operation]int) is.Storage {
	return is.Intercept(st, func(ctx context.Context, op is.Operation, do func(context.Context) error) error {
		calls[op]++
		return do(ctx)
	})
}

func entries(n int) []oplog.Entry {
	out := make([]oplog.Entry, n)
	for i := range out {
		out[i] = oplog.Entry{Index: oplog.Index(i + 1), Payload: fmt.Appendf(nil, "entry %d", i+1)}
	}
	return out
}

// An ephemeral oplog lives in the archive layers only: appending, reading, its last index, an archive
// step, a drain and the sweep's drain never call the primary.
func TestStack_AnEphemeralOplogNeverTouchesThePrimary(t *testing.T) {
	ctx := t.Context()
	st := memory.New()
	primary := &untouchable{Layer: oplog.NewPrimary(st)}
	c1, _ := archive.NewCompressed(st, 1)
	b0, _ := archive.NewBlob(memory.NewBlobStore(), 0)
	stack, err := oplog.NewStack(primary, c1, b0)
	if err != nil {
		t.Fatal(err)
	}
	a := oplog.AgentID{Component: "c", Name: "ephemeral"}
	if err := stack.Append(ctx, a, oplog.Ephemeral, entries(10)); err != nil {
		t.Fatal(err)
	}
	if got, err := stack.Read(ctx, a, oplog.Ephemeral, 1, 100); err != nil || len(got) != 10 {
		t.Fatalf("Read: %d entries, %v", len(got), err)
	}
	if last, ok, err := stack.LastIndex(ctx, a, oplog.Ephemeral); err != nil || !ok || last != 10 {
		t.Fatalf("LastIndex: %d %v %v", last, ok, err)
	}
	if d, err := stack.Drain(ctx, a, oplog.Ephemeral); err != nil || d.Moved != 10 {
		t.Fatalf("Drain: %+v %v", d, err)
	}
	if err := stack.Append(ctx, a, oplog.Ephemeral, entries(12)[10:]); err != nil {
		t.Fatal(err)
	}
	if d, err := stack.DrainSeen(ctx, a, oplog.Ephemeral, 1, 12); err != nil || d.Moved != 2 || d.Hops != 1 {
		t.Fatalf("DrainSeen: %+v %v", d, err)
	}
	if n := primary.calls.Load(); n != 0 {
		t.Fatalf("the ephemeral oplog made %d calls to the primary", n)
	}
	// A durable oplog does use it.
	if err := stack.Append(ctx, a, oplog.Durable, entries(3)); err != nil || primary.calls.Load() == 0 {
		t.Fatalf("a durable append did not reach the primary: %v", err)
	}
}

// The sweep's drain of an agent at the layer above the bottom is one read of the chunks with the last
// index (the gate's re-check), one segment put with its index rows (which refuse an overlap
// themselves: the target's last index is not read), and one drop: the source is not read again once
// moved.
func TestStack_DrainSeenReadsTheSourceOnceAndDropsItOnce(t *testing.T) {
	ctx := t.Context()
	calls := map[is.Operation]int{}
	st := counted(memory.New(), calls)
	stack, err := archive.DefaultStack(st, memory.NewBlobStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := oplog.AgentID{Component: "c", Name: "stranded"}
	if err := stack.Append(ctx, a, oplog.Ephemeral, entries(30)); err != nil {
		t.Fatal(err)
	}
	// The gate saw 29: the agent moved on since, and nothing moves.
	clear(calls)
	var moved *oplog.MovedOnError
	if d, err := stack.DrainSeen(ctx, a, oplog.Ephemeral, 1, 29); !errors.As(err, &moved) || moved.Last != 30 || moved.Seen != 29 || d != (oplog.Drained{}) {
		t.Fatalf("DrainSeen of an agent that moved on: %+v %v", d, err)
	}
	if want := map[is.Operation]int{is.OpClosestLast: 1}; fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Fatalf("storage calls of the declined drain %v, want %v", calls, want)
	}
	clear(calls)
	d, err := stack.DrainSeen(ctx, a, oplog.Ephemeral, 1, 30)
	if err != nil || d.Moved != 30 || d.Hops != 1 {
		t.Fatalf("DrainSeen: %+v %v", d, err)
	}
	want := map[is.Operation]int{is.OpClosestLast: 1, is.OpAppendKeys: 1, is.OpDropPrefix: 1}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Fatalf("storage calls %v, want %v", calls, want)
	}
	if got, err := stack.Read(ctx, a, oplog.Ephemeral, 1, 100); err != nil || len(got) != 30 {
		t.Fatalf("read back %d entries, %v", len(got), err)
	}
	// A gate that read no index (seen 0: stamps vouched for it) is re-checked against nothing: the
	// drain moves what its first read finds, with the same calls.
	if err := stack.Append(ctx, a, oplog.Ephemeral, entries(40)[30:]); err != nil {
		t.Fatal(err)
	}
	clear(calls)
	if d, err := stack.DrainSeen(ctx, a, oplog.Ephemeral, 1, 0); err != nil || d.Moved != 10 || !d.Finished(1) {
		t.Fatalf("DrainSeen with no index seen: %+v %v", d, err)
	}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Fatalf("storage calls %v with no index seen, want %v", calls, want)
	}
	if got, err := stack.Read(ctx, a, oplog.Ephemeral, 1, 100); err != nil || len(got) != 40 {
		t.Fatalf("read back %d entries, %v", len(got), err)
	}
	// A drain of a layer emptied meanwhile (the executor's teardown drain won) moves nothing and is
	// no hop.
	if d, err := stack.DrainSeen(ctx, a, oplog.Ephemeral, 1, 30); err != nil || d.Hops != 0 || d.Moved != 0 {
		t.Fatalf("DrainSeen of an emptied layer: %+v %v", d, err)
	}
	if _, err := stack.DrainSeen(ctx, a, oplog.Ephemeral, 0, 30); err == nil {
		t.Fatal("DrainSeen from the primary of an ephemeral oplog was accepted")
	}
	if _, err := stack.DrainSeen(ctx, a, oplog.Ephemeral, 2, 30); err == nil {
		t.Fatal("DrainSeen from the bottom was accepted")
	}
}

// A drain into the packed layer does not read the layer's last index first: its rows refuse an overlap
// themselves (is.KeyEntries.Below). Where the layer holds part of the oplog already (a sweep that
// crashed after its rows and before its drop), the refusal makes the drain read it and compare it:
// the rest is appended, each index read back once, and a prefix that differs is ErrIndexReused with
// nothing appended. A Below left off the rows appends the whole oplog over the prefix unread.
func TestStack_DrainOverAPrefixTheBottomHoldsComparesIt(t *testing.T) {
	for _, reused := range []bool{false, true} {
		t.Run(fmt.Sprintf("reused=%v", reused), func(t *testing.T) {
			ctx := t.Context()
			st, blobs := memory.New(), memory.NewBlobStore()
			stack, err := archive.DefaultStack(st, blobs, nil)
			if err != nil {
				t.Fatal(err)
			}
			bottom, err := archive.NewBlobLayer(st, blobs, 0, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			a := oplog.AgentID{Component: "c", Name: "half-archived"}
			all := entries(30)
			if err := stack.Append(ctx, a, oplog.Ephemeral, all); err != nil {
				t.Fatal(err)
			}
			prefix := slices.Clone(all[:20])
			if reused {
				prefix[4] = oplog.Entry{Index: 5, Payload: []byte("another entry 5")}
			}
			if err := bottom.Append(ctx, a, oplog.Ephemeral, prefix); err != nil {
				t.Fatal(err)
			}
			d, err := stack.DrainSeen(ctx, a, oplog.Ephemeral, 1, 30)
			if reused {
				if !errors.Is(err, oplog.ErrIndexReused) {
					t.Fatalf("DrainSeen over a prefix that differs: %+v %v, want ErrIndexReused", d, err)
				}
				if got, err := bottom.Read(ctx, a, oplog.Ephemeral, 1, 100, oplog.ReadLimit{Entries: 100, Bytes: 1 << 20}); err != nil || !slices.EqualFunc(got, prefix, entryEqual) {
					t.Fatalf("the bottom after the refused drain holds %v, %v; want the prefix alone", got, err)
				}
				return
			}
			if err != nil || d.Moved != 10 {
				t.Fatalf("DrainSeen over a prefix the bottom holds: %+v %v, want 10 moved", d, err)
			}
			got, err := stack.Read(ctx, a, oplog.Ephemeral, 1, 100)
			if err != nil || !slices.EqualFunc(got, all, entryEqual) {
				t.Fatalf("read back %v, %v; want indices 1..30 once each", got, err)
			}
		})
	}
}

func entryEqual(a, b oplog.Entry) bool {
	return a.Index == b.Index && bytes.Equal(a.Payload, b.Payload)
}
