package indexedstorage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
)

var quick = is.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Microsecond, MaxDelay: time.Millisecond, Multiplier: 3, Jitter: 0.15}

func TestRetry_RetriesTransientUntilAttemptsAreSpent(t *testing.T) {
	calls := 0
	transient := is.Classify(is.ErrTransient, errors.New("connection reset"))
	err := is.Retry(t.Context(), quick, func(context.Context) error { calls++; return transient })
	if calls != 3 || !errors.Is(err, is.ErrTransient) {
		t.Fatalf("calls %d, err %v; want 3 calls and the transient error", calls, err)
	}
}

func TestRetry_StopsAtFirstSuccess(t *testing.T) {
	calls := 0
	err := is.Retry(t.Context(), quick, func(context.Context) error {
		calls++
		if calls < 2 {
			return is.Classify(is.ErrTransient, errors.New("busy"))
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("calls %d, err %v; want success on the second call", calls, err)
	}
}

func TestRetry_NeverRetriesPermanentErrors(t *testing.T) {
	for _, kind := range []error{is.ErrConflict, is.ErrInvalidArgument, is.ErrClosed, errors.New("unclassified")} {
		calls := 0
		err := is.Retry(t.Context(), quick, func(context.Context) error { calls++; return kind })
		if calls != 1 || !errors.Is(err, kind) {
			t.Fatalf("%v: calls %d, err %v; want one call", kind, calls, err)
		}
	}
}

func TestRetry_ReturnsContextErrorWhenCancelledWhileWaiting(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	slow := is.RetryPolicy{MaxAttempts: 5, InitialDelay: time.Hour, MaxDelay: time.Hour, Multiplier: 1}
	calls := 0
	err := is.Retry(ctx, slow, func(context.Context) error {
		calls++
		cancel()
		return is.Classify(is.ErrTransient, errors.New("timeout"))
	})
	if calls != 1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("calls %d, err %v; want one call and context.Canceled", calls, err)
	}
}

func TestRetryPolicy_DelayGrowsToCap(t *testing.T) {
	p := is.DefaultRetryPolicy
	want := []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 900 * time.Millisecond, time.Second, time.Second}
	for i, w := range want {
		if got := p.Delay(i + 1); got != w {
			t.Fatalf("Delay(%d) = %v, want %v", i+1, got, w)
		}
	}
	if p.MaxAttempts != 3 || p.Jitter != 0.15 {
		t.Fatalf("default policy %+v", p)
	}
}
