package oplog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
)

// hop moves one layer's entries, up to the source's last index as the hop found it, one layer down. It
// goes through the source in batches of at most one chunk, and for each batch takes five steps, in this
// order:
//
//  1. read: the next batch of the source, from index 1 on.
//  2. alreadyBelow: how far the oplog is below already: the target's last index, raised to the end of
//     the part of the batch the source no longer holds (a concurrent drain moved it since the read).
//  3. verify: the part of the batch up to there must be below, byte for byte, or the hop fails with
//     ErrIndexReused.
//  4. append: the part of the batch above it, to the target.
//  5. drop: the source up to the end of the batch.
//
// Steps 3 to 5 are skipped when their part of the batch is empty; a source that held only verified
// entries is dropped once, after its last batch. The order is the hop's safety: nothing is appended
// before every entry at or below the target's last index compared equal (a reused index fails with
// nothing written), and nothing is dropped from the source that was not appended below or read back
// from there, so a failure between any two calls leaves every entry readable in one layer or both.
//
// A concurrent drain of the same agent (a teardown drain and the sweep, two sidecars during a hand-off)
// may move part of a batch between the batch's read and its append: that part shows in step 2, as in
// the target or as gone from the source, and is compared in step 3 instead of appended again, so the
// losing drain converges with nothing handed back and no error. A conflict on the append itself (the
// other drain appended first) makes run try the whole hop again.
type hop struct {
	agent AgentID
	mode  Mode
	src   Layer
	below []Layer // the layers under src, top first: below[0] is the target
	last  Index   // move the source up to here
	first []Entry // the source's first batch, already read by the caller (nil: read it)
	// targetLast, when set, is the target's last index read by the caller after this batch was read
	// (a batch drain reads them for many hops in one call): step 2 uses it instead of reading it.
	targetLast *Index
	// appendChecks: the target is the bottom and refuses, at the append, any entry at or below its last
	// index (OverlapRefuser). Step 2 then takes the target's last index as 0 without reading it, and a
	// refusal starts the pass again with reads (retry clears it): a batch above the target's last index
	// (the usual case) costs no read of it.
	appendChecks bool
	step         Step

	// Erasures (Stack.Erase): tombs is where they are recorded (nil: none looked for); started, when the
	// step first read the source; appended, whether the round under way appended to the target; and
	// emptied, whether a drop after such an append found the source emptied under it (see afterDrop).
	tombs    *tombstones
	started  time.Time
	appended bool
	emptied  bool

	// The pass under way: a hop makes passes over the source until one ends without a conflict.
	next     Index // the pass's next read starts here; past last, the pass is over
	end      Index // the last index of the batch being taken (0: the batch was empty)
	verified Index // the source up to here is identical below and not yet dropped
	target   Index // the greatest target last index this pass read

	tries, stalls int   // passes ended by a conflict; of those, in a row with the target's last index unmoved
	prevTarget    Index // target at the end of the pass before
}

func newHop(agent AgentID, mode Mode, src Layer, below []Layer, last Index, first []Entry) *hop {
	r, ok := below[0].(OverlapRefuser)
	return &hop{
		agent: agent, mode: mode, src: src, below: below, last: last, first: first, next: 1,
		appendChecks: len(below) == 1 && ok && r.RefusesOverlap(),
		step:         Step{Source: src.Name(), Target: below[0].Name()},
	}
}

// OverlapRefuser is implemented by a layer whose Append refuses with indexedstorage.ErrConflict any
// entry at or below the layer's last index, checked at the append itself (the packed blob layer's rows
// carry the condition: is.KeyEntries.Below), unless the layer holds exactly those entries already.
type OverlapRefuser interface {
	RefusesOverlap() bool
}

