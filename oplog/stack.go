package oplog

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Stack is an oplog across its layers: the primary on top, then the archive layers, the bottom one last
// (default: primary → compressed level 1 → blob level 0). Entries only ever move down, one hop at a
// time, by ArchiveStep.
type Stack struct {
	primary  Layer
	archives []Layer
	layers   []Layer // primary, then archives
}

// NewStack returns the stack primary → archives[0] → … → archives[n-1]. It needs at least one archive
// layer, and the bottom layer is a target only. The stack tells its layers apart by position, never by
// ==, so a Layer's dynamic type need not be comparable.
func NewStack(primary Layer, archives ...Layer) (*Stack, error) {
	if primary == nil || len(archives) == 0 {
		return nil, errors.New("oplog stack needs a primary layer and at least one archive layer")
	}
	for i, l := range archives {
		if l == nil {
			return nil, fmt.Errorf("oplog stack: archive layer %d is nil", i)
		}
	}
	layers := append([]Layer{primary}, archives...)
	return &Stack{primary: primary, archives: slices.Clone(archives), layers: layers}, nil
}

// Primary is the top layer.
func (s *Stack) Primary() Layer { return s.primary }

// Layers are every layer, top to bottom: the primary, then the archives.
func (s *Stack) Layers() []Layer { return slices.Clone(s.layers) }

// Archives are the archive layers, top to bottom.
func (s *Stack) Archives() []Layer { return slices.Clone(s.archives) }

// MaxHops bounds a Drain: every layer above the bottom can need one hop, plus slack for a writer
// racing the drain. Reaching it means a layer keeps reporting entries it should not have.
func (s *Stack) MaxHops() int { return len(s.archives) + 2 }

func checkOplog(agent AgentID, mode Mode) error {
	if _, err := ParseMode(string(mode)); err != nil {
		return err
	}
	return agent.Validate()
}

// Append writes entries, which must be contiguous and ascending, to the oplog: durable agents to the
// primary layer, ephemeral agents as chunks straight into the first archive layer (they never touch the
// primary). An entry whose payload alone exceeds MaxChunkBytes is ErrPayloadTooLarge; nothing is
// written.
func (s *Stack) Append(ctx context.Context, agent AgentID, mode Mode, entries []Entry) error {
	if err := checkOplog(agent, mode); err != nil {
		return err
	}
	if err := CheckEntries(entries); err != nil {
		return fmt.Errorf("append to %s: %w", agent, err)
	}
	if len(entries) == 0 {
		return nil
	}
	if mode == Durable {
		return s.primary.Append(ctx, agent, mode, entries)
	}
	return s.archives[0].Append(ctx, agent, mode, entries)
}

// ErrInvalidEntries is returned for entries that are not contiguous and ascending from an index ≥ 1.
var ErrInvalidEntries = errors.New("invalid oplog entries")

// CheckEntries checks entries are contiguous, ascending from an index ≥ 1, and each fits a chunk.
func CheckEntries(entries []Entry) error {
	for i, e := range entries {
		switch {
		case e.Index == 0:
			return fmt.Errorf("%w: index 0 (indices start at 1)", ErrInvalidEntries)
		case i > 0 && e.Index != entries[i-1].Index+1:
			return fmt.Errorf("%w: index %d follows %d", ErrInvalidEntries, e.Index, entries[i-1].Index)
		case len(e.Payload) > MaxChunkBytes:
			return fmt.Errorf("%w: entry %d has %d bytes, a chunk holds %d", ErrPayloadTooLarge, e.Index, len(e.Payload), MaxChunkBytes)
		}
	}
	return nil
}

// Read returns up to n entries of the oplog from index from on, ascending, each index once, merged
// across every layer. Layers are read top first: an entry moves down by being appended below before it
// is dropped above, so a read racing an archive step finds it in one layer or the other.
func (s *Stack) Read(ctx context.Context, agent AgentID, mode Mode, from Index, n int) ([]Entry, error) {
	if err := checkOplog(agent, mode); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("%w: read of %d entries", ErrInvalidEntries, n)
	}
	from = max(from, 1)
	to := from + Index(n) - 1
	var merged []Entry
	for _, l := range s.layers {
		entries, err := l.Read(ctx, agent, mode, from, to, ReadLimit{Entries: n, Bytes: int(^uint(0) >> 1)})
		if err != nil {
			return nil, err
		}
		merged = append(merged, entries...)
	}
	slices.SortStableFunc(merged, func(a, b Entry) int { return cmpIndex(a.Index, b.Index) })
	merged = slices.CompactFunc(merged, func(a, b Entry) bool { return a.Index == b.Index })
	return merged[:min(n, len(merged))], nil
}

