package indexedstorage

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/stratalog/strata/internal/backoff"
)

// RetryPolicy says how often and how patiently Retry tries a transient failure again.
type RetryPolicy struct {
	// MaxAttempts is the total number of tries, the first included. Values below 1 mean 1.
	MaxAttempts int
	// InitialDelay is the wait after the first failure.
	InitialDelay time.Duration
	// MaxDelay caps every wait.
	MaxDelay time.Duration
	// Multiplier grows the wait after each further failure. Values below 1 mean 1.
	Multiplier float64
	// Jitter spreads each wait uniformly over ±Jitter of itself (0.15 = ±15 %), so that callers who
	// failed together do not retry together.
	Jitter float64
}

// DefaultRetryPolicy: 3 attempts, waits from 100 ms growing ×3 up to 1 s, ±15 % jitter.
var DefaultRetryPolicy = RetryPolicy{
	MaxAttempts:  3,
	InitialDelay: 100 * time.Millisecond,
	MaxDelay:     time.Second,
	Multiplier:   3,
	Jitter:       0.15,
}

// Delay is the wait after the failed attempt number attempt (1-based), before jitter.
func (p RetryPolicy) Delay(attempt int) time.Duration { return p.backoff().Delay(attempt) }

// backoff is the policy's waits as the one backoff every loop of strata shares.
func (p RetryPolicy) backoff() backoff.Policy {
	return backoff.Policy{Initial: p.InitialDelay, Max: p.MaxDelay, Multiplier: p.Multiplier, Jitter: p.Jitter}
}

// Retry runs op until it succeeds, returns an error that is not ErrTransient, the policy's attempts
// are spent, or ctx ends. It returns op's last error; if ctx ended while waiting, the context's error.
// Only transient errors are retried: a conflict or an invalid argument would fail the same way again.
//
// A write whose first attempt reached the engine but whose reply was lost is applied; retried, it then
// meets itself and returns ErrConflict. A caller retrying writes therefore treats a conflict after a
// transient failure as "possibly written" and re-reads (the archive step reads the target's last index
// on every run, which is why it converges).
func Retry(ctx context.Context, policy RetryPolicy, op func(context.Context) error) error {
	attempts, waits := max(policy.MaxAttempts, 1), policy.backoff()
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if err == nil || !IsTransient(err) || attempt >= attempts {
			return err
		}
		if err := backoff.Wait(ctx, waits.Jittered(waits.Delay(attempt), rand.Float64())); err != nil {
			return err
		}
	}
}
