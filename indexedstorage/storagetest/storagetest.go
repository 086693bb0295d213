// Package storagetest is the conformance suite every indexedstorage backend runs, and the benchmarks
// that compare a backend's ScanStable with its engine's own loop. A backend's _test.go is only a
// harness:
//
//	func TestConformance(t *testing.T) {
//		storagetest.Run(t, storagetest.Harness{New: func(tb testing.TB) indexedstorage.Storage { ... }})
//	}
//
// strata's own backends take theirs from test/backendtest (Backend.Harness), the one place each
// engine is opened for tests.
//
// The suite is meant to be complete enough that a backend needs no other test for the contract:
// reopening, cancellation and a refused connection included. Stricter checks run only where the
// backend declares them through indexedstorage.Capabilities, or where its harness supplies what they
// need (Reopen, Unreachable, Poison).
package storagetest

import (
	"context"
	"errors"
	"slices"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
)

// Harness hands the suite fresh storage.
type Harness struct {
	// New returns an empty Storage, isolated from every other Storage New returns (its own schema,
	// file, key prefix), and registers its cleanup with tb.Cleanup. The suite may Close it itself;
	// Close is idempotent by contract.
	New func(tb testing.TB) is.Storage

	// ModelSinglePages is how many randomized single-page ScanStable cases the model check runs
	// (default 2000); ModelWalks how many randomized multi-page walks with interleaved inserts and
	// deletes (default 500). The memory backend runs 200,000 and 20,000.
	ModelSinglePages int
	ModelWalks       int

	// LinearizableHistories is how many random concurrent histories the linearizability check runs
	// (default 200).
	LinearizableHistories int

	// RaceRounds is how many rounds each racing check runs (default 30 to 60, by check). A round on an
	// in-process backend costs microseconds, and a lock bug there shows in a small share of rounds, so
	// such a backend runs thousands: enough that the bug fails every run.
	RaceRounds int

	// RawWalk, used by Bench only, walks every key of ns the way the engine would without strata
	// (keyset SELECT, SCAN, a sorted slice), pageSize keys a call, and returns how many keys it saw.
	// st is the Storage New returned, for the harness to reach its engine. nil leaves the raw row out.
	RawWalk func(ctx context.Context, st is.Storage, ns string, pageSize int) (int, error)

	// Poison, if set, makes the existing index (ns, key) of st (the Storage New returned) unreadable
	// the way a foreign writer or a disk fault would, in the engine's own terms: a file overwritten
	// with garbage, a row the schema's types do not allow, a Redis value of another type. The index
	// must stay where a walk looks (a file still listed, a key still scanned). nil skips the checks
	// that a poisoned index cannot stop a walk; a backend whose engine refuses every such value
	// leaves it nil.
	Poison func(tb testing.TB, st is.Storage, ns, key string)

	// Reopen returns a second handle on st (a Storage New returned), opened the way a restarted
	// process opens it: it must refer to the same storage (the same file, directory, schema or key
	// prefix), and st stays usable beside it; it registers its cleanup with tb.Cleanup. Reopen may be
	// called after st was closed. nil skips the checks that storage outlives its handle: a backend
	// whose storage is its process (memory) has no second handle to give, and one that hands back st
	// itself would prove nothing.
	Reopen func(tb testing.TB, st is.Storage) is.Storage

	// Unreachable opens the backend pointed at a loopback port nothing listens on. The open may fail,
	// and then its error must match ErrTransient; or it may hand back a Storage whose every operation
	// must then fail with an error matching ErrTransient. It registers any cleanup with tb.Cleanup. nil
	// skips the check: an in-process engine (memory, SQLite files) has no server to be refused by.
	Unreachable func(tb testing.TB) (is.Storage, error)
}

// Run runs the whole suite against the harness.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("storagetest: Harness.New is nil")
	}
	t.Run("Contract", func(t *testing.T) { testContract(t, h) })
	t.Run("Keys", func(t *testing.T) { testKeys(t, h) })
	t.Run("ScanStable", func(t *testing.T) { testScanStable(t, h) })
	t.Run("Model", func(t *testing.T) { testModel(t, h) })
	t.Run("Concurrency", func(t *testing.T) { testConcurrency(t, h) })
	t.Run("Isolation", func(t *testing.T) { testIsolation(t, h) })
	t.Run("Batch", func(t *testing.T) { testBatch(t, h) })
	t.Run("Linearizable", func(t *testing.T) { testLinearizable(t, h) })
	t.Run("Poisoned", func(t *testing.T) { testPoisoned(t, h) })
	t.Run("ErrorShape", func(t *testing.T) { testErrorShape(t, h) })
	t.Run("ScanDeep", func(t *testing.T) { testScanDeep(t, h) })
	t.Run("Reopen", func(t *testing.T) { testReopen(t, h) })
	t.Run("Cancel", func(t *testing.T) { testCancel(t, h) })
	t.Run("Unreachable", func(t *testing.T) { testUnreachable(t, h) })
}

