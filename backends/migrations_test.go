package backends

import (
	"os"
	"strings"
	"testing"

	"github.com/stratalog/strata/internal/testenv"
)

// status reads both stores of one URL and fails the test on an error.
func status(t *testing.T, storage, schedule string) (MigrationStatus, MigrationStatus) {
	t.Helper()
	st, err := StorageMigrationStatus(t.Context(), storage)
	if err != nil {
		t.Fatalf("storage %s: %v", storage, err)
	}
	var sched MigrationStatus
	if schedule != "" {
		if sched, err = ScheduleMigrationStatus(t.Context(), schedule); err != nil {
			t.Fatalf("schedule %s: %v", schedule, err)
		}
	}
	return st, sched
}

// On SQLite the status of a missing file lists every migration and creates nothing; migrating
// creates the file and applies them, and the status then lists none.
func TestMigrationStatus_SQLiteBeforeAndAfterMigrating(t *testing.T) {
	dir := t.TempDir()
	url := "sqlite://" + dir + "/data/strata.db"
	st, sched := status(t, url, url)
	if st.Exists || st.Backend != "sqlite" || st.Version != 0 || st.Latest != 2 || len(st.Pending) != 2 || !strings.Contains(st.Note, "does not exist") {
		t.Fatalf("storage: %+v", st)
	}
	if sched.Exists || sched.Store != StoreSchedule || len(sched.Pending) != 2 {
		t.Fatalf("schedule: %+v", sched)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("the status created %v", entries)
	}
	if err := MigrateStorage(t.Context(), url); err != nil {
		t.Fatal(err)
	}
	if st, sched = status(t, url, url); !st.Exists || st.Version != 2 || len(st.Pending) != 0 || sched.Version != 0 || len(sched.Pending) != 2 {
		t.Fatalf("after migrating the storage: %+v\n%+v", st, sched)
	}
	if err := MigrateSchedule(t.Context(), url); err != nil {
		t.Fatal(err)
	}
	if _, sched = status(t, url, url); sched.Version != 2 || len(sched.Pending) != 0 {
		t.Fatalf("after migrating the schedule store: %+v", sched)
	}
}

// multisqlite migrates each file as it opens it, and memory has nothing to migrate: both say so.
func TestMigrationStatus_BackendsWithoutAStoreWideSchemaSaySo(t *testing.T) {
	dir := t.TempDir()
	multi, _ := status(t, "multisqlite://"+dir+"/multi", "")
	if multi.Exists || multi.Latest != 0 || len(multi.Pending) != 0 || !strings.Contains(multi.Note, "each brought to schema version 2 when strata opens it") {
		t.Fatalf("multisqlite: %+v", multi)
	}
	if _, err := os.Stat(dir + "/multi"); !os.IsNotExist(err) {
		t.Fatal("the status created the multisqlite directory")
	}
	mem, memSched := status(t, "memory://", "memory://")
	for _, s := range []MigrationStatus{mem, memSched} {
		if s.Backend != "memory" || len(s.Pending) != 0 || !strings.Contains(s.Note, "nothing to migrate") {
			t.Fatalf("memory: %+v", s)
		}
	}
	if _, err := StorageMigrationStatus(t.Context(), "bogus://x"); err == nil || !strings.Contains(err.Error(), "unknown scheme") {
		t.Fatalf("unknown scheme: %v", err)
	}
	if _, err := ScheduleMigrationStatus(t.Context(), "redis://127.0.0.1:6379/0"); err == nil || !strings.Contains(err.Error(), "unknown scheme") {
		t.Fatalf("redis as a schedule store: %v", err)
	}
}

// On PostgreSQL each store's record is read; the URL shown hides its password.
func TestMigrationStatus_PostgresShowsEachStoreAndHidesThePassword(t *testing.T) {
	pg := testenv.PostgresURL(t)
	schema := testenv.PostgresSchema(t, pg)
	url := strings.Replace(pg, "postgres@", "postgres:hunter2@", 1) + "&schema=" + schema
	st, sched := status(t, url, url)
	if !st.Exists || st.Backend != "postgres" || st.Version != 0 || st.Latest != 1 || len(st.Pending) != 1 || len(sched.Pending) != 2 ||
		strings.Contains(st.URL, "hunter2") {
		t.Fatalf("before: %+v\n%+v", st, sched)
	}
	if err := MigrateStorage(t.Context(), url); err != nil {
		t.Fatal(err)
	}
	if err := MigrateSchedule(t.Context(), url); err != nil {
		t.Fatal(err)
	}
	if st, sched = status(t, url, url); st.Version != 1 || len(st.Pending) != 0 || sched.Version != 2 || len(sched.Pending) != 0 {
		t.Fatalf("after: %+v\n%+v", st, sched)
	}
}

// On Redis the layout marker is the version: a fresh prefix has none, and migrating writes it.
func TestMigrationStatus_RedisLayoutMarker(t *testing.T) {
	raw := testenv.RedisURL(t)
	url := testenv.WithQuery(t, raw, "prefix", testenv.RedisPrefix(t, raw))
	st, _ := status(t, url, "")
	if st.Backend != "redis" || st.Version != 0 || st.Latest != 2 || len(st.Pending) != 1 || !strings.Contains(st.Pending[0].SQL, "{strata}layout") {
		t.Fatalf("fresh prefix: %+v", st)
	}
	if err := MigrateStorage(t.Context(), url); err != nil {
		t.Fatal(err)
	}
	if st, _ = status(t, url, ""); st.Version != 2 || len(st.Pending) != 0 {
		t.Fatalf("after: %+v", st)
	}
}
