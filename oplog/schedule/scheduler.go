package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/stratalog/strata/internal/backoff"
	"github.com/stratalog/strata/internal/bounds"
	"github.com/stratalog/strata/internal/grace"
	"github.com/stratalog/strata/oplog"
)

// Config of a Scheduler. Zero fields take the defaults below; any other value must be within its
// range (Validate), which NewScheduler enforces.
type Config struct {
	// Owner names this process in lease_owner; it must differ between processes sharing the table,
	// and it is required (an empty owner would read back as "nobody holds it").
	Owner string
	// PollInterval is how often the scheduler looks for due rows when it has free slots (default 1 s).
	PollInterval time.Duration
	// Lease is how long a claim lasts; the scheduler renews it every Lease/3 while the row runs, so a
	// row is taken over only from a process that stopped (default 30 s).
	Lease time.Duration
	// Concurrency is how many rows run at once (default 4).
	Concurrency int
	// MaxAttempts is how many attempts a row gets before it is marked failed (default 5).
	MaxAttempts int
	// BackoffBase and BackoffMax shape the wait after a failed attempt: BackoffBase doubling per
	// attempt, capped at BackoffMax (defaults 1 s and 5 min).
	BackoffBase, BackoffMax time.Duration
	// ShutdownGrace is how long the rows under way keep running after Run's context is cancelled;
	// then their contexts are cancelled too and Run returns once they have. A cut row is neither
	// acknowledged nor released: its lease expires and it runs again (default 30 s; negative: cut at
	// once).
	ShutdownGrace time.Duration
	// Now is the clock (time.Now when nil); tests move it instead of sleeping.
	Now func() time.Time
	// MeterProvider receives the scheduler's metrics (metrics.go); nil records none.
	MeterProvider metric.MeterProvider
	// MetricsInterval is how often Run counts the table's rows for the row gauges (default 15 s); each
	// count is cut after the smaller of this and MaxCountDuration. A scrape reads the last count from
	// memory and never waits on the store.
	MetricsInterval time.Duration
}

// The defaults of Config.
const (
	DefaultPollInterval  = time.Second
	DefaultLease         = 30 * time.Second
	DefaultConcurrency   = 4
	DefaultMaxAttempts   = 5
	DefaultBackoffBase   = time.Second
	DefaultBackoffMax    = 5 * time.Minute
	DefaultShutdownGrace = 30 * time.Second
	// DefaultMetricsInterval: Prometheus' usual scrape interval, so a scrape sees a count at most one
	// interval old, at one count of the table per scheduler per interval (as when each scrape counted).
	DefaultMetricsInterval = 15 * time.Second
)

// MaxCountDuration bounds one count of the rows for the gauges: a store that takes longer is reported
// failing (oplog_schedule_row_counts_failed) rather than waited for.
const MaxCountDuration = 5 * time.Second

// Range is the values a count or duration of Config (or a setting of the scheduled rows, such as the
// registrar's archive interval) may take, bounds included (one type with the sweep's and the
// configuration's).
type Range[T int | time.Duration] = bounds.Range[T]

// The ranges of the scheduler's settings. The bounds are far from any sensible setting; they exist so
// that no value validates and then misbehaves.
var (
	// LeaseRange: the lease is renewed every Lease/3 on a ticker, which a lease under 3 ns would
	// make zero (a panic), and stores keep milliseconds; under a second the renewals would be most of
	// the store's load. Over a day, a row of a crashed process would wait that long to run again.
	LeaseRange = Range[time.Duration]{Min: time.Second, Max: 24 * time.Hour}
	// PollIntervalRange: under 10 ms the idle scheduler is a claim loop on the store; over an hour
	// due rows wait that long for a free slot to be noticed.
	PollIntervalRange = Range[time.Duration]{Min: 10 * time.Millisecond, Max: time.Hour}
	// ConcurrencyRange: each slot is a goroutine and a claimed row; a claim of millions of rows would
	// hold their leases for nothing.
	ConcurrencyRange = Range[int]{Min: 1, Max: 1024}
	// MaxAttemptsRange: more than a thousand attempts at the capped backoff is a row retried for
	// years, which is what "failed" is for.
	MaxAttemptsRange = Range[int]{Min: 1, Max: 1000}
	// BackoffRange bounds BackoffBase and BackoffMax: a day keeps the doubling in RetryDelay far from
	// overflowing a time.Duration.
	BackoffRange = Range[time.Duration]{Min: time.Millisecond, Max: 24 * time.Hour}
	// ShutdownGraceRange is the sweep's (sweeper.ShutdownGraceRange): one grace for the process.
	ShutdownGraceRange = bounds.ShutdownGrace
	// ArchiveIntervalRange bounds Registrar.ArchiveInterval: a row due more than a year after its
	// agent went idle is an oplog nobody will see archived.
	ArchiveIntervalRange = Range[time.Duration]{Min: 0, Max: 366 * 24 * time.Hour}
	// MetricsIntervalRange: under a second the counts would be a steady query load on the table; over
	// an hour the row gauges say little about now.
	MetricsIntervalRange = Range[time.Duration]{Min: time.Second, Max: time.Hour}
)

