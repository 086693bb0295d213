package sweeper_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/stratalog/strata/oplog"
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

// sweep.max_bytes_per_second paces the archive: a batch starts only while the bucket holds bytes, and
// the archive phase waits for it otherwise, so what a tick moves over the time it ran stays within the
// rate (plus the bucket's one second's worth and the batch that took it below zero); what the tick cannot
// wait for within three quarters of its deadline is deferred to the next one, counted in the report,
// without the tick counting as a deadline hit.
func TestByteBudget_PacesTheArchiveAndDefersWhatTheTickCannotWaitFor(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	var slept time.Duration
	cfg := config()
	cfg.MaxBytesPerSecond, cfg.ArchiveBatch, cfg.MaxConcurrency, cfg.MaxTickDuration = 1024, 2, 1, 8*time.Second
	e := newEnv(t, cfg, withOptions(func(o *sweeper.Options) {
		o.Now = clock.Now
		o.Sleep = func(ctx context.Context, d time.Duration) error { slept += d; clock.advance(d); return ctx.Err() }
	}))
	for i := range 10 {
		e.strand(agent(fmt.Sprint("bytes-", i)), 1, 120) // over 1 KiB each: a batch of 2 empties the bucket
	}
	e.tick()
	start := clock.Now()
	rep := e.tick() // through the gate: paced at 1 KiB/s until 6 s (3/4 of 8 s) into the tick
	rr := rep.Routes[0]
	elapsed := clock.Now().Sub(start)
	perAgent := rr.Bytes / int64(max(rr.Outcomes[sweeper.OutcomeArchived], 1))
	if rr.Outcomes[sweeper.OutcomeArchived] == 0 || perAgent <= 512 {
		t.Fatalf("outcomes %v, %d bytes: want batches of over 1 KiB archived", rr.Outcomes, rr.Bytes)
	}
	if slept == 0 || elapsed > 6*time.Second {
		t.Fatalf("the tick slept %v and ran %v: want it paced, waiting no later than 6 s into it", slept, elapsed)
	}
	if bound := int64(1024*(elapsed.Seconds()+1)) + 2*perAgent; rr.Bytes > bound {
		t.Fatalf("%d bytes moved in %v: over the bucket's bound %d", rr.Bytes, elapsed, bound)
	}
	// It moved as much as the rate allows: a batch more would have fitted only past 6 s.
	if floor := int64(1024*elapsed.Seconds()) - 2*perAgent; rr.Bytes < floor {
		t.Fatalf("%d bytes moved in %v: under the rate's %d, so it waited longer than it had to", rr.Bytes, elapsed, floor)
	}
	t.Logf("first tick: %d archived, %d bytes in %v (slept %v), %d deferred", rr.Outcomes[sweeper.OutcomeArchived], rr.Bytes, elapsed, slept, rr.ByteBudgetDeferred)
	left := 10 - rr.Outcomes[sweeper.OutcomeArchived]
	if left == 0 || rr.ByteBudgetDeferred != left || rr.ByteBudgetWait <= 0 || rr.Truncated != "" || rep.DeadlineHit {
		t.Fatalf("%d left, %d deferred, truncated %q, deadline hit %v: want the rest deferred, not truncated", left,
			rr.ByteBudgetDeferred, rr.Truncated, rep.DeadlineHit)
	}
	archived := 10 - left
	for range 10 {
		if archived == 10 {
			break
		}
		clock.advance(time.Second)
		archived += e.tick().Routes[0].Outcomes[sweeper.OutcomeArchived]
	}
	if archived != 10 {
		t.Fatalf("%d of 10 archived by the later ticks", archived)
	}
}

