package indexedstorage

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"golang.org/x/sync/semaphore"

	"github.com/stratalog/strata/internal/latency"
)

// Limiter is a Storage that lets at most n operations of its inner Storage run at once, across every
// caller that shares this value: the invocation path, the archive layers and the sweep all queue on the
// same semaphore, so no one of them can take the whole engine. Waiters are served first come, first
// served. Close is not limited.
type Limiter struct {
	around
	sem *semaphore.Weighted
	n   int

	waiting     atomic.Int64
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	acquired    atomic.Int64
	waitNanos   atomic.Int64
	holdNanos   atomic.Int64

	waitHist metric.Float64Histogram
	attrs    metric.MeasurementOption
}

// Limited is implemented by a Storage that bounds how many of its operations run at once: a Limiter,
// and a backend that keeps its limit inside (postgres, max_concurrent_ops). A caller that exports the
// limit's wait and occupancy (the sidecar) asks the storage it opened for it with one type assertion;
// a wrapper over a Limited storage does not forward it.
type Limited interface {
	LimiterStats() LimiterStats
}

var _ Limited = (*Limiter)(nil)

// LimiterStats is a snapshot of a Limiter's counters.
type LimiterStats struct {
	Limit       int           // the bound n
	Waiting     int64         // operations queued for a slot now
	InFlight    int64         // operations holding a slot now
	MaxInFlight int64         // the most that ever held a slot at once
	Acquired    int64         // slots handed out so far
	WaitTotal   time.Duration // time spent queued, summed over operations
	HoldTotal   time.Duration // time slots were held, summed over operations
}

// LimitOption configures Limit.
type LimitOption func(*Limiter)

// WithLimiterMetrics records every wait for a slot in the histogram
// strata_storage_limiter_wait_duration_seconds (the buckets of internal/latency) labelled storage=name.
func WithLimiterMetrics(mp metric.MeterProvider, name string) LimitOption {
	return func(l *Limiter) {
		h, err := mp.Meter(meterName).Float64Histogram("strata_storage_limiter_wait_duration",
			latency.Histogram("Time an operation waited for a storage concurrency slot.")...)
		if err != nil {
			otel.Handle(err)
			return
		}
		l.waitHist = h
		l.attrs = metric.WithAttributeSet(attribute.NewSet(attribute.String("storage", name)))
	}
}

// Limit wraps st so that at most n of its operations run at once (n < 1 is read as 1).
func Limit(st Storage, n int, opts ...LimitOption) *Limiter {
	n = max(n, 1)
	l := &Limiter{sem: semaphore.NewWeighted(int64(n)), n: n}
	l.around = around{inner: st, call: l.call}
	for _, o := range opts {
		o(l)
	}
	return l
}

// LimiterStats is Stats, for Limited.
func (l *Limiter) LimiterStats() LimiterStats { return l.Stats() }

// Stats returns the limiter's counters.
func (l *Limiter) Stats() LimiterStats {
	return LimiterStats{
		Limit:       l.n,
		Waiting:     l.waiting.Load(),
		InFlight:    l.inFlight.Load(),
		MaxInFlight: l.maxInFlight.Load(),
		Acquired:    l.acquired.Load(),
		WaitTotal:   time.Duration(l.waitNanos.Load()),
		HoldTotal:   time.Duration(l.holdNanos.Load()),
	}
}

func (l *Limiter) call(ctx context.Context, _ Operation, do func(context.Context) error) error {
	start := time.Now()
	l.waiting.Add(1)
	err := l.sem.Acquire(ctx, 1)
	l.waiting.Add(-1)
	waited := time.Since(start)
	l.waitNanos.Add(int64(waited))
	if l.waitHist != nil {
		l.waitHist.Record(ctx, waited.Seconds(), l.attrs)
	}
	if err != nil {
		// Waiting out a deadline for a slot is the pool-acquire timeout of the contract: transient.
		if errors.Is(err, context.DeadlineExceeded) {
			return Classify(ErrTransient, err)
		}
		return err
	}
	held := time.Now()
	n := l.inFlight.Add(1)
	for m := l.maxInFlight.Load(); n > m && !l.maxInFlight.CompareAndSwap(m, n); m = l.maxInFlight.Load() {
	}
	l.acquired.Add(1)
	defer func() {
		l.inFlight.Add(-1)
		l.holdNanos.Add(int64(time.Since(held)))
		l.sem.Release(1)
	}()
	return do(ctx)
}