// hopStalls bounds the tries of one hop whose appends the target keeps refusing with ErrConflict
// without its last index moving on. A conflict is normally a concurrent drain of the same agent that
// appended there first: the next try re-reads the target's last index, finds it higher, and compares
// what the other drain moved instead of appending it again. A conflict needs that index below the
// source's last, and it only rises, so counting only the tries in which it did not rise still ends the
// loop.
const hopStalls = 3

// run is the hop on its own: for every batch, read it (step 1), take it (steps 2 to 4) and drop what
// the take says (step 5), until the pass is over. A batch drain (drainLayer) drives many hops through
// the same steps, a round of reads and a round of drops at a time.
func (h *hop) run(ctx context.Context) (Step, error) {
	for !h.done() {
		batch, err := h.read(ctx, h.next)
		if err != nil {
			return h.step, err
		}
		upTo, err := h.take(ctx, batch)
		if err != nil {
			return h.step, err
		}
		if upTo > 0 {
			if err := h.drop(ctx, upTo); err != nil {
				return h.step, err
			}
		}
	}
	return h.step, nil
}

// done reports whether the hop has read everything it will and made the drops that followed.
func (h *hop) done() bool { return h.next > h.last }

// take is steps 2 to 4 for batch, the source's entries read from h.next on, and returns how far step 5
// drops the source (0: no drop this round): prepare, the append, then settle. A batch drain makes the
// appends of many hops in one call of the target between the two (drainLayer).
func (h *hop) take(ctx context.Context, batch []Entry) (upTo Index, err error) {
	above, err := h.prepare(ctx, batch)
	if err != nil {
		return 0, err
	}
	if len(above) > 0 {
		err = appendMany(ctx, h.below[0], h.mode, []AppendRequest{{Agent: h.agent, Entries: above}})[0]
	}
	return h.settle(above, err)
}

// prepare is steps 2 and 3 for batch and returns the part of it step 4 appends. Reading from 1 rather
// than from the target's last index + 1 costs nothing when the source starts above it (the usual case)
// and shows any entry at or below it. Those come first, so all of them are verified before the first
// append or drop.
func (h *hop) prepare(ctx context.Context, batch []Entry) (above []Entry, err error) {
	h.end, h.appended = 0, false
	if len(batch) == 0 {
		return nil, nil
	}
	h.end = batch[len(batch)-1].Index
	known, err := h.alreadyBelow(ctx, batch)
	if err != nil {
		return nil, err
	}
	h.target = max(h.target, known.target)
	atOrBelow, above := known.split(batch)
	if len(atOrBelow) > 0 {
		if err := h.verify(ctx, atOrBelow, known); err != nil {
			return nil, h.unlessErased(ctx, err, known)
		}
		h.verified = atOrBelow[len(atOrBelow)-1].Index
	}
	return above, nil
}

// settle ends take once step 4 appended above (appendErr: its error; ErrHeldAlready makes above
// verified rather than appended) and returns how far step 5 drops. An empty batch ends the pass's reads
// (a concurrent drain dropped the rest); at the end of the pass, a source that held only verified
// entries since the last drop is dropped up to them. A conflict on the append starts the pass again
// from index 1 (retry) while the target's last index moves on.
func (h *hop) settle(above []Entry, appendErr error) (upTo Index, err error) {
	if errors.Is(appendErr, ErrHeldAlready) {
		// Another drain appended exactly these first, and the target compared them: verified, not moved.
		h.verified, above, appendErr = h.end, nil, nil
	}
	if appendErr != nil {
		if errors.Is(appendErr, is.ErrConflict) && h.retry() {
			return 0, nil
		}
		return 0, appendErr
	}
	if h.end == 0 {
		h.next = h.last + 1
	} else {
		if len(above) > 0 {
			h.appended = true
			h.step.Moved += len(above)
			for _, e := range above {
				h.step.Bytes += int64(len(e.Payload))
			}
			upTo = h.end
		}
		h.next = h.end + 1
	}
	if h.done() && h.verified > max(upTo, h.step.DroppedUpTo) {
		upTo = h.verified
	}
	return upTo, nil
}