// testScanDeep runs the ScanStable checks, the keys' and the model's on ScanDeep, where the backend is
// an is.DeepScanner: ScanDeep has ScanStable's contract exactly.
func testScanDeep(t *testing.T, h Harness) {
	if _, ok := h.New(t).(is.DeepScanner); !ok {
		t.Skip("the backend has no ScanDeep (is.DeepScanner)")
	}
	deep := h
	deep.New = func(tb testing.TB) is.Storage { return deepAsStable{h.New(tb)} }
	deep.Poison = nil // a harness's poison reaches its own Storage type
	t.Run("Keys", func(t *testing.T) { testKeys(t, deep) })
	t.Run("ScanStable", func(t *testing.T) { testScanStable(t, deep) })
	t.Run("Model", func(t *testing.T) { testModel(t, deep) })
}

// deepAsStable is a DeepScanner whose ScanStable is its ScanDeep.
type deepAsStable struct{ is.Storage }

func (d deepAsStable) ScanStable(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	return d.Storage.(is.DeepScanner).ScanDeep(ctx, ns, r, from, count)
}

func (d deepAsStable) Capabilities() is.Capabilities { return is.CapabilitiesOf(d.Storage) }

// fixture is one test's storage and what the helpers need with it.
type fixture struct {
	t    *testing.T
	st   is.Storage
	caps is.Capabilities
	ctx  context.Context
}

func newFixture(t *testing.T, h Harness) *fixture {
	t.Helper()
	st := h.New(t)
	return &fixture{t: t, st: st, caps: is.CapabilitiesOf(st), ctx: t.Context()}
}

// append writes one entry per id to (ns, key), failing the test on any error.
func (f *fixture) append(ns, key string, ids ...uint64) {
	f.t.Helper()
	for _, id := range ids {
		if err := f.st.Append(f.ctx, ns, key, id, value(key, id)); err != nil {
			f.t.Fatalf("Append(%q, %q, %d): %v", ns, key, id, err)
		}
	}
}

// ids returns the ids of (ns, key), checking that each value is the one append wrote.
func (f *fixture) ids(ns, key string) []uint64 {
	f.t.Helper()
	entries, err := f.st.Read(f.ctx, ns, key, 0, ^uint64(0))
	if err != nil {
		f.t.Fatalf("Read(%q, %q): %v", ns, key, err)
	}
	return entryIDs(f.t, key, entries)
}

func (f *fixture) exists(ns, key string) bool {
	f.t.Helper()
	ok, err := f.st.Exists(f.ctx, ns, key)
	if err != nil {
		f.t.Fatalf("Exists(%q, %q): %v", ns, key, err)
	}
	return ok
}

func (f *fixture) length(ns, key string) uint64 {
	f.t.Helper()
	n, err := f.st.Length(f.ctx, ns, key)
	if err != nil {
		f.t.Fatalf("Length(%q, %q): %v", ns, key, err)
	}
	return n
}

func (f *fixture) dropPrefix(ns, key string, upTo uint64) uint64 {
	f.t.Helper()
	n, err := f.st.DropPrefix(f.ctx, ns, key, upTo)
	if err != nil {
		f.t.Fatalf("DropPrefix(%q, %q, %d): %v", ns, key, upTo, err)
	}
	return n
}

func (f *fixture) delete(ns, key string) {
	f.t.Helper()
	if err := f.st.Delete(f.ctx, ns, key); err != nil {
		f.t.Fatalf("Delete(%q, %q): %v", ns, key, err)
	}
}

// walk runs a whole ScanStable walk with pages of count keys, calling between(page) after each page
// (nil for none), and returns every key handed back, in order, duplicates kept. It checks the page
// rules every backend keeps and, where declared, the ordered ones. Nothing a walk of walk's callers
// meets was made unreadable, so a page that lists an index as Unreadable fails the test.
func (f *fixture) walk(ns, prefix string, count int, between func(page []string)) []string {
	f.t.Helper()
	return f.walkRange(ns, is.PrefixRange(prefix), count, between)
}

