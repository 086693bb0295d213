package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratalog/strata/config"
	"github.com/stratalog/strata/internal/sidecar"
	"github.com/stratalog/strata/oplog"
)

// metricName matches the names of strata's series, and of the runtime and process collectors, in a
// PromQL expression (labels, functions and Grafana variables do not match).
var metricName = regexp.MustCompile(`\b(?:oplog|strata|go|process)_[a-z0-9_]+\b`)

// scrapeStarted opens a sidecar on SQLite and a directory, serves it as `strata run` does (Serve, on a
// loopback listener), and returns its /metrics twice: first right after it started, before any
// request or event; then after it archived three stranded agents (so the histograms of the storage,
// the blob store and the tick have observations) and its scheduler counted the scheduled rows.
func scrapeStarted(t *testing.T) (atStart, afterSweeps string) {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Storage.URL = "sqlite://" + filepath.Join(dir, "strata.db")
	cfg.Schedule.URL = cfg.Storage.URL
	cfg.Blob.URL = "fs://" + filepath.Join(dir, "blobs")
	s, err := sidecar.Open(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	t.Cleanup(func() { stop(); <-served; s.Close() })
	base := "http://" + ln.Addr().String()
	do := func(method, path, body string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return string(b)
	}
	atStart = do("GET", "/metrics", "")
	for i := range 3 {
		a := oplog.AgentID{Component: "shop", Name: fmt.Sprint("m", i)}
		if err := s.Stack().Append(t.Context(), a, oplog.Ephemeral, []oplog.Entry{{Index: 1, Payload: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	do("PUT", "/v1/assignment", `{"shard_count": 1, "shards": [0]}`)
	do("PUT", "/v1/residency", `{"agents": []}`)
	do("POST", "/v1/sweep", "")
	do("POST", "/v1/sweep", "")
	// The scheduled-row gauges are counted in the background, the first time as the scheduler starts.
	counted := regexp.MustCompile(`(?m)^oplog_schedule_pending_rows \d+$`)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if afterSweeps = do("GET", "/metrics", ""); counted.MatchString(afterSweeps) || time.Now().After(deadline) {
			return atStart, afterSweeps
		}
	}
}

// seriesNames are the family names and the sample names (histograms' _bucket, _sum and _count) in
// a scrape.
func seriesNames(text string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

func dashboardExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/grafana/strata-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("deploy/grafana/strata-dashboard.json: %v", err)
	}
	var out []string
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			out = append(out, target.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		out = append(out, v.Definition)
	}
	return out
}

func TestDeploy_AlertsAndDashboardNameOnlyMetricsAStartedSidecarExports(t *testing.T) {
	_, text := scrapeStarted(t)
	have := seriesNames(text)
	alerts, err := os.ReadFile("../../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string][]string{
		"deploy/prometheus/alerts.yaml":        {string(alerts)},
		"deploy/grafana/strata-dashboard.json": dashboardExprs(t),
	}
	for file, texts := range sources {
		var named []string
		for _, text := range texts {
			named = append(named, metricName.FindAllString(text, -1)...)
		}
		if len(named) == 0 {
			t.Fatalf("%s names no metric", file)
		}
		slices.Sort(named)
		for _, name := range slices.Compact(named) {
			if !have[name] {
				t.Errorf("%s uses %s, which a started sidecar's /metrics does not export", file, name)
			}
		}
	}
}

func TestDeploy_MetricsShowZeroCountersTheTickHistogramRuntimeAndBuildInfoAtStartAndSecondBuckets(t *testing.T) {
	atStart, afterSweeps := scrapeStarted(t)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^oplog_sweep_truncated_total\{reason="deadline"\} 0$`),
		regexp.MustCompile(`(?m)^oplog_sweep_outcome_total\{[^}]*outcome="archived"[^}]*\} 0$`),
		regexp.MustCompile(`(?m)^oplog_sweep_outcome_total\{[^}]*outcome="unreadable"[^}]*\} 0$`),
		regexp.MustCompile(`(?m)^strata_storage_operation_errors_total\{[^}]*kind="transient"[^}]*\} 0$`),
		regexp.MustCompile(`(?m)^strata_blob_operation_errors_total\{[^}]*kind="other"[^}]*\} 0$`),
		regexp.MustCompile(`(?m)^oplog_schedule_failed_rows_total\{action="archive_oplog"\} 0$`),
		regexp.MustCompile(`(?m)^go_goroutines [0-9]`),
		regexp.MustCompile(`(?m)^process_resident_memory_bytes [0-9]`),
		regexp.MustCompile(`(?m)^strata_build_info\{[^}]*version="[^"]+"[^}]*\} 1$`),
		// The tick histogram before the first tick: every bucket at 0, no tick counted.
		regexp.MustCompile(`(?m)^oplog_sweep_tick_seconds_bucket\{le="0\.0005"\} 0$`),
		regexp.MustCompile(`(?m)^oplog_sweep_tick_seconds_count 0$`),
		// The start-up look at the stores: calls counted, on second buckets, from the start (where
		// each call lands is timing, left to the 2 ms tests of the instruments).
		regexp.MustCompile(`(?m)^strata_storage_operation_duration_seconds_bucket\{[^}]*le="0\.005"[^}]*\} [0-9]`),
		regexp.MustCompile(`(?m)^strata_storage_operation_duration_seconds_count\{[^}]*\} [1-9]`),
		regexp.MustCompile(`(?m)^strata_blob_operation_duration_seconds_bucket\{[^}]*le="0\.005"[^}]*\} [0-9]`),
		regexp.MustCompile(`(?m)^strata_blob_operation_duration_seconds_count\{[^}]*\} [1-9]`),
	} {
		if !want.MatchString(atStart) {
			t.Errorf("/metrics right after start has no line matching %s", want)
		}
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^strata_storage_operation_duration_seconds_bucket\{[^}]*le="0\.005"[^}]*\} [1-9]`),
		regexp.MustCompile(`(?m)^strata_blob_operation_duration_seconds_bucket\{[^}]*le="0\.0005"`),
		regexp.MustCompile(`(?m)^oplog_sweep_tick_seconds_bucket\{le="0\.0005"\}`),
	} {
		if !want.MatchString(afterSweeps) {
			t.Errorf("/metrics after two sweeps has no line matching %s", want)
		}
	}
}