// retry starts the pass again after a conflict on its append, unless hopStalls passes in a row ended
// so with the target's last index where it was; it reports whether it did.
func (h *hop) retry() bool {
	if h.tries > 0 && h.target > h.prevTarget {
		h.stalls = 0
	}
	if h.stalls++; h.stalls == hopStalls {
		return false
	}
	h.tries++
	h.prevTarget = h.target
	h.next, h.verified, h.target, h.first = 1, 0, 0, nil
	h.appendChecks = false // the conflict may be a prefix the target holds: read it, verify it
	return true
}

// read is step 1: the source's batch from next on (the caller's first batch, on the hop's first read).
func (h *hop) read(ctx context.Context, next Index) ([]Entry, error) {
	if h.first != nil {
		batch := h.first
		h.first = nil // a pass after a conflict reads afresh
		return batch, nil
	}
	return h.src.Read(ctx, h.agent, h.mode, next, h.last, ChunkLimit)
}

// knownBelow is how far an oplog is known to be below a source already, looked up after a batch was
// read.
type knownBelow struct {
	target Index // the target's last index (0: it holds none)
	gone   Index // the source no longer holds the batch up to here (0: it holds all of it)
	upTo   Index // max(target, gone): the batch up to here must be below, and is not appended
}

// split cuts batch into the part at or below k.upTo, which must be below already, and the rest.
func (k knownBelow) split(batch []Entry) (atOrBelow, above []Entry) {
	i, _ := slices.BinarySearchFunc(batch, k.upTo+1, func(e Entry, i Index) int { return cmpIndex(e.Index, i) })
	return batch[:i], batch[i:]
}

// alreadyBelow is step 2: how much of batch is below already, looked at after it was read. That is
// everything up to the target's last index, and the part of the batch the source dropped since the
// read (a concurrent hop moved it). The source is looked at first: a hop appends before it drops, so a
// drop seen here means the target's last index read next covers it, unless that hop has gone on to
// move the target's entries further down, which the source's side still shows. When the target is the
// bottom, nothing moves on from it, so its last index alone covers every drop and the source is not
// read again.
func (h *hop) alreadyBelow(ctx context.Context, batch []Entry) (knownBelow, error) {
	var k knownBelow
	if len(h.below) > 1 {
		first, ok, err := h.src.FirstIndex(ctx, h.agent, h.mode)
		if err != nil {
			return k, err
		}
		if last := batch[len(batch)-1].Index; !ok || first > last {
			k.gone = last
		} else if first > batch[0].Index {
			k.gone = first - 1
		}
	}
	switch {
	case h.targetLast != nil:
		k.target, h.targetLast = *h.targetLast, nil
	case h.appendChecks: // the append checks what a read would; a refusal retries with reads
	default:
		var err error
		if k.target, _, err = h.below[0].LastIndex(ctx, h.agent, h.mode); err != nil {
			return k, err
		}
	}
	k.upTo = max(k.target, k.gone)
	return k, nil
}

// verify is step 3: the layers below must hold every entry of want (ascending, at or below k.upTo)
// with the same payload, else ErrIndexReused. The target is read first; an index it lacks is looked
// for further down, where a concurrent drain of the next hop may have moved it. Layers are read top
// first, as Stack.Read does, so an entry moving down meanwhile is found in one or the other.
func (h *hop) verify(ctx context.Context, want []Entry, k knownBelow) error {
	pending := want
	for _, l := range h.below {
		var missing []Entry
		i := 0
		for i < len(pending) {
			got, err := l.Read(ctx, h.agent, h.mode, pending[i].Index, pending[len(pending)-1].Index, ChunkLimit)
			if err != nil {
				return err
			}
			if len(got) == 0 {
				break
			}
			for _, g := range got {
				for i < len(pending) && pending[i].Index < g.Index {
					missing = append(missing, pending[i])
					i++
				}
				if i < len(pending) && pending[i].Index == g.Index {
					if !bytes.Equal(pending[i].Payload, g.Payload) {
						return indexReused(want, k, fmt.Sprintf("index %d differs from %s's", pending[i].Index, l.Name()))
					}
					i++
				}
			}
		}
		if pending = append(missing, pending[i:]...); len(pending) == 0 {
			return nil
		}
	}
	return indexReused(want, k, fmt.Sprintf("no layer below holds index %d", pending[0].Index))
}

