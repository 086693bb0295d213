package storagetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
)

// operation is one call of the Storage interface on ctx, reduced to its error. A read that returns
// nil checks what it read of (ns, "k") holding ids 1..3, and returns a wrongResult if it is not that: a
// backend may finish a call whose context is done, but not hand back something else (a walk that
// passed every index over as unreadable because its context was dead, say).
type operation struct {
	name  string
	write bool
	call  func(ctx context.Context, st is.Storage) error
}

// wrongResult is what a read returned without an error that is not what (ns, "k") holds.
type wrongResult struct{ got any }

func (w wrongResult) Error() string {
	return fmt.Sprintf("returned no error and a wrong result: %+v", w.got)
}

// checked is err, or a wrongResult of got when err is nil and ok is false.
func checked(err error, ok bool, got any) error {
	if err == nil && !ok {
		return wrongResult{got}
	}
	return err
}

// operations calls every method of the Storage interface once on (ns, "k"); the writes would change
// an index holding ids 1..3 (each adds, drops or deletes something).
func operations() []operation {
	return []operation{
		{"Exists", false, func(ctx context.Context, st is.Storage) error {
			ok, err := st.Exists(ctx, ns, "k")
			return checked(err, ok, ok)
		}},
		{"Length", false, func(ctx context.Context, st is.Storage) error {
			n, err := st.Length(ctx, ns, "k")
			return checked(err, n == 3, n)
		}},
		{"Read", false, func(ctx context.Context, st is.Storage) error {
			entries, err := st.Read(ctx, ns, "k", 0, is.MaxID)
			return checked(err, len(entries) == 3 && entries[0].ID == 1 && entries[2].ID == 3, entries)
		}},
		{"First", false, func(ctx context.Context, st is.Storage) error {
			e, ok, err := st.First(ctx, ns, "k")
			return checked(err, ok && e.ID == 1, e)
		}},
		{"Last", false, func(ctx context.Context, st is.Storage) error {
			e, ok, err := st.Last(ctx, ns, "k")
			return checked(err, ok && e.ID == 3, e)
		}},
		{"LastID", false, func(ctx context.Context, st is.Storage) error {
			id, ok, err := st.LastID(ctx, ns, "k")
			return checked(err, ok && id == 3, id)
		}},
		{"Closest", false, func(ctx context.Context, st is.Storage) error {
			e, ok, err := st.Closest(ctx, ns, "k", 2)
			return checked(err, ok && e.ID == 2, e)
		}},
		// Scan's and ScanStable's pages may be empty and not done (a SCAN of a shared server), so
		// only what a page holds is checked.
		{"Scan", false, func(ctx context.Context, st is.Storage) error {
			next, keys, err := st.Scan(ctx, ns, "", 0, 10)
			return checked(err, slices.Equal(keys, []string{"k"}) || (len(keys) == 0 && next != 0), keys)
		}},
		{"ScanStable", false, func(ctx context.Context, st is.Storage) error {
			page, err := st.ScanStable(ctx, ns, is.AllKeys, is.Resume{}, 10)
			ok := len(page.Unreadable) == 0 && (slices.Equal(page.Keys, []string{"k"}) || (len(page.Keys) == 0 && !page.Done))
			return checked(err, ok, page)
		}},
		{"Append", true, func(ctx context.Context, st is.Storage) error { return st.Append(ctx, ns, "k", 4, value("k", 4)) }},
		{"AppendMany", true, func(ctx context.Context, st is.Storage) error {
			return st.AppendMany(ctx, ns, "k", []is.Entry{{ID: 4, Value: value("k", 4)}, {ID: 5, Value: value("k", 5)}})
		}},
		{"AppendManyNewIndex", true, func(ctx context.Context, st is.Storage) error {
			return st.AppendMany(ctx, ns, "new", []is.Entry{{ID: 1, Value: value("new", 1)}})
		}},
		{"DropPrefix", true, func(ctx context.Context, st is.Storage) error { _, err := st.DropPrefix(ctx, ns, "k", 2); return err }},
		{"Delete", true, func(ctx context.Context, st is.Storage) error { return st.Delete(ctx, ns, "k") }},
	}
}

