package oplog

import (
	"context"
	"fmt"

	is "github.com/stratalog/strata/indexedstorage"
)

// Primary is the primary layer: one indexed-storage entry per oplog entry, id = index, in namespace
// "{mode}/oplog". Durable agents write it; it is the top of every stack and never a sweep source.
type Primary struct {
	st is.Storage
}

// NewPrimary returns the primary layer over st.
func NewPrimary(st is.Storage) *Primary { return &Primary{st: st} }

var _ Layer = (*Primary)(nil)

func (p *Primary) Name() string { return "primary" }

// ScanNamespace answers true for durable oplogs only: an ephemeral oplog never touches the primary.
// The sweep takes the primary as a source only on the durable route, which an embedding executor turns
// on (sweeper.Options.DurableRoute); by default durable oplogs are archived by scheduled rows.
func (p *Primary) ScanNamespace(mode Mode) (string, bool) {
	if mode != Durable {
		return "", false
	}
	return PrimaryNamespace(mode), true
}

// ScanAgents walks the durable agents of the buckets r holding entries in the primary: one key range.
// A page's LastIDs, where the storage reads them with it, are each agent's last index in the primary,
// which is its last index in the whole stack (an oplog's newest entries are the primary's). An
// ephemeral walk returns ErrNotEnumerable: see ScanNamespace.
func (p *Primary) ScanAgents(ctx context.Context, mode Mode, r BucketRange, from is.Resume, count int) (is.Page, error) {
	return p.ScanRange(ctx, mode, r.Keys(), from, count)
}

var _ RangeScanner = (*Primary)(nil)

// ScanRange walks the keys of r holding entries in the primary, as ScanAgents walks a range of buckets.
func (p *Primary) ScanRange(ctx context.Context, mode Mode, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	ns, ok := p.ScanNamespace(mode)
	if !ok {
		return is.Page{}, fmt.Errorf("primary: %s oplogs: %w", mode, ErrNotEnumerable)
	}
	// An index of the primary holds one entry an oplog entry: the walk is ScanDeep, whose page costs its
	// keys where the storage has one (a loose index scan on SQL), not their entries.
	page, err := is.ScanDeep(ctx, p.st, ns, r, from, count)
	if err != nil {
		return page, fmt.Errorf("primary: scan %s keys of %v: %w", mode, r, err)
	}
	return page, nil
}

// primaryReadBatch bounds one storage read, so a read that stops on bytes never holds much more than
// its limit.
const primaryReadBatch = 256

// Read reads windows of primaryReadBatch ids. A window that finds nothing before anything was read
// jumps to the first entry at or above it (a read from index 1 of an oplog archived up to T costs one
// call more, not T/256); once entries were read, a missing id ends the run, so that a drop racing the
// read (or a hole a writer left) never yields a result with a gap.
func (p *Primary) Read(ctx context.Context, agent AgentID, mode Mode, from, to Index, limit ReadLimit) ([]Entry, error) {
	limit = limit.normalized()
	ns, key := PrimaryNamespace(mode), agent.StoredKey()
	var out []Entry
	size := 0
	for next := max(from, 1); next <= to && !limit.Full(len(out), size); {
		batchEnd := Index(min(uint64(to), uint64(next)+uint64(min(primaryReadBatch, limit.Entries-len(out)))-1))
		rows, err := p.st.Read(ctx, ns, key, uint64(next), uint64(batchEnd))
		if err != nil {
			return out, fmt.Errorf("read primary oplog of %s: %w", agent, err)
		}
		if len(rows) == 0 && len(out) == 0 && batchEnd < to {
			e, ok, err := p.st.Closest(ctx, ns, key, uint64(next))
			if err != nil {
				return out, fmt.Errorf("read primary oplog of %s: %w", agent, err)
			}
			if !ok || Index(e.ID) > to {
				return out, nil
			}
			out = append(out, Entry{Index: Index(e.ID), Payload: e.Value})
			size += len(e.Value)
			next = Index(e.ID) + 1
			continue
		}
		for _, r := range rows {
			if len(out) > 0 && Index(r.ID) != out[len(out)-1].Index+1 || limit.Full(len(out), size) {
				return out, nil
			}
			out = append(out, Entry{Index: Index(r.ID), Payload: r.Value})
			size += len(r.Value)
		}
		if len(out) == 0 || out[len(out)-1].Index != batchEnd {
			return out, nil // nothing in the range, or the run ended inside this window
		}
		if batchEnd >= to {
			break
		}
		next = batchEnd + 1
	}
	return out, nil
}

func (p *Primary) FirstIndex(ctx context.Context, agent AgentID, mode Mode) (Index, bool, error) {
	e, ok, err := p.st.First(ctx, PrimaryNamespace(mode), agent.StoredKey())
	if err != nil {
		return 0, false, fmt.Errorf("first index of primary oplog of %s: %w", agent, err)
	}
	return Index(e.ID), ok, nil
}

func (p *Primary) LastIndex(ctx context.Context, agent AgentID, mode Mode) (Index, bool, error) {
	id, ok, err := p.st.LastID(ctx, PrimaryNamespace(mode), agent.StoredKey())
	if err != nil {
		return 0, false, fmt.Errorf("last index of primary oplog of %s: %w", agent, err)
	}
	return Index(id), ok, nil
}

func (p *Primary) Append(ctx context.Context, agent AgentID, mode Mode, entries []Entry) error {
	rows := make([]is.Entry, len(entries))
	for i, e := range entries {
		rows[i] = is.Entry{ID: uint64(e.Index), Value: e.Payload}
	}
	if err := p.st.AppendMany(ctx, PrimaryNamespace(mode), agent.StoredKey(), rows); err != nil {
		return fmt.Errorf("append to primary oplog of %s: %w", agent, err)
	}
	return nil
}

// DropPrefix returns how many entries it removed: the storage's own count, so of two racing drops each
// entry is counted once.
func (p *Primary) DropPrefix(ctx context.Context, agent AgentID, mode Mode, upTo Index) (uint64, error) {
	dropped, err := p.st.DropPrefix(ctx, PrimaryNamespace(mode), agent.StoredKey(), uint64(upTo))
	if err != nil {
		return 0, fmt.Errorf("drop primary oplog of %s up to %d: %w", agent, upTo, err)
	}
	return dropped, nil
}

func (p *Primary) Delete(ctx context.Context, agent AgentID, mode Mode) error {
	if err := p.st.Delete(ctx, PrimaryNamespace(mode), agent.StoredKey()); err != nil {
		return fmt.Errorf("delete primary oplog of %s: %w", agent, err)
	}
	return nil
}
