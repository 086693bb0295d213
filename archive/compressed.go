package archive

import (
	"context"
	"fmt"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// Compressed is an archive level L ≥ 1 in indexed storage: namespace "{mode}/compressed/{L}", key
// the agent's stored key (its bucket prefix and its key), one entry per chunk with id = the chunk's
// last index and value = the encoded chunk. It can enumerate its agents, so it can be a sweep
// source.
type Compressed struct {
	st    is.Storage
	level int
	name  string
}

// NewCompressed returns compressed level level (≥ 1) over st.
func NewCompressed(st is.Storage, level int) (*Compressed, error) {
	if level < 1 {
		return nil, fmt.Errorf("compressed archive level must be at least 1, got %d", level)
	}
	return &Compressed{st: st, level: level, name: fmt.Sprintf("compressed-%d", level)}, nil
}

var _ oplog.Layer = (*Compressed)(nil)

func (c *Compressed) Name() string { return c.name }

// Level is the layer's level, the L of its namespace.
func (c *Compressed) Level() int { return c.level }

func (c *Compressed) ScanNamespace(mode oplog.Mode) (string, bool) {
	return oplog.CompressedNamespace(mode, c.level), true
}

// ScanAgents walks the agents of the buckets r holding chunks at this level: one key range.
func (c *Compressed) ScanAgents(ctx context.Context, mode oplog.Mode, r oplog.BucketRange, from is.Resume, count int) (is.Page, error) {
	return c.ScanRange(ctx, mode, r.Keys(), from, count)
}

var _ oplog.RangeScanner = (*Compressed)(nil)

// ScanRange walks the keys of r holding chunks at this level, as ScanAgents walks a range of buckets.
func (c *Compressed) ScanRange(ctx context.Context, mode oplog.Mode, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	page, err := c.st.ScanStable(ctx, oplog.CompressedNamespace(mode, c.level), r, from, count)
	if err != nil {
		return page, fmt.Errorf("%s: scan %s keys of %v: %w", c.name, mode, r, err)
	}
	return page, nil
}

func (c *Compressed) Read(ctx context.Context, agent oplog.AgentID, mode oplog.Mode, from, to oplog.Index, limit oplog.ReadLimit) ([]oplog.Entry, error) {
	entries, _, _, err := c.read(ctx, agent, mode, from, to, limit, false)
	return entries, err
}

// ReadLast is oplog.LastReader's: the first chunk and the last id come from one ClosestLast call.
func (c *Compressed) ReadLast(ctx context.Context, agent oplog.AgentID, mode oplog.Mode, from, to oplog.Index, limit oplog.ReadLimit) ([]oplog.Entry, oplog.Index, bool, error) {
	return c.read(ctx, agent, mode, from, to, limit, true)
}

// read reads the chunks of the range, the first with the index's last id where withLast is set.
func (c *Compressed) read(ctx context.Context, agent oplog.AgentID, mode oplog.Mode, from, to oplog.Index, limit oplog.ReadLimit, withLast bool) ([]oplog.Entry, oplog.Index, bool, error) {
	return readIndexed(ctx, c.st, c.name, oplog.CompressedNamespace(mode, c.level), agent, from, to, limit, withLast,
		func(_ context.Context, row is.Entry) ([]byte, bool, error) { return row.Value, true, nil })
}

// readIndexed is Read (and ReadLast, withLast) of a layer that keeps a row per chunk in ns under the
// agent's stored key, the row's id the chunk's last index: chunkOf turns a row into the chunk's bytes
// (its value, or what it points to), or answers false when the row's chunk is gone meanwhile.
func readIndexed(ctx context.Context, st is.Storage, layer, ns string, agent oplog.AgentID, from, to oplog.Index, limit oplog.ReadLimit, withLast bool,
	chunkOf func(ctx context.Context, row is.Entry) ([]byte, bool, error)) ([]oplog.Entry, oplog.Index, bool, error) {
	key := agent.StoredKey()
	var last uint64
	var exists bool
	if withLast && max(from, 1) > to {
		// readChunks reads nothing: the last id on its own.
		var err error
		last, exists, err = st.LastID(ctx, ns, key)
		return nil, oplog.Index(last), exists, wrapLayer(layer, "last index", agent, err)
	}
	entries, err := readChunks(ctx, layer, agent, from, to, limit, func(ctx context.Context, from oplog.Index) (oplog.Index, []byte, bool, error) {
		var row is.Entry
		var ok bool
		var err error
		switch {
		case withLast:
			withLast = false
			row, ok, last, exists, err = is.ClosestLast(ctx, st, ns, key, uint64(from))
		case exists && uint64(from) > last:
			// Past the last id read with the first chunk: what is there is a writer's since, which
			// a ReadLast does not return (a read to the end stops here without another call).
			return 0, nil, false, nil
		default:
			row, ok, err = st.Closest(ctx, ns, key, uint64(from))
		}
		if err != nil || !ok {
			return 0, nil, false, wrapLayer(layer, "read", agent, err)
		}
		data, ok, err := chunkOf(ctx, row)
		if err != nil {
			return 0, nil, false, fmt.Errorf("%s: agent %s, chunk stored under index %d: %w", layer, agent, row.ID, err)
		}
		return oplog.Index(row.ID), data, ok, nil
	})
	return entries, oplog.Index(last), exists, err
}

var _ oplog.BatchLayer = (*Compressed)(nil)

// ReadMany reads each agent's first chunk from From on and its last id in one storage call
// (indexedstorage.ClosestLastMany): one chunk an agent, clipped to [From, To].
func (c *Compressed) ReadMany(ctx context.Context, mode oplog.Mode, reqs []oplog.ReadRequest) ([]oplog.ReadResult, error) {
	ns := oplog.CompressedNamespace(mode, c.level)
	keys := make([]is.KeyID, len(reqs))
	for i, r := range reqs {
		keys[i] = is.KeyID{Key: r.Agent.StoredKey(), ID: uint64(max(r.From, 1))}
	}
	found, err := is.ClosestLastMany(ctx, c.st, ns, keys)
	if err != nil {
		return nil, fmt.Errorf("%s: read %d agents: %w", c.name, len(reqs), err)
	}
	out := make([]oplog.ReadResult, len(reqs))
	for i, f := range found {
		r := reqs[i]
		if f.Err != nil {
			out[i].Err = c.wrap("read", r.Agent, f.Err)
			continue
		}
		out[i].Last, out[i].Exists = oplog.Index(f.Last), f.Exists
		served := false
		out[i].Entries, out[i].Err = readChunks(ctx, c.name, r.Agent, r.From, r.To, oplog.ChunkLimit,
			func(context.Context, oplog.Index) (oplog.Index, []byte, bool, error) {
				if served {
					return 0, nil, false, nil // one chunk an agent: the next round reads on
				}
				served = true
				return oplog.Index(f.Entry.ID), f.Entry.Value, f.Found, nil
			})
	}
	return out, nil
}

// DropPrefixMany drops each agent's chunks up to its UpTo in one storage call
// (indexedstorage.DropPrefixMany); each count is the storage's own, as in DropPrefix.
func (c *Compressed) DropPrefixMany(ctx context.Context, mode oplog.Mode, reqs []oplog.DropRequest) ([]oplog.DropResult, error) {
	keys := make([]is.KeyID, len(reqs))
	for i, r := range reqs {
		keys[i] = is.KeyID{Key: r.Agent.StoredKey(), ID: uint64(r.UpTo)}
	}
	dropped, err := is.DropPrefixMany(ctx, c.st, oplog.CompressedNamespace(mode, c.level), keys)
	if err != nil {
		return nil, fmt.Errorf("%s: drop prefix of %d agents: %w", c.name, len(reqs), err)
	}
	out := make([]oplog.DropResult, len(reqs))
	for i, d := range dropped {
		out[i] = oplog.DropResult{Dropped: d.Dropped, Err: c.wrap("drop prefix", reqs[i].Agent, d.Err)}
	}
	return out, nil
}

var _ oplog.BatchLastReader = (*Compressed)(nil)

// LastIndexMany reads every agent's last chunk id in one storage call.
func (c *Compressed) LastIndexMany(ctx context.Context, mode oplog.Mode, agents []oplog.AgentID) ([]oplog.LastResult, error) {
	return lastIndexMany(ctx, c.st, oplog.CompressedNamespace(mode, c.level), c.name, agents)
}

func (c *Compressed) FirstIndex(ctx context.Context, agent oplog.AgentID, mode oplog.Mode) (oplog.Index, bool, error) {
	e, ok, err := c.st.First(ctx, oplog.CompressedNamespace(mode, c.level), agent.StoredKey())
	if err != nil || !ok {
		return 0, false, c.wrap("first index", agent, err)
	}
	first, _, err := ChunkSpan(e.Value)
	if err != nil {
		return 0, false, fmt.Errorf("%s: agent %s, chunk stored under index %d: %w", c.name, agent, e.ID, err)
	}
	return first, true, nil
}

func (c *Compressed) LastIndex(ctx context.Context, agent oplog.AgentID, mode oplog.Mode) (oplog.Index, bool, error) {
	// A chunk's id is its last index: the id alone answers, without reading the chunk.
	id, ok, err := c.st.LastID(ctx, oplog.CompressedNamespace(mode, c.level), agent.StoredKey())
	return oplog.Index(id), ok, c.wrap("last index", agent, err)
}

// Append writes entries as chunks, all of them in one AppendMany: they land together or not at all.
func (c *Compressed) Append(ctx context.Context, agent oplog.AgentID, mode oplog.Mode, entries []oplog.Entry) error {
	chunks, err := encodeChunks(entries)
	if err != nil {
		return fmt.Errorf("%s: append to %s: %w", c.name, agent, err)
	}
	rows := make([]is.Entry, len(chunks))
	for i, ch := range chunks {
		rows[i] = is.Entry{ID: uint64(ch.last), Value: ch.data}
	}
	return c.wrap("append", agent, c.st.AppendMany(ctx, oplog.CompressedNamespace(mode, c.level), agent.StoredKey(), rows))
}

// DropPrefix returns how many chunks it removed: the storage's own count, so of two racing drops each
// chunk is counted once.
func (c *Compressed) DropPrefix(ctx context.Context, agent oplog.AgentID, mode oplog.Mode, upTo oplog.Index) (uint64, error) {
	dropped, err := c.st.DropPrefix(ctx, oplog.CompressedNamespace(mode, c.level), agent.StoredKey(), uint64(upTo))
	if err != nil {
		return 0, c.wrap("drop prefix", agent, err)
	}
	return dropped, nil
}

func (c *Compressed) Delete(ctx context.Context, agent oplog.AgentID, mode oplog.Mode) error {
	return c.wrap("delete", agent, c.st.Delete(ctx, oplog.CompressedNamespace(mode, c.level), agent.StoredKey()))
}

func (c *Compressed) wrap(what string, agent oplog.AgentID, err error) error {
	return wrapLayer(c.name, what, agent, err)
}

// wrapLayer names the layer, the operation and the agent in err (nil stays nil).
func wrapLayer(layer, what string, agent oplog.AgentID, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %s of %s: %w", layer, what, agent, err)
}
