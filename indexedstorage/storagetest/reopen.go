package storagetest

import (
	"errors"
	"slices"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
)

// testReopen checks that storage outlives its handle: what one handle wrote, dropped and deleted, a
// second handle on the same storage reads as it was left, while the first is open and after it
// closed, and that the two see each other's writes.
func testReopen(t *testing.T, h Harness) {
	if h.Reopen == nil {
		t.Skip("the harness has no Reopen: the backend's storage has no second handle")
	}
	run := func(name string, fn func(f *fixture)) {
		t.Run(name, func(t *testing.T) { fn(newFixture(t, h)) })
	}
	reopen := func(f *fixture) is.Storage {
		f.t.Helper()
		st := h.Reopen(f.t, f.st)
		if st == f.st {
			f.t.Fatal("Reopen handed back the handle it was given, not a second one")
		}
		return st
	}
	// written leaves (ns, "k") holding 3..5, (ns, "empty-value") one entry of an empty value, and
	// (ns, "deleted") and (ns, "emptied") gone.
	written := func(f *fixture) {
		f.append(ns, "k", 1, 2, 3, 4, 5)
		f.dropPrefix(ns, "k", 2)
		if err := f.st.AppendMany(f.ctx, ns, "empty-value", []is.Entry{{ID: 7, Value: []byte{}}}); err != nil {
			f.t.Fatalf("AppendMany: %v", err)
		}
		f.append(ns, "deleted", 1)
		f.delete(ns, "deleted")
		f.append(ns, "emptied", 1, 2)
		f.dropPrefix(ns, "emptied", 2)
	}
	requireWritten := func(f *fixture, st is.Storage, when string) {
		f.t.Helper()
		g := &fixture{t: f.t, st: st, caps: is.CapabilitiesOf(st), ctx: f.ctx}
		requireIDs(f.t, g.ids(ns, "k"), []uint64{3, 4, 5}, "Read of k "+when)
		if n := g.length(ns, "k"); n != 3 {
			f.t.Fatalf("Length of k %s: %d, want 3", when, n)
		}
		entries, err := st.Read(f.ctx, ns, "empty-value", 0, is.MaxID)
		if err != nil || len(entries) != 1 || entries[0].ID != 7 || len(entries[0].Value) != 0 {
			f.t.Fatalf("Read of an entry with an empty value %s: %+v, %v; want id 7, empty", when, entries, err)
		}
		for _, gone := range []string{"deleted", "emptied"} {
			if g.exists(ns, gone) {
				f.t.Fatalf("%q exists %s; it was removed before", gone, when)
			}
		}
		if got := keySet(g.walk(ns, "", 10, nil)); !slices.Equal(got, []string{"empty-value", "k"}) {
			f.t.Fatalf("ScanStable %s: %q, want [empty-value k]", when, got)
		}
	}

	run("SecondHandleReadsWhatTheFirstWrote", func(f *fixture) {
		written(f)
		requireWritten(f, reopen(f), "through a second handle")
	})
	run("ClosingAHandleKeepsEntries", func(f *fixture) {
		written(f)
		if err := f.st.Close(); err != nil {
			f.t.Fatalf("Close: %v", err)
		}
		requireWritten(f, reopen(f), "after the first handle closed")
	})
	run("HandlesSeeEachOthersWrites", func(f *fixture) {
		f.append(ns, "k", 1)
		other := &fixture{t: f.t, st: reopen(f), ctx: f.ctx}
		other.caps = is.CapabilitiesOf(other.st)
		other.append(ns, "k", 2)
		requireIDs(f.t, f.ids(ns, "k"), []uint64{1, 2}, "the first handle's Read after the second appended")
		if err := f.st.Append(f.ctx, ns, "k", 2, value("k", 2)); !errors.Is(err, is.ErrConflict) {
			f.t.Fatalf("the first handle's Append of id 2 after the second appended it: %v, want ErrConflict", err)
		}
		f.delete(ns, "k")
		if other.exists(ns, "k") {
			f.t.Fatal("the second handle sees an index the first deleted")
		}
	})
}