func indexReused(want []Entry, k knownBelow, why string) error {
	where := fmt.Sprintf("at or below the target's last index %d", k.target)
	if k.gone > k.target {
		where = fmt.Sprintf("up to %d, which the source dropped during the step as moved below", k.gone)
	}
	return fmt.Errorf("%w: source indices %d..%d are %s, and %s", ErrIndexReused, want[0].Index, want[len(want)-1].Index, where, why)
}

// drop is step 5: the source up to upTo, all of it appended below or verified there. It records
// whether this drop finished the hop: it covered the hop's last index and removed something. Drops
// remove prefixes only, so a drop up to that index that finds anything left at or below it finds the
// entry at that index too (the hop read it there): it is the one drop, of all racing over those
// entries, that removed it.
func (h *hop) drop(ctx context.Context, upTo Index) error {
	dropped, err := h.src.DropPrefix(ctx, h.agent, h.mode, upTo)
	if err != nil {
		return err
	}
	h.dropped(upTo, dropped)
	return h.afterDrop(ctx)
}

// dropped records step 5's drop up to upTo, which removed dropped of the source's units.
func (h *hop) dropped(upTo Index, dropped uint64) {
	h.step.DroppedUpTo = upTo
	if upTo >= h.last && dropped > 0 {
		h.step.Finished = true
	}
	h.emptied = h.appended && dropped == 0
}

// afterDrop is the step's side of an erasure (Stack.Erase), after step 5. An erasure writes its
// tombstone, then deletes the layers top to bottom. A drop that removed something ran before the
// erasure reached the source, so what this round appended below came before the erasure reached the
// layers there, and the erasure removes it. A drop that found the source emptied after this round
// appended may have lost the race: a concurrent drain moved the entries first (the usual case), or an
// erasure deleted them, and then perhaps deleted below before the append landed. Only then is the
// tombstone read; when it says an erasure started before this step could have read the source, the
// step deletes the agent from every layer below the source and fails with ErrErased. The common path
// costs no call.
func (h *hop) afterDrop(ctx context.Context) error {
	if !h.emptied || h.tombs == nil {
		return nil
	}
	h.emptied = false
	return h.ifErased(ctx, nil)
}

// unlessErased is err, step 3's, unless it is ErrIndexReused for entries the source dropped during
// the step and an erasure explains where they went: then it is ErrErased (ifErased).
func (h *hop) unlessErased(ctx context.Context, err error, k knownBelow) error {
	if !errors.Is(err, ErrIndexReused) || k.gone <= k.target {
		return err
	}
	return h.ifErased(ctx, err)
}

// ifErased looks for an erasure that started before this step could have read the source; finding
// one, it deletes the agent from every layer below the source and returns ErrErased, else otherwise.
func (h *hop) ifErased(ctx context.Context, otherwise error) error {
	if h.tombs == nil {
		return otherwise
	}
	erased, err := h.tombs.honoured(ctx, h.agent, h.mode, h.started)
	if err != nil {
		return errors.Join(otherwise, err)
	}
	if !erased {
		return otherwise
	}
	for _, l := range h.below {
		if err := l.Delete(ctx, h.agent, h.mode); err != nil {
			return fmt.Errorf("%w; deleting what the step wrote to %s: %w", ErrErased, l.Name(), err)
		}
	}
	h.next = h.last + 1 // nothing more to move
	return ErrErased
}
