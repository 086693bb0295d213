package chaos

import (
	"slices"
	"sync"
	"time"
)

// sample is one invocation as the executor saw it.
type sample struct {
	start   time.Time
	latency time.Duration
	durable bool
}

// recorder keeps every invocation's latency, by start time.
type recorder struct {
	mu      sync.Mutex
	samples []sample
}

func (r *recorder) add(s sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
}

func (r *recorder) all() []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.samples)
}

// window is a span of the run: baseline, fault or recovery.
type window struct {
	from, to time.Time
}

func (w window) seconds() float64 { return w.to.Sub(w.from).Seconds() }

// PhaseStats are the latency figures of the invocations of one stream that started in one window.
type PhaseStats struct {
	Count      int
	P50, P90   time.Duration
	Throughput float64 // invocations completed per second of the window
	OverLimit  int     // invocations slower than the timeout
}

func phaseStats(samples []sample, w window, durable bool, timeout time.Duration) PhaseStats {
	var lat []time.Duration
	completed := 0
	st := PhaseStats{}
	for _, s := range samples {
		if s.durable != durable {
			continue
		}
		if !s.start.Before(w.from) && s.start.Before(w.to) {
			lat = append(lat, s.latency)
			if s.latency > timeout {
				st.OverLimit++
			}
		}
		if end := s.start.Add(s.latency); !end.Before(w.from) && end.Before(w.to) {
			completed++
		}
	}
	st.Count = len(lat)
	st.P50, st.P90 = percentile(lat, 0.5), percentile(lat, 0.9)
	if secs := w.seconds(); secs > 0 {
		st.Throughput = float64(completed) / secs
	}
	return st
}

// percentile is the nearest-rank percentile; 0 for no samples.
func percentile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// series is p50 per bucket of the run's timeline, for the plot: x in seconds from the run's start,
// y the p50 of the invocations of a stream that started in the bucket (NaN-free: empty buckets are
// skipped).
type point struct {
	x float64
	y time.Duration
}

func p50Series(samples []sample, start time.Time, bucket time.Duration, durable bool) []point {
	byBucket := map[int][]time.Duration{}
	for _, s := range samples {
		if s.durable == durable {
			b := int(s.start.Sub(start) / bucket)
			byBucket[b] = append(byBucket[b], s.latency)
		}
	}
	var out []point
	for b, lat := range byBucket {
		out = append(out, point{x: (float64(b) + 0.5) * bucket.Seconds(), y: percentile(lat, 0.5)})
	}
	slices.SortFunc(out, func(a, b point) int {
		switch {
		case a.x < b.x:
			return -1
		case a.x > b.x:
			return 1
		}
		return 0
	})
	return out
}

// busyTracker measures the time during which at least one operation of one caller is in flight: the
// sweep's duty cycle on a shared limiter.
type busyTracker struct {
	mu       sync.Mutex
	inFlight int
	since    time.Time
	spans    []window
}

func (b *busyTracker) begin(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inFlight == 0 {
		b.since = now
	}
	b.inFlight++
}

func (b *busyTracker) end(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inFlight--
	if b.inFlight == 0 {
		b.spans = append(b.spans, window{from: b.since, to: now})
	}
}

// duty is the share of w during which something was in flight.
func (b *busyTracker) duty(w window, now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	spans := slices.Clone(b.spans)
	if b.inFlight > 0 {
		spans = append(spans, window{from: b.since, to: now})
	}
	var busy time.Duration
	for _, s := range spans {
		from, to := maxTime(s.from, w.from), minTime(s.to, w.to)
		if to.After(from) {
			busy += to.Sub(from)
		}
	}
	if w.seconds() <= 0 {
		return 0
	}
	return busy.Seconds() / w.seconds()
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
