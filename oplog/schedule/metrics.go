package schedule

import (
	"context"

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
//
// The gauges are read from the store at each collection (one Counts query) and describe the whole
// table, so every scheduler sharing it reports the same values: aggregate them with max, not sum. The
// counters are this scheduler's own; failed_rows shows every action kind at 0 from the start.
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
	_, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		now := s.cfg.Now()
		c, err := s.store.Counts(ctx, now)
		if err != nil {
			s.log.Warn("count scheduled rows for the metrics", "err", err)
			return nil // no observation rather than a false zero
		}
		o.ObserveInt64(pending, int64(c.Pending))
		o.ObserveInt64(due, int64(c.Due))
		w := 0.0
		if c.Due > 0 && now.After(c.OldestDue) {
			w = now.Sub(c.OldestDue).Seconds()
		}
		o.ObserveFloat64(wait, w)
		return nil
	}, pending, due, wait)
	return m, err
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
