package main

import (
	"encoding/json"
	stdlog "log"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/stratalog/strata/config"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/internal/version"
	"github.com/stratalog/strata/oplog"
)

func runIn(args ...string) (int, string, string) {
	var out, errOut strings.Builder
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestVersion_PrintsTheBuild(t *testing.T) {
	code, out, _ := runIn("version")
	if code != 0 || strings.TrimSpace(out) != version.Get().String() {
		t.Fatalf("version: exit %d %q, want %q", code, out, version.Get().String())
	}
	code, out, _ = runIn("version", "--json")
	var v map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("version --json: exit %d %q", code, out)
	}
	for _, key := range []string{"version", "commit", "modified", "go_version"} {
		if _, ok := v[key]; !ok {
			t.Errorf("version --json lacks %q: %s", key, out)
		}
	}
	if v["go_version"] != version.Get().GoVersion || v["version"] != version.Get().Version {
		t.Errorf("version --json: %s", out)
	}
}

// Every command has a synopsis, through `strata help CMD` (stdout) and `CMD -h` (stderr), exit 0.
func TestHelp_EveryCommandHasASynopsis(t *testing.T) {
	for _, name := range commandNames() {
		c := commands[name]
		code, out, errOut := runIn("help", name)
		if code != 0 || !strings.Contains(out, "Usage: "+c.synopsis) || !strings.Contains(out, c.about[:20]) {
			t.Errorf("help %s: exit %d\n%s%s", name, code, out, errOut)
		}
		if c.args != "" && !strings.Contains(out, "Arguments:\n  "+c.args) {
			t.Errorf("help %s lacks its arguments:\n%s", name, out)
		}
		if name == "help" {
			continue
		}
		code, _, errOut = runIn(name, "-h")
		if code != 0 || !strings.Contains(errOut, "Usage: "+c.synopsis) {
			t.Errorf("%s -h: exit %d\n%s", name, code, errOut)
		}
	}
	for _, name := range []string{"run", "sweep", "scan", "inspect", "demo", "version"} {
		if _, out, _ := runIn("help", name); !strings.Contains(out, "Flags:\n") {
			t.Errorf("help %s lists no flags:\n%s", name, out)
		}
	}
	if _, out, _ := runIn("help", "scan"); !strings.Contains(out, "-json") || !strings.Contains(out, "-limit") {
		t.Errorf("help scan:\n%s", out)
	}
	if code, out, _ := runIn("help"); code != 0 || !strings.Contains(out, "strata version") {
		t.Errorf("help: exit %d\n%s", code, out)
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{}, {"nosuch"}, {"help", "nosuch"}, {"help", "a", "b"}, {"version", "extra"}, {"version", "--bogus"},
		{"config"}, {"config", "bogus"}, {"config", "check"}, {"config", "check", "a", "b"}, {"config", "defaults", "x"},
		{"config", "print", "extra"}, {"config", "print", "--bogus"},
		{"inspect"}, {"inspect", "a:b", "c:d"}, {"inspect", "--mode", "x", "a:b"}, {"scan", "extra"}, {"scan", "--mode", "x"},
		{"sweep"}, {"sweep", "--once", "--gap", "x"}, {"run", "--bogus"},
		{"demo", "--lose", "2"}, {"bench"}, {"bench", "nosuch"},
	} {
		if code, _, errOut := runIn(args...); code != 2 {
			t.Errorf("strata %s: exit %d, want 2\n%s", strings.Join(args, " "), code, errOut)
		}
	}
}

func TestConfigCheckAndPrint(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(good, []byte("[storage]\nurl = \"postgres://u:hunter2@127.0.0.1/db?password=hunter2\"\n[sweep]\npage_size = 77\n"), 0o600)
	os.WriteFile(bad, []byte("[sweep]\npage_size = -1\n"), 0o600)
	if code, out, errOut := runIn("config", "check", good); code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("check good: exit %d %s %s", code, out, errOut)
	}
	if code, _, errOut := runIn("config", "check", bad); code != 1 || !strings.Contains(errOut, "sweep.page_size") {
		t.Fatalf("check bad: exit %d %s", code, errOut)
	}
	if code, _, errOut := runIn("config", "check", filepath.Join(dir, "missing.toml")); code != 1 {
		t.Fatalf("check missing: exit %d %s", code, errOut)
	}
	t.Setenv("STRATA_HTTP_TOKEN", "hunter2-token")
	t.Setenv("STRATA_SWEEP_MAX_CONCURRENCY", "3")
	code, out, errOut := runIn("config", "print", "--config", good)
	if code != 0 || strings.Contains(out+errOut, "hunter2") {
		t.Fatalf("print: exit %d\n%s%s", code, out, errOut)
	}
	cfg, err := config.Parse([]byte(out), nil)
	if err != nil {
		t.Fatalf("print does not parse back: %v\n%s", err, out)
	}
	if cfg.Sweep.PageSize != 77 || cfg.Sweep.MaxConcurrency != 3 || cfg.HTTP.Token != "(hidden)" {
		t.Fatalf("print is not the effective config:\n%s", out)
	}
}

