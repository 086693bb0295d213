package storagetest

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
)

const ns = "test/ns"

func testContract(t *testing.T, h Harness) {
	run := func(name string, fn func(f *fixture)) {
		t.Run(name, func(t *testing.T) { fn(newFixture(t, h)) })
	}

	run("Exists/MissingIndexDoesNotExist", func(f *fixture) {
		if f.exists(ns, "k") {
			f.t.Fatal("a missing index exists")
		}
	})
	run("Exists/AppendCreatesIndex", func(f *fixture) {
		f.append(ns, "k", 1)
		if !f.exists(ns, "k") {
			f.t.Fatal("index does not exist after Append")
		}
	})
	run("DropPrefix/EmptyingRemovesIndex", func(f *fixture) {
		f.append(ns, "k", 1, 2, 3)
		f.append(ns, "other", 1)
		if n := f.dropPrefix(ns, "k", 3); n != 3 {
			f.t.Fatalf("DropPrefix dropped %d, want 3", n)
		}
		f.requireGone(ns, "k")
		if got := keySet(f.walk(ns, "", 10, nil)); !slices.Equal(got, []string{"other"}) {
			f.t.Fatalf("ScanStable after emptying: %q, want [other]", got)
		}
	})
	run("Delete/RemovesIndex", func(f *fixture) {
		f.append(ns, "k", 1, 2)
		f.append(ns, "other", 1)
		f.delete(ns, "k")
		f.requireGone(ns, "k")
		requireIDs(f.t, f.ids(ns, "other"), []uint64{1}, "other key after Delete")
	})
	run("Delete/MissingIndexIsFine", func(f *fixture) {
		f.delete(ns, "never-written")
		f.requireGone(ns, "never-written")
	})

	run("Append/WritesEntriesReadBackExactly", func(f *fixture) {
		values := [][]byte{{}, {0}, []byte("plain"), bytes.Repeat([]byte{0xff, 0x00, 0x80}, 50_000)}
		for i, v := range values {
			if err := f.st.Append(f.ctx, ns, "k", uint64(i+1), v); err != nil {
				f.t.Fatalf("Append %d: %v", i+1, err)
			}
		}
		entries, err := f.st.Read(f.ctx, ns, "k", 1, uint64(len(values)))
		if err != nil {
			f.t.Fatal(err)
		}
		if len(entries) != len(values) {
			f.t.Fatalf("read %d entries, want %d", len(entries), len(values))
		}
		for i, e := range entries {
			if e.ID != uint64(i+1) || !bytes.Equal(e.Value, values[i]) {
				f.t.Fatalf("entry %d: id %d value of %d bytes, want id %d value of %d bytes", i, e.ID, len(e.Value), i+1, len(values[i]))
			}
		}
	})
	run("Append/ValueIsCopied", func(f *fixture) {
		v := []byte("original")
		if err := f.st.Append(f.ctx, ns, "k", 1, v); err != nil {
			f.t.Fatal(err)
		}
		copy(v, "mutated!")
		e, ok, err := f.st.First(f.ctx, ns, "k")
		if err != nil || !ok || string(e.Value) != "original" {
			f.t.Fatalf("First after mutating the caller's slice: %q %v %v", e.Value, ok, err)
		}
	})
	run("Append/EqualIDIsConflictAndWritesNothing", func(f *fixture) {
		f.append(ns, "k", 1, 2)
		err := f.st.Append(f.ctx, ns, "k", 2, []byte("again"))
		requireIs(f.t, err, is.ErrConflict, "Append of the last id")
		requireIDs(f.t, f.ids(ns, "k"), []uint64{1, 2}, "after the conflict")
	})
	run("Append/LowerIDIsConflictAndWritesNothing", func(f *fixture) {
		f.append(ns, "k", 5, 9)
		err := f.st.Append(f.ctx, ns, "k", 7, []byte("between"))
		requireIs(f.t, err, is.ErrConflict, "Append below the last id")
		requireIDs(f.t, f.ids(ns, "k"), []uint64{5, 9}, "after the conflict")
	})
	run("Append/IDOutOfRangeIsInvalidAndWritesNothing", func(f *fixture) {
		for _, id := range []uint64{0, is.MaxID + 1, math.MaxUint64} {
			requireIs(f.t, f.st.Append(f.ctx, ns, "k", id, nil), is.ErrInvalidArgument, "Append of id out of range")
		}
		f.requireGone(ns, "k")
		f.append(ns, "k", is.MaxID)
		requireIDs(f.t, f.ids(ns, "k"), []uint64{is.MaxID}, "MaxID is a valid id")
	})
	run("Append/GapsAreAllowed", func(f *fixture) {
		f.append(ns, "k", 2, 40, 1_000_000)
		requireIDs(f.t, f.ids(ns, "k"), []uint64{2, 40, 1_000_000}, "sparse ids")
	})
	run("Append/AfterIndexWasEmptiedStartsAfresh", func(f *fixture) {
		f.append(ns, "k", 10, 11)
		f.dropPrefix(ns, "k", 11)
		f.append(ns, "k", 3) // the index no longer exists, so its old last id binds nothing
		requireIDs(f.t, f.ids(ns, "k"), []uint64{3}, "after re-creating the index")
	})

	run("AppendMany/WritesAllInOrder", func(f *fixture) {
		f.appendMany(ns, "k", span(1, 1000)...)
		requireIDs(f.t, f.ids(ns, "k"), span(1, 1000), "after AppendMany")
		if n := f.length(ns, "k"); n != 1000 {
			f.t.Fatalf("Length %d, want 1000", n)
		}
	})
	run("AppendMany/ConflictWithLastWritesNone", func(f *fixture) {
		f.append(ns, "k", 1, 2, 3, 4, 5)
		err := f.st.AppendMany(f.ctx, ns, "k", entries("k", 5, 6, 7))
		requireIs(f.t, err, is.ErrConflict, "AppendMany starting at the last id")
		requireIDs(f.t, f.ids(ns, "k"), span(1, 5), "after the conflict")
	})
	run("AppendMany/ThirdIDConflictWritesNone", func(f *fixture) {
		f.append(ns, "k", 1, 2)
		err := f.st.AppendMany(f.ctx, ns, "k", entries("k", 3, 4, 4, 5))
		requireIs(f.t, err, is.ErrConflict, "AppendMany whose third id repeats the second")
		requireIDs(f.t, f.ids(ns, "k"), []uint64{1, 2}, "after the conflict")
		err = f.st.AppendMany(f.ctx, ns, "k", entries("k", 3, 4, 1))
		requireIs(f.t, err, is.ErrConflict, "AppendMany whose third id goes back")
		requireIDs(f.t, f.ids(ns, "k"), []uint64{1, 2}, "after the conflict")
	})
	run("AppendMany/InvalidIDWritesNone", func(f *fixture) {
		requireIs(f.t, f.st.AppendMany(f.ctx, ns, "k", entries("k", 1, 2, 0)), is.ErrInvalidArgument, "batch with id 0")
		requireIs(f.t, f.st.AppendMany(f.ctx, ns, "k", entries("k", 1, 2, is.MaxID+1)), is.ErrInvalidArgument, "batch with id above MaxID")
		f.requireGone(ns, "k")
	})
	run("AppendMany/EmptyBatchDoesNotCreateIndex", func(f *fixture) {
		if err := f.st.AppendMany(f.ctx, ns, "k", nil); err != nil {
			f.t.Fatalf("empty AppendMany: %v", err)
		}
		f.requireGone(ns, "k")
	})

	run("Length/CountsEntries", func(f *fixture) {
		if n := f.length(ns, "k"); n != 0 {
			f.t.Fatalf("Length of a missing index is %d", n)
		}
		f.append(ns, "k", 1, 5, 6)
		if n := f.length(ns, "k"); n != 3 {
			f.t.Fatalf("Length %d, want 3", n)
		}
		f.dropPrefix(ns, "k", 5)
		if n := f.length(ns, "k"); n != 1 {
			f.t.Fatalf("Length after DropPrefix %d, want 1", n)
		}
	})

	run("Read/IsAClosedRange", func(f *fixture) {
		f.append(ns, "k", span(1, 10)...)
		for _, c := range []struct{ from, to uint64 }{{3, 7}, {4, 4}, {1, 10}, {0, 2}, {9, math.MaxUint64}, {0, math.MaxUint64}} {
			entries, err := f.st.Read(f.ctx, ns, "k", c.from, c.to)
			if err != nil {
				f.t.Fatal(err)
			}
			requireIDs(f.t, entryIDs(f.t, "k", entries), span(max(c.from, 1), min(c.to, 10)), "Read range")
		}
	})
	run("Read/EmptyRangesAreNotErrors", func(f *fixture) {
		f.append(ns, "k", 2, 4, 6)
		for _, c := range []struct{ from, to uint64 }{{5, 3}, {7, 100}, {3, 3}, {0, 1}, {math.MaxUint64, math.MaxUint64}} {
			entries, err := f.st.Read(f.ctx, ns, "k", c.from, c.to)
			if err != nil || len(entries) != 0 {
				f.t.Fatalf("Read(%d, %d): %d entries, %v; want none", c.from, c.to, len(entries), err)
			}
		}
		entries, err := f.st.Read(f.ctx, ns, "missing", 0, math.MaxUint64)
		if err != nil || len(entries) != 0 {
			f.t.Fatalf("Read of a missing index: %d entries, %v", len(entries), err)
		}
		entries, err = f.st.Read(f.ctx, ns, "k", 3, 5)
		if err != nil {
			f.t.Fatal(err)
		}
		requireIDs(f.t, entryIDs(f.t, "k", entries), []uint64{4}, "Read(3, 5) over ids 2, 4, 6")
	})

	run("FirstLast/ReturnEnds", func(f *fixture) {
		if _, ok, err := f.st.First(f.ctx, ns, "k"); ok || err != nil {
			f.t.Fatalf("First of a missing index: %v %v", ok, err)
		}
		if _, ok, err := f.st.Last(f.ctx, ns, "k"); ok || err != nil {
			f.t.Fatalf("Last of a missing index: %v %v", ok, err)
		}
		f.append(ns, "k", 3, 8, 12)
		first, ok, err := f.st.First(f.ctx, ns, "k")
		if err != nil || !ok || first.ID != 3 || !bytes.Equal(first.Value, value("k", 3)) {
			f.t.Fatalf("First: %+v %v %v", first, ok, err)
		}
		last, ok, err := f.st.Last(f.ctx, ns, "k")
		if err != nil || !ok || last.ID != 12 || !bytes.Equal(last.Value, value("k", 12)) {
			f.t.Fatalf("Last: %+v %v %v", last, ok, err)
		}
	})
	run("Closest/IsSmallestIDAtOrAbove", func(f *fixture) {
		f.append(ns, "k", 10, 20, 30)
		for _, c := range []struct {
			id, want uint64
			found    bool
		}{{0, 10, true}, {1, 10, true}, {10, 10, true}, {11, 20, true}, {30, 30, true}, {31, 0, false}, {is.MaxID, 0, false}, {math.MaxUint64, 0, false}} {
			e, ok, err := f.st.Closest(f.ctx, ns, "k", c.id)
			if err != nil || ok != c.found || (ok && (e.ID != c.want || !bytes.Equal(e.Value, value("k", c.want)))) {
				f.t.Fatalf("Closest(%d) = %d %v %v, want %d %v", c.id, e.ID, ok, err, c.want, c.found)
			}
		}
		if _, ok, err := f.st.Closest(f.ctx, ns, "missing", 1); ok || err != nil {
			f.t.Fatalf("Closest on a missing index: %v %v", ok, err)
		}
	})
	run("ClosestLast/IsClosestAndLastID", func(f *fixture) {
		// Through is.ClosestLast, so that a Storage without the method is checked on its fallback.
		check := func(key string, id, wantID, wantLast uint64, found, exists bool) {
			f.t.Helper()
			e, ok, last, there, err := is.ClosestLast(f.ctx, f.st, ns, key, id)
			if err != nil || ok != found || there != exists || last != wantLast ||
				(ok && (e.ID != wantID || !bytes.Equal(e.Value, value(key, wantID)))) {
				f.t.Fatalf("ClosestLast(%q, %d) = entry %d found %v, last %d exists %v, %v; want entry %d found %v, last %d exists %v",
					key, id, e.ID, ok, last, there, err, wantID, found, wantLast, exists)
			}
		}
		check("k", 1, 0, 0, false, false)
		f.append(ns, "k", 10, 20, 30)
		for _, c := range []struct {
			id, want uint64
			found    bool
		}{{0, 10, true}, {1, 10, true}, {10, 10, true}, {11, 20, true}, {30, 30, true}, {31, 0, false}, {is.MaxID, 0, false}, {math.MaxUint64, 0, false}} {
			check("k", c.id, c.want, 30, c.found, true)
		}
		f.dropPrefix(ns, "k", 20)
		check("k", 1, 30, 30, true, true)
		f.dropPrefix(ns, "k", 30)
		check("k", 1, 0, 0, false, false)
	})

	run("DropPrefix/RemovesOnlyUpToBound", func(f *fixture) {
		f.append(ns, "k", span(1, 10)...)
		if n := f.dropPrefix(ns, "k", 4); n != 4 {
			f.t.Fatalf("dropped %d, want 4", n)
		}
		requireIDs(f.t, f.ids(ns, "k"), span(5, 10), "after DropPrefix(4)")
		if n := f.dropPrefix(ns, "k", 4); n != 0 {
			f.t.Fatalf("repeated DropPrefix(4) dropped %d", n)
		}
		if n := f.dropPrefix(ns, "k", 0); n != 0 {
			f.t.Fatalf("DropPrefix(0) dropped %d", n)
		}
		if !f.exists(ns, "k") {
			f.t.Fatal("index with entries left does not exist")
		}
	})
	run("DropPrefix/CountsOnlyExistingIDs", func(f *fixture) {
		f.append(ns, "k", 2, 4, 6)
		if n := f.dropPrefix(ns, "k", 5); n != 2 {
			f.t.Fatalf("dropped %d, want 2", n)
		}
		requireIDs(f.t, f.ids(ns, "k"), []uint64{6}, "after DropPrefix(5)")
		if n := f.dropPrefix(ns, "k", math.MaxUint64); n != 1 {
			f.t.Fatalf("DropPrefix(max) dropped %d, want 1", n)
		}
		f.requireGone(ns, "k")
	})
	run("DropPrefix/MissingIndexIsNoOp", func(f *fixture) {
		if n := f.dropPrefix(ns, "missing", 100); n != 0 {
			f.t.Fatalf("dropped %d from a missing index", n)
		}
		f.requireGone(ns, "missing")
	})

	run("Namespaces/AreIsolated", func(f *fixture) {
		other := "test/ns/other" // one namespace a prefix of the other
		f.append(ns, "k", 1, 2)
		f.append(other, "k", 7)
		f.append(other, "only-other", 1)
		requireIDs(f.t, f.ids(ns, "k"), []uint64{1, 2}, "ns")
		requireIDs(f.t, f.ids(other, "k"), []uint64{7}, "other")
		if got := keySet(f.walk(ns, "", 10, nil)); !slices.Equal(got, []string{"k"}) {
			f.t.Fatalf("walk of ns: %q", got)
		}
		f.append(ns, "k", 3) // 3 < 7 conflicts only if the namespaces leak
		f.dropPrefix(other, "k", 100)
		requireIDs(f.t, f.ids(ns, "k"), []uint64{1, 2, 3}, "ns after dropping other")
		f.delete(ns, "k")
		requireIDs(f.t, f.ids(other, "only-other"), []uint64{1}, "other after deleting ns")
		if got := keySet(f.walk(other, "", 10, nil)); !slices.Equal(got, []string{"only-other"}) {
			f.t.Fatalf("walk of other: %q", got)
		}
	})

	run("InvalidArguments/AreRejectedAndChangeNothing", func(f *fixture) {
		f.append(ns, "k", 1)
		badNamespaces := []string{"", "has:colon", "has space", "ünï", strings.Repeat("n", is.MaxNamespaceLen+1)}
		badKeys := []string{"", "nul\x00inside", "\xff\xfe", strings.Repeat("k", is.MaxKeyLen+1)}
		for _, b := range badNamespaces {
			f.requireInvalidEverywhere(b, "k", "")
		}
		for _, b := range badKeys {
			f.requireInvalidEverywhere(ns, b, "")
		}
		for _, bad := range []string{"nul\x00", "\xc3", strings.Repeat("p", is.MaxKeyLen+1)} {
			for _, r := range []is.KeyRange{{Start: bad}, {End: bad}, {Start: "a", End: bad}} {
				_, err := f.st.ScanStable(f.ctx, ns, r, is.Resume{}, 10)
				requireIs(f.t, err, is.ErrInvalidArgument, fmt.Sprintf("ScanStable of %v", r))
			}
			_, _, err := f.st.Scan(f.ctx, ns, bad, 0, 10)
			requireIs(f.t, err, is.ErrInvalidArgument, "Scan with prefix "+bad)
		}
		for _, count := range []int{0, -1} {
			_, err := f.st.ScanStable(f.ctx, ns, is.AllKeys, is.Resume{}, count)
			requireIs(f.t, err, is.ErrInvalidArgument, "ScanStable with count < 1")
			_, _, err = f.st.Scan(f.ctx, ns, "", 0, count)
			requireIs(f.t, err, is.ErrInvalidArgument, "Scan with count < 1")
		}
		long := strings.Repeat("k", is.MaxKeyLen)
		f.append(ns, long, 1)
		requireIDs(f.t, f.ids(ns, "k"), []uint64{1}, "after rejected calls")
		requireIDs(f.t, f.ids(ns, long), []uint64{1}, "a key of the maximum length")
	})

	run("Resume/ForeignOrMalformedTokenIsInvalid", func(f *fixture) {
		f.append(ns, "a", 1)
		f.append(ns, "b", 1)
		f.append(ns, "c", 1)
		var minted is.Resume
		f.walkPages(f.st, ns, is.AllKeys, 1, func(page is.Page) {
			if !page.Done {
				minted = page.Next
			}
		})
		if minted.IsStart() {
			f.t.Fatal("a walk of three keys with pages of one never returned a resume token")
		}
		tokens := map[string]is.Resume{
			"marker": is.MarkerResume("b"), "file": is.FileResume("b"), "cursor": is.CursorResume(7),
		}
		for kind, token := range tokens {
			if kind == minted.Kind() {
				continue
			}
			_, err := f.st.ScanStable(f.ctx, ns, is.AllKeys, token, 10)
			requireIs(f.t, err, is.ErrInvalidArgument, "ScanStable with a "+kind+" token on a backend minting "+minted.Kind()+" tokens")
		}
		for _, token := range []is.Resume{is.MarkerResume(""), is.FileResume(""), is.CursorResume(0)} {
			_, err := f.st.ScanStable(f.ctx, ns, is.AllKeys, token, 10)
			requireIs(f.t, err, is.ErrInvalidArgument, "ScanStable with malformed token "+token.String())
		}
	})

	run("Close/LaterCallsAreClosed", func(f *fixture) {
		f.append(ns, "k", 1)
		if err := f.st.Close(); err != nil {
			f.t.Fatalf("Close: %v", err)
		}
		if err := f.st.Close(); err != nil {
			f.t.Fatalf("second Close: %v", err)
		}
		for name, err := range f.callEverything(ns, "k", "") {
			requireIs(f.t, err, is.ErrClosed, name+" after Close")
		}
	})
}

