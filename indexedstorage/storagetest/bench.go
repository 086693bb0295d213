package storagetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
)

// BenchScanKeys is how many keys the scan benchmarks walk unless the harness says otherwise.
const BenchScanKeys = 100_000

// BenchPageSize is the page of the scan benchmarks: the sweeper's default page_size.
const BenchPageSize = 128

const benchNS = "bench/ns"

// Bench runs the backend benchmarks: Append, AppendMany of 1,000, Read of 1,000, DropPrefix of 1,000,
// and a full ScanStable pass beside the harness's RawWalk over the same keys. Paired alternates the two
// walks inside each iteration and reports their ratio, so that noise on a shared machine hits both.
func Bench(b *testing.B, h Harness, scanKeys int) {
	if scanKeys <= 0 {
		scanKeys = BenchScanKeys
	}
	payload := make([]byte, 100)
	b.Run("Append", func(b *testing.B) {
		st, ctx := h.New(b), b.Context()
		b.ReportAllocs()
		id := uint64(0)
		for b.Loop() {
			id++
			if err := st.Append(ctx, benchNS, "agent:append", id, payload); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendMany1000", func(b *testing.B) {
		st, ctx := h.New(b), b.Context()
		b.ReportAllocs()
		next := uint64(1)
		for b.Loop() {
			if err := st.AppendMany(ctx, benchNS, "agent:many", batch(next, 1000, payload)); err != nil {
				b.Fatal(err)
			}
			next += 1000
		}
		b.ReportMetric(float64(1000*b.N)/b.Elapsed().Seconds(), "entries/s")
	})
	b.Run("Read1000", func(b *testing.B) {
		st, ctx := h.New(b), b.Context()
		if err := st.AppendMany(ctx, benchNS, "agent:read", batch(1, 1000, payload)); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			entries, err := st.Read(ctx, benchNS, "agent:read", 1, 1000)
			if err != nil || len(entries) != 1000 {
				b.Fatalf("Read: %d entries, %v", len(entries), err)
			}
		}
		b.ReportMetric(float64(1000*b.N)/b.Elapsed().Seconds(), "entries/s")
	})
	b.Run("DropPrefix1000", func(b *testing.B) {
		st, ctx := h.New(b), b.Context()
		next := uint64(1)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			if err := st.AppendMany(ctx, benchNS, "agent:drop", batch(next, 1000, payload)); err != nil {
				b.Fatal(err)
			}
			next += 1000
			b.StartTimer()
			if n, err := st.DropPrefix(ctx, benchNS, "agent:drop", next-1); err != nil || n != 1000 {
				b.Fatalf("DropPrefix: %d, %v", n, err)
			}
		}
		b.ReportMetric(float64(1000*b.N)/b.Elapsed().Seconds(), "entries/s")
	})
	// Last fetches the value, LastID only the id: on an index of 1 MiB chunks, as an archive layer holds,
	// the two alternate inside each iteration and their ratio is reported.
	b.Run("LastVsLastID1MiB", func(b *testing.B) {
		st, ctx := h.New(b), b.Context()
		chunk := make([]byte, 1<<20)
		for i := range chunk {
			chunk[i] = byte(i * 7)
		}
		if err := st.AppendMany(ctx, benchNS, "agent:chunks", []is.Entry{{ID: 4096, Value: chunk}, {ID: 8192, Value: chunk}}); err != nil {
			b.Fatal(err)
		}
		var last, lastID time.Duration
		for b.Loop() {
			start := time.Now()
			if e, ok, err := st.Last(ctx, benchNS, "agent:chunks"); err != nil || !ok || e.ID != 8192 {
				b.Fatalf("Last: %d %v %v", e.ID, ok, err)
			}
			mid := time.Now()
			if id, ok, err := st.LastID(ctx, benchNS, "agent:chunks"); err != nil || !ok || id != 8192 {
				b.Fatalf("LastID: %d %v %v", id, ok, err)
			}
			last, lastID = last+mid.Sub(start), lastID+time.Since(mid)
		}
		b.ReportMetric(float64(last.Microseconds())/float64(b.N), "last-µs/op")
		b.ReportMetric(float64(lastID.Microseconds())/float64(b.N), "lastid-µs/op")
		b.ReportMetric(float64(last)/float64(lastID), "last/lastid")
	})
	b.Run(fmt.Sprintf("Scan%dk", scanKeys/1000), func(b *testing.B) {
		st, ctx := h.New(b), b.Context()
		if err := Populate(ctx, st, benchNS, scanKeys); err != nil {
			b.Fatal(err)
		}
		// One untimed walk first: freshly written rows are cold (a database sets hint bits, a cache
		// fills), and whichever row ran first would pay for it.
		if _, err := WalkAll(ctx, st, benchNS, BenchPageSize); err != nil {
			b.Fatal(err)
		}
		walk := func(b *testing.B) {
			if n, err := WalkAll(ctx, st, benchNS, BenchPageSize); err != nil || n < scanKeys {
				b.Fatalf("ScanStable walk: %d keys, %v", n, err)
			}
		}
		raw := func(b *testing.B) {
			if n, err := h.RawWalk(ctx, st, benchNS, BenchPageSize); err != nil || n < scanKeys {
				b.Fatalf("raw walk: %d keys, %v", n, err)
			}
		}
		b.Run("ScanStable", func(b *testing.B) {
			for b.Loop() {
				walk(b)
			}
			b.ReportMetric(float64(scanKeys*b.N)/b.Elapsed().Seconds(), "keys/s")
		})
		if h.RawWalk == nil {
			return
		}
		b.Run("Raw", func(b *testing.B) {
			for b.Loop() {
				raw(b)
			}
			b.ReportMetric(float64(scanKeys*b.N)/b.Elapsed().Seconds(), "keys/s")
		})
		b.Run("Paired", func(b *testing.B) {
			var stable, native time.Duration
			timed := func(fn func(*testing.B)) time.Duration {
				start := time.Now()
				fn(b)
				return time.Since(start)
			}
			for i := 0; b.Loop(); i++ {
				// Alternate which walk goes first, so neither always inherits the other's warm cache.
				if i%2 == 0 {
					stable += timed(walk)
					native += timed(raw)
				} else {
					native += timed(raw)
					stable += timed(walk)
				}
			}
			// keys/s of ScanStable over keys/s of the raw loop: 1.0 is parity, the target is ≥ 0.8.
			b.ReportMetric(native.Seconds()/stable.Seconds(), "stable/raw")
		})
	})
}

