package main

import (
	"encoding/json"
	stdlog "log"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stratalog/strata/oplog"
)

func TestBinary_StrandedOplogsAreArchivedAfterTwoSweeps(t *testing.T) {
	d := newDeployment(t, "", "")
	stack := d.stack(t)
	agents := strandAgents(t, stack, 6, 20)
	p := start(t, d)
	feed(t, p, "")
	// The sidecar also ticks on its own once the feed arrives, so which pass archives is not the test's
	// to choose: two requested passes come after at least two passes in all, and the gate needs two.
	// What moved is read from the layers and the counter, not from one report.
	archived := 0.0
	for range 2 {
		var report struct{ Outcomes map[string]float64 }
		code, body := p.Call(t, "POST", "/v1/sweep", "", "")
		if code != 200 || json.Unmarshal([]byte(body), &report) != nil {
			t.Fatalf("sweep: %d %s", code, body)
		}
		archived += report.Outcomes["archived"]
	}
	if archived > 6 {
		t.Fatalf("the two sweeps report %v archived, more than the 6 agents", archived)
	}
	if got := requireWhole(t, stack, agents, 20); got != 6 {
		t.Fatalf("%d of 6 agents in the blob layer", got)
	}
	_, metrics := p.Call(t, "GET", "/metrics", "", "")
	m := regexp.MustCompile(`(?m)^oplog_sweep_outcome_total\{[^}]*outcome="archived"[^}]*\} (\d+)`).FindStringSubmatch(metrics)
	if m == nil || m[1] != "6" {
		t.Fatalf("oplog_sweep_outcome_total{outcome=\"archived\"} = %v, want 6", m)
	}
	if code := p.Stop(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM\n%s", code, p.Log())
	}
}

func TestBinary_SIGTERMDuringATickExitsZeroAndLeavesNoAgentHalfMoved(t *testing.T) {
	d := newDeployment(t, "max_concurrency = 1", "")
	stack := d.stack(t)
	const entries = 9000 // three chunks, two hops' worth of work per agent
	agents := strandAgents(t, stack, 40, entries)
	p := start(t, d)
	feed(t, p, "")
	if code, body := p.Call(t, "POST", "/v1/sweep", "", ""); code != 200 {
		t.Fatalf("first sweep: %d %s", code, body)
	}
	sweeping := make(chan string, 1)
	go func() {
		_, body := p.Call(t, "POST", "/v1/sweep", "", "")
		sweeping <- body
	}()
	// Signal once the tick is archiving: the first agent has left compressed level 1.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, ok, _ := stack.Archives()[0].LastIndex(t.Context(), agents[0], oplog.Ephemeral); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the tick never started archiving")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if code := p.Stop(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM during a tick\n%s", code, p.Log())
	}
	body := <-sweeping
	archived := requireWhole(t, stack, agents, entries)
	t.Logf("archived %d of %d agents before the shutdown stopped the tick", archived, len(agents))
	if !strings.Contains(body, "shutdown") && archived < len(agents) {
		t.Fatalf("the interrupted tick's report does not say shutdown: %.500s", body)
	}
}

func TestBinary_TokenBodiesAndBadJSON(t *testing.T) {
	d := newDeployment(t, "", "token = \"s3cret\"\nmax_body_bytes = 512")
	p := start(t, d)
	if code, _ := p.Call(t, "PUT", "/v1/assignment", "", `{"shard_count":1,"shards":[0]}`); code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", code)
	}
	if code, body := p.Call(t, "PUT", "/v1/residency", "s3cret", `{"agents":["`+strings.Repeat("x", 2000)+`"]}`); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized: %d %s", code, body)
	}
	if code, body := p.Call(t, "PUT", "/v1/assignment", "s3cret", `{"shard_count":`); code != http.StatusBadRequest || !strings.Contains(body, "bad JSON") {
		t.Fatalf("malformed: %d %s", code, body)
	}
	_, status := p.Call(t, "GET", "/v1/status", "s3cret", "")
	if !strings.Contains(status, `"assignment": null`) {
		t.Fatalf("refused writes changed the feed: %s", status)
	}
	if code := p.Stop(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func TestBinary_BadConfigurationNamesTheKey(t *testing.T) {
	d := newDeployment(t, "page_size = -1", "")
	code, _, errOut := runBinary(t, nil, "run", "--config", d.config)
	if code != 1 || !strings.Contains(errOut, "sweep.page_size") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	d = newDeployment(t, "", "")
	code, _, errOut = runBinary(t, []string{"STRATA_SWEEP_MAX_TICK_DURATION=soon"}, "run", "--config", d.config)
	if code != 1 || !strings.Contains(errOut, "STRATA_SWEEP_MAX_TICK_DURATION") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

// What libraries log on their own (the log package, go-redis) comes out in the configured format,
// redacted.
func TestLibraryLogsGoThroughTheConfiguredLogger(t *testing.T) {
	prev := slog.Default()
	t.Cleanup(func() { slog.SetDefault(prev) })
	var buf strings.Builder
	routeLibraryLogs(newLogger(&buf, slog.LevelInfo, "json"))
	stdlog.Print("dial postgres://u:hunter2@h/db failed")
	redisLogger{slog.Default()}.Printf(t.Context(), "redis: pool: %s", "password=hunter2")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || strings.Contains(buf.String(), "hunter2") {
		t.Fatalf("library lines:\n%s", buf.String())
	}
	requireJSONLines(t, buf.String())
}

// A configuration that asks for JSON logs but is otherwise bad gets its error as a JSON line.
func TestABadConfigAskingForJSONLogsFailsInJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(path, []byte("[log]\nformat = \"json\"\n[sweep]\npage_size = -1\n"), 0o600)
	for _, args := range [][]string{{"run", "--config", path}, {"scan", "--config", path}, {"sweep", "--once", "--config", path}} {
		code, _, errOut := runIn(args...)
		if code != 1 || !strings.Contains(errOut, "sweep.page_size") {
			t.Fatalf("%s: exit %d %s", args[0], code, errOut)
		}
		requireJSONLines(t, errOut)
	}
	t.Setenv("STRATA_LOG_FORMAT", "json")
	code, _, errOut := runIn("run", "--config", filepath.Join(t.TempDir(), "missing.toml"))
	if code != 1 {
		t.Fatalf("missing file: exit %d", code)
	}
	requireJSONLines(t, errOut)
}

// run opens the stores its URL flags name, over the configuration file's. Both are directories here,
// which SQLite cannot open, so run fails at once either way, naming the store it opened.
func TestRun_URLFlagsOverTheFile(t *testing.T) {
	fromFile, fromFlag := t.TempDir(), t.TempDir()
	path := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(path, []byte("[storage]\nurl = \"sqlite://"+fromFile+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runIn("run", "--config", path, "--storage-url", "sqlite://"+fromFlag)
	if code != 1 || !strings.Contains(errOut, "storage.url") || !strings.Contains(errOut, fromFlag) || strings.Contains(errOut, fromFile) {
		t.Fatalf("run --storage-url: exit %d, %q; want 1 naming the flag's store", code, errOut)
	}
}
