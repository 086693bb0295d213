package sweeper

import (
	"context"
	"maps"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/stratalog/strata/internal/latency"
	"github.com/stratalog/strata/oplog"
)

// RouteReport is what one tick did on one route.
type RouteReport struct {
	Route         string
	Outcomes      map[Outcome]int
	Scanned       int             // keys decided
	Pages         int             // scan calls
	PassCompleted bool            // the walk reached the end of the namespace this tick
	Truncated     Reason          // why the route stopped early, "" if it did not
	Errors        int             // storage calls that failed for another reason than the tick's end
	Moved         int             // entries moved to lower layers
	Bytes         int64           // their payload bytes
	Archived      []oplog.AgentID // agents drained to the bottom layer
	// Unarchived counts the agents the route found in its last completed pass or the pass under way
	// and holds unarchived after the tick: waiting for a quiet second sighting, through the gate but
	// not yet afforded by a budget, declined as moved on, or failed. See route.lag.
	Unarchived int
	// The lag of those agents: when the oldest was first sighted (zero when none), the entries they hold
	// (the sum of their last indices as the gate read them; an agent sighted by its page's stamp alone,
	// whose index the gate did not read, at the route's entries an archived agent so far) and those
	// entries' bytes, estimated at the route's bytes an entry moved so far.
	OldestUnarchived  time.Time
	UnarchivedEntries uint64
	UnarchivedBytes   int64
	// ByteBudgetDeferred counts the agents sweep.max_bytes_per_second held back to the next tick, and
	// ByteBudgetWait is how long, from when it held them back, until its bucket holds bytes again: a
	// tick sooner than that would defer them again at once.
	ByteBudgetDeferred int
	ByteBudgetWait     time.Duration
	// Unreadable lists the first MaxUnreadableListed keys (or files) the walk could not read; all of
	// them are counted in Outcomes[OutcomeUnreadable].
	Unreadable []UnreadableKey
	// Unparseable lists the first MaxUnparseableListed keys the walk met that are no agent's stored key
	// (in the parts outside every bucket too, on the sidecar that owns bucket 0); all of them are
	// counted in Outcomes[OutcomeUnparseable].
	Unparseable []UnparseableKey
}

// UnparseableKey is a key a walk met that is no agent's stored key: without a bucket prefix, with a
// bucket past the last, or with another bucket's prefix. It is never archived or deleted.
type UnparseableKey struct {
	Route string    `json:"route"`
	Key   string    `json:"key"`
	Why   string    `json:"why"`
	Pass  uint64    `json:"pass"`
	At    time.Time `json:"at"`
}

// MaxUnparseableListed bounds the unparseable keys a route report, and the status, list.
const MaxUnparseableListed = 32

// UnreadableKey is a key, or a backend's file, that a walk could not read. It was skipped for the pass
// and is read again on the next one.
type UnreadableKey struct {
	Route string    `json:"route"`
	Key   string    `json:"key,omitempty"` // "" when the backend could not tell the key (a file that is not a database)
	Where string    `json:"where"`         // what could not be read: the key, or the backend's name for it
	Err   string    `json:"error"`
	Pass  uint64    `json:"pass"`
	At    time.Time `json:"at"`
}

// MaxUnreadableListed bounds the unreadable keys a route report, and the status, list.
const MaxUnreadableListed = 32

// Report is what one tick did.
type Report struct {
	Start    time.Time
	Duration time.Duration
	// Disabled: the sweep is switched off and did nothing.
	Disabled bool
	// StandDownReason is set when the tick stood down and did nothing: the reason's label, as in the
	// oplog_sweep_standing_down metric (no_assignment, no_shards, lease_lapsed, or Options.StandDown's).
	StandDownReason string
	// StoodDown: Options.StandDown gave this detail; nothing was scanned or archived.
	StoodDown string
	// Unassigned: no usable shard assignment; nothing was scanned or archived.
	Unassigned       bool
	UnassignedReason string
	Routes           []RouteReport
	Outcomes         map[Outcome]int // over every route
	Truncated        []Reason        // every reason a route stopped early, once each
	DeadlineHit      bool
	DeadlineHits     int           // consecutive ticks, this one included, that hit the deadline
	NextWait         time.Duration // how long Run waits before the next tick
	Tracked          int           // tracking entries after the tick
}

// Archived returns every agent the tick drained.
func (r Report) Archived() []oplog.AgentID {
	var out []oplog.AgentID
	for _, rr := range r.Routes {
		out = append(out, rr.Archived...)
	}
	return out
}

