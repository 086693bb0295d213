// Package faults injects failures into storage for crash-window tests: it counts the calls that reach
// an indexed store and a blob store, and fails the k-th one, either before it reaches the store (the
// request was lost) or after (the store applied it and the reply was lost).
package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/stratalog/strata/archive"
	is "github.com/stratalog/strata/indexedstorage"
)

// When says which side of the store a fault falls on.
type When int

const (
	Before When = iota // the call fails without reaching the store
	After              // the store applies the call, then the caller sees an error
)

func (w When) String() string {
	if w == After {
		return "after"
	}
	return "before"
}

// ErrInjected is the error a faulted call returns; it is transient, as a lost connection would be.
var ErrInjected = is.Classify(is.ErrTransient, errors.New("injected fault"))

// Injector counts calls across every store it wraps and fails the one it is armed for.
type Injector struct {
	mu     sync.Mutex
	calls  int
	failAt int // 1-based call to fail; 0 disarmed
	when   When
	hook   func() // run at the armed call instead of failing it (ArmHook)
	log    []string
}

// Arm makes the k-th call from now fail (k ≥ 1), on the given side; it resets the count.
func (in *Injector) Arm(k int, when When) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.calls, in.failAt, in.when, in.log, in.hook = 0, k, when, nil, nil
}

// ArmHook makes the k-th call from now run fn on the given side of the store instead of failing (a
// forced interleaving: another actor's whole operation between two calls); it resets the count.
func (in *Injector) ArmHook(k int, when When, fn func()) {
	in.Arm(k, when)
	in.mu.Lock()
	defer in.mu.Unlock()
	in.hook = fn
}

// Count resets the count and disarms: the calls from now are counted only.
func (in *Injector) Count() { in.Arm(0, Before) }

// Calls returns how many calls were made since Arm or Count, and what they were.
func (in *Injector) Calls() (int, []string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.calls, append([]string(nil), in.log...)
}

// next counts a call and says whether it fails, and when.
func (in *Injector) next(name string) (fail bool, when When, hook func()) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.calls++
	in.log = append(in.log, name)
	if in.failAt != 0 && in.calls == in.failAt {
		return true, in.when, in.hook
	}
	return false, 0, nil
}

func (in *Injector) run(name string, do func() error) error {
	fail, when, hook := in.next(name)
	if !fail {
		return do()
	}
	if hook != nil {
		if when == Before {
			hook()
			return do()
		}
		err := do()
		hook()
		return err
	}
	if when == Before {
		return fmt.Errorf("%s: %w", name, ErrInjected)
	}
	if err := do(); err != nil {
		return err
	}
	return fmt.Errorf("%s (applied): %w", name, ErrInjected)
}

// Storage wraps st so its calls count toward the injector.
func (in *Injector) Storage(st is.Storage) is.Storage {
	return is.Intercept(st, func(ctx context.Context, op is.Operation, do func(context.Context) error) error {
		return in.run(string(op), func() error { return do(ctx) })
	})
}

// Blobs wraps a blob store so its calls count toward the injector.
func (in *Injector) Blobs(bs archive.BlobStore) archive.BlobStore { return &blobs{in: in, bs: bs} }

type blobs struct {
	in *Injector
	bs archive.BlobStore
}

func (b *blobs) Put(ctx context.Context, path string, data []byte) error {
	return b.in.run("blob put", func() error { return b.bs.Put(ctx, path, data) })
}

func (b *blobs) Get(ctx context.Context, path string) (data []byte, err error) {
	err = b.in.run("blob get", func() (e error) { data, e = b.bs.Get(ctx, path); return })
	return data, err
}

// GetRange is the ranged read, injected as itself so that counting it counts ranged GETs.
func (b *blobs) GetRange(ctx context.Context, path string, offset, length int64) (data []byte, err error) {
	err = b.in.run("blob get_range", func() (e error) { data, e = archive.GetRange(ctx, b.bs, path, offset, length); return })
	return data, err
}

func (b *blobs) Delete(ctx context.Context, path string) error {
	return b.in.run("blob delete", func() error { return b.bs.Delete(ctx, path) })
}

func (b *blobs) List(ctx context.Context, prefix string) (paths []string, err error) {
	err = b.in.run("blob list", func() (e error) { paths, e = b.bs.List(ctx, prefix); return })
	return paths, err
}

func (b *blobs) Close() error { return b.bs.Close() }