// scan and inspect create nothing: a missing SQLite file, multisqlite directory, blob directory or
// PostgreSQL schema or table fails them with a message saying so, and is still missing after.
func TestScanAndInspectCreateNothing(t *testing.T) {
	dir := t.TempDir()
	write := func(storage, blob string) string {
		path := filepath.Join(dir, "c.toml")
		cfg := "[storage]\nurl = \"" + storage + "\"\n[blob]\nurl = \"" + blob + "\"\n[log]\nformat = \"json\"\n"
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	blobs := filepath.Join(dir, "blobs")
	os.Mkdir(blobs, 0o755)
	cases := []struct{ storage, blob, missing string }{
		{"sqlite://" + dir + "/none/strata.db", "fs://" + blobs, filepath.Join(dir, "none")},
		{"sqlite://" + dir + "/strata.db", "fs://" + blobs, filepath.Join(dir, "strata.db")},
		{"multisqlite://" + dir + "/multi", "fs://" + blobs, filepath.Join(dir, "multi")},
	}
	// The blob directory too, against an existing database.
	db := filepath.Join(dir, "exists.db")
	if code, _, errOut := runIn("demo", "--dir", filepath.Join(dir, "demo"), "--invocations", "1"); code != 0 {
		t.Fatalf("demo: %s", errOut)
	}
	os.Rename(filepath.Join(dir, "demo", "strata.db"), db)
	cases = append(cases, struct{ storage, blob, missing string }{"sqlite://" + db, "fs://" + dir + "/noblobs", filepath.Join(dir, "noblobs")})
	for _, c := range cases {
		cfg := write(c.storage, c.blob)
		for _, args := range [][]string{{"scan", "--config", cfg}, {"inspect", "--config", cfg, "c:a"}} {
			code, _, errOut := runIn(args...)
			if code != 1 || !strings.Contains(errOut, "create nothing") {
				t.Errorf("%s on %s: exit %d, want 1 saying it creates nothing\n%s", args[0], c.storage, code, errOut)
			}
			requireJSONLines(t, errOut)
			if _, err := os.Stat(c.missing); !os.IsNotExist(err) {
				t.Fatalf("%s on %s created %s", args[0], c.storage, c.missing)
			}
		}
	}
}

func TestScanAndInspectCreateNoPostgresSchemaOrTable(t *testing.T) {
	pg := testenv.PostgresURL(t)
	existing := testenv.PostgresSchema(t, pg) // a schema without the table
	missing := testenv.UniqueName("strata_absent_")
	dir := t.TempDir()
	for _, schema := range []string{missing, existing} {
		path := filepath.Join(dir, "c.toml")
		cfg := "[storage]\nurl = \"" + pg + "&schema=" + schema + "\"\n[blob]\nurl = \"fs://" + dir + "\"\n"
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"scan", "--config", path}, {"inspect", "--config", path, "c:a"}} {
			if code, _, errOut := runIn(args...); code != 1 || !strings.Contains(errOut, "nothing was created") {
				t.Errorf("%s in schema %s: exit %d\n%s", args[0], schema, code, errOut)
			}
		}
	}
	conn, err := pgx.Connect(t.Context(), pg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	var schemas, tables int
	if err := conn.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = $1),
		(SELECT count(*) FROM pg_tables WHERE schemaname IN ($1, $2))`, missing, existing).Scan(&schemas, &tables); err != nil {
		t.Fatal(err)
	}
	if schemas != 0 || tables != 0 {
		t.Fatalf("scan/inspect created %d schemas and %d tables", schemas, tables)
	}
}

func TestBinary_ScanAndInspectJSON(t *testing.T) {
	d := newDeployment(t, "", "")
	stack := d.stack(t)
	agents := strandAgents(t, stack, 2, 30)
	if _, err := stack.Drain(t.Context(), agents[1], oplog.Ephemeral); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runBinary(t, nil, "scan", "--json", "--config", d.config)
	if code != 0 {
		t.Fatalf("scan --json: exit %d %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var row struct {
		Agent     string `json:"agent"`
		LastIndex *int   `json:"last_index"`
	}
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &row) != nil || row.Agent != agents[0].Key() || row.LastIndex == nil || *row.LastIndex != 30 {
		t.Fatalf("scan --json:\n%s", out)
	}
	code, out, errOut = runBinary(t, nil, "inspect", "--json", "--config", d.config, agents[1].Key())
	var got struct {
		Agent  string `json:"agent"`
		Mode   string `json:"mode"`
		Layers []struct {
			Layer   string `json:"layer"`
			First   *int   `json:"first"`
			Last    *int   `json:"last"`
			Entries int    `json:"entries"`
		} `json:"layers"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Agent != agents[1].Key() || got.Mode != "ephemeral" {
		t.Fatalf("inspect --json: exit %d\n%s%s", code, out, errOut)
	}
	last := got.Layers[len(got.Layers)-1]
	if last.Layer != "blob-0" || last.First == nil || *last.First != 1 || *last.Last != 30 || last.Entries != 30 || got.Layers[0].First != nil {
		t.Fatalf("inspect --json: %s", out)
	}
}

func TestUsageErrors_StrayArgumentsExitTwo(t *testing.T) {
	for _, args := range [][]string{{"run", "extra"}, {"sweep", "--once", "extra"}, {"demo", "extra"}} {
		if code, _, errOut := runIn(args...); code != 2 || !strings.Contains(errOut, "takes no arguments") {
			t.Errorf("strata %s: exit %d, want 2\n%s", strings.Join(args, " "), code, errOut)
		}
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
