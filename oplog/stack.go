package oplog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Stack is an oplog across its layers: the primary on top, then the archive layers, the bottom one last
// (default: primary → compressed level 1 → blob level 0). Entries only ever move down, one hop at a
// time, by ArchiveStep. Build one with NewStack: the zero Stack (and a nil *Stack) has no layers, and
// every method that can fail returns ErrStackNotBuilt, the others nothing.
type Stack struct {
	primary  Layer
	archives []Layer
	layers   []Layer     // primary, then archives
	tombs    *tombstones // erasures (WithTombstones); nil: Erase refuses, steps look for none
}

// NewStack returns the stack primary → archives[0] → … → archives[n-1]. It needs at least one archive
// layer, and the bottom layer is a target only. The stack tells its layers apart by position, never by
// ==, so a Layer's dynamic type need not be comparable.
func NewStack(primary Layer, archives ...Layer) (*Stack, error) {
	if primary == nil || len(archives) == 0 {
		return nil, errors.New("oplog stack needs a primary layer and at least one archive layer")
	}
	if n := 1 + len(archives); n > MaxLayers {
		return nil, fmt.Errorf("oplog stack: %d layers, at most %d", n, MaxLayers)
	}
	for i, l := range archives {
		if l == nil {
			return nil, fmt.Errorf("oplog stack: archive layer %d is nil", i)
		}
	}
	layers := append([]Layer{primary}, archives...)
	return &Stack{primary: primary, archives: slices.Clone(archives), layers: layers}, nil
}

// MaxLayers is the most layers a stack may have, the primary included.
const MaxLayers = 64

// ErrStackNotBuilt is returned by the methods of a Stack that NewStack did not build (the zero Stack, or
// a nil *Stack): it has no layers to read or write.
var ErrStackNotBuilt = errors.New("oplog stack has no layers: build it with NewStack")

// now is the clock of the stack's archive steps: the tombstones' (time.Now by default).
func (s *Stack) now() time.Time {
	if s.tombs != nil {
		return s.tombs.clock()
	}
	return time.Now()
}

// built reports whether NewStack built s.
func (s *Stack) built() bool { return s != nil && len(s.layers) > 0 }

// check refuses a stack NewStack did not build, then an oplog that cannot be addressed.
func (s *Stack) check(agent AgentID, mode Mode) error {
	if !s.built() {
		return ErrStackNotBuilt
	}
	return checkOplog(agent, mode)
}

// Primary is the top layer; nil for a stack NewStack did not build.
func (s *Stack) Primary() Layer {
	if !s.built() {
		return nil
	}
	return s.primary
}

// Layers are every layer, top to bottom: the primary, then the archives. None for a stack NewStack did
// not build.
func (s *Stack) Layers() []Layer {
	if !s.built() {
		return nil
	}
	return slices.Clone(s.layers)
}

// Archives are the archive layers, top to bottom. None for a stack NewStack did not build.
func (s *Stack) Archives() []Layer {
	if !s.built() {
		return nil
	}
	return slices.Clone(s.archives)
}

// layersOf is the layers an oplog of mode can have entries in, top first, and the position of the first
// of them in Layers: an ephemeral oplog never touches the primary (Append writes it straight to the first
// archive layer), so nothing of an ephemeral agent reads the primary either.
func (s *Stack) layersOf(mode Mode) (layers []Layer, top int) {
	if mode == Ephemeral {
		return s.layers[1:], 1
	}
	return s.layers, 0
}

