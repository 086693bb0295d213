package multisqlite

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
)

// BenchmarkGateAndArchive_ColdFiles times what a sweep pass asks of 500 live agents' files when the
// pool holds fewer files than the pass touches (MaxOpenFiles 64, so each file is opened again on every
// visit): a ScanStable pass, each key's last id for the quiet gate (from the page when it carries
// them, else LastID), then the archive's batched read of all of them in batches of 128. Nothing is
// dropped, so every loop sees the same files. opens/pass is how many files a pass opens.
func BenchmarkGateAndArchive_ColdFiles(b *testing.B) {
	for _, cached := range []bool{false, true} {
		b.Run(fmt.Sprintf("schemacache=%v", cached), func(b *testing.B) { benchGateAndArchive(b, cached) })
	}
}

func benchGateAndArchive(b *testing.B, cached bool) {
	const live, batch = 500, 128
	ctx := b.Context()
	st := open(b, b.TempDir(), Options{MaxOpenFiles: 64})
	st.pool.uncached = !cached
	var keys []string
	for i := range live {
		keys = append(keys, agentKey(fmt.Sprintf("c:live-%05d", i)))
	}
	parallel(b, keys, func(k string) error { return st.Append(ctx, testNS, k, 1, []byte("entry")) })
	r := is.BucketsRange(0, is.Buckets)
	pass := func() {
		var found []string
		for from := (is.Resume{}); ; {
			page, err := st.ScanStable(ctx, testNS, r, from, batch)
			if err != nil {
				b.Fatal(err)
			}
			for i, k := range page.Keys {
				if page.LastIDs != nil && page.LastIDs[i] == 1 {
					continue
				}
				if id, ok, err := st.LastID(ctx, testNS, k); err != nil || !ok || id != 1 {
					b.Fatalf("LastID(%q): %d, %v, %v", k, id, ok, err)
				}
			}
			found = append(found, page.Keys...)
			if page.Done {
				break
			}
			from = page.Next
		}
		for len(found) > 0 {
			n := min(batch, len(found))
			reqs := make([]is.KeyID, n)
			for i, k := range found[:n] {
				reqs[i] = is.KeyID{Key: k, ID: 1}
			}
			res, err := is.ClosestLastMany(ctx, st, testNS, reqs)
			if err != nil {
				b.Fatal(err)
			}
			for i, x := range res {
				if x.Err != nil || !x.Found || x.Last != 1 {
					b.Fatalf("ClosestLastMany %q: %+v", reqs[i].Key, x)
				}
			}
			found = found[n:]
		}
	}
	pass()
	start, checks, cpu := st.Stats(), st.pool.schemaChecks.Load(), cpuTime(b)
	for b.Loop() {
		pass()
	}
	end := st.Stats()
	b.ReportMetric(float64(end.FilesOpened-start.FilesOpened)/float64(b.N), "opens/pass")
	b.ReportMetric(float64(st.pool.schemaChecks.Load()-checks)/float64(b.N), "checks/pass")
	b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(b.N)/1000, "cpu-ms/pass")
}

// cpuTime is the process's CPU time so far (user and system): on a machine shared with other work, a
// steadier measure of a loop's cost than its wall time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReopen times one LastID that must open its file (two files, a pool of one), with and
// without the schema-check cache: what an open costs, and the part of it the cache saves.
func BenchmarkReopen(b *testing.B) {
	for _, cached := range []bool{false, true} {
		b.Run(fmt.Sprintf("schemacache=%v", cached), func(b *testing.B) {
			ctx := b.Context()
			st := open(b, b.TempDir(), Options{MaxOpenFiles: 1})
			st.pool.uncached = !cached
			keys := []string{agentKey("c:a"), agentKey("c:b")}
			for _, k := range keys {
				if err := st.Append(ctx, testNS, k, 1, []byte("entry")); err != nil {
					b.Fatal(err)
				}
			}
			i := 0
			cpu := cpuTime(b)
			for b.Loop() {
				if _, ok, err := st.LastID(ctx, testNS, keys[i%2]); err != nil || !ok {
					b.Fatal(ok, err)
				}
				i++
			}
			b.ReportMetric(float64((cpuTime(b)-cpu).Nanoseconds())/float64(b.N)/1000, "cpu-µs/op")
		})
	}
}