// Validate reports every field outside its range, joined, each naming the field, its value and the
// range. A zero field is valid: it takes the default.
func (c Config) Validate() error {
	var errs []error
	if c.Owner == "" {
		errs = append(errs, errors.New("schedule owner is empty: every process sharing the table needs a name of its own"))
	}
	errs = append(errs,
		checkRange("poll_interval", c.PollInterval, PollIntervalRange),
		checkRange("lease", c.Lease, LeaseRange),
		checkRange("concurrency", c.Concurrency, ConcurrencyRange),
		checkRange("max_attempts", c.MaxAttempts, MaxAttemptsRange),
		checkRange("backoff_base", c.BackoffBase, BackoffRange),
		checkRange("backoff_max", c.BackoffMax, BackoffRange),
		checkRange("metrics_interval", c.MetricsInterval, MetricsIntervalRange),
	)
	if c.ShutdownGrace > ShutdownGraceRange.Max {
		errs = append(errs, fmt.Errorf("schedule shutdown_grace %v: want a negative value (none), 0 (the default) or up to %v",
			c.ShutdownGrace, ShutdownGraceRange.Max))
	}
	return errors.Join(errs...)
}

// checkRange accepts zero (the default) or a value within r.
func checkRange[T int | time.Duration](name string, v T, r Range[T]) error {
	if v == 0 || r.Contains(v) {
		return nil
	}
	return fmt.Errorf("schedule %s %v: want 0 (the default) or from %v to %v", name, v, r.Min, r.Max)
}

func (c Config) withDefaults() Config {
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = DefaultBackoffBase
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	switch {
	case c.ShutdownGrace == 0:
		c.ShutdownGrace = DefaultShutdownGrace
	case c.ShutdownGrace < 0:
		c.ShutdownGrace = 0
	}
	if c.MetricsInterval == 0 {
		c.MetricsInterval = DefaultMetricsInterval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// RetryDelay is the wait after the failed attempt number attempts (1-based): base doubling per
// attempt, capped at maxDelay.
func RetryDelay(attempts int, base, maxDelay time.Duration) time.Duration {
	return backoff.Policy{Initial: base, Max: maxDelay, Multiplier: 2}.Delay(attempts)
}

// Handler runs one claimed row. A nil error acknowledges the row; an error retries it with backoff.
type Handler func(ctx context.Context, row Row) error

// Tally counts what a RunOnce did. Cut rows were stopped by cancellation before they finished and
// were left to their leases.
type Tally struct {
	Claimed, Succeeded, Retried, Failed, LeaseLost, Cut int
}

// ErrShutdownGrace is the cause of a row's context cancelled because Run's shutdown grace elapsed
// (context.Cause).
var ErrShutdownGrace = errors.New("scheduler shutdown grace elapsed")

// Scheduler claims the due rows of the buckets it owns and runs them with bounded concurrency.
type Scheduler struct {
	store  Store
	handle Handler
	owned  func() []oplog.BucketRange
	cfg    Config
	log    *slog.Logger
	m      *instruments
	counts rowCounts
}

// NewScheduler returns a scheduler over store for the bucket ranges owned() returns at each claim, or
// cfg.Validate's error. A scheduler that owns shards of a shard count passes their ranges,
// oplog.ShardsBuckets(count, shards), read afresh at each claim: after a change of the shard count it
// claims exactly the rows of the agents it owns now. OwnedShards builds such a function.
func NewScheduler(store Store, handle Handler, owned func() []oplog.BucketRange, cfg Config, log *slog.Logger) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil || handle == nil || owned == nil {
		return nil, errors.New("schedule: NewScheduler needs a store, a handler and an owned-buckets function")
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Scheduler{store: store, handle: handle, owned: owned, cfg: cfg.withDefaults(), log: log}
	s.counts.since = s.cfg.Now()
	var err error
	if s.m, err = newInstruments(cfg.MeterProvider, s); err != nil {
		return nil, fmt.Errorf("schedule: metrics: %w", err)
	}
	return s, nil
}

// OwnedShards is an owned-buckets function for NewScheduler from an assignment read at each claim:
// the bucket ranges of the shards among count, or none while assigned reports false (or the count is
// outside [1, oplog.Buckets]).
func OwnedShards(assignment func() (count int, shards []int, assigned bool)) func() []oplog.BucketRange {
	return func() []oplog.BucketRange {
		count, shards, ok := assignment()
		if !ok {
			return nil
		}
		return oplog.ShardsBuckets(count, shards)
	}
}

// RunOnce claims up to Concurrency due rows and runs them all to completion, or until ctx is
// cancelled: a row cut that way is left to its lease.
func (s *Scheduler) RunOnce(ctx context.Context) (Tally, error) {
	rows, err := s.claim(ctx, s.cfg.Concurrency)
	if err != nil || len(rows) == 0 {
		return Tally{}, err
	}
	var mu sync.Mutex
	t := Tally{Claimed: len(rows)}
	var wg sync.WaitGroup
	for _, r := range rows {
		wg.Go(func() {
			res := s.run(ctx, r)
			mu.Lock()
			defer mu.Unlock()
			t.add(res)
		})
	}
	wg.Wait()
	return t, nil
}

// Run keeps up to Concurrency rows running, polling every PollInterval for more, until ctx is
// cancelled. Then it stops claiming and gives the rows under way ShutdownGrace to finish, their leases
// still renewed; the rows still running after it are cancelled, and Run returns once they have
// returned. A cut row loses nothing: it is left claimed, and runs again when its lease expires. Beside
// the claims, it counts the table's rows for the gauges every MetricsInterval (RefreshRowCounts), on
// a goroutine of its own, so that neither a slow claim nor a slow count holds up the other.
func (s *Scheduler) Run(ctx context.Context) error {
	var counting sync.WaitGroup
	counting.Go(func() { s.countRowsEvery(ctx) })
	defer counting.Wait()
	// The rows' context outlives ctx by the grace, so a shutdown does not cut a step that is about to
	// finish, and a black-holed store cannot hold the shutdown longer than the grace.
	rowCtx, release := grace.After(ctx, s.cfg.ShutdownGrace, ErrShutdownGrace)
	defer release()
	slots := make(chan struct{}, s.cfg.Concurrency)
	var wg sync.WaitGroup
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			if context.Cause(rowCtx) == ErrShutdownGrace {
				s.log.Warn("shutdown grace elapsed: the scheduled actions still under way were cancelled; their leases bring them back",
					"grace", s.cfg.ShutdownGrace)
			}
			return nil
		case <-timer.C:
		}
		free := s.cfg.Concurrency - len(slots)
		if free > 0 {
			rows, err := s.claim(ctx, free)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("claim scheduled actions", "err", err)
			}
			for _, r := range rows {
				slots <- struct{}{}
				wg.Go(func() {
					defer func() { <-slots }()
					s.run(rowCtx, r)
				})
			}
		}
		timer.Reset(s.cfg.PollInterval)
	}
}

