package sidecar

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stratalog/strata/config"
)

func TestAPI_StatusNeedsTheTokenAndTheProbesDoNot(t *testing.T) {
	_, srv, _ := testSidecar(t, func(c *config.Config) { c.HTTP.Token = "s3cret" })
	for _, tok := range []string{"", "wrong"} {
		if code, _ := call(t, srv, "GET", "/v1/status", tok, nil); code != http.StatusUnauthorized {
			t.Errorf("GET /v1/status with token %q: %d, want 401", tok, code)
		}
	}
	if code, body := call(t, srv, "GET", "/v1/status", "s3cret", nil); code != 200 || body["sweep"] == nil {
		t.Errorf("GET /v1/status with the token: %d %v", code, body)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _ := call(t, srv, "GET", path, "", nil); code == http.StatusUnauthorized {
			t.Errorf("GET %s needs the token; probes and the scrape must not", path)
		}
	}
	// Without a token configured, status is open (on loopback).
	_, open, _ := testSidecar(t, nil)
	if code, _ := call(t, open, "GET", "/v1/status", "", nil); code != 200 {
		t.Errorf("GET /v1/status without a token configured: %d", code)
	}
}

// callHost sends a request with Host set to host.
func callHost(t *testing.T, srv *httptest.Server, method, path, host string, body io.Reader) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A name an attacker rebinds to 127.0.0.1 reaches the loopback listener with its own Host: refused,
// on every endpoint, so a page cannot feed the sidecar nor read its status.
func TestAPI_ALoopbackListenerRefusesAForeignHost(t *testing.T) {
	_, srv, _ := testSidecar(t, func(c *config.Config) { c.HTTP.Listen = "127.0.0.1:9464" })
	port := srv.Listener.Addr().String()[strings.LastIndex(srv.Listener.Addr().String(), ":"):]
	for _, host := range []string{"evil.example" + port, "evil.example", "127.0.0.1.evil.example" + port, "10.0.0.1" + port} {
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/v1/status", ""}, {"PUT", "/v1/residency", `{"agents":[]}`}, {"POST", "/v1/sweep", ""}, {"DELETE", "/v1/agents/a:b", ""}, {"GET", "/healthz", ""},
		} {
			if code := callHost(t, srv, c.method, c.path, host, strings.NewReader(c.body)); code != http.StatusMisdirectedRequest {
				t.Errorf("%s %s with Host %q: %d, want 421", c.method, c.path, host, code)
			}
		}
	}
	for _, host := range []string{"localhost" + port, "LOCALHOST.", "127.0.0.1" + port, "127.1.2.3", "[::1]" + port, "[::1]"} {
		if code := callHost(t, srv, "GET", "/v1/status", host, nil); code != 200 {
			t.Errorf("GET /v1/status with Host %q: %d, want 200", host, code)
		}
	}
}

func TestAPI_TheListenersOwnHostIsAllowed(t *testing.T) {
	s, _, _ := testSidecar(t, func(c *config.Config) { c.HTTP.Listen = "localhost:9464" })
	s.boundAddr = "127.0.0.1:9464"
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	if code := callHost(t, srv, "GET", "/healthz", "localhost:9464", nil); code != 200 {
		t.Errorf("Host localhost:9464: %d", code)
	}
}

func TestAPI_WritesRefuseABodyThatIsNotJSON(t *testing.T) {
	s, srv, _ := testSidecar(t, nil)
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/x-ndjson", "bogus/"} {
		for _, path := range []string{"/v1/residency", "/v1/assignment"} {
			req, _ := http.NewRequestWithContext(t.Context(), "PUT", srv.URL+path, strings.NewReader(`{"agents":[],"shard_count":1}`))
			req.Header.Set("Content-Type", ct)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnsupportedMediaType {
				t.Errorf("PUT %s as %s: %d, want 415", path, ct, resp.StatusCode)
			}
		}
	}
	if st := s.feed.status(); !st.Residency.ReceivedAt.IsZero() || st.Assignment != nil {
		t.Fatalf("a refused body changed the feed: %+v", st)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "PUT", srv.URL+"/v1/residency", strings.NewReader(`{"agents":["c:a"]}`))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || s.feed.status().Residency.Agents != 1 {
		t.Fatalf("application/json; charset=utf-8: %d", resp.StatusCode)
	}
}