func (f *fixture) appendMany(ns, key string, ids ...uint64) {
	f.t.Helper()
	if err := f.st.AppendMany(f.ctx, ns, key, entries(key, ids...)); err != nil {
		f.t.Fatalf("AppendMany(%q, %q, %d entries): %v", ns, key, len(ids), err)
	}
}

func entries(key string, ids ...uint64) []is.Entry {
	out := make([]is.Entry, len(ids))
	for i, id := range ids {
		out[i] = is.Entry{ID: id, Value: value(key, id)}
	}
	return out
}

// requireGone checks every way of observing an index says it does not exist.
func (f *fixture) requireGone(ns, key string) {
	f.t.Helper()
	if f.exists(ns, key) {
		f.t.Fatalf("%q exists", key)
	}
	if n := f.length(ns, key); n != 0 {
		f.t.Fatalf("%q has length %d", key, n)
	}
	if _, ok, err := f.st.Last(f.ctx, ns, key); ok || err != nil {
		f.t.Fatalf("%q: Last found an entry (%v, %v)", key, ok, err)
	}
	if slices.Contains(f.walk(ns, "", 7, nil), key) {
		f.t.Fatalf("ScanStable still returns %q", key)
	}
	if slices.Contains(f.scanAll(ns, "", 7), key) {
		f.t.Fatalf("Scan still returns %q", key)
	}
}

