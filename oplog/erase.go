package oplog

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
)

// ErasedNamespace is the indexed-storage namespace of mode's erasure tombstones: "{mode}/erased", key
// the agent's stored key, a row per event of an erasure (docs/storage-format.md).
func ErasedNamespace(mode Mode) string { return string(mode) + "/erased" }

// ErrErased is an archive step's error for an agent erased while the step ran: the step found the
// source emptied under it, found the erasure's tombstone, and removed what it had written below. It is
// the erasure's outcome, not a failure: the sweep declines the agent.
var ErrErased = errors.New("oplog erased during the archive step")

// ErrNoTombstones is Stack.Erase's error on a stack built without WithTombstones: without a tombstone
// an archive step in flight could bring the agent back below after the erasure passed there.
var ErrNoTombstones = errors.New("oplog stack has no tombstone storage (WithTombstones): it cannot erase safely")

// EraseClockSkew is the margin an archive step allows between its clock and the eraser's: a step that
// started less than this after an erasure finished honours its tombstone (it may have read what the
// erasure removed). Past it, what the step read was written after the erasure: an agent key used again.
const EraseClockSkew = time.Minute

// The events a tombstone row records: the first byte of its value, then the time as 8 bytes of
// big-endian Unix nanoseconds.
const (
	tombstoneStarted  = 's'
	tombstoneFinished = 'f'
	tombstoneLen      = 9
)

// Erased is what Stack.Erase removed: a line per layer the oplog of mode can use, top first.
type Erased struct {
	Agent  AgentID
	Mode   Mode
	Layers []ErasedLayer
}

// MarshalJSON is {"agent":"component:name","mode":…,"entries":N,"layers":[{"layer":…,"held":…,
// "first":N,"last":N},…]}: the agent by its key, as every other report names it.
func (e Erased) MarshalJSON() ([]byte, error) {
	layers := e.Layers
	if layers == nil {
		layers = []ErasedLayer{}
	}
	return json.Marshal(struct {
		Agent   string        `json:"agent"`
		Mode    Mode          `json:"mode"`
		Entries uint64        `json:"entries"`
		Layers  []ErasedLayer `json:"layers"`
	}{e.Agent.Key(), e.Mode, e.Entries(), layers})
}

// ErasedLayer is one layer's part of an erasure: whether the layer held entries of the oplog when the
// erasure came to it, and which.
type ErasedLayer struct {
	Layer string `json:"layer"`
	Held  bool   `json:"held"`
	First Index  `json:"first,omitempty"`
	Last  Index  `json:"last,omitempty"`
}

// Entries is how many indices the erasure found in the layers, counting an index held in two layers
// (during a step) twice.
func (e Erased) Entries() uint64 {
	var n uint64
	for _, l := range e.Layers {
		if l.Held {
			n += uint64(l.Last - l.First + 1)
		}
	}
	return n
}

// WithTombstones returns a copy of s that records erasures in st (ErasedNamespace) and whose archive
// steps honour them. DefaultStack (package archive) builds its stack with the stack's own storage.
func (s *Stack) WithTombstones(st is.Storage) *Stack {
	if !s.built() {
		return nil // nothing to copy; a nil *Stack refuses every call with ErrStackNotBuilt
	}
	c := *s
	c.tombs = &tombstones{st: st}
	return &c
}

// Erase removes the oplog of agent in mode from every layer, top to bottom, and reports what each held.
// It first writes a tombstone (with the time) and, once every layer is deleted, a second row saying the
// erasure finished. An archive step in flight cannot bring the agent back: a step drops its source
// after it writes below, so one whose drop still removed something ran before the erasure reached the
// source, and wrote below before the erasure reached the layers there; one whose drop found the source
// emptied looks for a tombstone and, finding this one, deletes what it wrote (ErrErased). Erasing an
// oplog that holds nothing is no error; an erasure cut short leaves its tombstone "started", which
// every step honours until Erase runs again to its end. Erase an agent that is not running: entries an
// executor writes during the erasure may stay.
func (s *Stack) Erase(ctx context.Context, agent AgentID, mode Mode) (Erased, error) {
	if err := s.check(agent, mode); err != nil {
		return Erased{}, err
	}
	out := Erased{Agent: agent, Mode: mode}
	if s.tombs == nil {
		return out, ErrNoTombstones
	}
	if err := s.tombs.record(ctx, agent, mode, tombstoneStarted); err != nil {
		return out, fmt.Errorf("erase %s: write its tombstone: %w", agent, err)
	}
	layers, _ := s.layersOf(mode)
	for _, l := range layers {
		el := ErasedLayer{Layer: l.Name()}
		first, ok, err := l.FirstIndex(ctx, agent, mode)
		if err == nil && ok {
			el.First, el.Held = first, true
			el.Last, ok, err = l.LastIndex(ctx, agent, mode)
			el.Held = el.Held && ok
		}
		if err != nil {
			return out, fmt.Errorf("erase %s: look at %s: %w", agent, l.Name(), err)
		}
		if err := l.Delete(ctx, agent, mode); err != nil {
			return out, fmt.Errorf("erase %s: delete from %s: %w", agent, l.Name(), err)
		}
		out.Layers = append(out.Layers, el)
	}
	if err := s.tombs.record(ctx, agent, mode, tombstoneFinished); err != nil {
		return out, fmt.Errorf("erase %s: every layer deleted; write that the erasure finished: %w", agent, err)
	}
	return out, nil
}

// tombstones reads and writes the rows of ErasedNamespace.
type tombstones struct {
	st  is.Storage
	now func() time.Time // time.Now when nil
}

func (t *tombstones) clock() time.Time {
	if t.now != nil {
		return t.now()
	}
	return time.Now()
}

// tombstoneTries bounds the appends of one tombstone row that lose a race to a concurrent erasure's.
const tombstoneTries = 8

// record appends a row of kind to the agent's tombstone, after its last.
func (t *tombstones) record(ctx context.Context, agent AgentID, mode Mode, kind byte) error {
	ns, key := ErasedNamespace(mode), agent.StoredKey()
	value := make([]byte, tombstoneLen)
	value[0] = kind
	for range tombstoneTries {
		last, _, err := t.st.LastID(ctx, ns, key)
		if err != nil {
			return err
		}
		binary.BigEndian.PutUint64(value[1:], uint64(t.clock().UnixNano()))
		err = t.st.Append(ctx, ns, key, last+1, value)
		if !errors.Is(err, is.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("%w: %d tries lost to concurrent erasures", is.ErrConflict, tombstoneTries)
}

// honoured reports whether an archive step of the agent that started at started must undo what it
// wrote below: an erasure started and has not finished, or finished less than EraseClockSkew before
// the step started.
func (t *tombstones) honoured(ctx context.Context, agent AgentID, mode Mode, started time.Time) (bool, error) {
	row, found, err := t.st.Last(ctx, ErasedNamespace(mode), agent.StoredKey())
	if err != nil || !found {
		return false, err
	}
	if len(row.Value) != tombstoneLen || (row.Value[0] != tombstoneStarted && row.Value[0] != tombstoneFinished) {
		// A tombstone this version does not know: honour it, the safe side of an erasure.
		return true, nil
	}
	if row.Value[0] == tombstoneStarted {
		return true, nil
	}
	finished := time.Unix(0, int64(binary.BigEndian.Uint64(row.Value[1:])))
	return started.Before(finished.Add(EraseClockSkew)), nil
}
