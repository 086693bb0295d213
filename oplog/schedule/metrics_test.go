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

// The scheduler's metrics after real claims: the gauges read the store at collection, the counters
// count claims, lease takeovers and failed rows by action, and the counters are at 0 from the start.
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

	requireMetrics(t, collect(t, reader), map[string]float64{
		"oplog_schedule_claims": 0, "oplog_schedule_lease_takeovers": 0, "oplog_schedule_failed_rows{action=archive_oplog}": 0,
		"oplog_schedule_pending_rows": 0, "oplog_schedule_due_rows": 0, "oplog_schedule_oldest_due_wait": 0,
	})

	ctx := t.Context()
	for name, due := range map[string]time.Duration{"ok": -90 * time.Second, "fails": -time.Minute, "later": time.Hour} {
		if _, err := store.Register(ctx, schedule.NewRow{DueAt: t0.Add(due), Action: schedule.ArchiveOplog{
			Agent: oplog.AgentID{Component: "c", Name: name}, Mode: oplog.Durable, LastIndex: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	requireMetrics(t, collect(t, reader), map[string]float64{
		"oplog_schedule_pending_rows": 3, "oplog_schedule_due_rows": 2, "oplog_schedule_oldest_due_wait": 90,
	})
	if tally, err := sched.RunOnce(ctx); err != nil || tally != (schedule.Tally{Claimed: 2, Succeeded: 1, Failed: 1}) {
		t.Fatalf("RunOnce: %+v %v", tally, err)
	}
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
	requireMetrics(t, collect(t, reader), map[string]float64{"oplog_schedule_due_rows": 1, "oplog_schedule_oldest_due_wait": 30.001})
	takeover := newScheduler(t, store, func(context.Context, schedule.Row) error { return nil }, schedule.Config{Owner: "other", Now: clk.Now, MeterProvider: mp})
	if tally, err := takeover.RunOnce(ctx); err != nil || tally.Claimed != 1 || tally.Succeeded != 1 {
		t.Fatalf("takeover RunOnce: %+v %v", tally, err)
	}
	requireMetrics(t, collect(t, reader), map[string]float64{
		"oplog_schedule_claims": 3, "oplog_schedule_lease_takeovers": 1, "oplog_schedule_failed_rows{action=archive_oplog}": 1,
		"oplog_schedule_pending_rows": 1, "oplog_schedule_due_rows": 0,
	})
}