// testCancel checks what a caller that gave up gets back: its own context's error, and for a
// cancellation never ErrTransient (a retry loop would retry what its caller abandoned; a deadline may
// be transient, as ClassifyCommon makes it), and that a write it gave up on before calling is all or
// nothing. A backend may finish an operation whose context is already done (an in-process engine has
// nothing to interrupt); what it must not do is fail it with another error, or fail it after applying
// it (go-cloud's drivertest checks the same of a cancelled blob write).
func testCancel(t *testing.T, h Harness) {
	cancelled := func(t *testing.T) context.Context {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		return ctx
	}
	expired := func(t *testing.T) context.Context {
		ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Hour))
		t.Cleanup(cancel)
		return ctx
	}
	for _, c := range []struct {
		name           string
		ctx            func(t *testing.T) context.Context
		want           error
		transientFails bool
	}{
		{"Canceled", cancelled, context.Canceled, true},
		{"DeadlineExceeded", expired, context.DeadlineExceeded, false},
	} {
		for _, op := range operations() {
			// On a second handle too, the first call it gets: nothing opened or cached yet (a file, a
			// connection) that would let the operation finish without looking at the context.
			for _, fresh := range []bool{false, true} {
				name := c.name + "/" + op.name
				if fresh {
					name += "/FreshHandle"
				}
				t.Run(name, func(t *testing.T) {
					if fresh && h.Reopen == nil {
						t.Skip("the harness has no Reopen: the backend's storage has no second handle")
					}
					f := newFixture(t, h)
					f.append(ns, "k", 1, 2, 3)
					st := f.st
					if fresh {
						st = h.Reopen(t, f.st)
					}
					err := op.call(c.ctx(t), st)
					if wrong := (wrongResult{}); errors.As(err, &wrong) {
						t.Fatalf("%s with a context already done %v", op.name, err)
					}
					if err != nil && !errors.Is(err, c.want) {
						t.Fatalf("%s with a context already done: %v; want an error matching %v", op.name, err, c.want)
					}
					if c.transientFails && is.IsTransient(err) {
						t.Fatalf("%s with a cancelled context: %v; want it not to match ErrTransient", op.name, err)
					}
					if op.write {
						f.requireAllOrNothing(op, err)
					}
				})
			}
		}
	}
}

// requireAllOrNothing checks, with a live context, that op, called on (ns, "k") holding 1..3 and
// returning err, changed the storage as it says if err is nil and left it as it was if not.
func (f *fixture) requireAllOrNothing(op operation, err error) {
	f.t.Helper()
	was := map[string][]uint64{"k": {1, 2, 3}}
	if err == nil {
		switch op.name {
		case "Append":
			was["k"] = []uint64{1, 2, 3, 4}
		case "AppendMany":
			was["k"] = []uint64{1, 2, 3, 4, 5}
		case "AppendManyNewIndex":
			was["new"] = []uint64{1}
		case "DropPrefix":
			was["k"] = []uint64{3}
		case "Delete":
			delete(was, "k")
		}
	}
	what := op.name + " that failed with the caller's context error"
	if err == nil {
		what = op.name + " that returned nil under a context already done"
	}
	for _, key := range []string{"k", "new"} {
		requireIDs(f.t, f.ids(ns, key), was[key], what+": ids of "+key)
		if f.exists(ns, key) != (len(was[key]) > 0) {
			f.t.Fatalf("%s: Exists(%q) is %v, want %v", what, key, !(len(was[key]) > 0), len(was[key]) > 0)
		}
	}
	want := make([]string, 0, len(was))
	for key := range was {
		want = append(want, key)
	}
	slices.Sort(want)
	if got := keySet(f.walk(ns, "", 10, nil)); !slices.Equal(got, want) {
		f.t.Fatalf("%s: ScanStable %q, want %q", what, got, want)
	}
}

// testUnreachable checks that a server that refuses the connection is a transient failure, worth a
// retry once it is back: when opening, or on every operation of a Storage opened without a
// connection.
func testUnreachable(t *testing.T, h Harness) {
	if h.Unreachable == nil {
		t.Skip("the harness has no Unreachable: the backend reaches no server")
	}
	st, err := h.Unreachable(t)
	if err != nil {
		if !is.IsTransient(err) {
			t.Fatalf("opening against a port nothing listens on: %v, want an error matching ErrTransient", err)
		}
		return
	}
	ctx := t.Context()
	for _, op := range operations() {
		if err := op.call(ctx, st); !is.IsTransient(err) {
			t.Errorf("%s against a port nothing listens on: %v, want an error matching ErrTransient", op.name, err)
		}
	}
}