func cmpIndex(a, b Index) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// LastIndex returns the greatest index any layer holds for the oplog; false when the oplog is empty.
func (s *Stack) LastIndex(ctx context.Context, agent AgentID, mode Mode) (Index, bool, error) {
	if err := checkOplog(agent, mode); err != nil {
		return 0, false, err
	}
	var last Index
	found := false
	for _, l := range s.layers {
		idx, ok, err := l.LastIndex(ctx, agent, mode)
		if err != nil {
			return 0, false, err
		}
		if ok && idx > last {
			last, found = idx, true
		}
	}
	return last, found, nil
}

// Step is what one ArchiveStep did.
type Step struct {
	Source, Target string // layer names; empty when there was nothing to move
	Moved          int    // entries appended to the target
	Bytes          int64  // payload bytes appended to the target
	DroppedUpTo    Index  // the source was dropped up to this index (0: nothing dropped)
	More           bool   // a layer above the bottom still holds entries: another hop remains
}

// ArchiveStep moves the entries of the topmost layer that holds any (other than the bottom) one layer
// down, and reports what moved and whether another hop remains:
//
//  1. T = the target's last index (0 if none).
//  2. Read the source from T+1 in batches of at most one chunk; entries ≤ T were moved by an
//     interrupted step and are skipped.
//  3. Append each batch to the target, then drop the source up to the last index read.
//  4. If the source held only entries ≤ T, drop them.
//
// Memory stays bounded by one chunk whatever the oplog's length. A failure between any two storage
// calls leaves every entry readable through Read (in one layer or both), and a re-run converges with no
// duplicate and no loss. Entries a writer appends above the source's last index during the step stay
// where they are. A step over layers that hold nothing returns at once with a zero Step.
func (s *Stack) ArchiveStep(ctx context.Context, agent AgentID, mode Mode) (Step, error) {
	if err := checkOplog(agent, mode); err != nil {
		return Step{}, err
	}
	for i, src := range s.layers[:len(s.layers)-1] {
		srcLast, ok, err := src.LastIndex(ctx, agent, mode)
		if err != nil {
			return Step{}, err
		}
		if !ok {
			continue
		}
		step, err := move(ctx, agent, mode, src, s.layers[i+1], srcLast)
		if err != nil {
			return step, fmt.Errorf("archive %s from %s to %s: %w", agent, step.Source, step.Target, err)
		}
		step.More, err = s.holdsAboveBottom(ctx, agent, mode, i)
		return step, err
	}
	return Step{}, nil
}

func move(ctx context.Context, agent AgentID, mode Mode, src, dst Layer, srcLast Index) (Step, error) {
	step := Step{Source: src.Name(), Target: dst.Name()}
	target, _, err := dst.LastIndex(ctx, agent, mode)
	if err != nil {
		return step, err
	}
	for next := target + 1; next <= srcLast; {
		batch, err := src.Read(ctx, agent, mode, next, srcLast, ChunkLimit)
		if err != nil {
			return step, err
		}
		if len(batch) == 0 {
			break
		}
		if err := dst.Append(ctx, agent, mode, batch); err != nil {
			return step, err
		}
		step.Moved += len(batch)
		for _, e := range batch {
			step.Bytes += int64(len(e.Payload))
		}
		readUpTo := batch[len(batch)-1].Index
		if err := src.DropPrefix(ctx, agent, mode, readUpTo); err != nil {
			return step, err
		}
		step.DroppedUpTo = readUpTo
		next = readUpTo + 1
	}
	if step.DroppedUpTo == 0 && target > 0 {
		// Everything the source holds up to T is already below: an interrupted step appended it.
		upTo := min(target, srcLast)
		if err := src.DropPrefix(ctx, agent, mode, upTo); err != nil {
			return step, err
		}
		step.DroppedUpTo = upTo
	}
	return step, nil
}

// holdsAboveBottom reports whether any layer from index from down to the one above the bottom holds
// entries of the oplog.
func (s *Stack) holdsAboveBottom(ctx context.Context, agent AgentID, mode Mode, from int) (bool, error) {
	for _, l := range s.layers[from : len(s.layers)-1] {
		_, ok, err := l.LastIndex(ctx, agent, mode)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// ErrStepCap is returned by Drain when MaxHops steps have not emptied the layers above the bottom.
var ErrStepCap = errors.New("archive step cap reached")

// Drained sums the steps of a Drain.
type Drained struct {
	Hops  int   // steps that moved or dropped something
	Moved int   // entries appended to a lower layer, over all hops
	Bytes int64 // their payload bytes
}

// Drain runs ArchiveStep until no layer above the bottom holds entries of the oplog, at most MaxHops
// times; past that it returns ErrStepCap with what it did.
func (s *Stack) Drain(ctx context.Context, agent AgentID, mode Mode) (Drained, error) {
	var d Drained
	for range s.MaxHops() {
		step, err := s.ArchiveStep(ctx, agent, mode)
		if step.Source != "" {
			d.Hops++
			d.Moved += step.Moved
			d.Bytes += step.Bytes
		}
		if err != nil || !step.More {
			return d, err
		}
	}
	return d, fmt.Errorf("%w: %s still holds entries above the bottom layer after %d hops", ErrStepCap, agent, s.MaxHops())
}
