package sidecar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/config"
	"github.com/stratalog/strata/oplog"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// testSidecar opens a sidecar on SQLite and a filesystem blob store in a temporary directory, behind an
// httptest server.
func testSidecar(t *testing.T, edit func(*config.Config)) (*Sidecar, *httptest.Server, *clock) {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Storage.URL = "sqlite://" + filepath.Join(dir, "strata.db")
	cfg.Schedule.URL = cfg.Storage.URL
	cfg.Blob.URL = "fs://" + filepath.Join(dir, "blobs")
	if edit != nil {
		edit(&cfg)
	}
	s, err := Open(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{now: time.Now()}
	s.now = clk.Now
	s.feed.now = clk.Now
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Close() })
	return s, srv, clk
}

func call(t *testing.T, srv *httptest.Server, method, path, token string, body io.Reader) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	if out == nil {
		out = map[string]any{"raw": string(raw)}
	}
	return resp.StatusCode, out
}

func jsonBody(v any) io.Reader {
	b, _ := json.Marshal(v)
	return bytes.NewReader(b)
}

func strand(t *testing.T, s *Sidecar, name string, n int) oplog.AgentID {
	t.Helper()
	a := oplog.AgentID{Component: "shop", Name: name}
	var entries []oplog.Entry
	for i := 1; i <= n; i++ {
		entries = append(entries, oplog.Entry{Index: oplog.Index(i), Payload: []byte(fmt.Sprint(name, i))})
	}
	if err := s.stack.Append(t.Context(), a, oplog.Ephemeral, entries); err != nil {
		t.Fatal(err)
	}
	return a
}

func inLevel1(t *testing.T, s *Sidecar, a oplog.AgentID) bool {
	t.Helper()
	_, ok, err := s.stack.Archives()[0].LastIndex(t.Context(), a, oplog.Ephemeral)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func readBack(t *testing.T, s *Sidecar, a oplog.AgentID, n int) {
	t.Helper()
	entries, err := s.stack.Read(t.Context(), a, oplog.Ephemeral, 1, n+5)
	if err != nil || len(entries) != n {
		t.Fatalf("%s: read %d entries, %v; want %d", a, len(entries), err, n)
	}
}

func TestAPI_AssignmentAndResidencyFeedTheSweep(t *testing.T) {
	s, srv, _ := testSidecar(t, nil)
	stranded, resident := strand(t, s, "stranded", 5), strand(t, s, "resident", 3)

	if code, _ := call(t, srv, "GET", "/readyz", "", nil); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz before an assignment: %d", code)
	}
	if code, body := call(t, srv, "PUT", "/v1/assignment", "", jsonBody(map[string]any{"shard_count": 1, "shards": []int{0}, "lease_seconds": 60})); code != 200 {
		t.Fatalf("assignment: %d %v", code, body)
	}
	if code, body := call(t, srv, "PUT", "/v1/residency", "", jsonBody(map[string]any{"agents": []string{resident.Key()}})); code != 200 {
		t.Fatalf("residency: %d %v", code, body)
	}
	if code, _ := call(t, srv, "GET", "/readyz", "", nil); code != 200 {
		t.Fatalf("readyz after an assignment: %d", code)
	}
	for range 2 {
		if code, body := call(t, srv, "POST", "/v1/sweep", "", nil); code != 200 {
			t.Fatalf("sweep: %d %v", code, body)
		}
	}
	if inLevel1(t, s, stranded) || !inLevel1(t, s, resident) {
		t.Fatalf("after two sweeps: stranded in level 1 %v, resident in level 1 %v", inLevel1(t, s, stranded), inLevel1(t, s, resident))
	}
	readBack(t, s, stranded, 5)
	readBack(t, s, resident, 3)

	code, status := call(t, srv, "GET", "/v1/status", "", nil)
	sweep, _ := status["sweep"].(map[string]any)
	feed, _ := status["feed"].(map[string]any)
	if code != 200 || sweep == nil || feed == nil || sweep["passes"] == nil {
		t.Fatalf("status: %d %v", code, status)
	}
	if res := feed["residency"].(map[string]any); res["agents"].(float64) != 1 || res["stale"].(bool) {
		t.Fatalf("status residency %v", res)
	}
}

