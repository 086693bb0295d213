package schedule_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
)

// collect reads every metric once: name (and action attribute, if any) → value.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name+label(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[m.Name+label(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[m.Name+label(p.Attributes)] = p.Value
				}
			}
		}
	}
	return out
}

func label(set attribute.Set) string {
	if v, ok := set.Value("action"); ok {
		return "{action=" + v.AsString() + "}"
	}
	return ""
}

func requireMetrics(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
}

// The scheduler's metrics after real claims: the row gauges show the last count (RefreshRowCounts), the
// counters count claims, lease takeovers and failed rows by action, and the counters are at 0 from the
// start.
func TestScheduler_MetricsReportRowsClaimsTakeoversAndFailures(t *testing.T) {
	store := memory.NewScheduleStore()
	reader := sdkmetric.NewManualReader()
	clk := &clock{now: t0}
	stall, crashing := make(chan struct{}), make(chan struct{})
	handler := func(ctx context.Context, row schedule.Row) error {
		switch row.Action.Agent.Name {
		case "fails":
			return errors.New("storage is down")
		case "crashes":
			close(crashing)
			<-stall // the first holder never returns: its lease runs out
			return ctx.Err()
		}
		return nil
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	cfg := schedule.Config{Owner: "me", Now: clk.Now, MaxAttempts: 1, MeterProvider: mp}
	sched := newScheduler(t, store, handler, cfg)

	atStart := collect(t, reader)
	requireMetrics(t, atStart, map[string]float64{
		"oplog_schedule_claims": 0, "oplog_schedule_lease_takeovers": 0, "oplog_schedule_failed_rows{action=archive_oplog}": 0,
		"oplog_schedule_row_counts_age": 0, "oplog_schedule_row_counts_failed": 0,
	})
	for _, name := range []string{"oplog_schedule_pending_rows", "oplog_schedule_due_rows", "oplog_schedule_oldest_due_wait"} {
		if v, ok := atStart[name]; ok {
			t.Errorf("%s = %v before any count; want it absent rather than a false zero", name, v)
		}
	}

	ctx := t.Context()
	count := func() {
		t.Helper()
		if err := sched.RefreshRowCounts(ctx); err != nil {
			t.Fatal(err)
		}
	}
	count()
	requireMetrics(t, collect(t, reader), map[string]float64{
		"oplog_schedule_pending_rows": 0, "oplog_schedule_due_rows": 0, "oplog_schedule_oldest_due_wait": 0,
	})
	for name, due := range map[string]time.Duration{"ok": -90 * time.Second, "fails": -time.Minute, "later": time.Hour} {
		if _, err := store.Register(ctx, schedule.NewRow{DueAt: t0.Add(due), Action: schedule.ArchiveOplog{
			Agent: oplog.AgentID{Component: "c", Name: name}, Mode: oplog.Durable, LastIndex: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	count()
	requireMetrics(t, collect(t, reader), map[string]float64{
		"oplog_schedule_pending_rows": 3, "oplog_schedule_due_rows": 2, "oplog_schedule_oldest_due_wait": 90,
	})
	if tally, err := sched.RunOnce(ctx); err != nil || tally != (schedule.Tally{Claimed: 2, Succeeded: 1, Failed: 1}) {
		t.Fatalf("RunOnce: %+v %v", tally, err)
	}
	count()
	requireMetrics(t, collect(t, reader), map[string]float64{
		"oplog_schedule_claims": 2, "oplog_schedule_lease_takeovers": 0, "oplog_schedule_failed_rows{action=archive_oplog}": 1,
		"oplog_schedule_pending_rows": 1, "oplog_schedule_due_rows": 0, "oplog_schedule_oldest_due_wait": 0,
	})

	// A row whose holder stops renewing: claimed by a scheduler that hangs in it, then, once the lease
	// has run out, taken over by another scheduler on the same meter provider (the stuck one reports
	// nothing, so its claim is not counted).
	if _, err := store.Register(ctx, schedule.NewRow{DueAt: t0, Action: schedule.ArchiveOplog{
		Agent: oplog.AgentID{Component: "c", Name: "crashes"}, Mode: oplog.Durable, LastIndex: 1}}); err != nil {
		t.Fatal(err)
	}
	stuck := newScheduler(t, store, handler, schedule.Config{Owner: "stuck", Now: clk.Now})
	stuckCtx, cancelStuck := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { stuck.RunOnce(stuckCtx); close(done) }()
	defer func() { cancelStuck(); close(stall); <-done }()
	<-crashing
	clk.Advance(schedule.DefaultLease + time.Millisecond)
	count()
	requireMetrics(t, collect(t, reader), map[string]float64{"oplog_schedule_due_rows": 1, "oplog_schedule_oldest_due_wait": 30.001})
	takeover := newScheduler(t, store, func(context.Context, schedule.Row) error { return nil }, schedule.Config{Owner: "other", Now: clk.Now, MeterProvider: mp})
	if tally, err := takeover.RunOnce(ctx); err != nil || tally.Claimed != 1 || tally.Succeeded != 1 {
		t.Fatalf("takeover RunOnce: %+v %v", tally, err)
	}
	count()
	requireMetrics(t, collect(t, reader), map[string]float64{
		"oplog_schedule_claims": 3, "oplog_schedule_lease_takeovers": 1, "oplog_schedule_failed_rows{action=archive_oplog}": 1,
		"oplog_schedule_pending_rows": 1, "oplog_schedule_due_rows": 0,
	})
}

// stallingStore is a schedule store whose Counts, while stalled, does not answer until released,
// whatever its context says: a store that stopped answering and does not honour cancellation.
type stallingStore struct {
	schedule.Store
	stalled bool
	entered chan struct{}
	release chan struct{}
}

func (s *stallingStore) Counts(ctx context.Context, now time.Time) (schedule.Counts, error) {
	if !s.stalled {
		return s.Store.Counts(ctx, now)
	}
	s.entered <- struct{}{}
	<-s.release
	return schedule.Counts{}, errors.New("the store does not answer")
}

// A collection never waits on the store: while a count hangs in it, the row gauges show the last
// count, the age grows with the clock, and the count is reported failing once it has outlasted its
// timeout, and after it returns an error, until a count succeeds again.
func TestScheduler_RowGaugesNeverWaitOnTheStore(t *testing.T) {
	store := &stallingStore{Store: memory.NewScheduleStore(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	ctx := t.Context()
	for _, name := range []string{"a", "b"} {
		if _, err := store.Register(ctx, schedule.NewRow{DueAt: t0.Add(time.Hour), Action: schedule.ArchiveOplog{
			Agent: oplog.AgentID{Component: "c", Name: name}, Mode: oplog.Durable, LastIndex: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	reader := sdkmetric.NewManualReader()
	clk := &clock{now: t0}
	sched := newScheduler(t, store, func(context.Context, schedule.Row) error { return nil }, schedule.Config{
		Owner: "me", Now: clk.Now, MetricsInterval: time.Second, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err := sched.RefreshRowCounts(ctx); err != nil {
		t.Fatal(err)
	}
	requireMetrics(t, collect(t, reader), map[string]float64{
		"oplog_schedule_pending_rows": 2, "oplog_schedule_row_counts_age": 0, "oplog_schedule_row_counts_failed": 0})

	store.stalled = true
	counted := make(chan error, 1)
	go func() { counted <- sched.RefreshRowCounts(ctx) }()
	<-store.entered
	// collectWithin collects on a goroutine and fails if the collection does not return: the bound is
	// generous, the point is that it does not wait for the store.
	collectWithin := func() map[string]float64 {
		t.Helper()
		got := make(chan map[string]float64, 1)
		go func() { got <- collect(t, reader) }()
		select {
		case m := <-got:
			return m
		case <-time.After(10 * time.Second):
			close(store.release)
			t.Fatal("a collection waited on the store")
			return nil
		}
	}
	clk.Advance(500 * time.Millisecond)
	requireMetrics(t, collectWithin(), map[string]float64{
		"oplog_schedule_pending_rows": 2, "oplog_schedule_row_counts_age": 0.5, "oplog_schedule_row_counts_failed": 0})
	clk.Advance(time.Second) // the count under way has outlasted its timeout (1 s, the interval)
	requireMetrics(t, collectWithin(), map[string]float64{
		"oplog_schedule_pending_rows": 2, "oplog_schedule_row_counts_age": 1.5, "oplog_schedule_row_counts_failed": 1})

	close(store.release)
	if err := <-counted; err == nil {
		t.Fatal("RefreshRowCounts over a store that did not answer: no error")
	}
	clk.Advance(time.Second)
	requireMetrics(t, collectWithin(), map[string]float64{
		"oplog_schedule_pending_rows": 2, "oplog_schedule_row_counts_age": 2.5, "oplog_schedule_row_counts_failed": 1})

	store.stalled = false
	if err := sched.RefreshRowCounts(ctx); err != nil {
		t.Fatal(err)
	}
	requireMetrics(t, collect(t, reader), map[string]float64{
		"oplog_schedule_pending_rows": 2, "oplog_schedule_row_counts_age": 0, "oplog_schedule_row_counts_failed": 0})
}
