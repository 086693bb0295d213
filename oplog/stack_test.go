package oplog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
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

// The zero Stack, and a nil *Stack, hold no layers: every exported method refuses it, with
// ErrStackNotBuilt where it returns an error and with nothing (nil, 0) where it does not, and none
// panics. Reflection calls each one, so a method added later is held to it too.
func TestStack_TheZeroValueIsRefusedByEveryMethodWithoutPanic(t *testing.T) {
	errType := reflect.TypeFor[error]()
	agent := oplog.AgentID{Component: "c", Name: "zero"}
	for name, s := range map[string]*oplog.Stack{"zero Stack": new(oplog.Stack), "nil *Stack": nil} {
		v := reflect.ValueOf(s)
		if v.NumMethod() == 0 {
			t.Fatal("no methods found")
		}
		for i := range v.NumMethod() {
			m, mt := v.Type().Method(i), v.Method(i).Type()
			args := make([]reflect.Value, mt.NumIn())
			for j := range args {
				switch in := mt.In(j); in {
				case reflect.TypeFor[context.Context]():
					args[j] = reflect.ValueOf(t.Context())
				case reflect.TypeFor[oplog.AgentID]():
					args[j] = reflect.ValueOf(agent)
				case reflect.TypeFor[oplog.Mode]():
					args[j] = reflect.ValueOf(oplog.Ephemeral)
				case reflect.TypeFor[[]oplog.Entry]():
					args[j] = reflect.ValueOf(entries(1, 2))
				case reflect.TypeFor[int]():
					args[j] = reflect.ValueOf(1)
				case reflect.TypeFor[oplog.Index]():
					args[j] = reflect.ValueOf(oplog.Index(1))
				case reflect.TypeFor[[]oplog.AgentID]():
					args[j] = reflect.ValueOf([]oplog.AgentID{agent})
				case reflect.TypeFor[is.Storage]():
					args[j] = reflect.ValueOf(memory.New())
				case reflect.TypeFor[[]oplog.Seen]():
					args[j] = reflect.ValueOf([]oplog.Seen{{Agent: agent, Index: 1}})
				default:
					t.Fatalf("%s: Stack.%s takes a %s this test does not know how to make", name, m.Name, in)
				}
			}
			var out []reflect.Value
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s: Stack.%s panics: %v", name, m.Name, r)
					}
				}()
				out = v.Method(i).Call(args)
			}()
			for k, o := range out {
				switch {
				case mt.Out(k) == errType:
					if err, _ := o.Interface().(error); !errors.Is(err, oplog.ErrStackNotBuilt) {
						t.Errorf("%s: Stack.%s returned error %v, want ErrStackNotBuilt", name, m.Name, err)
					}
				case !o.IsZero():
					t.Errorf("%s: Stack.%s returned %v, want nothing", name, m.Name, o)
				}
			}
		}
	}
}

func TestNewStack_RefusesMoreThanMaxLayers(t *testing.T) {
	st := memory.New()
	var archives []oplog.Layer
	for l := 1; l < oplog.MaxLayers; l++ {
		c, err := archive.NewCompressed(st, l)
		if err != nil {
			t.Fatal(err)
		}
		archives = append(archives, c)
	}
	if _, err := oplog.NewStack(oplog.NewPrimary(st), archives...); err != nil {
		t.Fatalf("a stack of %d layers: %v", oplog.MaxLayers, err)
	}
	c, _ := archive.NewCompressed(st, oplog.MaxLayers)
	if _, err := oplog.NewStack(oplog.NewPrimary(st), append(archives, c)...); err == nil {
		t.Fatalf("a stack of %d layers was built", oplog.MaxLayers+1)
	}
}
