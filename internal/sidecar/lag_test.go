package sidecar

import (
	"strings"
	"testing"
	"time"
)

// A known backlog shows in /v1/status (the last tick's lag per route, and the lag the gauges show) and
// in /metrics, the oldest's age rising between ticks and through ticks that stand down (the agents still
// wait: an outage must not blind the alert), and both fall to nothing once it is archived.
func TestAPI_StatusAndMetricsShowTheLagOfAKnownBacklog(t *testing.T) {
	s, srv, clk := testSidecar(t, nil)
	for _, name := range []string{"a", "b", "c"} {
		strand(t, s, name, 4)
	}
	call(t, srv, "PUT", "/v1/assignment", "", jsonBody(map[string]any{"shard_count": 1, "shards": []int{0}, "lease_seconds": 3600}))
	call(t, srv, "PUT", "/v1/residency", "", jsonBody(map[string]any{"agents": []string{}}))
	firstSighted := clk.Now()
	if code, rep := call(t, srv, "POST", "/v1/sweep", "", nil); code != 200 {
		t.Fatalf("sweep: %d %v", code, rep)
	}
	status := func() (last, lag map[string]any) {
		t.Helper()
		_, status := call(t, srv, "GET", "/v1/status", "", nil)
		sweep := status["sweep"].(map[string]any)
		if routes, _ := sweep["last"].(map[string]any)["routes"].([]any); len(routes) > 0 {
			last = routes[0].(map[string]any)["lag"].(map[string]any)
		}
		lags := sweep["lag"].([]any)
		if len(lags) != 1 || lags[0].(map[string]any)["route"] != "ephemeral-l1" {
			t.Fatalf("status sweep.lag %v, want the one route's", lags)
		}
		return last, lags[0].(map[string]any)
	}
	last, lag := status()
	for _, got := range []map[string]any{last, lag} {
		if got["agents"] != 3.0 || got["entries"] != 12.0 || got["oldest_first_sighted"] == nil {
			t.Fatalf("status lag after the first sighting: %v; want 3 agents, 12 entries", got)
		}
		if at, err := time.Parse(time.RFC3339Nano, got["oldest_first_sighted"].(string)); err != nil || !at.Equal(firstSighted) {
			t.Fatalf("oldest first sighted %v (%v), want %v", got["oldest_first_sighted"], err, firstSighted)
		}
	}
	metrics := func() string { _, body := call(t, srv, "GET", "/metrics", "", nil); return body["raw"].(string) }
	wantMetrics := func(when string, want ...string) {
		t.Helper()
		m := metrics()
		for _, w := range want {
			if !strings.Contains(m, w) {
				t.Fatalf("%s: /metrics lacks %s:\n%s", when, w, grepLines(m, "oplog_sweep_lag"))
			}
		}
	}
	clk.Advance(150 * time.Second) // past residency.ttl: the next tick stands down
	wantMetrics("between ticks", `oplog_sweep_lag_agents{route="ephemeral-l1"} 3`, `oplog_sweep_lag_entries{route="ephemeral-l1"} 12`,
		`oplog_sweep_lag_oldest_seconds{route="ephemeral-l1"} 150`)
	if _, rep := call(t, srv, "POST", "/v1/sweep", "", nil); rep["stand_down_reason"] != StandDownResidencyStale {
		t.Fatalf("the tick with a stale feed did not stand down: %v", rep["stand_down_reason"])
	}
	clk.Advance(30 * time.Second)
	wantMetrics("after a tick that stood down", `oplog_sweep_lag_agents{route="ephemeral-l1"} 3`,
		`oplog_sweep_lag_oldest_seconds{route="ephemeral-l1"} 180`)
	if _, lag := status(); lag["agents"] != 3.0 || lag["oldest_seconds"] != 180.0 {
		t.Fatalf("status lag after a tick that stood down: %v", lag)
	}
	call(t, srv, "PUT", "/v1/residency", "", jsonBody(map[string]any{"agents": []string{}}))
	call(t, srv, "POST", "/v1/sweep", "", nil)
	last, lag = status()
	for _, got := range []map[string]any{last, lag} {
		if got["agents"] != 0.0 || got["entries"] != 0.0 || got["oldest_first_sighted"] != nil || got["bytes"] != 0.0 {
			t.Fatalf("status lag after the archive: %v", got)
		}
	}
	wantMetrics("after the archive", `oplog_sweep_lag_agents{route="ephemeral-l1"} 0`, `oplog_sweep_lag_oldest_seconds{route="ephemeral-l1"} 0`)
}

func grepLines(text, substr string) string {
	var out []string
	for line := range strings.Lines(text) {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}
