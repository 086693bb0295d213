// Package backoff is the one growing wait of strata's loops: Retry's wait after a transient storage
// failure, the scheduler's retry of a failed row, the sweep's wait after ticks that hit their deadline,
// and multi-SQLite's polls of a busy file or lock. The arithmetic is pure; Wait is the only part that
// sleeps.
package backoff

import (
	"context"
	"math"
	"time"
)

// Policy is a wait growing by Multiplier per attempt from Initial up to Max, spread by Jitter.
type Policy struct {
	// Initial is the wait after the first attempt. Zero or less means no wait.
	Initial time.Duration
	// Max caps every wait, Initial included. Zero or less means no wait.
	Max time.Duration
	// Multiplier grows the wait after each further attempt. Values below 1 mean 1: a constant wait.
	Multiplier float64
	// Jitter spreads a wait uniformly over ±Jitter of itself (0.15 = ±15 %), so that callers who
	// failed together do not try again together. Zero or less means none.
	Jitter float64
}

// maxWait is the first float64 above every time.Duration: a float at or above it does not convert.
const maxWait = 1 << 63

// Delay is the wait after the failed attempt number attempt (1-based; below 1 reads as 1), before
// jitter: Initial × Multiplier^(attempt−1), capped at Max. It takes the same time at any attempt, up to
// math.MaxInt.
func (p Policy) Delay(attempt int) time.Duration {
	if p.Initial <= 0 || p.Max <= 0 {
		return 0
	}
	growth := 1.0
	if p.Multiplier > 1 { // a NaN reads as 1 too
		growth = p.Multiplier
	}
	d := float64(p.Initial) * math.Pow(growth, float64(max(attempt, 1)-1))
	if d >= maxWait { // +Inf included
		return p.Max
	}
	return min(time.Duration(d), p.Max)
}

// Jittered spreads d by ±Jitter; u is uniform in [0, 1) (rand.Float64). The result is never negative
// (a Jitter above 1 may ask for less than nothing) and saturates at the longest time.Duration.
func (p Policy) Jittered(d time.Duration, u float64) time.Duration {
	if !(p.Jitter > 0) { // a NaN means none too
		return d
	}
	j := float64(d) * (1 + p.Jitter*(2*u-1))
	switch {
	case j >= maxWait:
		return math.MaxInt64
	case j <= 0:
		return 0
	}
	return time.Duration(j)
}

// Wait waits d, or less if ctx ends first, and then returns ctx's error: nil if the whole wait passed.
// A context already done returns its error at once, whatever d.
func Wait(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil || d <= 0 {
		return err
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
