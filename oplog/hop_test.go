package oplog

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
)

// memLayer is a Layer over a map, enough for a hop: one oplog's entries by index.
type memLayer struct {
	Layer // the methods a hop does not call
	name  string
	held  map[Index][]byte
}

func newMemLayer(name string, es ...Entry) *memLayer {
	l := &memLayer{name: name, held: map[Index][]byte{}}
	for _, e := range es {
		l.held[e.Index] = e.Payload
	}
	return l
}

func (l *memLayer) Name() string { return l.name }

func (l *memLayer) indices() []Index {
	var out []Index
	for i := range l.held {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

func (l *memLayer) Read(_ context.Context, _ AgentID, _ Mode, from, to Index, limit ReadLimit) ([]Entry, error) {
	var out []Entry
	for _, i := range l.indices() {
		if i < from || i > to {
			continue
		}
		if (len(out) > 0 && i != out[len(out)-1].Index+1) || len(out) == limit.normalized().Entries {
			break // a hole, or the limit
		}
		out = append(out, Entry{Index: i, Payload: l.held[i]})
	}
	return out, nil
}

func (l *memLayer) FirstIndex(context.Context, AgentID, Mode) (Index, bool, error) {
	if ix := l.indices(); len(ix) > 0 {
		return ix[0], true, nil
	}
	return 0, false, nil
}

func (l *memLayer) LastIndex(context.Context, AgentID, Mode) (Index, bool, error) {
	if ix := l.indices(); len(ix) > 0 {
		return ix[len(ix)-1], true, nil
	}
	return 0, false, nil
}

func (l *memLayer) Append(_ context.Context, _ AgentID, _ Mode, es []Entry) error {
	if last, ok, _ := l.LastIndex(context.Background(), AgentID{}, ""); ok && es[0].Index <= last {
		return is.ErrConflict
	}
	for _, e := range es {
		l.held[e.Index] = e.Payload
	}
	return nil
}

func (l *memLayer) DropPrefix(_ context.Context, _ AgentID, _ Mode, upTo Index) (uint64, error) {
	var n uint64
	for i := range l.held {
		if i <= upTo {
			delete(l.held, i)
			n++
		}
	}
	return n, nil
}

// recording wraps a layer and records each call a hop makes as "<layer>.<method>" in a shared log; the
// call named fail fails with errInjected instead, after it is recorded.
type recording struct {
	Layer
	log  *[]string
	fail string
}

var errInjected = errors.New("injected failure")

func (r *recording) call(method string) error {
	name := r.Name() + "." + method
	*r.log = append(*r.log, name)
	if name == r.fail {
		return errInjected
	}
	return nil
}

func (r *recording) Read(ctx context.Context, agent AgentID, mode Mode, from, to Index, limit ReadLimit) ([]Entry, error) {
	if err := r.call("Read"); err != nil {
		return nil, err
	}
	return r.Layer.Read(ctx, agent, mode, from, to, limit)
}

func (r *recording) FirstIndex(ctx context.Context, agent AgentID, mode Mode) (Index, bool, error) {
	if err := r.call("FirstIndex"); err != nil {
		return 0, false, err
	}
	return r.Layer.FirstIndex(ctx, agent, mode)
}

func (r *recording) LastIndex(ctx context.Context, agent AgentID, mode Mode) (Index, bool, error) {
	if err := r.call("LastIndex"); err != nil {
		return 0, false, err
	}
	return r.Layer.LastIndex(ctx, agent, mode)
}

func (r *recording) Append(ctx context.Context, agent AgentID, mode Mode, es []Entry) error {
	if err := r.call("Append"); err != nil {
		return err
	}
	return r.Layer.Append(ctx, agent, mode, es)
}

func (r *recording) DropPrefix(ctx context.Context, agent AgentID, mode Mode, upTo Index) (uint64, error) {
	if err := r.call("DropPrefix"); err != nil {
		return 0, err
	}
	return r.Layer.DropPrefix(ctx, agent, mode, upTo)
}

func hopEntries(from, to Index) []Entry {
	var out []Entry
	for i := from; i <= to; i++ {
		out = append(out, Entry{Index: i, Payload: fmt.Appendf(nil, "entry %d", i)})
	}
	return out
}

// hopOverThree is a hop out of src (entries 1..5) into dst, which holds 1..3 already (an interrupted
// hop put them there), with a bottom layer under dst: every one of the five steps has work to do.
func hopOverThree(log *[]string, fail string) (*hop, *memLayer, *memLayer) {
	src, dst := newMemLayer("src", hopEntries(1, 5)...), newMemLayer("dst", hopEntries(1, 3)...)
	rec := func(l Layer) Layer { return &recording{Layer: l, log: log, fail: fail} }
	h := newHop(AgentID{Component: "c", Name: "a"}, Durable, rec(src), []Layer{rec(dst), rec(newMemLayer("bottom"))}, 5, nil)
	return h, src, dst
}

// The steps of one hop, as storage calls: read the source; already below (the source's first index,
// then the target's last); verify the part at or below it; append the rest; drop the source.
var hopCalls = []string{"src.Read", "src.FirstIndex", "dst.LastIndex", "dst.Read", "dst.Append", "src.DropPrefix"}

func TestHop_CallsItsStepsInOrder(t *testing.T) {
	var log []string
	h, src, dst := hopOverThree(&log, "")
	step, err := h.run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(log, hopCalls) {
		t.Fatalf("calls:\n got %q\nwant %q", log, hopCalls)
	}
	if len(src.held) != 0 || len(dst.held) != 5 || step.Moved != 2 || !step.Finished {
		t.Fatalf("after the hop: source holds %d, target %d, step %+v", len(src.held), len(dst.held), step)
	}
}

func TestHop_FailedStepStopsTheLaterOnes(t *testing.T) {
	for n, failing := range hopCalls {
		t.Run(failing, func(t *testing.T) {
			var log []string
			h, src, dst := hopOverThree(&log, failing)
			if _, err := h.run(t.Context()); !errors.Is(err, errInjected) {
				t.Fatalf("err = %v, want the injected failure", err)
			}
			if want := hopCalls[:n+1]; !reflect.DeepEqual(log, want) {
				t.Fatalf("calls:\n got %q\nwant %q", log, want)
			}
			// Whatever failed, every entry is still in one layer or the other.
			for i := Index(1); i <= 5; i++ {
				if src.held[i] == nil && dst.held[i] == nil {
					t.Fatalf("entry %d lost", i)
				}
			}
		})
	}
}

func TestHop_ReusedIndexAppendsAndDropsNothing(t *testing.T) {
	var log []string
	h, src, dst := hopOverThree(&log, "")
	dst.held[2] = []byte("another entry 2")
	if _, err := h.run(t.Context()); !errors.Is(err, ErrIndexReused) {
		t.Fatalf("err = %v, want ErrIndexReused", err)
	}
	if want := hopCalls[:4]; !reflect.DeepEqual(log, want) {
		t.Fatalf("calls:\n got %q\nwant %q", log, want)
	}
	if len(src.held) != 5 || len(dst.held) != 3 {
		t.Fatalf("source holds %d, target %d: want 5 and 3, untouched", len(src.held), len(dst.held))
	}
}

func TestHop_CallsOfItsOtherShapes(t *testing.T) {
	for _, c := range []struct {
		name      string
		src, dst  []Entry
		withBelow bool // a layer under the target, so that the source is looked at again in step 2
		want      []string
	}{
		// Into the bottom layer, nothing moves on from the target: its last index alone says what is below.
		{"into the bottom", hopEntries(1, 5), nil, false, []string{"src.Read", "dst.LastIndex", "dst.Append", "src.DropPrefix"}},
		// A source that holds only entries already below is verified, then dropped once, after its last batch.
		{"all below already", hopEntries(1, 3), hopEntries(1, 3), true, []string{"src.Read", "src.FirstIndex", "dst.LastIndex", "dst.Read", "src.DropPrefix"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log []string
			rec := func(l Layer) Layer { return &recording{Layer: l, log: &log} }
			below := []Layer{rec(newMemLayer("dst", c.dst...))}
			if c.withBelow {
				below = append(below, rec(newMemLayer("bottom")))
			}
			src := newMemLayer("src", c.src...)
			h := newHop(AgentID{Component: "c", Name: "a"}, Durable, rec(src), below, c.src[len(c.src)-1].Index, nil)
			if _, err := h.run(t.Context()); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(log, c.want) {
				t.Fatalf("calls:\n got %q\nwant %q", log, c.want)
			}
			if len(src.held) != 0 {
				t.Fatalf("the source still holds %d entries", len(src.held))
			}
		})
	}
}
