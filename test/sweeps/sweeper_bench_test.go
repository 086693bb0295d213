package sweeps_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/fsblob"
	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
)

const benchAgents = 10_000

// BenchmarkSweepSteadyState: 10,000 resident agents in the layer, one tick over all of them. The
// storage calls must be exactly the page reads, ceil(10,000 / page_size), with no per-agent read;
// reported as ns per scanned key.
func BenchmarkSweepSteadyState(b *testing.B) {
	for _, be := range backendtest.All() {
		b.Run(be.Name, func(b *testing.B) {
			cfg := oplogtest.SweepConfig()
			cfg.MaxScannedPerTick = benchAgents
			var calls oplogtest.CallCounter
			st := be.Open(b)
			ordered := is.CapabilitiesOf(st).OrderedScan
			r := oplogtest.NewSweepRig(b, calls.Wrap(st), cfg)
			for _, a := range r.StrandAgents(b, "resident", benchAgents, 1) {
				r.Resident.Store(a, true)
			}
			scanned := 0
			calls.Reset()
			for b.Loop() {
				rep := r.Sweeper.SweepOnce(b.Context())
				scanned += rep.Routes[0].Scanned
				got := calls.Reset()
				pages := rep.Routes[0].Pages
				total := 0
				for _, n := range got {
					total += n
				}
				if total != pages || got["scan_stable"] != pages {
					b.Fatalf("storage calls %v, want only the %d page reads", got, pages)
				}
				// No walk takes fewer pages than full ones make; SQL and memory pages are full, Redis's
				// may come back short (a page ends with its batch of bucket probes).
				if want := (rep.Routes[0].Scanned + cfg.PageSize - 1) / cfg.PageSize; ordered && pages < want {
					b.Fatalf("%d pages for %d keys of page size %d, want at least %d", pages, rep.Routes[0].Scanned, cfg.PageSize, want)
				}
				b.ReportMetric(float64(pages), "storage-calls/tick")
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(scanned), "ns/key")
		})
	}
}

// BenchmarkSweepStranded: 10,000 stranded agents, ticks back to back until every one is archived;
// agents/s per backend, with the default budgets.
func BenchmarkSweepStranded(b *testing.B) {
	for _, be := range backendtest.All() {
		b.Run(be.Name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				r := oplogtest.NewSweepRig(b, be.Open(b), oplogtest.SweepConfig())
				agents := r.StrandAgents(b, fmt.Sprint("stranded-", i), benchAgents, 3)
				b.StartTimer()
				start := time.Now()
				ticks := sweepUntilDrained(b, r, benchAgents)
				elapsed := time.Since(start)
				b.StopTimer()
				if n := r.StrandedCount(b, agents); n != 0 {
					b.Fatalf("%d agents left", n)
				}
				b.ReportMetric(float64(benchAgents)/elapsed.Seconds(), "agents/s")
				b.ReportMetric(float64(ticks), "ticks")
				b.StartTimer()
			}
		})
	}
}

// BenchmarkSweepStrandedBesideRaw: per backend and blob store, 10,000 (STRATA_BENCH_AGENTS) stranded agents drained by the
// sweep (default budgets, ticks back to back, both passes of the gate) and then 10,000 more by
// oplogtest.RawArchive at the same concurrency, in one run on the same store: agents/s of each, their
// ratio, and the indexed-storage calls per archived agent of each.
func BenchmarkSweepStrandedBesideRaw(b *testing.B) {
	n := testenv.PositiveInt(b, agentsEnv, benchAgents)
	for _, be := range backendtest.All() {
		for _, bs := range benchBlobStores {
			b.Run(be.Name+"/"+bs.name, func(b *testing.B) {
				cfg := oplogtest.SweepConfig()
				// Totals over the iterations, each of which runs both archivers: one slow tick of
				// either does not decide the ratio.
				var sweepTime, rawTime time.Duration
				var sweepCalls, rawCalls, iterations int
				for i := 0; b.Loop(); i++ {
					iterations++
					var calls oplogtest.CallCounter
					st := be.Open(b)
					blobs := bs.open(b)
					r := oplogtest.NewSweepRigOn(b, oplogtest.NewLayers(b, calls.Wrap(st), blobs), cfg)
					agents := r.StrandAgents(b, fmt.Sprint("sweep-", i), n, 3)
					calls.Reset()
					start := time.Now()
					sweepUntilDrained(b, r, int64(n))
					sweepTime += time.Since(start)
					sweepCalls += total(calls.Reset())
					if left := r.StrandedCount(b, agents); left != 0 {
						b.Fatalf("%d agents left", left)
					}

					r.StrandAgents(b, fmt.Sprint("raw-", i), n, 3)
					calls.Reset()
					start = time.Now()
					got, err := oplogtest.RawArchive(b.Context(), r.St, blobs, oplog.CompressedNamespace(oplog.Ephemeral, 1), cfg.MaxConcurrency, cfg.PageSize)
					rawTime += time.Since(start)
					rawCalls += total(calls.Reset())
					if err != nil || got != n {
						b.Fatalf("raw archiver: %d agents, %v", got, err)
					}
					if page, err := st.ScanStable(b.Context(), oplog.CompressedNamespace(oplog.Ephemeral, 1), is.AllKeys, is.Resume{}, 1); err != nil || len(page.Keys) > 0 {
						b.Fatalf("the raw archiver left %q, %v", page.Keys, err)
					}
				}
				archived := float64(iterations * n)
				sweepRate, rawRate := archived/sweepTime.Seconds(), archived/rawTime.Seconds()
				b.ReportMetric(sweepRate, "sweep-agents/s")
				b.ReportMetric(rawRate, "raw-agents/s")
				b.ReportMetric(sweepRate/rawRate, "sweep/raw")
				b.ReportMetric(float64(sweepCalls)/archived, "sweep-calls/agent")
				b.ReportMetric(float64(rawCalls)/archived, "raw-calls/agent")
			})
		}
	}
}

// benchBlobStores are the blob stores the drains beside a baseline run with.
var benchBlobStores = []struct {
	name string
	open func(b *testing.B) archive.BlobStore
}{
	{"memblobs", func(*testing.B) archive.BlobStore { return memory.NewBlobStore() }},
	{"fsblobs", func(b *testing.B) archive.BlobStore {
		fs, err := fsblob.New(b.Context(), b.TempDir(), nil)
		if err != nil {
			b.Fatal(err)
		}
		return fs
	}},
}

// sweepUntilDrained ticks the rig's sweeper back to back until n agents were drained and returns the
// ticks it took, failing after 1,000.
func sweepUntilDrained(b *testing.B, r *oplogtest.SweepRig, n int64) (ticks int) {
	for r.Drained.Load() < n {
		r.Sweeper.SweepOnce(b.Context())
		if ticks++; ticks > 1000 {
			b.Fatal("not drained after 1000 ticks")
		}
	}
	return ticks
}