// MaxHops bounds a Drain: every layer above the bottom can need one hop, plus slack for a writer
// racing the drain. Reaching it means a layer keeps reporting entries it should not have. 0 for a stack
// NewStack did not build.
func (s *Stack) MaxHops() int {
	if !s.built() {
		return 0
	}
	return len(s.archives) + 2
}

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
	if err := s.check(agent, mode); err != nil {
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

// Read returns up to n entries of the oplog from index from on, ascending, each index once and
// contiguous, merged across every layer. Layers are read top first: an entry moves down by being
// appended below before it is dropped above, so a read racing an archive step finds it in one layer or
// the other. A read racing a step's drop may end short of n, never past a gap: the caller reads on from
// the index after the last one returned.
func (s *Stack) Read(ctx context.Context, agent AgentID, mode Mode, from Index, n int) ([]Entry, error) {
	if err := s.check(agent, mode); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("%w: read of %d entries", ErrInvalidEntries, n)
	}
	from = max(from, 1)
	to := from + Index(n) - 1
	var merged []Entry
	layers, _ := s.layersOf(mode)
	for _, l := range layers {
		entries, err := l.Read(ctx, agent, mode, from, to, ReadLimit{Entries: n, Bytes: int(^uint(0) >> 1)})
		if err != nil {
			return nil, err
		}
		merged = append(merged, entries...)
	}
	slices.SortStableFunc(merged, func(a, b Entry) int { return cmpIndex(a.Index, b.Index) })
	merged = slices.CompactFunc(merged, func(a, b Entry) bool { return a.Index == b.Index })
	// A layer's read ends where a concurrent step's drop cut its run, though the layer may hold entries
	// past the cut that no other layer returned: the merge is handed on only up to its first gap.
	for i := 1; i < len(merged); i++ {
		if merged[i].Index != merged[i-1].Index+1 {
			merged = merged[:i]
			break
		}
	}
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
	if err := s.check(agent, mode); err != nil {
		return 0, false, err
	}
	var last Index
	found := false
	layers, _ := s.layersOf(mode)
	for _, l := range layers {
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
	DroppedUpTo    Index  // the step's last drop of the source was up to this index (0: it dropped nothing)
	// Finished reports that the step's own drop removed the source's entry at the last index the step
	// set out to move: this step, and not a concurrent drain of the same agent, completed the hop. A
	// step that found the source emptied under it, or whose drops found nothing left, did not. Drops
	// remove prefixes atomically and each counts only what it removed (Layer.DropPrefix), so of steps
	// racing over the same entries of the top layer of their oplog (the primary of a durable one, the
	// first archive layer of an ephemeral one, which no hop appends to) exactly one finishes. A lower
	// layer is a hop's target too, and a drain racing that hop can put back a batch the other had
	// already moved further down (which loses and doubles nothing: the copy is compared and dropped by
	// a later hop); the hop out of it may then be finished twice.
	Finished bool
	More     bool // a layer above the bottom still holds entries: another hop remains
}

// ArchiveStep moves the entries of the topmost layer that holds any (other than the bottom) one layer
// down, and reports what moved and whether another hop remains. The hop (hop.go, whose methods are
// these steps in this order):
//
//  1. Read the source from index 1 in batches of at most one chunk.
//  2. After each read, T = the target's last index (0 if none), raised to the end of the part of the
//     batch the source no longer holds (a concurrent drain moved it since the read). The part of a
//     batch at or below T must already be below, byte for byte (an interrupted step, or a concurrent
//     drain, put it there); the part above T is appended to the target.
//  3. After each append, drop the source up to the end of the batch; if the source held only entries
//     ≤ T, drop those once all of them compared equal.
//
// Indices continue over an agent's whole life, across every layer. A source entry at or below T that
// differs from what the layers below hold (or that they lack) fails the step with ErrIndexReused
// before anything is appended or dropped: a step never drops an entry it has not read back from below
// or written there itself.
//
// Memory stays bounded by one chunk whatever the oplog's length. A failure between any two storage
// calls leaves every entry readable through Read (in one layer or both), and a re-run converges
// with no duplicate and no loss. A concurrent drain of the same agent is no error: what it moved
// first, whether the step sees it in the target or as gone from the source, is compared instead of
// appended again (a conflict on the append itself re-runs the step), so the loser converges with
// nothing doubled. Entries a writer appends above the source's last index during the step stay
// where they are. A step over layers that hold nothing returns at once with a zero Step.
func (s *Stack) ArchiveStep(ctx context.Context, agent AgentID, mode Mode) (Step, error) {
	if err := s.check(agent, mode); err != nil {
		return Step{}, err
	}
	step, _, err := s.archiveStep(ctx, agent, mode)
	return step, err
}

// archiveStep is ArchiveStep, which also returns the position in Layers of the step's source (-1: none).
func (s *Stack) archiveStep(ctx context.Context, agent AgentID, mode Mode) (Step, int, error) {
	_, top := s.layersOf(mode)
	started := s.now()
	for i := top; i < len(s.layers)-1; i++ {
		srcLast, ok, err := s.layers[i].LastIndex(ctx, agent, mode)
		if err != nil {
			return Step{}, -1, err
		}
		if !ok {
			continue
		}
		step, err := s.hop(ctx, agent, mode, i, srcLast, nil, started)
		if err != nil {
			return step, i, err
		}
		step.More, err = s.holdsAboveBottom(ctx, agent, mode, i)
		return step, i, err
	}
	return Step{}, -1, nil
}

// hop moves layer i's entries up to srcLast one layer down (see hop); first, when not nil, is the
// source's first batch already read; started, the time before the step first read the source.
func (s *Stack) hop(ctx context.Context, agent AgentID, mode Mode, i int, srcLast Index, first []Entry, started time.Time) (Step, error) {
	h := newHop(agent, mode, s.layers[i], s.layers[i+1:], srcLast, first)
	h.tombs, h.started = s.tombs, started
	step, err := h.run(ctx)
	if err != nil {
		return step, fmt.Errorf("archive %s from %s to %s: %w", agent, step.Source, step.Target, err)
	}
	return step, nil
}

// DrainSeen is the sweep's drain: it moves what the sweep's gate saw, the entries of
// Layers()[layer] up to seen (the layer's last index when the gate let the agent through), down to
// the bottom, and returns without looking again at what it has moved past. Its first read of the
// layer reads the layer's last index with it (LastReader, one storage call where the layer can):
// when that is no longer seen, the agent moved on since the gate and nothing moves (MovedOnError);
// when the layer holds nothing, a teardown drain won and the drain is no hop. It is one hop when
// the layer below is the bottom; otherwise Drain's hops follow from the next layer down.
// Drained.Finished(layer) reports whether this drain, and not a concurrent one, moved the entry at
// seen out of the layer. A seen of 0 is a gate that read no index (Seen): the first read's last
// index stands for it, with nothing to re-check. Entries a writer appends above seen during the drain
// stay where they are, as in ArchiveStep: the sweep meets them on a later pass, when they are quiet
// (under the executor's Locker nothing can be written meanwhile).
func (s *Stack) DrainSeen(ctx context.Context, agent AgentID, mode Mode, layer int, seen Index) (Drained, error) {
	if err := s.check(agent, mode); err != nil {
		return Drained{}, err
	}
	if _, top := s.layersOf(mode); layer < top || layer >= len(s.layers)-1 {
		return Drained{}, fmt.Errorf("drain %s: layer %d is not a layer above the bottom that a %s oplog uses", agent, layer, mode)
	}
	src := s.layers[layer]
	started := s.now()
	sn := Seen{Agent: agent, Index: seen}
	first, last, exists, err := readLast(ctx, src, agent, mode, 1, sn.bound(), ChunkLimit)
	switch {
	case err != nil:
		return Drained{}, fmt.Errorf("archive %s from %s: %w", agent, src.Name(), err)
	case !exists:
		return Drained{}, nil
	case sn.movedOn(last):
		return Drained{}, &MovedOnError{Layer: src.Name(), Seen: seen, Last: last}
	}
	step, err := s.hop(ctx, agent, mode, layer, last, first, started)
	d := Drained{Moved: step.Moved, Bytes: step.Bytes}
	// A hop whose entries a concurrent drain (a teardown drain, another sidecar) moved first, wholly or
	// only its last part, is not this drain's.
	d.finish(step, layer)
	if err != nil || layer+1 == len(s.layers)-1 {
		return d, err
	}
	// The layers between the next one and the bottom, as Drain does, one hop fewer.
	return s.steps(ctx, agent, mode, d, s.MaxHops()-1)
}

// MovedOnError is DrainSeen's error when the layer's last index is no longer the one the gate saw:
// the agent was written to (or drained and written to again) since. Nothing was moved or dropped.
type MovedOnError struct {
	Layer      string
	Seen, Last Index
}

func (e *MovedOnError) Error() string {
	return fmt.Sprintf("%s moved on since the gate: last index %d, the gate saw %d", e.Layer, e.Last, e.Seen)
}

// UnreadableError is an agent's failure in a batched drain (DrainSeenMany, DrainMany) at the first read
// of a layer, where the read of that agent's key failed on its own while the batch's read went on: its
// data cannot be read (a file that is not a database, a key of another type); a read the drain's
// context cut is not one. Nothing of the agent was moved or dropped. The sweep counts it as the gate
// counts a read that fails, unreadable; an agent the gate passed without a read (by stamps) meets its
// first read here.
type UnreadableError struct {
	Layer string
	Err   error
}

func (e *UnreadableError) Error() string { return e.Err.Error() } // the layer's read names what failed

func (e *UnreadableError) Unwrap() error { return e.Err }

// ErrIndexReused is returned by an archive step that finds source entries at or below the target's
// last index that are not byte-identical to what the layers below hold: the agent's indices started
// again instead of continuing. The step appended and dropped nothing, so every entry stays readable
// where it was. It is an ErrIntegrity.
var ErrIndexReused = NewIntegrityError("oplog index reused")

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
	// Hops counts the hops this drain finished (Step.Finished). A hop whose entries a concurrent drain
	// of the same agent moved first is not counted: of drains racing over the same entries, the hop out
	// of the top layer counts in exactly one of them (a hop out of a lower layer, see Step.Finished,
	// in at least one).
	Hops  int
	Moved int   // entries appended to a lower layer, over all hops
	Bytes int64 // their payload bytes

	finished uint64 // bit i: this drain finished a hop out of Layers()[i] (a stack has at most MaxLayers)
}