// Status is the sweep's state, for an operator.
type Status struct {
	Last         Report            // the last tick
	Current      *Progress         // the tick under way; nil between ticks
	Passes       map[string]uint64 // the pass each route is in
	Tracked      int
	DeadlineHits int
	NextWait     time.Duration
	// StandDownReason is the label of the last tick's stand-down, "" when it ran.
	StandDownReason string
	// Unreadable is the most recent keys the walks could not read, newest last, at most
	// MaxUnreadableListed.
	Unreadable []UnreadableKey
	// Unparseable is the most recent keys the walks met that are no agent's stored key, newest last,
	// at most MaxUnparseableListed.
	Unparseable []UnparseableKey
	// Lag is each route's backlog as the last tick that swept it left it: a tick that stood down, was
	// disabled or did not reach the route leaves it as it was, since the agents still wait (and the
	// oldest grows older), which the gauges and their alert must go on showing.
	Lag map[string]RouteLag
}

// RouteLag is a route's backlog after a tick: RouteReport's Unarchived, OldestUnarchived,
// UnarchivedEntries and UnarchivedBytes.
type RouteLag struct {
	Agents      int       `json:"agents"`
	OldestSince time.Time `json:"-"` // zero when none waits
	Entries     uint64    `json:"entries"`
	Bytes       int64     `json:"bytes"`
	TickStart   time.Time `json:"tick_start"` // the tick that measured it
}

// Progress is where the tick under way is.
type Progress struct {
	Start time.Time `json:"start"`
	Phase Phase     `json:"phase"`
	Route string    `json:"route,omitempty"`
	// Started and Done count the agents of the archive phase: started, and finished whatever their
	// outcome.
	Started int `json:"agents_started"`
	Done    int `json:"agents_done"`
}

// Phase is the part of a tick under way.
type Phase string

const (
	PhaseScan    Phase = "scan"
	PhaseArchive Phase = "archive"
)

// Status returns the state after the last tick and where the tick under way is. It does not wait for a
// tick under way.
func (s *Sweeper) Status() Status {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	st := s.status
	st.Passes = maps.Clone(s.status.Passes)
	st.Unreadable = slices.Clone(s.status.Unreadable)
	st.Unparseable = slices.Clone(s.status.Unparseable)
	st.Lag = maps.Clone(s.status.Lag)
	if s.status.Current != nil {
		current := *s.status.Current
		st.Current = &current
	}
	return st
}

// finish totals the report, moves the backoff, publishes the status and records the metrics: the one
// place a tick's outcome is accounted for.
func (s *Sweeper) finish(rep *Report) {
	for _, rr := range rep.Routes {
		tally(rep.Outcomes).merge(rr.Outcomes)
		if rr.Truncated != "" && !slices.Contains(rep.Truncated, rr.Truncated) {
			rep.Truncated = append(rep.Truncated, rr.Truncated)
		}
	}
	// The deadline is wall time: a tick that ended after it hit it, whatever its checkpoints saw (an
	// agent under way may have run on past it).
	rep.DeadlineHit = slices.Contains(rep.Truncated, ReasonDeadline) || rep.Duration > s.cfg.MaxTickDuration
	switch {
	case rep.Disabled || rep.StandDownReason != "":
		// A tick that did nothing says nothing about the storage: the backoff stays as it was.
		rep.DeadlineHit = false
	case slices.Contains(rep.Truncated, ReasonShutdown):
		// Nor does a tick cut by shutdown.
	case rep.DeadlineHit:
		s.hits++
	default:
		s.hits = 0
	}
	rep.DeadlineHits = s.hits
	rep.NextWait = nextWait(s.cfg.Interval, s.hits, s.cfg.MaxBackoffIntervals)
	rep.Tracked = s.tracked.len()
	s.logStandDown(*rep)

	passes := make(map[string]uint64, len(s.routes))
	for _, r := range s.routes {
		passes[r.Name] = r.pass
	}
	s.statusMu.Lock()
	unreadable := s.status.Unreadable
	for _, rr := range rep.Routes {
		unreadable = append(unreadable, rr.Unreadable...)
	}
	if extra := len(unreadable) - MaxUnreadableListed; extra > 0 {
		unreadable = slices.Clone(unreadable[extra:])
	}
	unparseable := latestUnparseable(s.status.Unparseable, rep.Routes)
	lag := maps.Clone(s.status.Lag)
	if lag == nil {
		lag = make(map[string]RouteLag, len(s.routes))
	}
	for _, rr := range rep.Routes {
		lag[rr.Route] = RouteLag{Agents: rr.Unarchived, OldestSince: rr.OldestUnarchived, Entries: rr.UnarchivedEntries,
			Bytes: rr.UnarchivedBytes, TickStart: rep.Start}
	}
	if rep.StandDownReason != "" && !slices.Contains(s.reasons, rep.StandDownReason) {
		s.reasons = append(s.reasons, rep.StandDownReason)
	}
	s.status = Status{Last: *rep, Passes: passes, Tracked: s.tracked.len(), DeadlineHits: s.hits, NextWait: rep.NextWait,
		StandDownReason: rep.StandDownReason, Unreadable: unreadable, Unparseable: unparseable, Lag: lag}
	s.statusMu.Unlock()
	s.m.record(*rep)
}

