package storagetest

import (
	"context"
	"errors"
	"slices"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
)

// poisonedKeys is how many indexes the poisoned checks write; the one in the middle is poisoned, so
// that pages before, around and after it are all walked.
const poisonedKeys = 20

// testPoisoned checks that one index whose own storage is broken (Harness.Poison) cannot stop a walk
// or spoil its neighbours: the sweep's "no key can stall a route" rests on it.
func testPoisoned(t *testing.T, h Harness) {
	if h.Poison == nil {
		t.Skip("Harness.Poison is nil: this backend cannot make one index unreadable, so the checks that a poisoned index cannot stop a walk do not run")
	}
	// setup writes the indexes and poisons one; every other index holds ids 1 and 2.
	setup := func(t *testing.T) (f *fixture, healthy []string, poisoned string) {
		f = newFixture(t, h)
		keys := numberedKeys("agent:", poisonedKeys)
		for _, k := range keys {
			f.append(ns, k, 1, 2)
		}
		f.append("test/elsewhere", "agent:9999", 1)
		poisoned = keys[len(keys)/2]
		h.Poison(t, f.st, ns, poisoned)
		return f, slices.Delete(slices.Clone(keys), len(keys)/2, len(keys)/2+1), poisoned
	}

	t.Run("WalkHandsBackEveryKey", func(t *testing.T) {
		f, healthy, poisoned := setup(t)
		// The wrappers an application stacks on a backend must hand Unreadable on as they got it.
		wrapped := is.Limit(is.Instrument(is.Intercept(f.st, func(ctx context.Context, _ is.Operation, do func(context.Context) error) error {
			return do(ctx)
		}), nil, "poisoned"), 2)
		for _, via := range []struct {
			name string
			st   is.Storage
		}{{"bare", f.st}, {"wrapped", wrapped}} {
			for _, count := range []int{1, 3, 100} {
				f.requirePoisonedWalk(via.st, via.name, count, healthy, poisoned)
			}
		}
	})

	t.Run("ReadsAnswerOrFail", func(t *testing.T) {
		f, healthy, poisoned := setup(t)
		f.readPoisoned(poisoned)
		f.requireHealthy(healthy)
	})

	// A batch over the poisoned index and its neighbours (DESIGN §13): the poisoned key's part answers
	// or fails on its own, naming that key; every other key's part is read or dropped as if the
	// poisoned one were not there, those after it included.
	t.Run("BatchesFailThePoisonedKeyOnly", func(t *testing.T) {
		f, healthy, poisoned := setup(t)
		keys := append(slices.Clone(healthy[:len(healthy)/2]), poisoned)
		keys = append(keys, healthy[len(healthy)/2:]...)
		reqs := make([]is.KeyID, len(keys))
		for i, k := range keys {
			reqs[i] = is.KeyID{Key: k, ID: 0}
		}
		var reads []is.ClosestLastResult
		var err error
		f.noPanic("ClosestLastMany", poisoned, func() { reads, err = is.ClosestLastMany(f.ctx, f.st, ns, reqs) })
		if err != nil || len(reads) != len(reqs) {
			f.t.Fatalf("ClosestLastMany over poisoned %q: %d results for %d keys, %v; a poisoned key fails its own part only",
				poisoned, len(reads), len(reqs), err)
		}
		for i, r := range reads {
			if keys[i] == poisoned {
				f.requireReadErrorKind("ClosestLastMany", poisoned, r.Err)
				continue
			}
			if r.Err != nil || !r.Found || r.Entry.ID != 1 || !r.Exists || r.Last != 2 {
				f.t.Fatalf("ClosestLastMany over poisoned %q: healthy %q (part %d of %d) read entry %d found %v, last %d exists %v, %v; want entry 1, last 2",
					poisoned, keys[i], i, len(keys), r.Entry.ID, r.Found, r.Last, r.Exists, r.Err)
			}
		}
		for i := range reqs {
			reqs[i].ID = 1
		}
		var drops []is.DropResult
		f.noPanic("DropPrefixMany", poisoned, func() { drops, err = is.DropPrefixMany(f.ctx, f.st, ns, reqs) })
		if err != nil || len(drops) != len(reqs) {
			f.t.Fatalf("DropPrefixMany over poisoned %q: %d results for %d keys, %v; a poisoned key fails its own part only",
				poisoned, len(drops), len(reqs), err)
		}
		for i, d := range drops {
			if keys[i] == poisoned {
				f.requireWriteErrorKind("DropPrefixMany", poisoned, d.Err)
				continue
			}
			if d.Err != nil || d.Dropped != 1 {
				f.t.Fatalf("DropPrefixMany over poisoned %q: healthy %q (part %d of %d) dropped %d, %v; want 1",
					poisoned, keys[i], i, len(keys), d.Dropped, d.Err)
			}
			requireIDs(f.t, f.ids(ns, keys[i]), []uint64{2}, "healthy "+keys[i]+" after a batch drop beside a poisoned index")
		}
		appends := make([]is.KeyEntries, len(keys))
		for i, k := range keys {
			appends[i] = is.KeyEntries{Key: k, Entries: entries(k, 3, 4)}
		}
		var errs []error
		f.noPanic("AppendKeys", poisoned, func() { errs, err = is.AppendKeys(f.ctx, f.st, ns, appends) })
		if err != nil || len(errs) != len(appends) {
			f.t.Fatalf("AppendKeys over poisoned %q: %d results for %d keys, %v; a poisoned key fails its own part only",
				poisoned, len(errs), len(appends), err)
		}
		for i, e := range errs {
			if keys[i] == poisoned {
				f.requireWriteErrorKind("AppendKeys", poisoned, e)
				continue
			}
			if e != nil {
				f.t.Fatalf("AppendKeys over poisoned %q: healthy %q (part %d of %d): %v", poisoned, keys[i], i, len(keys), e)
			}
			requireIDs(f.t, f.ids(ns, keys[i]), []uint64{2, 3, 4}, "healthy "+keys[i]+" after a batch append beside a poisoned index")
		}
		f.readPoisoned(poisoned)
	})

	t.Run("WritesAnswerOrFail", func(t *testing.T) {
		f, healthy, poisoned := setup(t)
		var err error
		f.noPanic("Append", poisoned, func() { err = f.st.Append(f.ctx, ns, poisoned, 3, value(poisoned, 3)) })
		f.requireWriteErrorKind("Append", poisoned, err)
		f.noPanic("AppendMany", poisoned, func() { err = f.st.AppendMany(f.ctx, ns, poisoned, entries(poisoned, 4, 5)) })
		f.requireWriteErrorKind("AppendMany", poisoned, err)
		f.noPanic("DropPrefix", poisoned, func() { _, err = f.st.DropPrefix(f.ctx, ns, poisoned, 1) })
		f.requireWriteErrorKind("DropPrefix", poisoned, err)
		f.readPoisoned(poisoned)
		f.requireHealthy(healthy)
		f.requirePoisonedWalk(f.st, "bare", 3, healthy, poisoned)

		f.noPanic("Delete", poisoned, func() { err = f.st.Delete(f.ctx, ns, poisoned) })
		f.requireWriteErrorKind("Delete", poisoned, err)
		if err == nil {
			// A Delete that succeeds removed the index, poison and all.
			f.requireGone(ns, poisoned)
		}
		f.requireHealthy(healthy)
	})
}

