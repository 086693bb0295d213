package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
)

// scan, inspect and the commands after the archive (verify, compact, erase, gc) create nothing: a
// missing SQLite file, multisqlite directory, blob directory or PostgreSQL schema or table fails them
// with a message naming the command and saying so, and is still missing after.
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
		for _, args := range [][]string{{"scan", "--config", cfg}, {"inspect", "--config", cfg, "c:a"}, {"verify", "--config", cfg},
			{"compact", "--config", cfg}, {"erase", "--config", cfg, "c:a"}, {"gc", "--config", cfg}} {
			code, _, errOut := runIn(args...)
			if code != 1 || !strings.Contains(errOut, args[0]+" creates nothing") {
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

// scan --json prints JSON Lines: one JSON object per agent.
func TestBinary_ScanJSONLines(t *testing.T) {
	d := newDeployment(t, "", "")
	stack := d.stack(t)
	agents := strandAgents(t, stack, 3, 30)
	if _, err := stack.Drain(t.Context(), agents[1], oplog.Ephemeral); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runBinary(t, nil, "scan", "--json", "--config", d.config)
	if code != 0 {
		t.Fatalf("scan --json: exit %d %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("scan --json: %d lines, want one per stranded agent:\n%s", len(lines), out)
	}
	for i, want := range []string{agents[0].Key(), agents[2].Key()} {
		var row struct {
			Agent     string `json:"agent"`
			LastIndex *int   `json:"last_index"`
		}
		if json.Unmarshal([]byte(lines[i]), &row) != nil || row.Agent != want || row.LastIndex == nil || *row.LastIndex != 30 {
			t.Fatalf("scan --json line %d: %s", i+1, lines[i])
		}
	}
}

func TestBinary_ScanShowsWhatALayerHolds(t *testing.T) {
	d := newDeployment(t, "", "")
	stack := d.stack(t)
	agents := strandAgents(t, stack, 2, 5000)
	if _, err := stack.Drain(t.Context(), agents[1], oplog.Ephemeral); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runBinary(t, nil, "scan", "--config", d.config)
	if code != 0 || !strings.Contains(out, agents[0].Key()+"  5000") || strings.Contains(out, agents[1].Key()) {
		t.Fatalf("scan: exit %d\n%s", code, out)
	}
	// The blob layer enumerates its agents through its index: the drained one, with its last index.
	code, out, _ = runBinary(t, nil, "scan", "--config", d.config, "--layer", "blob-0")
	if code != 0 || !strings.Contains(out, agents[1].Key()+"  5000") || strings.Contains(out, agents[0].Key()) {
		t.Fatalf("scan --layer blob-0: exit %d\n%s", code, out)
	}
	code, out, errOut := runBinary(t, nil, "scan", "--config", d.config, "--layer", "nosuch")
	if code != 2 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, `no layer "nosuch"; the stack has primary, compressed-1, blob-0`) {
		t.Fatalf("scan --layer nosuch: exit %d\n%s%s", code, out, errOut)
	}
}

// scanLayer is tested over a layer whose pages pass over a file and whose last index read fails for
// one agent; the other methods of oplog.Layer are never called.
type brokenLayer struct {
	oplog.Layer
	pages []is.Page
}

func (l *brokenLayer) ScanAgents(_ context.Context, _ oplog.Mode, _ oplog.BucketRange, from is.Resume, _ int) (is.Page, error) {
	if from.IsStart() {
		return l.pages[0], nil
	}
	return l.pages[1], nil
}

func (l *brokenLayer) LastIndex(_ context.Context, a oplog.AgentID, _ oplog.Mode) (oplog.Index, bool, error) {
	if a.Name == "b" {
		return 0, false, errors.New("database disk image is malformed")
	}
	return 7, true, nil
}

func TestScanLayer_MarksWhatItCannotReadAndWalksOn(t *testing.T) {
	layer := &brokenLayer{pages: []is.Page{
		{Keys: []string{stored("c:a"), stored("c:b")}, Next: is.MarkerResume(stored("c:b")),
			Unreadable: []is.Unreadable{{Where: "ns-ephemeral~compressed~1/7f7f.db", Err: errors.New("file is not a database")}}},
		{Keys: []string{stored("c:c")}, Done: true},
	}}
	var out strings.Builder
	n, err := scanLayer(t.Context(), layer, oplog.Ephemeral, 0, &tableRows{tw: tabwriter.NewWriter(&out, 0, 4, 2, ' ', 0)})
	if err != nil || n != 2 {
		t.Fatalf("%d unreadable, %v; want 2 and no error", n, err)
	}
	for _, row := range []string{"ns-ephemeral~compressed~1/7f7f.db  unreadable: file is not a database", "c:a", "c:b",
		"unreadable: database disk image is malformed", "c:c"} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("output lacks %q:\n%s", row, out.String())
		}
	}
}

// stored is the stored key of the agent with key.
func stored(key string) string {
	a, err := oplog.ParseAgentKey(key)
	if err != nil {
		panic(err)
	}
	return a.StoredKey()
}

// A key no agent is stored under is listed as unparseable, in key order with the agents, wherever it
// sorts: inside a bucket's range with another bucket's prefix, below the first bucket, above the last,
// as the sweep counts it. Before, the keys outside every bucket's range were not listed at all.
func TestScanLayer_ListsKeysThatAreNoAgentsWhereverTheySort(t *testing.T) {
	st := memory.New()
	defer st.Close()
	layer, err := archive.NewCompressed(st, 1)
	if err != nil {
		t.Fatal(err)
	}
	agent := oplog.AgentID{Component: "c", Name: "a"}
	if err := layer.Append(t.Context(), agent, oplog.Ephemeral, []oplog.Entry{{Index: 1, Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	ns := oplog.CompressedNamespace(oplog.Ephemeral, 1)
	foreign := []string{"-below-every-bucket", "0000/c:a", "4001/c:a", "nobucket"}
	for _, key := range foreign {
		if err := st.Append(t.Context(), ns, key, 7, []byte("foreign")); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	unreadable, err := scanLayer(t.Context(), layer, oplog.Ephemeral, 0, jsonRows{enc: json.NewEncoder(&out)})
	if err != nil || unreadable != 0 {
		t.Fatalf("scanLayer: %d unreadable, %v", unreadable, err)
	}
	want := []string{
		`{"agent":"-below-every-bucket","last_index":null,"unparseable":"`,
		`{"agent":"0000/c:a","last_index":null,"unparseable":"`,
		`{"agent":"c:a","last_index":1}`,
		`{"agent":"4001/c:a","last_index":null,"unparseable":"`,
		`{"agent":"nobucket","last_index":null,"unparseable":"`,
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("scan listed %d rows, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("row %d: %s\nwant %s…", i+1, lines[i], w)
		}
	}
}
