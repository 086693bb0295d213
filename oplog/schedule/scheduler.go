package schedule

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Config of a Scheduler. Zero fields take the defaults below.
type Config struct {
	// Owner names this process in lease_owner; it must differ between processes sharing the table.
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
	// Now is the clock (time.Now when nil); tests move it instead of sleeping.
	Now func() time.Time
}

// The defaults of Config.
const (
	DefaultPollInterval = time.Second
	DefaultLease        = 30 * time.Second
	DefaultConcurrency  = 4
	DefaultMaxAttempts  = 5
	DefaultBackoffBase  = time.Second
	DefaultBackoffMax   = 5 * time.Minute
)

func (c Config) withDefaults() Config {
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.Lease <= 0 {
		c.Lease = DefaultLease
	}
	if c.Concurrency < 1 {
		c.Concurrency = DefaultConcurrency
	}
	if c.MaxAttempts < 1 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = DefaultBackoffBase
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// RetryDelay is the wait after the failed attempt number attempts (1-based): base doubling per
// attempt, capped at maxDelay.
func RetryDelay(attempts int, base, maxDelay time.Duration) time.Duration {
	d := base
	for i := 1; i < attempts && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}

// Handler runs one claimed row. A nil error acknowledges the row; an error retries it with backoff.
type Handler func(ctx context.Context, row Row) error

// Tally counts what a RunOnce did.
type Tally struct {
	Claimed, Succeeded, Retried, Failed, LeaseLost int
}

// Scheduler claims the due rows of the shards it owns and runs them with bounded concurrency.
type Scheduler struct {
	store  Store
	handle Handler
	shards func() []int
	cfg    Config
	log    *slog.Logger
}

// NewScheduler returns a scheduler over store for the shards shards() returns at each claim.
func NewScheduler(store Store, handle Handler, shards func() []int, cfg Config, log *slog.Logger) *Scheduler {
	if log == nil {
		log = slog.Default()
	}
	return &Scheduler{store: store, handle: handle, shards: shards, cfg: cfg.withDefaults(), log: log}
}

// RunOnce claims up to Concurrency due rows and runs them all to completion.
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
// cancelled; then it stops claiming and waits for the rows under way, which finish with their leases
// renewed (an archive step is not cut in the middle by shutdown).
func (s *Scheduler) Run(ctx context.Context) error {
	slots := make(chan struct{}, s.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
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
					s.run(context.WithoutCancel(ctx), r)
				})
			}
		}
		timer.Reset(s.cfg.PollInterval)
	}
}

func (s *Scheduler) claim(ctx context.Context, limit int) ([]Row, error) {
	shards := s.shards()
	if len(shards) == 0 {
		return nil, nil
	}
	return s.store.Claim(ctx, s.cfg.Owner, shards, s.cfg.Now(), s.cfg.Lease, limit)
}

type result int

const (
	resultSucceeded result = iota
	resultRetried
	resultFailed
	resultLeaseLost
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
	}
}

// run runs one row with its lease renewed every Lease/3, then acknowledges or releases it.
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
	failed := row.Attempts >= s.cfg.MaxAttempts
	retryAt := s.cfg.Now().Add(RetryDelay(row.Attempts, s.cfg.BackoffBase, s.cfg.BackoffMax))
	if relErr := s.store.Release(ctx, row.ID, s.cfg.Owner, retryAt, failed); relErr != nil {
		s.log.Warn("release scheduled action", "id", row.ID, "err", relErr)
		return resultLeaseLost
	}
	if failed {
		s.log.Error("scheduled action failed for good", "id", row.ID, "agent", row.Action.Agent.Key(),
			"mode", row.Action.Mode, "attempts", row.Attempts, "err", err)
		return resultFailed
	}
	s.log.Info("scheduled action will be retried", "id", row.ID, "agent", row.Action.Agent.Key(),
		"attempts", row.Attempts, "retry_at", retryAt, "err", err)
	return resultRetried
}
