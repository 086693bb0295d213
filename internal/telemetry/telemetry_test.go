package telemetry_test

import (
	"context"
	"io"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric"

	"github.com/stratalog/strata/internal/latency"
	"github.com/stratalog/strata/internal/telemetry"
	"github.com/stratalog/strata/internal/version"
)

// open returns a fresh provider and a function scraping its handler.
func open(t *testing.T) (metric.MeterProvider, func() string) {
	t.Helper()
	mp, h, err := telemetry.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	get := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		b, _ := io.ReadAll(rec.Body)
		return string(b)
	}
	return mp, get
}

func TestNew_RuntimeProcessAndBuildInfoFromTheStart(t *testing.T) {
	_, get := open(t)
	text := get()
	for _, want := range []string{"go_goroutines ", "go_memstats_heap_alloc_bytes ", "process_resident_memory_bytes ", "process_start_time_seconds "} {
		if !strings.Contains(text, "\n"+want) {
			t.Errorf("/metrics lacks %s", strings.TrimSpace(want))
		}
	}
	info := version.Get()
	m := regexp.MustCompile(`(?m)^strata_build_info\{([^}]*)\} 1$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no strata_build_info 1 in:\n%.3000s", text)
	}
	labels := map[string]string{}
	for _, kv := range regexp.MustCompile(`(\w+)="([^"]*)"`).FindAllStringSubmatch(m[1], -1) {
		labels[kv[1]] = kv[2]
	}
	revision := info.Revision()
	if revision == "" {
		revision = "unknown"
	}
	// The labels of client_golang's version collector (prometheus/common/version), every one of them
	// and no other, with this build's values.
	want := map[string]string{"version": info.Version, "revision": revision, "branch": "unknown",
		"goversion": runtime.Version(), "goos": runtime.GOOS, "goarch": runtime.GOARCH}
	for name, v := range want {
		if got, ok := labels[name]; !ok || got != v {
			t.Errorf("strata_build_info{%s}: %s=%q (present %v), want %q", m[1], name, got, ok, v)
		}
	}
	if _, ok := labels["tags"]; !ok || len(labels) != len(want)+1 {
		t.Errorf("strata_build_info{%s}: want exactly the labels version, revision, branch, goversion, goos, goarch, tags", m[1])
	}
	if !strings.Contains(text, "# HELP strata_build_info A metric with a constant '1' value labeled by version, revision, branch, goversion") {
		t.Errorf("strata_build_info does not have the version collector's HELP:\n%s", grep(text, "strata_build_info"))
	}
}

func TestNew_HistogramsExportTheSecondBuckets(t *testing.T) {
	mp, get := open(t)
	h, err := mp.Meter("test").Float64Histogram("strata_test_duration", latency.Histogram("test")...)
	if err != nil {
		t.Fatal(err)
	}
	h.Record(context.Background(), 0.002)
	text := get()
	for _, want := range []string{
		`strata_test_duration_seconds_bucket{le="0.001"} 0`,
		`strata_test_duration_seconds_bucket{le="0.0025"} 1`,
		`strata_test_duration_seconds_bucket{le="0.005"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grep(text, "strata_test"))
		}
	}
}

func grep(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// family is the block of one metric family in an exposition: its HELP and TYPE lines and its samples.
func family(text, name string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "#" && f[2] == name ||
			strings.HasPrefix(l, name+"_bucket") || strings.HasPrefix(l, name+"_sum") || strings.HasPrefix(l, name+"_count") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The tick histogram is there, at zero, from its creation, with the HELP and buckets it has once
// observed; after the first observation it is the exporter's, counted once, never twice.
func TestNew_TheTickHistogramIsThereAtZeroUntilItsFirstObservation(t *testing.T) {
	mp, get := open(t)
	if strings.Contains(get(), "oplog_sweep_tick_seconds") {
		t.Fatal("oplog_sweep_tick_seconds before the histogram was created")
	}
	tick, err := mp.Meter("test").Float64Histogram("oplog_sweep_tick", latency.Histogram("Duration of sweep ticks.")...)
	if err != nil {
		t.Fatal(err)
	}
	before := family(get(), "oplog_sweep_tick_seconds")
	for _, want := range []string{
		"# HELP oplog_sweep_tick_seconds Duration of sweep ticks.",
		"# TYPE oplog_sweep_tick_seconds histogram",
		`oplog_sweep_tick_seconds_bucket{le="0.0005"} 0`,
		`oplog_sweep_tick_seconds_bucket{le="60"} 0`,
		`oplog_sweep_tick_seconds_bucket{le="+Inf"} 0`,
		"oplog_sweep_tick_seconds_sum 0",
		"oplog_sweep_tick_seconds_count 0",
	} {
		if !strings.Contains(before, want) {
			t.Errorf("before the first tick, /metrics lacks %q:\n%s", want, before)
		}
	}
	tick.Record(context.Background(), 0.3)
	after := family(get(), "oplog_sweep_tick_seconds")
	if n := strings.Count(after, "oplog_sweep_tick_seconds_count "); n != 1 || !strings.Contains(after, "oplog_sweep_tick_seconds_count 1") {
		t.Fatalf("after one tick, want one count of 1:\n%s", after)
	}
	// The same family either way: HELP, TYPE and bucket bounds.
	shape := regexp.MustCompile(`(?m)^(# .*|oplog_sweep_tick_seconds_bucket\{le="[^"]*"\})`)
	if b, a := shape.FindAllString(before, -1), shape.FindAllString(after, -1); strings.Join(b, "\n") != strings.Join(a, "\n") {
		t.Errorf("the zero family differs from the exporter's:\nbefore\n%s\nafter\n%s", strings.Join(b, "\n"), strings.Join(a, "\n"))
	}
}
