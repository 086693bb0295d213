package sidecar

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratalog/strata/config"
	"github.com/stratalog/strata/internal/faultproxy"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
)

// scrapeTimeout bounds each GET /metrics of the test below: the bound for a scrape while the
// schedule store black-holes.
const scrapeTimeout = 2 * time.Second

// While the PostgreSQL schedule store black-holes (behind a real TCP proxy that swallows every byte),
// GET /metrics answers within scrapeTimeout, every time, and says the row counts fail; the row gauges
// keep the last count, and their age grows. The indexed storage is the same PostgreSQL behind the same
// proxy, as in the Kubernetes manifest, so the sweep's and the storage limiter's gauges are collected
// while their store black-holes too (they read memory only).
func TestMetrics_AnswerWhileTheScheduleStoreBlackHoles(t *testing.T) {
	pgURL := testenv.PostgresURL(t)
	schema := testenv.PostgresSchema(t, pgURL)
	u, err := url.Parse(testenv.WithQuery(t, pgURL, "schema", schema))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start("127.0.0.1:0", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	u.Host = proxy.Addr()

	s, addr := serveSidecar(t, func(c *config.Config) {
		c.Storage.URL = u.String()
		c.Schedule.URL = u.String()
		c.Schedule.MetricsInterval = time.Second
	})
	t.Cleanup(func() { proxy.SetBlackhole(false) }) // heal before the sidecar closes its stores
	if _, err := s.Schedules().Register(t.Context(), schedule.NewRow{DueAt: time.Now().Add(time.Hour),
		Action: schedule.ArchiveOplog{Agent: oplog.AgentID{Component: "shop", Name: "durable"}, Mode: oplog.Durable, LastIndex: 1}}); err != nil {
		t.Fatal(err)
	}

	client := &http.Client{Timeout: scrapeTimeout}
	scrape := func() string {
		t.Helper()
		resp, err := client.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatalf("GET /metrics (timeout %s): %v", scrapeTimeout, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
		}
		return string(body)
	}
	// scrapeUntil scrapes every 100 ms until the scrape matches every pattern, within a generous bound.
	scrapeUntil := func(what string, patterns ...string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			text := scrape()
			matched := true
			for _, p := range patterns {
				matched = matched && regexp.MustCompile(`(?m)^`+p+`$`).MatchString(text)
			}
			if matched {
				return text
			}
			if time.Now().After(deadline) {
				t.Fatalf("no scrape showed %s within 30 s; the last:\n%s", what, text)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	scrapeUntil("the registered row counted", `oplog_schedule_pending_rows 1`, `oplog_schedule_row_counts_failed 0`)
	// A sweep under way, which the black hole will hold: the sweep's gauges are collected meanwhile.
	if code, body := callAddr(t, addr, "PUT", "/v1/assignment", `{"shard_count":1,"shards":[0]}`); code != http.StatusOK {
		t.Fatalf("assignment: %d %s", code, body)
	}
	if code, body := callAddr(t, addr, "PUT", "/v1/residency", `{"agents":[]}`); code != http.StatusOK {
		t.Fatalf("residency: %d %s", code, body)
	}

	proxy.SetBlackhole(true)
	text := scrapeUntil("the counts failing", `oplog_schedule_row_counts_failed 1`)
	if !regexp.MustCompile(`(?m)^oplog_schedule_pending_rows 1$`).MatchString(text) {
		t.Errorf("while the counts fail, the row gauges should keep the last count (1 pending row):\n%s", text)
	}
	m := regexp.MustCompile(`(?m)^oplog_schedule_row_counts_age_seconds (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no oplog_schedule_row_counts_age_seconds in\n%s", text)
	}
	if age, err := strconv.ParseFloat(m[1], 64); err != nil || age <= 0 {
		t.Errorf("oplog_schedule_row_counts_age_seconds %s while the counts fail, want > 0", m[1])
	}
	// And it keeps answering, scrape after scrape, for as long as the store black-holes.
	for range 5 {
		scrape()
	}
	for _, series := range []string{`oplog_sweep_tick_age_seconds \S+`, `strata_storage_limiter_in_flight \S+`} {
		if !regexp.MustCompile(`(?m)^` + series + `$`).MatchString(text) {
			t.Errorf("no %s while the stores black-hole", series)
		}
	}
	if st := proxy.Stats(); st.Swallowed == 0 {
		t.Errorf("the proxy swallowed nothing: the test did not black-hole the schedule store (%+v)", st)
	}
}

// callAddr sends one request to the sidecar at addr and returns the answer's status and body.
func callAddr(t *testing.T, addr, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(answer)
}