// logStandDown logs a change between standing down and sweeping, once per change rather than once a
// tick: a sweep that archives nothing for a reason must say so somewhere other than its status.
func (s *Sweeper) logStandDown(rep Report) {
	if rep.Disabled || rep.StandDownReason == s.standDown {
		return
	}
	switch detail := rep.StoodDown + rep.UnassignedReason; {
	case rep.StandDownReason == "":
		s.log.Info("sweep resumed", "stood_down_for", s.standDown)
	case s.standDown == "":
		s.log.Warn("sweep standing down: it archives nothing until this clears", "reason", rep.StandDownReason, "detail", detail)
	default:
		s.log.Warn("sweep still standing down, for another reason", "reason", rep.StandDownReason, "detail", detail,
			"was", s.standDown)
	}
	s.standDown = rep.StandDownReason
}

// instruments are the sweep's metrics. Names are Prometheus names once exported:
// oplog_sweep_outcome_total{route,outcome}, oplog_sweep_tick_seconds (buckets of internal/latency),
// oplog_sweep_truncated_total{reason}, oplog_sweep_moved_entries_total{route},
// oplog_sweep_tracked_agents, oplog_sweep_deadline_hits, oplog_sweep_standing_down{reason} and
// oplog_sweep_tick_age_seconds. Every route × outcome, route and reason is present at 0 from New. The
// tick histogram has no data point before the first tick that runs (OpenTelemetry exports none without
// a measurement); the sidecar's exporter shows it at zero until then (internal/telemetry).
type instruments struct {
	outcome   metric.Int64Counter
	tick      metric.Float64Histogram
	truncated metric.Int64Counter
	moved     metric.Int64Counter
}

const meterName = "github.com/stratalog/strata/sweeper"

