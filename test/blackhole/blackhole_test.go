// Package blackhole_test runs `strata run` against PostgreSQL and Redis behind a fault proxy that, once
// switched, accepts and never answers (a partition): the deadline and the shutdown grace must bound
// what a store that never answers can hold, and nothing may be lost once the network heals.
package blackhole_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/fsblob"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/faultproxy"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
	"github.com/stratalog/strata/test/strataproc"
)

// The sidecar's budgets in this test: small, so that the bounds are seconds, not minutes.
const (
	interval      = 200 * time.Millisecond
	shutdownGrace = 2 * time.Second
	// slack is what the bounds allow beyond the configured durations: scheduling, one page, the
	// status poll's own period, closing the stores. Generous on purpose: the test checks a bound, not
	// a speed.
	slack = 5 * time.Second

	agents  = 40
	entries = 30
)

// budgets are the sweep's time bounds in one run of the binary.
type budgets struct{ maxTick, maxAgent time.Duration }

var (
	// short bounds every tick to about two seconds behind a black hole.
	short = budgets{maxTick: time.Second, maxAgent: time.Second}
	// long lets an agent under way run for an hour: only the shutdown grace can end it.
	long = budgets{maxTick: 30 * time.Second, maxAgent: time.Hour}
)

func TestBlackHole_TheDeadlineAndTheGraceBoundAStoreThatNeverAnswers(t *testing.T) {
	testenv.SkipUnlessLong(t, "a store black-holed behind a proxy")
	bin, err := strataproc.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Run("postgres", func(t *testing.T) {
		st := backendtest.Postgres().Open(t)
		u := backendtest.URL(t, st)
		// The scheduler's store is the same PostgreSQL, behind the same proxy, as in a real deployment.
		run(t, bin, st, u, func(proxied string) string { return proxied })
	})
	t.Run("redis", func(t *testing.T) {
		st := backendtest.Redis().Open(t)
		u := backendtest.URL(t, st)
		schedule := "sqlite://" + filepath.Join(t.TempDir(), "schedule.db")
		run(t, bin, st, u, func(string) string { return schedule })
	})
}

func run(t *testing.T, bin string, st is.Storage, storageURL string, scheduleURL func(proxied string) string) {
	proxy, proxied := proxyFor(t, storageURL)
	blobs, err := fsblob.New(t.Context(), filepath.Join(t.TempDir(), "blobs"), nil)
	if err != nil {
		t.Fatal(err)
	}
	l := oplogtest.NewLayers(t, st, blobs)
	stranded := make([]oplog.AgentID, agents)
	for i := range stranded {
		stranded[i] = oplogtest.AgentNamed(fmt.Sprintf("blackhole-%03d", i))
		if err := l.Stack.Append(t.Context(), stranded[i], oplog.Ephemeral, oplogtest.EntriesRange(1, entries)); err != nil {
			t.Fatal(err)
		}
	}
	config := func(b budgets) string { return writeConfig(t, proxied, scheduleURL(proxied), blobs.Root(), b) }
	p := strataproc.Start(t, bin, config(short))
	feed(t, p)

	// Let the sweep get under way: the first agents archived, most still stranded.
	waitFor(t, p, "the first archives", func(s status) bool { return l.StrandedCount(t, stranded) < agents })
	proxy.SetBlackhole(true)
	t.Log("black hole on")

	// While the store never answers, every tick still ends within its bound and the backoff grows.
	bound := short.maxTick + short.maxAgent + slack
	var longest time.Duration
	last := waitFor(t, p, "two deadline hits in a row", func(s status) bool {
		longest = max(longest, s.Sweep.Last.duration(), s.Sweep.Current.age())
		if longest > bound {
			t.Fatalf("a tick has run %v behind the black hole, bound %v (max_tick_duration + max_agent_duration + slack)", longest, bound)
		}
		return s.Sweep.DeadlineHits >= 2
	})
	if wait := seconds(last.Sweep.NextWaitSeconds); wait < 2*interval {
		t.Fatalf("after %d deadline hits the wait is %v: the backoff did not grow", last.Sweep.DeadlineHits, wait)
	}
	if hits := metric(t, p, "oplog_sweep_deadline_hits"); hits < 2 {
		t.Fatalf("oplog_sweep_deadline_hits = %v", hits)
	}
	t.Logf("behind the black hole: longest tick %v, %d deadline hits, next wait %.1fs",
		longest, last.Sweep.DeadlineHits, last.Sweep.NextWaitSeconds)
	stop(t, p, "with the store dark")

	// Now an agent under way that nothing but the grace can end: an hour of max_agent_duration, the
	// store going dark in the middle of its archive, then SIGTERM.
	proxy.SetBlackhole(false)
	proxy.SetLatency(30*time.Millisecond, faultproxy.Both) // so that an archive lasts long enough to be caught
	p = strataproc.Start(t, bin, config(long))
	feed(t, p)
	hangAnAgent(t, p, proxy)
	stop(t, p, "with an agent hung in its archive")
	proxy.SetLatency(0, faultproxy.Both)

	// The network heals: a sweep over the same storage archives every agent, and each reads back whole.
	proxy.SetBlackhole(false)
	r := oplogtest.NewSweepRigOn(t, l, oplogtest.SweepConfig())
	for tick := 0; l.StrandedCount(t, stranded) > 0; tick++ {
		if tick == 20 {
			t.Fatalf("%d agents still stranded after %d ticks once healed", l.StrandedCount(t, stranded), tick)
		}
		r.Sweeper.SweepOnce(t.Context())
	}
	for _, a := range stranded {
		l.RequireExact(t, a, oplog.Ephemeral, entries)
		l.RequireDrained(t, a, oplog.Ephemeral, entries)
	}
}

