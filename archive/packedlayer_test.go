package archive_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// countingBlobs counts a blob store's calls by name and can run a hook before each.
type countingBlobs struct {
	archive.BlobStore
	mu     sync.Mutex
	calls  map[string]int
	before func(op, path string)
}

func newCountingBlobs() *countingBlobs {
	return &countingBlobs{BlobStore: memory.NewBlobStore(), calls: map[string]int{}}
}

func (c *countingBlobs) count(op, path string) {
	c.mu.Lock()
	c.calls[op]++
	before := c.before
	c.mu.Unlock()
	if before != nil {
		before(op, path)
	}
}

func (c *countingBlobs) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = map[string]int{}
	return out
}

func (c *countingBlobs) Put(ctx context.Context, path string, data []byte) error {
	c.count("put", path)
	return c.BlobStore.Put(ctx, path, data)
}

func (c *countingBlobs) Get(ctx context.Context, path string) ([]byte, error) {
	c.count("get", path)
	return c.BlobStore.Get(ctx, path)
}

func (c *countingBlobs) GetRange(ctx context.Context, path string, offset, length int64) ([]byte, error) {
	c.count("get_range", path)
	return archive.GetRange(ctx, c.BlobStore, path, offset, length)
}

func (c *countingBlobs) List(ctx context.Context, prefix string) ([]string, error) {
	c.count("list", prefix)
	return c.BlobStore.List(ctx, prefix)
}