func TestAPI_StaleResidencyStandsTheSweepDown(t *testing.T) {
	s, srv, clk := testSidecar(t, func(c *config.Config) { c.Residency.TTL = 2 * time.Minute })
	if _, body := call(t, srv, "GET", "/metrics", "", nil); !strings.Contains(body["raw"].(string), `oplog_sweep_standing_down{reason="residency_stale"} 0`) {
		t.Fatalf("before any tick /metrics lacks residency_stale at 0:\n%s", body["raw"])
	}
	a := strand(t, s, "x", 2)
	call(t, srv, "PUT", "/v1/assignment", "", jsonBody(map[string]any{"shard_count": 1, "shards": []int{0}}))
	call(t, srv, "PUT", "/v1/residency", "", jsonBody(map[string]any{"agents": []string{}}))
	clk.Advance(3 * time.Minute)
	for range 3 {
		code, rep := call(t, srv, "POST", "/v1/sweep", "", nil)
		if code != 200 || !strings.Contains(fmt.Sprint(rep["stood_down"]), "older than residency.ttl") {
			t.Fatalf("sweep with a stale feed: %d %v", code, rep["stood_down"])
		}
	}
	if !inLevel1(t, s, a) {
		t.Fatal("archived on a stale residency feed")
	}
	// Standing down shows in a metric with its reason and in the status, not only in the report.
	_, body := call(t, srv, "GET", "/metrics", "", nil)
	for _, want := range []string{`oplog_sweep_standing_down{reason="residency_stale"} 1`, `oplog_sweep_standing_down{reason="no_assignment"} 0`} {
		if !strings.Contains(body["raw"].(string), want) {
			t.Fatalf("/metrics lacks %s:\n%s", want, body["raw"])
		}
	}
	if _, status := call(t, srv, "GET", "/v1/status", "", nil); status["sweep"].(map[string]any)["standing_down"] != StandDownResidencyStale {
		t.Fatalf("status: %v", status["sweep"])
	}
	call(t, srv, "PUT", "/v1/residency", "", jsonBody(map[string]any{"agents": []string{}}))
	call(t, srv, "POST", "/v1/sweep", "", nil)
	call(t, srv, "POST", "/v1/sweep", "", nil)
	if inLevel1(t, s, a) {
		t.Fatal("not archived once the feed was fresh again")
	}
}

func TestAPI_WritesNeedTheTokenOnANonLoopbackListener(t *testing.T) {
	_, srv, _ := testSidecar(t, func(c *config.Config) { c.HTTP.Listen, c.HTTP.Token = "0.0.0.0:9464", "s3cret" })
	body := func() io.Reader { return jsonBody(map[string]any{"shard_count": 1, "shards": []int{0}}) }
	for _, tok := range []string{"", "wrong"} {
		if code, _ := call(t, srv, "PUT", "/v1/assignment", tok, body()); code != http.StatusUnauthorized {
			t.Fatalf("token %q: %d", tok, code)
		}
		if code, _ := call(t, srv, "POST", "/v1/sweep", tok, nil); code != http.StatusUnauthorized {
			t.Fatalf("sweep with token %q: %d", tok, code)
		}
	}
	if code, status := call(t, srv, "GET", "/v1/status", "s3cret", nil); code != 200 || status["feed"].(map[string]any)["assignment"] != nil {
		t.Fatalf("an unauthorized write changed the assignment: %v", status["feed"])
	}
	if code, _ := call(t, srv, "PUT", "/v1/assignment", "s3cret", body()); code != 200 {
		t.Fatalf("with the token: %d", code)
	}
	if code, _ := call(t, srv, "GET", "/healthz", "", nil); code != 200 {
		t.Fatal("reads must not need the token")
	}
}

func TestOpen_RefusesANonLoopbackListenerWithoutAToken(t *testing.T) {
	cfg := config.Default()
	cfg.HTTP.Listen = "0.0.0.0:9464"
	if _, err := Open(t.Context(), cfg, nil); err == nil || !strings.Contains(err.Error(), "http.token") {
		t.Fatalf("Open: %v", err)
	}
}

