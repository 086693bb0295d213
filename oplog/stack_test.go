package oplog_test

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/oplog"
)

// nonComparable is a Layer used by value whose type cannot be compared: == on two interface values
// holding it panics at run time.
type nonComparable struct {
	oplog.Layer
	tags []string
}

func payload(i oplog.Index) []byte { return fmt.Appendf(nil, "entry %d", i) }

func entries(from oplog.Index, n int) []oplog.Entry {
	out := make([]oplog.Entry, n)
	for i := range out {
		out[i] = oplog.Entry{Index: from + oplog.Index(i), Payload: payload(from + oplog.Index(i))}
	}
	return out
}

func TestStack_NonComparableLayersBuildAndDrainWithoutPanic(t *testing.T) {
	st, blobs := memory.New(), memory.NewBlobStore()
	c1, err := archive.NewCompressed(st, 1)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := archive.NewCompressed(st, 2)
	if err != nil {
		t.Fatal(err)
	}
	b0, err := archive.NewBlob(blobs, 0)
	if err != nil {
		t.Fatal(err)
	}
	wrap := func(l oplog.Layer) oplog.Layer { return nonComparable{Layer: l, tags: []string{l.Name()}} }
	stack, err := oplog.NewStack(wrap(oplog.NewPrimary(st)), wrap(c1), wrap(c2), wrap(b0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const n = 5000
	for _, mode := range oplog.Modes {
		agent := oplog.AgentID{Component: "c", Name: "non-comparable-" + string(mode)}
		if err := stack.Append(ctx, agent, mode, entries(1, n)); err != nil {
			t.Fatal(err)
		}
		if _, err := stack.Drain(ctx, agent, mode); err != nil {
			t.Fatalf("drain %s: %v", agent, err)
		}
		if last, ok, err := b0.LastIndex(ctx, agent, mode); err != nil || !ok || last != n {
			t.Fatalf("%s: bottom layer's last index %d %v %v, want %d", agent, last, ok, err, n)
		}
		got, err := stack.Read(ctx, agent, mode, 1, n+1)
		if err != nil || len(got) != n {
			t.Fatalf("%s: read %d entries, %v; want %d", agent, len(got), err, n)
		}
		for i, e := range got {
			if e.Index != oplog.Index(i+1) || !bytes.Equal(e.Payload, payload(e.Index)) {
				t.Fatalf("%s: entry %d is %d %q", agent, i+1, e.Index, e.Payload)
			}
		}
	}
	callEveryMethodTakingALayer(t, stack)
}

// callEveryMethodTakingALayer calls each exported method of Stack that takes a Layer with each layer of
// the stack, failing on a panic: a method that finds a layer by == panics on a non-comparable one.
func callEveryMethodTakingALayer(t *testing.T, stack *oplog.Stack) {
	layerType := reflect.TypeFor[oplog.Layer]()
	v := reflect.ValueOf(stack)
	for i := range v.NumMethod() {
		m, mt := v.Type().Method(i), v.Method(i).Type()
		takesLayer := false
		for j := range mt.NumIn() {
			takesLayer = takesLayer || mt.In(j) == layerType
		}
		if !takesLayer {
			continue
		}
		for _, l := range stack.Layers() {
			args := make([]reflect.Value, mt.NumIn())
			for j := range args {
				switch in := mt.In(j); in {
				case layerType:
					args[j] = reflect.ValueOf(&l).Elem()
				case reflect.TypeFor[context.Context]():
					args[j] = reflect.ValueOf(t.Context())
				default:
					args[j] = reflect.Zero(in)
				}
			}
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("Stack.%s(%s) panics on a non-comparable layer: %v", m.Name, l.Name(), r)
					}
				}()
				v.Method(i).Call(args)
			}()
		}
	}
}