// walkRange is walk over a key range.
func (f *fixture) walkRange(ns string, r is.KeyRange, count int, between func(page []string)) []string {
	f.t.Helper()
	return f.walkPages(f.st, ns, r, count, func(page is.Page) {
		if len(page.Unreadable) > 0 {
			u := page.Unreadable[0]
			f.t.Fatalf("ScanStable(%q, %v) passed over %d healthy indexes as unreadable, first key %q at %q: %v",
				ns, r, len(page.Unreadable), u.Key, u.Where, u.Err)
		}
		if between != nil {
			between(page.Keys)
		}
	})
}

// maxWalkPages bounds every walk the suite makes, so that a backend whose Next never reaches Done
// fails the test instead of hanging it. Redis's SCAN pages cover the whole database, whatever the
// prefix, so the bound leaves room for a shared server holding many other keys.
const maxWalkPages = 100_000

// walkPages walks st as walk does, calling onPage after each page has been checked.
func (f *fixture) walkPages(st is.Storage, ns string, r is.KeyRange, count int, onPage func(page is.Page)) []string {
	f.t.Helper()
	var all []string
	var from is.Resume
	for pages := 0; ; pages++ {
		if pages > maxWalkPages {
			f.t.Fatalf("ScanStable(%q, %v) did not finish after %d pages", ns, r, pages)
		}
		page, err := st.ScanStable(f.ctx, ns, r, from, count)
		if err != nil {
			f.t.Fatalf("ScanStable(%q, %v, %v, %d): %v", ns, r, from, count, err)
		}
		f.checkPage(r, count, all, page)
		all = append(all, page.Keys...)
		onPage(page)
		if page.Done {
			return all
		}
		from = page.Next
	}
}

// checkPage checks one page against the rules and against the keys earlier pages returned.
func (f *fixture) checkPage(r is.KeyRange, count int, before []string, page is.Page) {
	f.t.Helper()
	for _, k := range page.Keys {
		if k < r.Start || (r.End != "" && k >= r.End) {
			f.t.Fatalf("ScanStable of %v returned %q", r, k)
		}
	}
	if page.LastIDs != nil && len(page.LastIDs) != len(page.Keys) {
		f.t.Fatalf("a page of %d keys carries %d last ids", len(page.Keys), len(page.LastIDs))
	}
	if page.Stamps != nil && len(page.Stamps) != len(page.Keys) {
		f.t.Fatalf("a page of %d keys carries %d stamps", len(page.Keys), len(page.Stamps))
	}
	if page.Done && !page.Next.IsStart() {
		f.t.Fatalf("a Done page must carry the zero Resume, got %v", page.Next)
	}
	if !page.Done && page.Next.IsStart() {
		f.t.Fatalf("a page that is not Done carries the zero Resume: the walk would restart")
	}
	if f.caps.OrderedScan {
		if len(page.Keys) > count {
			f.t.Fatalf("ordered backend returned %d keys for count %d", len(page.Keys), count)
		}
		last := ""
		if len(before) > 0 {
			last = before[len(before)-1]
		}
		for i, k := range page.Keys {
			if (i > 0 || len(before) > 0) && k <= last {
				f.t.Fatalf("ordered backend returned %q after %q", k, last)
			}
			last = k
		}
	}
	if f.caps.UniqueScan {
		seen := make(map[string]bool, len(before))
		for _, k := range before {
			seen[k] = true
		}
		for _, k := range page.Keys {
			if seen[k] {
				f.t.Fatalf("backend declaring unique scans returned %q twice in one walk", k)
			}
			seen[k] = true
		}
	}
}

// keySet is a walk's result with duplicates removed (Redis may repeat keys), sorted.
func keySet(keys []string) []string {
	out := slices.Clone(keys)
	slices.Sort(out)
	return slices.Compact(out)
}

func value(key string, id uint64) []byte {
	return []byte(key + "#" + string(rune('a'+id%26)) + "\x00\xff")
}

func entryIDs(t *testing.T, key string, entries []is.Entry) []uint64 {
	t.Helper()
	ids := make([]uint64, len(entries))
	for i, e := range entries {
		if want := value(key, e.ID); string(e.Value) != string(want) {
			t.Fatalf("key %q id %d: value %q, want %q", key, e.ID, e.Value, want)
		}
		ids[i] = e.ID
	}
	return ids
}

func span(from, to uint64) []uint64 {
	var ids []uint64
	for id := from; id <= to; id++ {
		ids = append(ids, id)
	}
	return ids
}

func requireIs(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one matching %v", what, err, target)
	}
}

func requireIDs(t *testing.T, got, want []uint64, what string) {
	t.Helper()
	if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("%s: ids %v, want %v", what, got, want)
	}
}