func TestAPI_BadBodiesAreRefusedAndChangeNothing(t *testing.T) {
	s, srv, _ := testSidecar(t, func(c *config.Config) { c.HTTP.MaxBodyBytes = 256 })
	call(t, srv, "PUT", "/v1/assignment", "", jsonBody(map[string]any{"shard_count": 2, "shards": []int{1}}))
	huge := `{"agents":["` + strings.Repeat("a", 1000) + `"]}`
	for _, c := range []struct {
		path, body string
		code       int
		says       string
	}{
		{"/v1/residency", huge, http.StatusRequestEntityTooLarge, "larger than 256 bytes"},
		{"/v1/assignment", `{"shard_count": 4, "shards": [0,`, 400, "bad JSON"},
		{"/v1/assignment", `not json`, 400, "bad JSON"},
		{"/v1/assignment", ``, 400, "empty body"},
		{"/v1/assignment", `{"shard_count": 4, "shards": [0], "extra": 1}`, 400, "unknown field"},
		{"/v1/assignment", `{"shard_count": 4, "shards": [4]}`, 400, "outside 0..3"},
		{"/v1/assignment", `{"shard_count": 4, "shards": [1, 1]}`, 400, "twice"},
		{"/v1/assignment", `{"shards": [1]}`, 400, "shard_count is required"},
		{"/v1/assignment", `{"shard_count": 4, "shards": [0], "lease_seconds": -1}`, 400, "lease_seconds"},
		{"/v1/assignment", `{"shard_count": 4} {"shard_count": 5}`, 400, "after the JSON object"},
		{"/v1/residency", `{"agents": ["no-colon"]}`, 400, "agents[0]"},
		{"/v1/residency", `{}`, 400, "agents is required"},
	} {
		code, body := call(t, srv, "PUT", c.path, "", strings.NewReader(c.body))
		if code != c.code || !strings.Contains(fmt.Sprint(body["error"]), c.says) {
			t.Fatalf("PUT %s %.40q: %d %v, want %d saying %q", c.path, c.body, code, body, c.code, c.says)
		}
	}
	a, _ := s.feed.shards()
	if a.ShardCount != 2 || len(a.Shards) != 1 || a.Shards[0] != 1 {
		t.Fatalf("a refused body changed the assignment: %+v", a)
	}
	if st := s.feed.status(); st.Residency.Agents != 0 || !st.Residency.ReceivedAt.IsZero() {
		t.Fatalf("a refused body changed the residency: %+v", st.Residency)
	}
}

func TestAPI_MetricsShowWhatTheSweepArchived(t *testing.T) {
	s, srv, _ := testSidecar(t, nil)
	for i := range 3 {
		strand(t, s, fmt.Sprint("m", i), 2)
	}
	call(t, srv, "PUT", "/v1/assignment", "", jsonBody(map[string]any{"shard_count": 1, "shards": []int{0}}))
	call(t, srv, "PUT", "/v1/residency", "", jsonBody(map[string]any{"agents": []string{}}))
	call(t, srv, "POST", "/v1/sweep", "", nil)
	call(t, srv, "POST", "/v1/sweep", "", nil)
	_, body := call(t, srv, "GET", "/metrics", "", nil)
	text := body["raw"].(string)
	m := regexp.MustCompile(`(?m)^oplog_sweep_outcome_total\{[^}]*outcome="archived"[^}]*\} (\d+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no archived outcome in /metrics:\n%s", text)
	}
	if n, _ := strconv.Atoi(m[1]); n != 3 {
		t.Fatalf("oplog_sweep_outcome_total{outcome=archived} = %d, want 3", n)
	}
	for _, name := range []string{"oplog_sweep_tick_seconds", "strata_storage_operation_duration_seconds", "oplog_sweep_tracked_agents"} {
		if !strings.Contains(text, name) {
			t.Fatalf("/metrics lacks %s", name)
		}
	}
	if !regexp.MustCompile(`route="ephemeral-l1"`).MatchString(text) {
		t.Fatal("outcomes are not labelled by route")
	}
}

func TestUnbucketedKey_FindsKeysOfTheLayoutBeforeBuckets(t *testing.T) {
	st := memory.New()
	ns := oplog.CompressedNamespace(oplog.Ephemeral, 1)
	agent := oplog.AgentID{Component: "c", Name: "a"}
	if err := st.Append(t.Context(), ns, agent.StoredKey(), 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if ns, key, found, err := UnbucketedKey(t.Context(), st, []string{ns}); err != nil || found {
		t.Fatalf("a bucketed store: %q %q %v %v", ns, key, found, err)
	}
	for _, legacy := range []string{"c:a", "zz:top", "4000/x:y"} {
		if err := st.Append(t.Context(), oplog.PrimaryNamespace(oplog.Durable), legacy, 1, []byte("x")); err != nil {
			t.Fatal(err)
		}
		got, key, found, err := UnbucketedKey(t.Context(), st, []string{ns, oplog.PrimaryNamespace(oplog.Durable)})
		if err != nil || !found || got != oplog.PrimaryNamespace(oplog.Durable) || key != legacy {
			t.Fatalf("%q: %q %q %v %v", legacy, got, key, found, err)
		}
		if err := st.Delete(t.Context(), oplog.PrimaryNamespace(oplog.Durable), legacy); err != nil {
			t.Fatal(err)
		}
	}
}