// Shutdown while the archive phase waits for the byte budget ends the wait at once: the tick reports
// shutdown, the agents it had not started stay whole where they were, and a later tick archives them.
func TestByteBudget_ShutdownEndsTheWaitAndLosesNothing(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	shutdown, stop := context.WithCancel(t.Context())
	waits := 0
	cfg := config()
	cfg.MaxBytesPerSecond, cfg.ArchiveBatch, cfg.MaxConcurrency = 1024, 2, 1
	e := newEnv(t, cfg, withOptions(func(o *sweeper.Options) {
		o.Now = clock.Now
		o.Sleep = func(ctx context.Context, d time.Duration) error {
			waits++
			if waits == 1 {
				stop() // shutdown arrives during the first wait
				<-ctx.Done()
				return ctx.Err()
			}
			clock.advance(d)
			return ctx.Err()
		}
	}))
	var agents []oplog.AgentID
	for i := range 6 {
		agents = append(agents, agent(fmt.Sprint("shut-", i)))
		e.strand(agents[i], 1, 120)
	}
	e.tick()
	rr := e.sw.SweepOnce(shutdown).Routes[0]
	if rr.Truncated != sweeper.ReasonShutdown || rr.Outcomes[sweeper.OutcomeArchived] != 2 || rr.ByteBudgetDeferred != 0 {
		t.Fatalf("truncated %q, outcomes %v, deferred %d: want the first batch archived and the tick cut by shutdown",
			rr.Truncated, rr.Outcomes, rr.ByteBudgetDeferred)
	}
	stranded := 0
	for _, a := range agents {
		if e.inLayer(a) {
			e.requireStranded(a, 120)
			stranded++
		} else {
			e.requireArchived(a, 120)
		}
	}
	if stranded != 4 {
		t.Fatalf("%d agents left in the layer, want the 4 not started", stranded)
	}
	for range 4 {
		clock.advance(time.Second)
		e.tick()
	}
	for _, a := range agents {
		e.requireArchived(a, 120)
	}
}

// Batches that start together each reserve what they are likely to move (their entries at the bytes an
// entry the route has moved), so running four at once does not let four find the bucket full: what a
// tick moves stays within the rate over its time plus one batch, not plus max_concurrency of them.
// Agents the gate passed by their pages' stamps alone (their indexes unread) reserve as many entries as
// an agent the route archived.
func TestByteBudget_ConcurrentBatchesReserveTheirBytes(t *testing.T) {
	for _, stamped := range []bool{false, true} {
		t.Run(fmt.Sprintf("stamped=%v", stamped), func(t *testing.T) { concurrentBatchesReserveTheirBytes(t, stamped) })
	}
}

func concurrentBatchesReserveTheirBytes(t *testing.T, stamped bool) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	cfg := config()
	cfg.MaxBytesPerSecond, cfg.ArchiveBatch, cfg.MaxConcurrency, cfg.MaxTickDuration = 1024, 2, 4, 20*time.Second
	e := newEnv(t, cfg, withOptions(func(o *sweeper.Options) {
		o.Now = clock.Now
		o.Sleep = func(ctx context.Context, d time.Duration) error { clock.advance(d); return ctx.Err() }
	}))
	e.st.set(func(p *probe) { p.noPageIDs, p.stamped = stamped, stamped })
	e.strand(agent("together-L"), 1, 120) // the route learns the bytes an entry moves (names of one length: entries of one size)
	e.tick()
	if e.tick().Routes[0].Outcomes[sweeper.OutcomeArchived] != 1 {
		t.Fatal("the first agent was not archived")
	}
	for i := range 10 {
		e.strand(agent(fmt.Sprint("together-", i)), 1, 120)
	}
	e.tick()
	clock.advance(10 * time.Second) // the bucket full again: one second's worth
	start := clock.Now()
	rr := e.tick().Routes[0]
	elapsed := clock.Now().Sub(start)
	archived := rr.Outcomes[sweeper.OutcomeArchived]
	if archived == 0 {
		t.Fatalf("outcomes %v: nothing archived", rr.Outcomes)
	}
	batch := 2 * rr.Bytes / int64(archived)
	if bound := int64(1024*(elapsed.Seconds()+1)) + batch; rr.Bytes > bound {
		t.Fatalf("%d bytes moved in %v by batches of %d bytes, 4 at once: over the bound %d of one batch under way",
			rr.Bytes, elapsed, batch, bound)
	}
}