func (s *Scheduler) claim(ctx context.Context, limit int) ([]Row, error) {
	buckets := s.owned()
	if len(buckets) == 0 {
		return nil, nil
	}
	rows, err := s.store.Claim(ctx, s.cfg.Owner, buckets, s.cfg.Now(), s.cfg.Lease, limit)
	s.m.claimed(rows)
	return rows, err
}

type result int

const (
	resultSucceeded result = iota
	resultRetried
	resultFailed
	resultLeaseLost
	resultCut
)

func (t *Tally) add(r result) {
	switch r {
	case resultSucceeded:
		t.Succeeded++
	case resultRetried:
		t.Retried++
	case resultFailed:
		t.Failed++
	case resultLeaseLost:
		t.LeaseLost++
	case resultCut:
		t.Cut++
	}
}

// run runs one row with its lease renewed every Lease/3, then acknowledges or releases it. A row whose
// ctx was cancelled (shutdown) and that did not succeed is neither: releasing it would count the cut as
// a failed attempt, so it is left to its lease.
func (s *Scheduler) run(ctx context.Context, row Row) result {
	runCtx, cancel := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		tick := time.NewTicker(s.cfg.Lease / 3)
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
				if err := s.store.Extend(runCtx, row.ID, s.cfg.Owner, s.cfg.Now().Add(s.cfg.Lease)); errors.Is(err, ErrLeaseLost) {
					s.log.Warn("lease lost while running a scheduled action", "id", row.ID, "agent", row.Action.Agent.Key())
					cancel()
					return
				}
			}
		}
	}()
	err := s.handle(runCtx, row)
	cancel()
	<-renewed

	if err == nil {
		if ackErr := s.store.Ack(ctx, row.ID, s.cfg.Owner); ackErr != nil {
			s.log.Warn("acknowledge scheduled action", "id", row.ID, "err", ackErr)
			return resultLeaseLost
		}
		return resultSucceeded
	}
	if ctx.Err() != nil {
		s.log.Info("scheduled action cut by shutdown; it runs again when its lease expires", "id", row.ID,
			"agent", row.Action.Agent.Key(), "cause", context.Cause(ctx))
		return resultCut
	}
	failed := row.Attempts >= s.cfg.MaxAttempts
	retryAt := s.cfg.Now().Add(RetryDelay(row.Attempts, s.cfg.BackoffBase, s.cfg.BackoffMax))
	if relErr := s.store.Release(ctx, row.ID, s.cfg.Owner, retryAt, failed); relErr != nil {
		s.log.Warn("release scheduled action", "id", row.ID, "err", relErr)
		return resultLeaseLost
	}
	if failed {
		s.m.failed(row)
		s.log.Error("scheduled action failed for good", "id", row.ID, "agent", row.Action.Agent.Key(),
			"mode", row.Action.Mode, "attempts", row.Attempts, "err", err)
		return resultFailed
	}
	s.log.Info("scheduled action will be retried", "id", row.ID, "agent", row.Action.Agent.Key(),
		"attempts", row.Attempts, "retry_at", retryAt, "err", err)
	return resultRetried
}