func newPacked(t *testing.T, st is.Storage, blobs archive.BlobStore, opts *archive.PackedOptions) *archive.Packed {
	t.Helper()
	p, err := archive.NewPacked(st, blobs, 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func agentN(i int) oplog.AgentID { return oplog.AgentID{Component: "c", Name: fmt.Sprint("agent-", i)} }

func entriesFrom(first oplog.Index, n int, agent int) []oplog.Entry {
	out := make([]oplog.Entry, n)
	for i := range out {
		idx := first + oplog.Index(i)
		out[i] = oplog.Entry{Index: idx, Payload: fmt.Appendf(nil, "agent %d entry %d", agent, idx)}
	}
	return out
}

func requireRead(t *testing.T, l oplog.Layer, agent oplog.AgentID, want []oplog.Entry) {
	t.Helper()
	got, err := l.Read(t.Context(), agent, oplog.Ephemeral, 1, 1<<40, oplog.ReadLimit{Entries: 1 << 20, Bytes: 1 << 30})
	if err != nil {
		t.Fatalf("%s: read: %v", agent, err)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: read %d entries, want %d", agent, len(got), len(want))
	}
	for i := range want {
		if got[i].Index != want[i].Index || string(got[i].Payload) != string(want[i].Payload) {
			t.Fatalf("%s: entry %d read as %d %q", agent, want[i].Index, got[i].Index, got[i].Payload)
		}
	}
}

// A batch of agents is one segment and one round of index rows; each agent reads back whole through
// the index with one ranged read per chunk and no LIST, and the layer enumerates them.
func TestPacked_ABatchIsOneSegmentAndReadsBackWithoutList(t *testing.T) {
	ctx := t.Context()
	st, blobs := memory.New(), newCountingBlobs()
	p := newPacked(t, st, blobs, nil)
	const agents = 50
	reqs := make([]oplog.AppendRequest, agents)
	for i := range reqs {
		reqs[i] = oplog.AppendRequest{Agent: agentN(i), Entries: entriesFrom(1, 1+i%7, i)}
	}
	errs, err := p.AppendBatch(ctx, oplog.Ephemeral, reqs)
	if err != nil || len(errs) != agents || errors.Join(errs...) != nil {
		t.Fatalf("AppendBatch: %v %v", err, errors.Join(errs...))
	}
	if calls := blobs.reset(); calls["put"] != 1 {
		t.Fatalf("blob calls of a batch of %d agents: %v, want one put", agents, calls)
	}
	all, err := blobs.BlobStore.List(ctx, "")
	if err != nil || len(all) != 1 || !strings.HasPrefix(all[0], "ephemeral/0/segments/") {
		t.Fatalf("blobs %v (%v), want one segment", all, err)
	}
	for i, r := range reqs {
		blobs.reset()
		requireRead(t, p, r.Agent, r.Entries)
		if calls := blobs.reset(); calls["list"] != 0 || calls["get"] != 0 || calls["get_range"] != 1 {
			t.Fatalf("%s: blob calls of a read %v, want one ranged read and no list", r.Agent, calls)
		}
		last, ok, err := p.LastIndex(ctx, r.Agent, oplog.Ephemeral)
		if err != nil || !ok || last != oplog.Index(1+i%7) {
			t.Fatalf("%s: LastIndex %d %v %v", r.Agent, last, ok, err)
		}
		first, ok, err := p.FirstIndex(ctx, r.Agent, oplog.Ephemeral)
		if err != nil || !ok || first != 1 {
			t.Fatalf("%s: FirstIndex %d %v %v", r.Agent, first, ok, err)
		}
	}
	if calls := blobs.reset(); calls["get"]+calls["get_range"]+calls["list"] != 0 {
		t.Fatalf("LastIndex and FirstIndex read blobs: %v", calls)
	}
	page, err := p.ScanAgents(ctx, oplog.Ephemeral, oplog.BucketRange{Lo: 0, Hi: oplog.Buckets}, is.Resume{}, 1000)
	if err != nil || len(page.Keys) != agents {
		t.Fatalf("ScanAgents: %d keys, %v; want %d", len(page.Keys), err, agents)
	}
}

// Per agent, AppendBatch keeps Append's rules: an agent whose chunks overlap what the index holds fails
// with ErrConflict, one with invalid entries fails alone, the rest land.
func TestPacked_AnAgentsFailureIsItsOwn(t *testing.T) {
	ctx := t.Context()
	st := memory.New()
	p := newPacked(t, st, memory.NewBlobStore(), nil)
	for _, a := range []int{1, 4} {
		if err := p.Append(ctx, agentN(a), oplog.Ephemeral, entriesFrom(1, 10, a)); err != nil {
			t.Fatal(err)
		}
	}
	reqs := []oplog.AppendRequest{
		{Agent: agentN(0), Entries: entriesFrom(1, 5, 0)},
		{Agent: agentN(1), Entries: entriesFrom(5, 3, 91)}, // ends at 7, at or below the index's 10, other bytes
		{Agent: agentN(4), Entries: entriesFrom(1, 10, 4)}, // what the layer holds already: ErrHeldAlready
		{Agent: agentN(2), Entries: []oplog.Entry{{Index: 1}, {Index: 3}}},
		{Agent: agentN(3), Entries: entriesFrom(1, 2, 3)},
		{Agent: agentN(0), Entries: entriesFrom(6, 1, 0)}, // twice in one batch
	}
	reqs[2], reqs[3], reqs[4], reqs[5] = reqs[3], reqs[4], reqs[5], reqs[2] // the identical one last
	errs, err := p.AppendBatch(ctx, oplog.Ephemeral, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[3] != nil {
		t.Fatalf("valid agents failed: %v, %v", errs[0], errs[3])
	}
	if !errors.Is(errs[5], oplog.ErrHeldAlready) {
		t.Fatalf("what the layer holds already: %v, want ErrHeldAlready", errs[5])
	}
	if !errors.Is(errs[1], is.ErrConflict) {
		t.Fatalf("an overlap: %v, want ErrConflict", errs[1])
	}
	if !errors.Is(errs[2], oplog.ErrInvalidEntries) {
		t.Fatalf("entries not contiguous: %v, want ErrInvalidEntries", errs[2])
	}
	if !errors.Is(errs[4], is.ErrInvalidArgument) {
		t.Fatalf("an agent twice in a batch: %v, want ErrInvalidArgument", errs[4])
	}
	requireRead(t, p, agentN(0), entriesFrom(1, 5, 0))
	requireRead(t, p, agentN(1), entriesFrom(1, 10, 1))
	requireRead(t, p, agentN(3), entriesFrom(1, 2, 3))
	requireRead(t, p, agentN(4), entriesFrom(1, 10, 4))
	if _, ok, _ := p.LastIndex(ctx, agentN(2), oplog.Ephemeral); ok {
		t.Fatal("the agent with invalid entries has index rows")
	}
}

// A row whose segment is gone is a lost chunk, reported as such; a row removed with its segment while
// the read was under way (an erasure) is a chunk the layer no longer holds.
func TestPacked_AMissingSegmentIsAnIntegrityErrorUnlessItsRowWentToo(t *testing.T) {
	ctx := t.Context()
	st, blobs := memory.New(), newCountingBlobs()
	p := newPacked(t, st, blobs, nil)
	a := agentN(1)
	if err := p.Append(ctx, a, oplog.Ephemeral, entriesFrom(1, 10, 1)); err != nil {
		t.Fatal(err)
	}
	segs, _ := blobs.BlobStore.List(ctx, "")
	if err := blobs.BlobStore.Delete(ctx, segs[0]); err != nil {
		t.Fatal(err)
	}
	_, err := p.Read(ctx, a, oplog.Ephemeral, 1, 10, oplog.ChunkLimit)
	if !errors.Is(err, archive.ErrSegmentMissing) || !errors.Is(err, oplog.ErrIntegrity) || !strings.Contains(err.Error(), segs[0]) {
		t.Fatalf("read with the segment gone: %v, want ErrSegmentMissing naming %s", err, segs[0])
	}
	// The rows go while the ranged read is under way.
	blobs.before = func(op, _ string) {
		if op == "get_range" {
			if err := p.Delete(ctx, a, oplog.Ephemeral); err != nil {
				t.Error(err)
			}
		}
	}
	got, err := p.Read(ctx, a, oplog.Ephemeral, 1, 10, oplog.ChunkLimit)
	if err != nil || len(got) != 0 {
		t.Fatalf("read of an agent erased during the read: %d entries, %v; want none and no error", len(got), err)
	}
}

// A flipped byte in a packed chunk fails the read with the chunk named, as a corrupt chunk.
func TestPacked_ACorruptChunkFailsTheRead(t *testing.T) {
	ctx := t.Context()
	st, blobs := memory.New(), memory.NewBlobStore()
	p := newPacked(t, st, blobs, nil)
	a := agentN(1)
	if err := p.Append(ctx, a, oplog.Ephemeral, entriesFrom(1, 10, 1)); err != nil {
		t.Fatal(err)
	}
	segs, _ := blobs.List(ctx, "")
	data, _ := blobs.Get(ctx, segs[0])
	data[5] ^= 0x40
	if err := blobs.Put(ctx, segs[0], data); err != nil {
		t.Fatal(err)
	}
	_, err := p.Read(ctx, a, oplog.Ephemeral, 1, 10, oplog.ChunkLimit)
	if !errors.Is(err, archive.ErrCorruptChunk) || !strings.Contains(err.Error(), a.String()) {
		t.Fatalf("read of a corrupt chunk: %v, want ErrCorruptChunk naming %s", err, a)
	}
}

// clock is a test's time: it moves only when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// A step whose segment put took half the collector's grace writes it again under a new name before its
// rows: rows are never written for a segment a collector may already judge an orphan.
func TestPacked_ASlowSegmentPutIsWrittenAgainBeforeItsRows(t *testing.T) {
	ctx := t.Context()
	st, blobs := memory.New(), newCountingBlobs()
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	const grace = time.Hour
	p := newPacked(t, st, blobs, &archive.PackedOptions{Grace: grace, Now: clk.Now})
	puts := 0
	blobs.before = func(op, _ string) {
		if op == "put" {
			if puts++; puts == 1 {
				clk.add(grace / 2) // the first put is slow
			}
		}
	}
	a := agentN(1)
	if err := p.Append(ctx, a, oplog.Ephemeral, entriesFrom(1, 10, 1)); err != nil {
		t.Fatal(err)
	}
	segs, _ := blobs.BlobStore.List(ctx, "")
	if len(segs) != 2 {
		t.Fatalf("segments %v, want the slow one and its second writing", segs)
	}
	row, ok, err := st.Last(ctx, oplog.BlobIndexNamespace(oplog.Ephemeral, 0), a.StoredKey())
	if err != nil || !ok {
		t.Fatal(err)
	}
	ref, err := archive.DecodeSegmentRef(row.Value, oplog.Index(row.ID))
	if err != nil || ref.Segment != segs[1] {
		t.Fatalf("the row points at %q (%v), want the second segment %q", ref.Segment, err, segs[1])
	}
	requireRead(t, p, a, entriesFrom(1, 10, 1))

	// Every put slow: the append fails, as transient, and nothing is indexed.
	blobs.before = func(op, _ string) {
		if op == "put" {
			clk.add(grace)
		}
	}
	b := agentN(2)
	if err := p.Append(ctx, b, oplog.Ephemeral, entriesFrom(1, 3, 2)); !errors.Is(err, is.ErrTransient) {
		t.Fatalf("append whose puts all outlast half the grace: %v, want ErrTransient", err)
	}
	if _, ok, _ := p.LastIndex(ctx, b, oplog.Ephemeral); ok {
		t.Fatal("rows were written for segments past half the grace")
	}
}

// A step whose rows landed past the grace puts back a segment a collector removed meanwhile, before
// the source may drop: rows never point at nothing once Append returns.
func TestPacked_RowsThatLandPastTheGracePutBackARemovedSegment(t *testing.T) {
	ctx := t.Context()
	st, blobs := memory.New(), memory.NewBlobStore()
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	const grace = time.Hour
	p := newPacked(t, st, blobs, &archive.PackedOptions{Grace: grace, Now: clk.Now})
	archive.SetBeforeRows(p, func(segments []string) {
		// The rows are slow: a collector finds the segment past its grace with no row, and removes it.
		clk.add(2 * grace)
		for _, s := range segments {
			if err := blobs.Delete(ctx, s); err != nil {
				t.Error(err)
			}
		}
	})
	a := agentN(1)
	if err := p.Append(ctx, a, oplog.Ephemeral, entriesFrom(1, 10, 1)); err != nil {
		t.Fatal(err)
	}
	requireRead(t, p, a, entriesFrom(1, 10, 1))
}

// A batch of more chunks than a segment lists is packed into several segments, each agent's rows
// still pointing at its own chunks.
func TestPacked_ABatchLargerThanASegmentSpansSegments(t *testing.T) {
	ctx := t.Context()
	st, blobs := memory.New(), memory.NewBlobStore()
	p := newPacked(t, st, blobs, nil)
	n := archive.MaxSegmentChunks + 10
	reqs := make([]oplog.AppendRequest, n)
	for i := range reqs {
		reqs[i] = oplog.AppendRequest{Agent: agentN(i), Entries: entriesFrom(1, 1, i)}
	}
	errs, err := p.AppendBatch(ctx, oplog.Ephemeral, reqs)
	if err != nil || errors.Join(errs...) != nil {
		t.Fatal(err, errors.Join(errs...))
	}
	segs, _ := blobs.List(ctx, "")
	if len(segs) != 2 {
		t.Fatalf("%d chunks went into %d segments, want 2", n, len(segs))
	}
	for _, i := range []int{0, archive.MaxSegmentChunks - 1, archive.MaxSegmentChunks, n - 1} {
		requireRead(t, p, agentN(i), entriesFrom(1, 1, i))
	}
	seen := map[string]bool{}
	for _, s := range segs {
		data, _ := blobs.Get(ctx, s)
		listed, err := archive.DecodeSegment(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range listed {
			if seen[c.Key] {
				t.Fatalf("%s listed twice", c.Key)
			}
			seen[c.Key] = true
		}
	}
	if len(seen) != n {
		t.Fatalf("segments list %d agents, want %d", len(seen), n)
	}
}
