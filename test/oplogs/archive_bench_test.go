package oplogs_test

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/fsblob"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
)

// BenchmarkDrain reports entries/s for draining a 100,000-entry durable oplog through both hops
// (primary → compressed → blob), per backend.
func BenchmarkDrain(b *testing.B) {
	const n = 100_000
	for _, be := range backendtest.All() {
		b.Run(be.Name, func(b *testing.B) {
			blobs, err := fsblob.New(b.Context(), b.TempDir(), nil)
			if err != nil {
				b.Fatal(err)
			}
			l := oplogtest.NewLayers(b, be.Open(b), blobs)
			for i := 0; b.Loop(); i++ {
				agent := oplogtest.AgentNamed(fmt.Sprint("bench-", i))
				b.StopTimer()
				l.Write(b, agent, oplog.Durable, 1, n, nil)
				b.StartTimer()
				l.Drain(b, agent, oplog.Durable)
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

// BenchmarkDrainPeakHeap drains durable oplogs of 100,000 and 1,000,000 entries on SQLite with a
// filesystem blob store (so the oplog itself is not in the Go heap) and reports the peak live heap
// above the level before the drain, sampled every millisecond. The archive step holds one chunk at a
// time, so the peak should stay flat as the oplog grows tenfold.
func BenchmarkDrainPeakHeap(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			blobs, err := fsblob.New(b.Context(), b.TempDir(), nil)
			if err != nil {
				b.Fatal(err)
			}
			l := oplogtest.NewLayers(b, backendtest.SQLite().Open(b), blobs)
			var peak uint64
			for i := 0; b.Loop(); i++ {
				agent := oplogtest.AgentNamed(fmt.Sprint("heap-", i))
				b.StopTimer()
				l.Write(b, agent, oplog.Durable, 1, n, nil)
				runtime.GC()
				base := liveHeap()
				stop := sampleHeap(&peak, base)
				b.StartTimer()
				l.Drain(b, agent, oplog.Durable)
				b.StopTimer()
				stop()
				b.StartTimer()
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

func liveHeap() uint64 {
	metrics.Read(heapSample)
	return heapSample[0].Value.Uint64()
}

// sampleHeap records into peak the largest heap seen above base until the returned stop is called.
func sampleHeap(peak *uint64, base uint64) (stop func()) {
	done := make(chan struct{})
	var max atomic.Uint64
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if h := liveHeap(); h > base && h-base > max.Load() {
				max.Store(h - base)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		if m := max.Load(); m > *peak {
			*peak = m
		}
	}
}