func newInstruments(mp metric.MeterProvider, s *Sweeper) (*instruments, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	meter := mp.Meter(meterName)
	m := &instruments{}
	var err error
	if m.outcome, err = meter.Int64Counter("oplog_sweep_outcome",
		metric.WithDescription("Keys the sweep decided, by route and outcome. archived climbing on a healthy cluster means teardown drains are being lost.")); err != nil {
		return nil, err
	}
	if m.tick, err = meter.Float64Histogram("oplog_sweep_tick", latency.Histogram("Duration of sweep ticks.")...); err != nil {
		return nil, err
	}
	if m.truncated, err = meter.Int64Counter("oplog_sweep_truncated",
		metric.WithDescription("Ticks that stopped before their work was done, by reason: scan_budget, archive_budget, deadline, shutdown.")); err != nil {
		return nil, err
	}
	if m.moved, err = meter.Int64Counter("oplog_sweep_moved_entries",
		metric.WithDescription("Oplog entries the sweep moved to lower layers.")); err != nil {
		return nil, err
	}
	// Every known label value at 0 from the start: a rate() or an alert over these series works before
	// the first event instead of seeing no series at all.
	ctx := context.Background()
	for _, r := range s.routes {
		for _, o := range Outcomes {
			m.outcome.Add(ctx, 0, metric.WithAttributes(attribute.String("route", r.Name), attribute.String("outcome", string(o))))
		}
		m.moved.Add(ctx, 0, metric.WithAttributes(attribute.String("route", r.Name)))
	}
	for _, reason := range Reasons {
		m.truncated.Add(ctx, 0, metric.WithAttributes(attribute.String("reason", string(reason))))
	}
	tracked, err := meter.Int64ObservableGauge("oplog_sweep_tracked_agents",
		metric.WithDescription("Agents in the sweep's tracking table."))
	if err != nil {
		return nil, err
	}
	hits, err := meter.Int64ObservableGauge("oplog_sweep_deadline_hits",
		metric.WithDescription("Consecutive ticks that hit max_tick_duration; the wait between ticks doubles with each, up to max_backoff_intervals."))
	if err != nil {
		return nil, err
	}
	standingDown, err := meter.Int64ObservableGauge("oplog_sweep_standing_down",
		metric.WithDescription("1 for the reason the sweep stands down now (it archives nothing), 0 for the others: "+
			"no_assignment, no_shards, lease_lapsed, or the embedder's (the sidecar: residency_stale)."))
	if err != nil {
		return nil, err
	}
	age, err := meter.Float64ObservableGauge("oplog_sweep_tick_age", metric.WithUnit("s"),
		metric.WithDescription("How long the tick under way has run; 0 between ticks. Rising past max_tick_duration "+
			"+ max_agent_duration means something the deadline cannot bound."))
	if err != nil {
		return nil, err
	}
	lagAgents, err := meter.Int64ObservableGauge("oplog_sweep_lag_agents",
		metric.WithDescription("Agents a route found and holds unarchived after the last tick: waiting at the gate for a quiet "+
			"second sighting, or for a budget, or declined or failed (RouteReport.Unarchived)."))
	if err != nil {
		return nil, err
	}
	lagOldest, err := meter.Float64ObservableGauge("oplog_sweep_lag_oldest", metric.WithUnit("s"),
		metric.WithDescription("How long ago the oldest of those agents was first sighted; it keeps rising between ticks "+
			"and while ticks do not run."))
	if err != nil {
		return nil, err
	}
	lagEntries, err := meter.Int64ObservableGauge("oplog_sweep_lag_entries",
		metric.WithDescription("The entries those agents hold, as the gate read their last indices."))
	if err != nil {
		return nil, err
	}
	lagBytes, err := meter.Int64ObservableGauge("oplog_sweep_lag_bytes", metric.WithUnit("By"),
		metric.WithDescription("Those entries' bytes, estimated at the bytes an entry the route has moved (0 until it moved one)."))
	if err != nil {
		return nil, err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := s.Status()
		now := s.opts.Now()
		for _, r := range s.routes {
			lag := st.Lag[r.Name]
			route := metric.WithAttributes(attribute.String("route", r.Name))
			oldest := 0.0
			if !lag.OldestSince.IsZero() {
				oldest = max(now.Sub(lag.OldestSince).Seconds(), 0)
			}
			o.ObserveInt64(lagAgents, int64(lag.Agents), route)
			o.ObserveFloat64(lagOldest, oldest, route)
			o.ObserveInt64(lagEntries, int64(lag.Entries), route)
			o.ObserveInt64(lagBytes, lag.Bytes, route)
		}
		o.ObserveInt64(tracked, int64(st.Tracked))
		o.ObserveInt64(hits, int64(st.DeadlineHits))
		for _, reason := range s.standDownReasons() {
			v := int64(0)
			if reason == st.StandDownReason {
				v = 1
			}
			o.ObserveInt64(standingDown, v, metric.WithAttributes(attribute.String("reason", reason)))
		}
		tickAge := 0.0
		if st.Current != nil {
			tickAge = s.opts.Now().Sub(st.Current.Start).Seconds()
		}
		o.ObserveFloat64(age, tickAge)
		return nil
	}, tracked, hits, standingDown, age, lagAgents, lagOldest, lagEntries, lagBytes)
	return m, err
}

// standDownReasons are the label values of oplog_sweep_standing_down: the sweep's own, then every
// other reason a tick has stood down for.
func (s *Sweeper) standDownReasons() []string {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	reasons := []string{StandDownNoAssignment, StandDownNoShards, StandDownLeaseLapsed}
	for _, r := range s.reasons {
		if !slices.Contains(reasons, r) {
			reasons = append(reasons, r)
		}
	}
	return reasons
}

func (m *instruments) record(rep Report) {
	ctx := context.Background()
	if !rep.Disabled && rep.StandDownReason == "" {
		m.tick.Record(ctx, rep.Duration.Seconds())
	}
	for _, rr := range rep.Routes {
		for _, o := range Outcomes {
			if n := rr.Outcomes[o]; n > 0 {
				m.outcome.Add(ctx, int64(n), metric.WithAttributes(attribute.String("route", rr.Route), attribute.String("outcome", string(o))))
			}
		}
		if rr.Moved > 0 {
			m.moved.Add(ctx, int64(rr.Moved), metric.WithAttributes(attribute.String("route", rr.Route)))
		}
	}
	for _, reason := range rep.Truncated {
		m.truncated.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", string(reason))))
	}
}

// latestUnparseable is the status's list of unparseable keys after a tick: the keys of each route's
// report appended to what was listed, each key once (a key met again moves to the end), the newest
// MaxUnparseableListed.
func latestUnparseable(listed []UnparseableKey, routes []RouteReport) []UnparseableKey {
	out := slices.Clone(listed)
	for _, rr := range routes {
		for _, u := range rr.Unparseable {
			out = slices.DeleteFunc(out, func(o UnparseableKey) bool { return o.Route == u.Route && o.Key == u.Key })
			out = append(out, u)
		}
	}
	if extra := len(out) - MaxUnparseableListed; extra > 0 {
		out = slices.Clone(out[extra:])
	}
	return out
}
