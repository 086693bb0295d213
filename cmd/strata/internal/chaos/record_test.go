package chaos

import (
	"testing"
	"time"
)

func TestPercentile_NearestRank(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 10; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	if p := percentile(lat, 0.5); p != 5*time.Millisecond {
		t.Fatalf("p50 = %v", p)
	}
	if p := percentile(lat, 0.9); p != 9*time.Millisecond {
		t.Fatalf("p90 = %v", p)
	}
	if percentile(nil, 0.5) != 0 {
		t.Fatal("p50 of nothing")
	}
}

func TestPhaseStats_CountsByStartAndThroughputByEnd(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := window{from: t0, to: t0.Add(10 * time.Second)}
	samples := []sample{
		{start: t0.Add(-time.Second), latency: 2 * time.Second},           // started before, ends inside: throughput only
		{start: t0.Add(time.Second), latency: time.Second},                // inside
		{start: t0.Add(2 * time.Second), latency: 5 * time.Second},        // inside, over a 3 s timeout
		{start: t0.Add(9 * time.Second), latency: 4 * time.Second},        // starts inside, ends after
		{start: t0.Add(time.Second), latency: time.Second, durable: true}, // another stream
	}
	st := phaseStats(samples, w, false, 3*time.Second)
	if st.Count != 3 || st.OverLimit != 2 || st.Throughput != 0.3 || st.P50 != 4*time.Second {
		t.Fatalf("stats %+v", st)
	}
}

func TestBusyTracker_DutyIsTheShareOfTheWindowWithWorkInFlight(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var b busyTracker
	b.begin(t0.Add(time.Second))
	b.begin(t0.Add(2 * time.Second)) // overlapping: still one busy span
	b.end(t0.Add(3 * time.Second))
	b.end(t0.Add(4 * time.Second))
	b.begin(t0.Add(8 * time.Second)) // still in flight at the end of the window
	w := window{from: t0, to: t0.Add(10 * time.Second)}
	if d := b.duty(w, t0.Add(12*time.Second)); d != 0.5 {
		t.Fatalf("duty %v, want 0.5 (3 s + 2 s of 10 s)", d)
	}
}
