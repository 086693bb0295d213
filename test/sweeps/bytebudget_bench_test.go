package sweeps_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/sqlite"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/oplogtest"
)

// The byte budget's window and rate: STRATA_BENCH_BYTE_WINDOW_SECONDS (default 30) of a sweep held to
// byteBudgetRate with a backlog larger than the window can move.
const (
	byteWindowEnv  = "STRATA_BENCH_BYTE_WINDOW_SECONDS"
	byteBudgetRate = 2 << 20
	// Agents of 4 entries of 1 KiB: a batch of 128 moves 512 KiB, a quarter of a second's worth, so the
	// bucket goes into debt after each and the pacing sets the rate.
	byteAgentEntries = 4
	byteEntryBytes   = 1 << 10
)

// BenchmarkSweepByteBudget: sweep.max_bytes_per_second at 2 MiB/s over a window of real time, on the
// embedded SQLite default with memory blobs, ticking as Run does at a 100 ms interval with a 10 s tick
// deadline, against a backlog of the window and two tick deadlines' worth (a tick under way runs on past the window's
// end: the window is measured to the end of the last tick). Reported: the payload bytes the ticks' reports say
// moved, and the bytes that actually left the layer (its stranded agents counted before and after, times
// each agent's bytes), each over the window as a fraction of the budget (rate/limit, left/limit: 1.00 is
// the budget exactly; sweep.max_bytes_per_second holds within 10 % when they are at most 1.10), and
// the ticks' deferrals. The sweep alone moves this backlog many times faster (BenchmarkSweepDrain).
func BenchmarkSweepByteBudget(b *testing.B) {
	window := time.Duration(testenv.PositiveInt(b, byteWindowEnv, 30)) * time.Second
	agentBytes := int64(byteAgentEntries * byteEntryBytes)
	const tickDeadline = 10 * time.Second
	// The window, plus the tick under way at its end, plus as much again: a backlog it cannot drain.
	n := int(int64(byteBudgetRate)*int64((window+2*tickDeadline)/time.Second)/agentBytes) + 1
	for b.Loop() {
		st, err := sqlite.Open(b.Context(), "sqlite://"+filepath.Join(b.TempDir(), "strata.db"))
		if err != nil {
			b.Fatal(err)
		}
		cfg := oplogtest.SweepConfig()
		cfg.Interval, cfg.MaxTickDuration, cfg.MaxBytesPerSecond = 100*time.Millisecond, tickDeadline, byteBudgetRate
		cfg.MaxArchivesPerTick = n
		r := oplogtest.NewSweepRig(b, st, cfg)
		payload := bytes.Repeat([]byte{'b'}, byteEntryBytes)
		entries := make([]oplog.Entry, byteAgentEntries)
		for i := range entries {
			entries[i] = oplog.Entry{Index: oplog.Index(i + 1), Payload: payload}
		}
		agents := make([]oplog.AgentID, n)
		for i := range agents {
			agents[i] = oplogtest.AgentNamed(fmt.Sprintf("budget-%06d", i))
			if err := r.Stack.Append(b.Context(), agents[i], oplog.Ephemeral, entries); err != nil {
				b.Fatal(err)
			}
		}
		r.Sweeper.SweepOnce(b.Context()) // the first sighting: nothing moves yet
		if left := r.StrandedCount(b, agents); left != n {
			b.Fatalf("%d of %d stranded after the first sighting", left, n)
		}
		var moved int64
		deferred, ticks := 0, 0
		start := time.Now()
		for time.Since(start) < window {
			rep := r.Sweeper.SweepOnce(b.Context())
			for _, rr := range rep.Routes {
				moved += rr.Bytes
				deferred += rr.ByteBudgetDeferred
			}
			ticks++
			time.Sleep(cfg.Interval)
		}
		elapsed := time.Since(start)
		left := r.StrandedCount(b, agents)
		if left == 0 {
			b.Fatalf("the backlog of %d agents drained within %v (%d bytes reported moved): the budget did not hold the sweep back", n, elapsed, moved)
		}
		limit := float64(byteBudgetRate) * elapsed.Seconds()
		b.ReportMetric(float64(moved)/limit, "rate/limit")
		b.ReportMetric(float64(int64(n-left)*agentBytes)/limit, "left/limit")
		b.ReportMetric(elapsed.Seconds(), "window-s")
		b.ReportMetric(float64(ticks), "ticks")
		b.ReportMetric(float64(deferred)/float64(ticks), "deferred/tick")
	}
}
