package sweeper_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/stratalog/strata/sweeper"
)

// fakeClock is a clock a test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// A known backlog: the lag gauges and the report count exactly the agents stranded, their entries and
// the age of the oldest since its first sighting, and fall to zero once they are archived.
func TestLag_GaugesMatchAKnownBacklog(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	e := newEnv(t, config(), withOptions(func(o *sweeper.Options) {
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		o.Now = clock.Now
	}))
	const route = "oplog_sweep_lag_agents{route=ephemeral-l1}"
	if g := gaugePoints(t, reader); g[route] != 0 {
		t.Fatalf("before any tick: %v", g)
	}
	first := clock.Now()
	entries := 0
	for i := range 7 {
		e.strand(agent(fmt.Sprint("lag-", i)), 1, 3+i)
		entries += 3 + i
	}
	rep := e.tick() // the first sighting of each: all wait at the gate
	rr := rep.Routes[0]
	if rr.Unarchived != 7 || rr.UnarchivedEntries != uint64(entries) || !rr.OldestUnarchived.Equal(first) {
		t.Fatalf("after the first sighting: %d agents, %d entries, oldest %v; want 7, %d, %v", rr.Unarchived, rr.UnarchivedEntries,
			rr.OldestUnarchived, entries, first)
	}
	g := gaugePoints(t, reader)
	if g[route] != 7 || g["oplog_sweep_lag_entries{route=ephemeral-l1}"] != float64(entries) ||
		g["oplog_sweep_lag_oldest{route=ephemeral-l1}"] != 0 {
		t.Fatalf("gauges after the first sighting %v; want 7 agents, %d entries, the oldest 0 s", g, entries)
	}
	clock.advance(90 * time.Second) // between ticks the age keeps rising
	if g := gaugePoints(t, reader); g["oplog_sweep_lag_oldest{route=ephemeral-l1}"] != 90 || g[route] != 7 {
		t.Fatalf("between ticks: %v, want 7 agents, the oldest 90 s", g)
	}
	e.strand(agent("lag-late"), 1, 2) // first sighted by the next tick, which archives the seven
	rep = e.tick()
	if n := rep.Routes[0].Outcomes[sweeper.OutcomeArchived]; n != 7 {
		t.Fatalf("second tick archived %d, want the 7 sighted before", n)
	}
	g = gaugePoints(t, reader)
	if g[route] != 1 || g["oplog_sweep_lag_entries{route=ephemeral-l1}"] != 2 || g["oplog_sweep_lag_oldest{route=ephemeral-l1}"] != 0 {
		t.Fatalf("gauges %v; want the late agent alone: 1 agent, 2 entries, the oldest 0 s", g)
	}
	// Its bytes are estimated at the bytes an entry of the seven moved.
	perEntry := float64(rep.Routes[0].Bytes) / float64(rep.Routes[0].Moved)
	if got := g["oplog_sweep_lag_bytes{route=ephemeral-l1}"]; got != float64(int64(2*perEntry)) || got == 0 {
		t.Fatalf("lag bytes %v, want 2 entries at %.1f bytes", got, perEntry)
	}
	clock.advance(time.Second)
	e.tick()
	g = gaugePoints(t, reader)
	if g[route] != 0 || g["oplog_sweep_lag_oldest{route=ephemeral-l1}"] != 0 || g["oplog_sweep_lag_entries{route=ephemeral-l1}"] != 0 ||
		g["oplog_sweep_lag_bytes{route=ephemeral-l1}"] != 0 {
		t.Fatalf("after the archive: %v, want no lag", g)
	}
}

// sweep.max_bytes_per_second holds the archive back once a second's bytes are moved: the rest of the
// tick's agents wait for the next tick, counted in the report, and go once the bucket refills.
func TestByteBudget_HoldsTheArchiveBackUntilTheBucketRefills(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	cfg := config()
	cfg.MaxBytesPerSecond, cfg.ArchiveBatch, cfg.MaxConcurrency = 1024, 2, 1
	e := newEnv(t, cfg, withOptions(func(o *sweeper.Options) { o.Now = clock.Now }))
	for i := range 10 {
		e.strand(agent(fmt.Sprint("bytes-", i)), 1, 120) // over 1 KiB each: one batch of 2 empties the bucket
	}
	e.tick()
	rep := e.tick() // through the gate: the first batch spends the bucket, the rest wait
	rr := rep.Routes[0]
	batchBytes := rr.Bytes
	if rr.Outcomes[sweeper.OutcomeArchived] != 2 || rr.ByteBudgetDeferred != 8 || batchBytes <= 1024 {
		t.Fatalf("outcomes %v, deferred %d, bytes %d; want one batch of 2 over 1 KiB and 8 deferred", rr.Outcomes,
			rr.ByteBudgetDeferred, batchBytes)
	}
	if rep := e.tick(); rep.Routes[0].Outcomes[sweeper.OutcomeArchived] != 0 || rep.Routes[0].ByteBudgetDeferred != 8 {
		t.Fatalf("a tick at the same instant archived %d: the bucket is in debt", rep.Routes[0].Outcomes[sweeper.OutcomeArchived])
	}
	// Second by second, what moved stays within the bucket's bound: the rate times the seconds passed
	// plus one second's worth, plus the batch that took the bucket below zero.
	archived, moved := 2, batchBytes
	for elapsed := 1; archived < 10 && elapsed <= 60; elapsed++ {
		clock.advance(time.Second)
		rr := e.tick().Routes[0]
		archived += rr.Outcomes[sweeper.OutcomeArchived]
		moved += rr.Bytes
		if bound := int64(1024*(elapsed+1)) + batchBytes; moved > bound {
			t.Fatalf("after %d s: %d bytes moved, over the bound %d", elapsed, moved, bound)
		}
		if rr.Outcomes[sweeper.OutcomeArchived]+rr.ByteBudgetDeferred != 10-archived+rr.Outcomes[sweeper.OutcomeArchived] {
			t.Fatalf("after %d s: %d archived, %d deferred, %d left", elapsed, rr.Outcomes[sweeper.OutcomeArchived], rr.ByteBudgetDeferred, 10-archived)
		}
	}
	if archived != 10 {
		t.Fatalf("%d of 10 archived after the bucket refilled", archived)
	}
}