// callEverything calls every operation once and returns what each returned.
func (f *fixture) callEverything(ns, key, prefix string) map[string]error {
	errs := map[string]error{}
	ctx := f.ctx
	_, errs["Exists"] = f.st.Exists(ctx, ns, key)
	errs["Append"] = f.st.Append(ctx, ns, key, 100, nil)
	errs["AppendMany"] = f.st.AppendMany(ctx, ns, key, entries(key, 101, 102))
	// An empty batch writes nothing, but is still a call: validated, and refused once closed.
	errs["AppendMany(empty)"] = f.st.AppendMany(ctx, ns, key, nil)
	_, errs["Length"] = f.st.Length(ctx, ns, key)
	_, errs["Read"] = f.st.Read(ctx, ns, key, 1, 10)
	_, _, errs["First"] = f.st.First(ctx, ns, key)
	_, _, errs["Last"] = f.st.Last(ctx, ns, key)
	_, _, errs["LastID"] = f.st.LastID(ctx, ns, key)
	_, _, errs["Closest"] = f.st.Closest(ctx, ns, key, 1)
	_, _, _, _, errs["ClosestLast"] = is.ClosestLast(ctx, f.st, ns, key, 1)
	_, errs["DropPrefix"] = f.st.DropPrefix(ctx, ns, key, 1)
	errs["Delete"] = f.st.Delete(ctx, ns, key)
	// The batch forms, of one key: the call's error, or (the per-key fallback) its one part's.
	reqs := []is.KeyID{{Key: key, ID: 1}}
	reads, err := is.ClosestLastMany(ctx, f.st, ns, reqs)
	errs["ClosestLastMany"] = batchErr(err, len(reads), func(i int) error { return reads[i].Err })
	drops, err := is.DropPrefixMany(ctx, f.st, ns, reqs)
	errs["DropPrefixMany"] = batchErr(err, len(drops), func(i int) error { return drops[i].Err })
	appended, err := is.AppendKeys(ctx, f.st, ns, []is.KeyEntries{{Key: key, Entries: entries(key, 103)}})
	errs["AppendKeys"] = batchErr(err, len(appended), func(i int) error { return appended[i] })
	_, _, errs["Scan"] = f.st.Scan(ctx, ns, prefix, 0, 10)
	_, errs["ScanStable"] = f.st.ScanStable(ctx, ns, is.PrefixRange(prefix), is.Resume{}, 10)
	return errs
}

// batchErr is what a batch call of one key returned: the call's error, else its part's.
func batchErr(err error, results int, partErr func(i int) error) error {
	switch {
	case err != nil:
		return err
	case results != 1:
		return fmt.Errorf("a batch of one key returned %d results", results)
	}
	return partErr(0)
}

// requireInvalidEverywhere checks every operation rejects the bad namespace or key.
func (f *fixture) requireInvalidEverywhere(ns, key, prefix string) {
	f.t.Helper()
	for name, err := range f.callEverything(ns, key, prefix) {
		if (name == "Scan" || name == "ScanStable") && is.ValidateNamespace(ns) == nil {
			continue // a bad key does not concern a scan
		}
		requireIs(f.t, err, is.ErrInvalidArgument, name+" with namespace "+ns+" key "+key)
	}
}