// requirePoisonedWalk walks the namespace with pages of count keys and checks the contract's promise:
// every healthy key comes back in Keys, and the poisoned one in Keys or in Unreadable.
func (f *fixture) requirePoisonedWalk(st is.Storage, via string, count int, healthy []string, poisoned string) {
	f.t.Helper()
	var unreadable []is.Unreadable
	got := f.walkPages(st, ns, is.AllKeys, count, func(page is.Page) {
		for _, u := range page.Unreadable {
			if u.Where == "" || u.Err == nil {
				f.t.Fatalf("%s walk, pages of %d: Unreadable %+v must say where and why", via, count, u)
			}
			if u.Key != "" && u.Key != poisoned {
				f.t.Fatalf("%s walk, pages of %d: healthy %q listed as unreadable (%s: %v)", via, count, u.Key, u.Where, u.Err)
			}
		}
		unreadable = append(unreadable, page.Unreadable...)
	})
	if missing := difference(healthy, got); len(missing) > 0 {
		f.t.Fatalf("%s walk, pages of %d, with %q poisoned: %d healthy keys never handed back, first %q",
			via, count, poisoned, len(missing), missing[0])
	}
	if extra := difference(keySet(got), append(slices.Clone(healthy), poisoned)); len(extra) > 0 {
		f.t.Fatalf("%s walk, pages of %d: keys never written or of another namespace: %q", via, count, extra)
	}
	inKeys := slices.Contains(got, poisoned)
	if !inKeys && !slices.ContainsFunc(unreadable, func(u is.Unreadable) bool { return u.Key == "" || u.Key == poisoned }) {
		f.t.Fatalf("%s walk, pages of %d: poisoned %q handed back neither in Keys nor in Unreadable", via, count, poisoned)
	}
	if f.caps.UniqueScan {
		// One index poisoned: a walk that visits each index once lists at most that one, and not both
		// ways.
		listed := slices.ContainsFunc(unreadable, func(u is.Unreadable) bool { return u.Key == poisoned })
		if len(unreadable) > 1 || (inKeys && listed) {
			f.t.Fatalf("%s walk, pages of %d: a backend declaring unique scans handed back poisoned %q more than once (in Keys: %v, Unreadable: %+v)",
				via, count, poisoned, inKeys, unreadable)
		}
		if n := len(got) + len(unreadable); n > len(healthy)+1 {
			f.t.Fatalf("%s walk, pages of %d: %d keys and unreadable indexes for %d indexes", via, count, n, len(healthy)+1)
		}
	}
}

