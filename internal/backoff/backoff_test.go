package backoff

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func TestPolicy_Delay(t *testing.T) {
	const ms = time.Millisecond
	retry := Policy{Initial: 100 * ms, Max: time.Second, Multiplier: 3}
	doubling := Policy{Initial: time.Second, Max: time.Minute, Multiplier: 2}
	for _, c := range []struct {
		name    string
		p       Policy
		attempt int
		want    time.Duration
	}{
		{"first attempt waits Initial", retry, 1, 100 * ms},
		{"grows by the multiplier", retry, 2, 300 * ms},
		{"and again", retry, 3, 900 * ms},
		{"up to the cap", retry, 4, time.Second},
		{"doubling", doubling, 3, 4 * time.Second},
		{"doubling capped", doubling, 10, time.Minute},
		{"a cap between powers of two", Policy{Initial: time.Minute, Max: 3 * time.Minute, Multiplier: 2}, 3, 3 * time.Minute},
		{"attempt 0 reads as 1", retry, 0, 100 * ms},
		{"a negative attempt reads as 1", retry, math.MinInt, 100 * ms},
		{"top of the range, growing", retry, math.MaxInt, time.Second},
		{"top of the range, constant", Policy{Initial: ms, Max: time.Second, Multiplier: 1}, math.MaxInt, ms},
		{"top of the range, barely growing", Policy{Initial: 1, Max: math.MaxInt64, Multiplier: 1 + 1e-15}, math.MaxInt, math.MaxInt64},
		{"top of the range, no cap to speak of", Policy{Initial: time.Second, Max: math.MaxInt64, Multiplier: 10}, math.MaxInt, math.MaxInt64},
		{"past the longest duration before the cap", Policy{Initial: time.Hour, Max: math.MaxInt64, Multiplier: 1e6}, 4, math.MaxInt64},
		{"a multiplier below 1 reads as 1", Policy{Initial: ms, Max: time.Second, Multiplier: 0.5}, 5, ms},
		{"a NaN multiplier reads as 1", Policy{Initial: ms, Max: time.Second, Multiplier: math.NaN()}, 5, ms},
		{"Initial above Max is capped", Policy{Initial: time.Hour, Max: time.Minute, Multiplier: 2}, 1, time.Minute},
		{"no Initial, no wait", Policy{Max: time.Second, Multiplier: 2}, 7, 0},
		{"no Max, no wait", Policy{Initial: time.Second, Multiplier: 2}, 1, 0},
		{"a negative Initial, no wait", Policy{Initial: -time.Second, Max: time.Second, Multiplier: 2}, 3, 0},
	} {
		if got := c.p.Delay(c.attempt); got != c.want {
			t.Errorf("%s: Delay(%d) = %v, want %v", c.name, c.attempt, got, c.want)
		}
	}
}

func TestPolicy_Jittered(t *testing.T) {
	const s = time.Second
	almostOne := math.Nextafter(1, 0)
	for _, c := range []struct {
		name   string
		jitter float64
		d      time.Duration
		u      float64
		want   time.Duration
	}{
		{"u 0 is the shortest", 0.15, s, 0, 850 * time.Millisecond},
		{"u ½ is d", 0.15, s, 0.5, s},
		{"u ¾ is halfway to the longest", 0.5, 10 * s, 0.75, 12500 * time.Millisecond},
		{"no jitter", 0, s, 0, s},
		{"a negative jitter is none", -1, s, 0, s},
		{"a NaN jitter is none", math.NaN(), s, 0, s},
		{"never below nothing", 3, s, 0, 0},
		{"saturates at the longest duration", 0.5, math.MaxInt64, almostOne, math.MaxInt64},
	} {
		if got := (Policy{Jitter: c.jitter}).Jittered(c.d, c.u); got != c.want {
			t.Errorf("%s: Jittered(%v, %v) = %v, want %v", c.name, c.d, c.u, got, c.want)
		}
	}
}

func TestWait_ADoneContextReturnsItsErrorAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Wait(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	if err := Wait(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait(0) = %v, want context.Canceled", err)
	}
}

func TestWait_CancelledWhileWaitingReturnsTheContextsError(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- Wait(ctx, time.Hour) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}

func TestWait_AWaitThatPassesReturnsNil(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, 0, time.Nanosecond} {
		if err := Wait(t.Context(), d); err != nil {
			t.Fatalf("Wait(%v) = %v, want nil", d, err)
		}
	}
}