// BenchDepthKeys is how many keys each of BenchWalkDepth's two namespaces holds unless the harness
// says otherwise; BenchDepthEntries is how many entries a key of the deep one holds, as a key of the
// primary layer holds one entry an oplog entry.
const (
	BenchDepthKeys    = 10_000
	BenchDepthEntries = 100
)

// BenchWalkDepth walks keys indexes of one entry each and keys indexes of BenchDepthEntries entries
// each, two namespaces of one store, with full walks in pages of BenchPageSize, by ScanStable and by
// ScanDeep (is.ScanDeep: ScanStable again where the backend has no ScanDeep), and reports the cost of
// a key of each namespace by each: a walk whose cost is per key, not per entry, costs the same on both.
// The walks alternate inside each iteration, as Bench's Paired does, so that noise on a shared machine
// hits them all. settle, when set, runs once the keys are written and before any walk:
// a harness brings its engine to the state a long-running store is in (PostgreSQL's VACUUM, which a
// test server with autovacuum off never runs).
func BenchWalkDepth(b *testing.B, h Harness, keys int, settle func(ctx context.Context, st is.Storage) error) {
	if keys <= 0 {
		keys = BenchDepthKeys
	}
	st, ctx := h.New(b), b.Context()
	payload := make([]byte, 100)
	const flatNS, deepNS = "bench/flat", "bench/deep"
	if err := populateDepth(ctx, st, flatNS, keys, 1, payload); err != nil {
		b.Fatal(err)
	}
	if err := populateDepth(ctx, st, deepNS, keys, BenchDepthEntries, payload); err != nil {
		b.Fatal(err)
	}
	if settle != nil {
		if err := settle(ctx, st); err != nil {
			b.Fatal(err)
		}
	}
	// ScanStable and ScanDeep (is.ScanDeep: ScanStable where the backend has no ScanDeep), each over
	// both namespaces.
	scans := []func(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error){
		st.ScanStable,
		func(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
			return is.ScanDeep(ctx, st, ns, r, from, count)
		},
	}
	walk := func(scan int, ns string) time.Duration {
		start := time.Now()
		if n, err := walkWith(ctx, scans[scan], ns, BenchPageSize); err != nil || n < keys {
			b.Fatalf("walk of %s: %d keys, %v", ns, n, err)
		}
		return time.Since(start)
	}
	// One untimed walk of each first: freshly written rows are cold.
	for scan := range scans {
		walk(scan, flatNS)
		walk(scan, deepNS)
	}
	var flat, deep [2]time.Duration
	for i := 0; b.Loop(); i++ {
		for scan := range scans {
			if i%2 == 0 {
				flat[scan] += walk(scan, flatNS)
				deep[scan] += walk(scan, deepNS)
			} else {
				deep[scan] += walk(scan, deepNS)
				flat[scan] += walk(scan, flatNS)
			}
		}
	}
	perKey := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(keys*b.N) }
	for scan, name := range []string{"stable", "deep"} {
		b.ReportMetric(perKey(flat[scan]), name+"-flat-ns/key")
		b.ReportMetric(perKey(deep[scan]), fmt.Sprintf("%s-deep%d-ns/key", name, BenchDepthEntries))
	}
}

