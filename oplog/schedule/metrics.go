package schedule

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// instruments are the scheduler's metrics, what seed 000's task runner reports. Names are Prometheus
// names once exported:
//
//   - oplog_schedule_pending_rows: rows not failed, waiting or running (the whole table).
//   - oplog_schedule_due_rows: rows claimable now: due, available, and nobody's lease running.
//   - oplog_schedule_oldest_due_wait_seconds: how long the oldest of those has been due; 0 when none.
//   - oplog_schedule_claims_total: rows this scheduler claimed.
//   - oplog_schedule_lease_takeovers_total: claims of a row whose previous holder's lease had
//     expired (a process that stopped renewing: crashed, partitioned or stalled).
//   - oplog_schedule_failed_rows_total{action}: rows this scheduler marked failed, out of attempts.
//   - oplog_schedule_row_counts_age_seconds: how long ago the three row gauges were counted (since the
//     scheduler was created, while no count has succeeded).
//   - oplog_schedule_row_counts_failed: 1 while the last count failed or one under way has outlasted
//     its timeout, else 0.
//
// The row gauges describe the whole table, so every scheduler sharing it reports the same values:
// aggregate them with max, not sum. They are counted in the background (Run, every MetricsInterval,
// or RefreshRowCounts) under a timeout, and a collection reads the last count from memory: a scrape
// never waits on the store, and a store that stops answering shows as a count that grows old and
// fails rather than as a scrape that hangs. Before the first count succeeds the row gauges are absent
// rather than a false zero; the age and failure gauges are there from the start. The counters are
// this scheduler's own; failed_rows shows every action kind at 0 from the start.
type instruments struct {
	claims, takeovers, failedRows metric.Int64Counter
}

const meterName = "github.com/stratalog/strata/oplog/schedule"

func newInstruments(mp metric.MeterProvider, s *Scheduler) (*instruments, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	meter := mp.Meter(meterName)
	m := &instruments{}
	var err error
	if m.claims, err = meter.Int64Counter("oplog_schedule_claims",
		metric.WithDescription("Scheduled rows this scheduler claimed.")); err != nil {
		return nil, err
	}
	if m.takeovers, err = meter.Int64Counter("oplog_schedule_lease_takeovers",
		metric.WithDescription("Claims of a scheduled row whose previous lease had expired unrenewed: its holder stopped, and the row runs again.")); err != nil {
		return nil, err
	}
	if m.failedRows, err = meter.Int64Counter("oplog_schedule_failed_rows",
		metric.WithDescription("Scheduled rows marked failed after max_attempts, by action; they stay in the table for inspection and are never retried.")); err != nil {
		return nil, err
	}
	ctx := context.Background()
	m.claims.Add(ctx, 0)
	m.takeovers.Add(ctx, 0)
	for _, kind := range Kinds {
		m.failedRows.Add(ctx, 0, metric.WithAttributes(attribute.String("action", kind)))
	}
	pending, err := meter.Int64ObservableGauge("oplog_schedule_pending_rows",
		metric.WithDescription("Scheduled rows not failed, waiting or running, in the whole table."))
	if err != nil {
		return nil, err
	}
	due, err := meter.Int64ObservableGauge("oplog_schedule_due_rows",
		metric.WithDescription("Scheduled rows claimable now (due, available, no lease running), in the whole table. Staying high means the schedulers fall behind or no scheduler owns their buckets."))
	if err != nil {
		return nil, err
	}
	wait, err := meter.Float64ObservableGauge("oplog_schedule_oldest_due_wait", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest claimable scheduled row has been due; 0 when none is."))
	if err != nil {
		return nil, err
	}
	age, err := meter.Float64ObservableGauge("oplog_schedule_row_counts_age", metric.WithUnit("s"),
		metric.WithDescription("How long ago the scheduled-row gauges were counted (since the scheduler started, while no count has succeeded). They are counted in the background every MetricsInterval (the sidecar's schedule.metrics_interval); growing means the schedule store does not answer."))
	if err != nil {
		return nil, err
	}
	failed, err := meter.Int64ObservableGauge("oplog_schedule_row_counts_failed",
		metric.WithDescription("1 while the last count of the scheduled rows failed or one under way has outlasted its timeout (the schedule store does not answer), else 0. The row gauges then show the last successful count."))
	if err != nil {
		return nil, err
	}
	// From memory only: this runs inside a scrape.
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		snap := s.counts.snapshot(s.cfg.Now(), s.countTimeout())
		if snap.counted {
			o.ObserveInt64(pending, int64(snap.counts.Pending))
			o.ObserveInt64(due, int64(snap.counts.Due))
			o.ObserveFloat64(wait, snap.oldestDueWait.Seconds())
		}
		o.ObserveFloat64(age, snap.age.Seconds())
		f := int64(0)
		if snap.failing {
			f = 1
		}
		o.ObserveInt64(failed, f)
		return nil
	}, pending, due, wait, age, failed)
	return m, err
}