// Finished reports whether this drain finished a hop out of Layers()[layer]: its own drop removed the
// entry the hop set out to move last. Of drains racing over the same entries of the top layer of their
// oplog, exactly one reports it; the others found them moved by it (Step.Finished says why a lower
// layer may differ). The sweep counts an agent archived on that: once across sidecars on the routes out
// of the top layer (ephemeral-l1, every route of the default stack, and durable-l0).
func (d Drained) Finished(layer int) bool {
	return 0 <= layer && layer < MaxLayers && d.finished&(1<<layer) != 0
}

// finish counts step, a hop out of Layers()[layer], if it finished.
func (d *Drained) finish(step Step, layer int) {
	if step.Finished && 0 <= layer && layer < MaxLayers {
		d.Hops++
		d.finished |= 1 << layer
	}
}

// Drain runs ArchiveStep until no layer above the bottom holds entries of the oplog, at most MaxHops
// times; past that it returns ErrStepCap with what it did.
func (s *Stack) Drain(ctx context.Context, agent AgentID, mode Mode) (Drained, error) {
	if err := s.check(agent, mode); err != nil {
		return Drained{}, err
	}
	return s.steps(ctx, agent, mode, Drained{}, s.MaxHops())
}

// steps runs ArchiveStep until no layer above the bottom holds entries, at most n times, adding what
// each moved to d; past n it returns ErrStepCap with what was done.
func (s *Stack) steps(ctx context.Context, agent AgentID, mode Mode, d Drained, n int) (Drained, error) {
	for range n {
		step, from, err := s.archiveStep(ctx, agent, mode)
		d.finish(step, from)
		d.Moved += step.Moved
		d.Bytes += step.Bytes
		if err != nil || !step.More {
			return d, err
		}
	}
	return d, fmt.Errorf("%w: %s still holds entries above the bottom layer after %d hops", ErrStepCap, agent, s.MaxHops())
}
