package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
)

// migrationLine is one line of migrate status --json.
type migrationLine struct {
	Store   string `json:"store"`
	Backend string `json:"backend"`
	URL     string `json:"url"`
	Exists  bool   `json:"exists"`
	Version int    `json:"version"`
	Latest  int    `json:"latest"`
	Pending []struct {
		Version int    `json:"version"`
		Name    string `json:"name"`
		SQL     string `json:"sql"`
	} `json:"pending"`
	Note string `json:"note"`
}

func statusJSON(t *testing.T, args ...string) []migrationLine {
	t.Helper()
	code, out, errOut := runIn(append([]string{"migrate", "status", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("migrate status --json: exit %d\n%s%s", code, out, errOut)
	}
	var lines []migrationLine
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var l migrationLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		lines = append(lines, l)
	}
	if len(lines) != 2 || lines[0].Store != "storage" || lines[1].Store != "schedule" {
		t.Fatalf("want a line for the storage and one for the schedule store:\n%s", out)
	}
	return lines
}

func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// On SQLite: status reports a store that does not exist and creates nothing; up --dry-run prints the
// SQL it would run and creates nothing; up creates and migrates both stores; status then shows them
// up to date.
func TestMigrate_StatusDryRunAndUpOnSQLite(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "data", "strata.db")
	url := "sqlite://" + db
	flags := []string{"--storage-url", url, "--schedule-url", url}

	code, out, errOut := runIn(append([]string{"migrate", "status"}, flags...)...)
	if code != 0 || !strings.Contains(out, "storage (sqlite, "+url+"): does not exist; latest schema version 2; 2 pending: 1 index_storage, 2 index_storage_type_checks") ||
		!strings.Contains(out, "schedule (sqlite, "+url+"): does not exist; latest schema version 2; 2 pending: 1 scheduled_actions, 2 scheduled_actions_subject") {
		t.Fatalf("migrate status: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runIn(append([]string{"migrate", "up", "--dry-run"}, flags...)...)
	if code != 0 || !strings.Contains(out, "-- storage: would apply migration 1 index_storage\nCREATE TABLE IF NOT EXISTS index_storage") ||
		!strings.Contains(out, "-- schedule: would apply migration 1 scheduled_actions\nCREATE TABLE scheduled_actions") {
		t.Fatalf("migrate up --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	if names := dirEntries(t, dir); len(names) != 0 {
		t.Fatalf("status and --dry-run created %v", names)
	}

	code, out, errOut = runIn(append([]string{"migrate", "up"}, flags...)...)
	if code != 0 || strings.Count(out, "up to date") != 2 {
		t.Fatalf("migrate up: exit %d\n%s%s", code, out, errOut)
	}
	for _, l := range statusJSON(t, flags...) {
		if !l.Exists || l.Backend != "sqlite" || l.Version != 2 || l.Latest != 2 || len(l.Pending) != 0 {
			t.Fatalf("after up: %+v", l)
		}
	}
	// What up made is what strata reads: scan finds the (empty) stores it needs.
	if code, _, errOut := runIn("scan", "--storage-url", url, "--blob-url", "fs://"+dir); code != 0 {
		t.Fatalf("scan after migrate up: exit %d %s", code, errOut)
	}
}

// A half-migrated file: status names the one migration pending and up applies it.
func TestMigrate_StatusOfAStoreTheSidecarOpenedWithoutItsScheduleStore(t *testing.T) {
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "strata.db")
	if code, _, errOut := runIn("migrate", "up", "--storage-url", url, "--schedule-url", "memory://"); code != 0 {
		t.Fatalf("migrate up: %s", errOut)
	}
	lines := statusJSON(t, "--storage-url", url, "--schedule-url", url)
	if lines[0].Version != 2 || len(lines[0].Pending) != 0 || lines[1].Version != 0 || len(lines[1].Pending) != 2 || !lines[1].Exists {
		t.Fatalf("%+v", lines)
	}
	mem := statusJSON(t, "--storage-url", "memory://", "--schedule-url", "memory://")
	if mem[0].Backend != "memory" || !strings.Contains(mem[0].Note, "nothing to migrate") {
		t.Fatalf("memory: %+v", mem[0])
	}
}

// A store that cannot be read is a failure naming its key (exit 1), after the line of the one that can.
func TestMigrate_StatusOfAnUnreadableStoreFails(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runIn("migrate", "status", "--storage-url", "sqlite://"+dir, "--schedule-url", "memory://")
	if code != 1 || !strings.Contains(errOut, "storage.url") || !strings.Contains(errOut, "is a directory") || !strings.Contains(out, "schedule (memory") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
}

// On PostgreSQL: status and --dry-run create no schema and hide the URL's password; up creates the
// schema and both stores' tables, recorded.
func TestMigrate_OnPostgres(t *testing.T) {
	pg := testenv.PostgresURL(t)
	schema := testenv.UniqueName("strata_migrate_")
	t.Cleanup(func() {
		ctx, cancel := testenv.Context()
		defer cancel()
		if conn, err := pgx.Connect(ctx, pg); err == nil {
			conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			conn.Close(ctx)
		}
	})
	url := strings.Replace(pg, "postgres@", "postgres:hunter2@", 1) + "&schema=" + schema
	flags := []string{"--storage-url", url, "--schedule-url", url}
	schemaExists := func() bool {
		conn, err := pgx.Connect(t.Context(), pg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(t.Context())
		var n int
		if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	code, out, errOut := runIn(append([]string{"migrate", "up", "--dry-run"}, flags...)...)
	if code != 0 || strings.Contains(out+errOut, "hunter2") || !strings.Contains(out, fmt.Sprintf(`schema %q does not exist yet`, schema)) ||
		!strings.Contains(out, fmt.Sprintf(`CREATE TABLE "%s".index_storage`, schema)) {
		t.Fatalf("migrate up --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	for _, l := range statusJSON(t, flags...) {
		if l.Exists || l.Backend != "postgres" || len(l.Pending) != l.Latest || strings.Contains(l.URL, "hunter2") {
			t.Fatalf("before up: %+v", l)
		}
	}
	if schemaExists() {
		t.Fatal("status or --dry-run created the schema")
	}
	if code, out, errOut = runIn(append([]string{"migrate", "up"}, flags...)...); code != 0 || strings.Count(out, "up to date") != 2 {
		t.Fatalf("migrate up: exit %d\n%s%s", code, out, errOut)
	}
	for _, l := range statusJSON(t, flags...) {
		if !l.Exists || l.Version != l.Latest || len(l.Pending) != 0 {
			t.Fatalf("after up: %+v", l)
		}
	}
}

// migrate blobs packs a chunk-layout store: every agent reads back through the packed layout, no chunk
// blob is left, and a second run finds nothing to do.
func TestMigrateBlobs_PacksAChunkLayoutStore(t *testing.T) {
	dir := t.TempDir()
	storageURL, blobURL := "sqlite://"+filepath.Join(dir, "strata.db"), "fs://"+filepath.Join(dir, "blobs")
	ctx := t.Context()
	blobs, err := backends.OpenBlob(ctx, blobURL)
	if err != nil {
		t.Fatal(err)
	}
	defer blobs.Close()
	chunks, _ := archive.NewBlob(blobs, 0)
	var agents []oplog.AgentID
	for i := range 20 {
		a := oplog.AgentID{Component: "shop", Name: fmt.Sprint("cart/", i)}
		es := make([]oplog.Entry, 3+i)
		for j := range es {
			es[j] = oplog.Entry{Index: oplog.Index(j + 1), Payload: fmt.Appendf(nil, "%s #%d", a, j+1)}
		}
		if err := chunks.Append(ctx, a, oplog.Ephemeral, es); err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
	}
	code, out, errOut := runIn("migrate", "blobs", "--storage-url", storageURL, "--blob-url", blobURL)
	if code != 0 || !strings.Contains(out, "ephemeral: 20 agents packed") {
		t.Fatalf("migrate blobs: exit %d\n%s%s", code, out, errOut)
	}
	st, err := backends.Open(ctx, storageURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	packed, _ := archive.NewPacked(st, blobs, 0, nil)
	for i, a := range agents {
		got, err := packed.Read(ctx, a, oplog.Ephemeral, 1, 1000, oplog.ChunkLimit)
		if err != nil || len(got) != 3+i || string(got[len(got)-1].Payload) != fmt.Sprintf("%s #%d", a, 3+i) {
			t.Fatalf("%s after the migration: %d entries, %v", a, len(got), err)
		}
	}
	paths, _ := blobs.List(ctx, "")
	for _, p := range paths {
		if !strings.Contains(p, "/segments/") {
			t.Fatalf("chunk blob %s left", p)
		}
	}
	code, out, errOut = runIn("migrate", "blobs", "--storage-url", storageURL, "--blob-url", blobURL, "--json")
	if code != 0 || !strings.Contains(out, `"mode":"ephemeral","agents":0`) {
		t.Fatalf("second run: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := runIn("migrate", "blobs", "--storage-url", storageURL, "--blob-url", blobURL, "--agent", "nocolon"); code != 2 {
		t.Fatalf("--agent without a colon: exit %d, want 2\n%s", code, errOut)
	}
}