// rowCounts is the last count of the table's rows, which the row gauges serve.
type rowCounts struct {
	mu        sync.Mutex
	since     time.Time // the scheduler's creation: what the age runs from before any count succeeded
	counts    Counts
	countedAt time.Time // the now of the last successful count; zero before the first
	failed    bool      // the last count that ended failed
	running   time.Time // when the count under way started; zero when none is
}

// countSnapshot is what the gauges show at one collection.
type countSnapshot struct {
	counted       bool
	counts        Counts
	oldestDueWait time.Duration // as of the count
	age           time.Duration
	failing       bool
}

// snapshot is the gauges' values at now: a pure function of the state, no I/O.
func (rc *rowCounts) snapshot(now time.Time, timeout time.Duration) countSnapshot {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	snap := countSnapshot{counted: !rc.countedAt.IsZero(), counts: rc.counts}
	from := rc.since
	if snap.counted {
		from = rc.countedAt
		if rc.counts.Due > 0 && rc.countedAt.After(rc.counts.OldestDue) {
			snap.oldestDueWait = rc.countedAt.Sub(rc.counts.OldestDue)
		}
	}
	snap.age = max(now.Sub(from), 0)
	snap.failing = rc.failed || (!rc.running.IsZero() && now.Sub(rc.running) > timeout)
	return snap
}

// RefreshRowCounts counts the table's rows now, for the row gauges, cut after the count timeout (the
// smaller of MetricsInterval and MaxCountDuration), and returns the count's error. Run calls it every
// MetricsInterval; an embedder that drives the scheduler with RunOnce calls it on a schedule of its
// own, or the row gauges stay absent.
func (s *Scheduler) RefreshRowCounts(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.countTimeout())
	defer cancel()
	now := s.cfg.Now()
	s.counts.start(now)
	c, err := s.store.Counts(ctx, now)
	switch s.counts.finish(now, c, err) {
	case countStartedFailing:
		s.log.Warn("count scheduled rows for the metrics: the row gauges show the last count until one succeeds", "err", err)
	case countRecovered:
		s.log.Info("counting scheduled rows for the metrics again")
	}
	if err != nil {
		return fmt.Errorf("schedule: count rows: %w", err)
	}
	return nil
}

// countTimeout bounds one count: the interval, at most MaxCountDuration.
func (s *Scheduler) countTimeout() time.Duration { return min(s.cfg.MetricsInterval, MaxCountDuration) }

// countRowsEvery counts the rows at once and then every MetricsInterval, until ctx is cancelled.
func (s *Scheduler) countRowsEvery(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		_ = s.RefreshRowCounts(ctx) // logged there, and shown by the gauges
		timer.Reset(s.cfg.MetricsInterval)
	}
}

type countChange int

const (
	countUnchanged countChange = iota
	countStartedFailing
	countRecovered
)

func (rc *rowCounts) start(now time.Time) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.running = now
}

// finish records a count that ran at now, and says whether it changed between failing and not. A
// count older than the one recorded (two counts overlapping) does not replace it.
func (rc *rowCounts) finish(now time.Time, c Counts, err error) countChange {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.running.Equal(now) {
		rc.running = time.Time{}
	}
	was := rc.failed
	rc.failed = err != nil
	if err == nil && !now.Before(rc.countedAt) {
		rc.counts, rc.countedAt = c, now
	}
	switch {
	case rc.failed && !was:
		return countStartedFailing
	case !rc.failed && was:
		return countRecovered
	}
	return countUnchanged
}

func (m *instruments) claimed(rows []Row) {
	if len(rows) == 0 {
		return
	}
	ctx := context.Background()
	m.claims.Add(ctx, int64(len(rows)))
	var taken int64
	for _, r := range rows {
		if r.TakenOver {
			taken++
		}
	}
	if taken > 0 {
		m.takeovers.Add(ctx, taken)
	}
}

func (m *instruments) failed(row Row) {
	m.failedRows.Add(context.Background(), 1, metric.WithAttributes(attribute.String("action", row.Action.Kind())))
}