// readPoisoned calls every read on the poisoned index: each answers or fails, never panics, and a
// failure does not blame the caller or promise that a retry will mend it.
func (f *fixture) readPoisoned(key string) {
	f.t.Helper()
	var err error
	f.noPanic("Exists", key, func() { _, err = f.st.Exists(f.ctx, ns, key) })
	f.requireReadErrorKind("Exists", key, err)
	f.noPanic("Length", key, func() { _, err = f.st.Length(f.ctx, ns, key) })
	f.requireReadErrorKind("Length", key, err)
	f.noPanic("Read", key, func() { _, err = f.st.Read(f.ctx, ns, key, 0, ^uint64(0)) })
	f.requireReadErrorKind("Read", key, err)
	f.noPanic("First", key, func() { _, _, err = f.st.First(f.ctx, ns, key) })
	f.requireReadErrorKind("First", key, err)
	f.noPanic("Last", key, func() { _, _, err = f.st.Last(f.ctx, ns, key) })
	f.requireReadErrorKind("Last", key, err)
	f.noPanic("LastID", key, func() { _, _, err = f.st.LastID(f.ctx, ns, key) })
	f.requireReadErrorKind("LastID", key, err)
	f.noPanic("Closest", key, func() { _, _, err = f.st.Closest(f.ctx, ns, key, 2) })
	f.requireReadErrorKind("Closest", key, err)
	f.noPanic("ClosestLast", key, func() { _, _, _, _, err = is.ClosestLast(f.ctx, f.st, ns, key, 2) })
	f.requireReadErrorKind("ClosestLast", key, err)
}

// requireHealthy checks the indexes next to the poisoned one read as they were written.
func (f *fixture) requireHealthy(keys []string) {
	f.t.Helper()
	for _, k := range keys {
		requireIDs(f.t, f.ids(ns, k), []uint64{1, 2}, "healthy "+k+" beside a poisoned index")
		if !f.exists(ns, k) || f.length(ns, k) != 2 {
			f.t.Fatalf("healthy %q beside a poisoned index: exists %v, length %d", k, f.exists(ns, k), f.length(ns, k))
		}
		if e, ok, err := f.st.Last(f.ctx, ns, k); err != nil || !ok || e.ID != 2 {
			f.t.Fatalf("healthy %q beside a poisoned index: Last = %d, %v, %v", k, e.ID, ok, err)
		}
	}
	if got := f.ids("test/elsewhere", "agent:9999"); !slices.Equal(got, []uint64{1}) {
		f.t.Fatalf("an index of another namespace beside a poisoned one: ids %v", got)
	}
}

// noPanic runs fn and fails the test, rather than crash the suite, if it panics: a library returns a
// storage error, it never panics on one.
func (f *fixture) noPanic(op, key string, fn func()) {
	f.t.Helper()
	panicked := true
	defer func() {
		if panicked {
			f.t.Fatalf("%s of poisoned %q panicked: %v", op, key, recover())
		}
	}()
	fn()
	panicked = false
}

// requireReadErrorKind allows a read of a poisoned index any answer but an error that says the call was
// wrong, the storage closed, the write conflicting or the failure worth retrying: none is true, and a
// retried read of a poisoned index would spin.
func (f *fixture) requireReadErrorKind(op, key string, err error) {
	f.t.Helper()
	for _, wrong := range []error{is.ErrInvalidArgument, is.ErrClosed, is.ErrConflict, is.ErrTransient} {
		if errors.Is(err, wrong) {
			f.t.Fatalf("%s of poisoned %q: %v, which matches %v", op, key, err, wrong)
		}
	}
	requireNamesIndex(f.t, op, ns, key, err)
}

// requireWriteErrorKind is requireReadErrorKind for writes, which may also conflict.
func (f *fixture) requireWriteErrorKind(op, key string, err error) {
	f.t.Helper()
	for _, wrong := range []error{is.ErrInvalidArgument, is.ErrClosed, is.ErrTransient} {
		if errors.Is(err, wrong) {
			f.t.Fatalf("%s of poisoned %q: %v, which matches %v", op, key, err, wrong)
		}
	}
	requireNamesIndex(f.t, op, ns, key, err)
}