// stop sends SIGTERM and requires the process to exit cleanly within the grace (plus the slack).
func stop(t *testing.T, p *strataproc.Process, while string) {
	t.Helper()
	began := time.Now()
	if code := p.Stop(t); code != 0 {
		t.Fatalf("strata exited %d after SIGTERM %s\n%s", code, while, p.Log())
	}
	took := time.Since(began)
	if took > shutdownGrace+slack {
		t.Fatalf("SIGTERM %s took %v, grace %v\n%s", while, took, shutdownGrace, p.Log())
	}
	t.Logf("SIGTERM %s: exited in %v", while, took)
}

// hangAnAgent turns the black hole on while the archive phase has an agent under way, and returns once
// that agent is seen stuck: the counts of started and finished agents unchanged for a second while
// one is unfinished. If the agents finished before the store went dark, it heals and tries again.
func hangAnAgent(t *testing.T, p *strataproc.Process, proxy *faultproxy.Proxy) {
	t.Helper()
	for try := 1; ; try++ {
		if try > 10 {
			t.Fatal("never caught an agent under way in its archive")
		}
		waitFor(t, p, "an agent under way", func(s status) bool { return s.Sweep.Current.underWay() })
		proxy.SetBlackhole(true)
		before := waitFor(t, p, "the status", func(status) bool { return true })
		time.Sleep(time.Second)
		after := waitFor(t, p, "the status", func(status) bool { return true })
		if b, a := before.Sweep.Current, after.Sweep.Current; b.underWay() && a.underWay() && b.Started == a.Started && b.Done == a.Done {
			t.Logf("an agent is hung in its archive (try %d): %+v", try, *after.Sweep.Current)
			return
		}
		proxy.SetBlackhole(false)
	}
}

// proxyFor starts a fault proxy in front of the URL's server and returns it with the URL pointed at it.
func proxyFor(t *testing.T, raw string) (*faultproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start("127.0.0.1:0", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	u.Host = proxy.Addr()
	return proxy, u.String()
}

func writeConfig(t *testing.T, storageURL, scheduleURL, blobDir string, b budgets) string {
	t.Helper()
	return strataproc.WriteConfig(t, t.TempDir(), storageURL, scheduleURL, "fs://"+blobDir, fmt.Sprintf(`[sweep]
interval = %q
max_tick_duration = %q
max_agent_duration = %q
shutdown_grace = %q
max_concurrency = 2
max_archives_per_tick = 4
page_size = 8
[residency]
ttl = "1h"
`, interval, b.maxTick, b.maxAgent, shutdownGrace))
}

func feed(t *testing.T, p *strataproc.Process) {
	t.Helper()
	for path, body := range map[string]string{"/v1/assignment": `{"shard_count":1,"shards":[0]}`, "/v1/residency": `{"agents":[]}`} {
		if code, resp := p.Call(t, http.MethodPut, path, "", body); code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, code, resp)
		}
	}
}

// status is the part of GET /v1/status this test reads.
type status struct {
	Sweep struct {
		Current         *progress `json:"current"` // null between ticks
		Last            report    `json:"last"`
		DeadlineHits    int       `json:"deadline_hits"`
		NextWaitSeconds float64   `json:"next_wait_seconds"`
	} `json:"sweep"`
}

type progress struct {
	AgeSeconds float64 `json:"age_seconds"`
	Phase      string  `json:"phase"`
	Started    int     `json:"agents_started"`
	Done       int     `json:"agents_done"`
}

// underWay reports whether the tick is archiving an agent that has not finished.
func (p *progress) underWay() bool { return p != nil && p.Phase == "archive" && p.Started > p.Done }

type report struct {
	DurationSeconds float64 `json:"duration_seconds"`
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func (r report) duration() time.Duration { return seconds(r.DurationSeconds) }

// age is how long the tick under way has run; 0 between ticks.
func (p *progress) age() time.Duration {
	if p == nil {
		return 0
	}
	return seconds(p.AgeSeconds)
}

// waitFor polls the status until done says so, failing the test after a minute. The status is served
// from memory: it answers whatever the store does.
func waitFor(t *testing.T, p *strataproc.Process, what string, done func(status) bool) status {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := p.Call(t, http.MethodGet, "/v1/status", "", "")
		var s status
		if code != http.StatusOK || json.Unmarshal([]byte(body), &s) != nil {
			t.Fatalf("status: %d %s", code, body)
		}
		if done(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute; status %s\n%s", what, body, p.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metric reads one unlabelled series from /metrics.
func metric(t *testing.T, p *strataproc.Process, name string) float64 {
	t.Helper()
	code, body := p.Call(t, http.MethodGet, "/metrics", "", "")
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
	if code != http.StatusOK || m == nil {
		t.Fatalf("/metrics: %d, no %s\n%s", code, name, body)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