// populateDepth writes n indexes of entries entries each to ns with 8 writers, one AppendMany an index.
func populateDepth(ctx context.Context, st is.Storage, ns string, n, entries int, payload []byte) error {
	const writers = 8
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n && errs[w] == nil; i += writers {
				errs[w] = st.AppendMany(ctx, ns, BenchKey(i), batch(1, entries, payload))
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func batch(first uint64, n int, payload []byte) []is.Entry {
	out := make([]is.Entry, n)
	for i := range out {
		out[i] = is.Entry{ID: first + uint64(i), Value: payload}
	}
	return out
}

// BenchKey is the key Populate writes for i.
func BenchKey(i int) string { return fmt.Sprintf("component:agent-%08d", i) }

// Populate writes n one-entry indexes to ns with 8 writers.
func Populate(ctx context.Context, st is.Storage, ns string, n int) error {
	return populateDepth(ctx, st, ns, n, 1, []byte("entry"))
}

// WalkAll runs one full ScanStable walk of ns and returns how many keys it was handed (a backend
// that may repeat keys can return more than there are). A page that passes an index over as
// unreadable fails the walk: a timing of a walk that skipped reads compares with nothing.
func WalkAll(ctx context.Context, st is.Storage, ns string, pageSize int) (int, error) {
	return walkWith(ctx, st.ScanStable, ns, pageSize)
}

// walkWith is WalkAll with scan for ScanStable.
func walkWith(ctx context.Context, scan func(context.Context, string, is.KeyRange, is.Resume, int) (is.Page, error), ns string, pageSize int) (int, error) {
	n := 0
	var from is.Resume
	for {
		page, err := scan(ctx, ns, is.AllKeys, from, pageSize)
		if err != nil {
			return n, err
		}
		if len(page.Unreadable) > 0 {
			u := page.Unreadable[0]
			return n, fmt.Errorf("ScanStable passed over %d unreadable indexes, first %s: %w", len(page.Unreadable), u.Where, u.Err)
		}
		n += len(page.Keys)
		if page.Done {
			return n, nil
		}
		from = page.Next
	}
}
