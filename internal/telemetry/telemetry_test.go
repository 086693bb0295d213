package telemetry_test

import (
	"context"
	"io"
	"net/http/httptest"
	"regexp"
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
	for _, label := range []string{`version="` + info.Version + `"`, `go_version="` + info.GoVersion + `"`, `commit="`} {
		if !strings.Contains(m[1], label) {
			t.Errorf("strata_build_info{%s} lacks %s", m[1], label)
		}
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