// A second residency PUT while one is being read waits for it, and lands after it: the newer set is
// the one in force.
func TestAPI_ASecondResidencyPUTWaitsItsTurnAndLandsAfterTheFirst(t *testing.T) {
	s, srv, _ := testSidecar(t, nil)
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.CloseWithError(errors.New("the test ended")) }) // before the server closes
	put := func(body io.Reader, code chan<- int) {
		req, _ := http.NewRequest("PUT", srv.URL+"/v1/residency", body)
		resp, err := srv.Client().Do(req)
		if err != nil {
			code <- -1
			return
		}
		resp.Body.Close()
		code <- resp.StatusCode
	}
	first, second := make(chan int, 1), make(chan int, 1)
	go put(pr, first)
	if _, err := io.WriteString(pw, `{"agents":["c:one",`); err != nil {
		t.Fatal(err)
	}
	// The handler has read what was written, so it holds the turn: wait until it does.
	waitFor(t, "the first PUT holds the turn", func() bool { return len(s.residencyTurn) > 0 })
	go put(strings.NewReader(`{"agents":[]}`), second)
	waitFor(t, "the second PUT waits its turn", func() bool { return s.residencyWaiting.Load() > 0 })
	if _, status := call(t, srv, "GET", "/v1/status", "", nil); status["residency_puts"].(map[string]any)["waiting"].(float64) != 1 {
		t.Fatalf("status while the second PUT waits: %v", status["residency_puts"])
	}
	io.WriteString(pw, `"c:two"]}`)
	pw.Close()
	if code := <-first; code != 200 {
		t.Fatalf("first PUT: %d", code)
	}
	if code := <-second; code != 200 {
		t.Fatalf("second PUT: %d, want 200 after the first", code)
	}
	if n := s.feed.status().Residency.Agents; n != 0 {
		t.Fatalf("resident agents %d, want the second PUT's 0", n)
	}
}

// countingReader is an endless body of agents after a bad one, counting what was read of it.
type countingReader struct {
	head string
	read int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		var chunk string
		if c.read < len(c.head) {
			chunk = c.head[c.read:]
		} else {
			chunk = `"c:x",`
		}
		m := copy(p[n:], chunk)
		n += m
		c.read += m
	}
	return n, nil
}

// The residency body is decoded as it streams in: a bad agent fails the PUT at once, without the
// body being read to its limit first.
func TestAPI_ResidencyIsDecodedAsAStream(t *testing.T) {
	const limit = 64 << 20
	s, _, _ := testSidecar(t, func(c *config.Config) { c.HTTP.MaxBodyBytes = limit })
	body := &countingReader{head: `{"agents":["no-colon",`}
	req := httptest.NewRequest("PUT", "http://127.0.0.1/v1/residency", body)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), "agents[0]") {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
	if body.read > 1<<20 {
		t.Fatalf("read %d bytes of the body before failing on its first agent", body.read)
	}
	for _, c := range []struct{ body, says string }{
		{`{"agents":[],"agents":[]}`, "given twice"},
		{`{"agents":[1]}`, "want a string"},
		{`{"agents":{}}`, "as a list"},
		{`[]`, "an object"},
		{`{"agents":[],"x":1}`, "unknown field"},
		{`{"agents":[]} {}`, "after the JSON object"},
		{`{"agents":["c:a"`, "bad JSON"},
	} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("PUT", "http://127.0.0.1/v1/residency", strings.NewReader(c.body)))
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), c.says) {
			t.Errorf("%s: %d %s, want 400 saying %q", c.body, rec.Code, rec.Body.String(), c.says)
		}
	}
}

// Every key /v1/status answers is snake_case, in every nested object; the maps keyed by data (a route
// name, an outcome) are exempt.
func TestAPI_StatusKeysAreSnakeCase(t *testing.T) {
	s, srv, _ := testSidecar(t, nil)
	strand(t, s, "snake", 2)
	call(t, srv, "PUT", "/v1/assignment", "", jsonBody(map[string]any{"shard_count": 1, "shards": []int{0}, "lease_seconds": 60}))
	call(t, srv, "PUT", "/v1/residency", "", jsonBody(map[string]any{"agents": []string{}}))
	call(t, srv, "POST", "/v1/sweep", "", nil)
	_, status := call(t, srv, "GET", "/v1/status", "", nil)
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if !snake.MatchString(k) {
					t.Errorf("%s.%s is not snake_case", path, k)
				}
				if k == "passes" || k == "outcomes" {
					continue
				}
				walk(path+"."+k, x)
			}
		case []any:
			for _, x := range v {
				walk(path+"[]", x)
			}
		}
	}
	walk("status", status)
	if routes, _ := status["sweep"].(map[string]any)["routes"].([]any); len(routes) == 0 {
		t.Fatalf("no routes in the status: %v", status)
	}
}

// A listener on a named address (the pod IP) allows that address and loopback, nothing else; a
// wildcard listener has no Host check.
func TestAPI_AListenerOffLoopbackAllowsItsOwnHost(t *testing.T) {
	s, _, _ := testSidecar(t, func(c *config.Config) { c.HTTP.Listen, c.HTTP.Token = "10.1.2.3:9464", "s3cret" })
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for host, want := range map[string]int{"10.1.2.3:9464": 200, "localhost:9464": 200, "strata.evil.example": http.StatusMisdirectedRequest} {
		if code := callHost(t, srv, "GET", "/healthz", host, nil); code != want {
			t.Errorf("Host %q on a 10.1.2.3 listener: %d, want %d", host, code, want)
		}
	}
	w, _, _ := testSidecar(t, func(c *config.Config) { c.HTTP.Listen, c.HTTP.Token = "0.0.0.0:9464", "s3cret" })
	wsrv := httptest.NewServer(w.Handler())
	defer wsrv.Close()
	if code := callHost(t, wsrv, "GET", "/healthz", "strata.ns.svc:9464", nil); code != 200 {
		t.Errorf("a wildcard listener refused a Host: %d", code)
	}
}
