package sidecar

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/config"
	"github.com/stratalog/strata/oplog"
)

// metricValue is the value of the series of name whose labels include label, on /metrics.
func metricValue(t *testing.T, text, name, label string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `\{[^}]*` + regexp.QuoteMeta(label) + `[^}]*\} (\d+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no %s{%s} in /metrics:\n%s", name, label, text)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// The blob store loses every object (an S3 server restarted empty): the next scrub reports every
// archived chunk missing, on /metrics, where the alert reads it.
func TestScrubLoop_ReportsAnEmptiedObjectStoreWithinOneInterval(t *testing.T) {
	s, srv, _ := testSidecar(t, func(c *config.Config) { c.Scrub.Interval = time.Hour })
	agents := []oplog.AgentID{strand(t, s, "a", 5), strand(t, s, "b", 3)}
	for _, a := range agents {
		if _, err := s.stack.Drain(t.Context(), a, oplog.Ephemeral); err != nil {
			t.Fatal(err)
		}
	}
	ticks := make(chan time.Time)
	runs := make(chan []archive.VerifyReport)
	s.scrubTicks = ticks
	s.afterScrub = func(r []archive.VerifyReport, err error) {
		if err != nil {
			t.Error(err)
		}
		runs <- r
	}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.scrubLoop(ctx); close(done) }()
	defer func() { stop(); <-done }()

	ticks <- time.Now()
	<-runs
	_, body := call(t, srv, "GET", "/metrics", "", nil)
	if n := metricValue(t, body["raw"].(string), "strata_scrub_last_findings", `kind="missing"`); n != 0 {
		t.Fatalf("a sound store: %d missing", n)
	}
	paths, err := s.blobs.List(t.Context(), "")
	if err != nil || len(paths) == 0 {
		t.Fatalf("%d blobs (%v)", len(paths), err)
	}
	for _, p := range paths {
		if err := s.blobs.Delete(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	ticks <- time.Now()
	reports := <-runs
	missing := 0
	for _, r := range reports {
		missing += r.Count(archive.FindingMissing)
	}
	if missing == 0 {
		t.Fatalf("the scrub found nothing missing: %+v", reports)
	}
	_, body = call(t, srv, "GET", "/metrics", "", nil)
	text := body["raw"].(string)
	if n := metricValue(t, text, "strata_scrub_last_findings", `kind="missing"`); n != missing {
		t.Fatalf("strata_scrub_last_findings{kind=missing} = %d, want %d", n, missing)
	}
	if n := metricValue(t, text, "strata_scrub_findings_total", `kind="missing"`); n != missing {
		t.Fatalf("strata_scrub_findings_total{kind=missing} = %d, want %d", n, missing)
	}
}
