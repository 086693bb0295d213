package sqlite_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stratalog/strata/backends/sqlite"
)

// dirState is every file of dir with its bytes: what a read-only look must leave as it was.
func dirState(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

func requireSameDir(t *testing.T, dir string, before map[string][]byte) {
	t.Helper()
	after := dirState(t, dir)
	if len(after) != len(before) {
		t.Fatalf("the directory changed: %d files before, %d after", len(before), len(after))
	}
	for name, b := range before {
		if !bytes.Equal(after[name], b) {
			t.Fatalf("%s changed", name)
		}
	}
}

func versions(ms []sqlite.Migration) []int {
	var out []int
	for _, m := range ms {
		out = append(out, m.Version)
	}
	return out
}

// The status of a missing file says so, lists every migration and creates nothing.
func TestSchemaState_OfAMissingFileCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "none", "strata.db")
	st, err := sqlite.StorageSchemaState(t.Context(), path)
	if err != nil || st.Exists || st.Version != 0 || st.Latest != sqlite.SchemaVersion || !slices.Equal(versions(st.Pending), []int{1, 2}) {
		t.Fatalf("storage: %+v, %v", st, err)
	}
	sched, err := sqlite.ScheduleSchemaState(t.Context(), path)
	if err != nil || sched.Exists || sched.Version != 0 || !slices.Equal(versions(sched.Pending), []int{1, 2}) ||
		!strings.Contains(sched.Pending[0].SQL, "CREATE TABLE scheduled_actions") {
		t.Fatalf("schedule: %+v, %v", sched, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "none")); !os.IsNotExist(err) {
		t.Fatalf("the status created %s", filepath.Join(dir, "none"))
	}
}

// The status reads each store's version and what opening it would apply, and leaves the file, its
// journal and the directory byte for byte as they were.
func TestSchemaState_ReadsEachStoresVersionAndChangesNothing(t *testing.T) {
	path := oldFile(t) // index storage at version 1, in WAL mode, no scheduled_actions
	dir := filepath.Dir(path)
	before := dirState(t, dir)
	st, err := sqlite.StorageSchemaState(t.Context(), path)
	if err != nil || !st.Exists || st.Version != 1 || !slices.Equal(versions(st.Pending), []int{2}) ||
		!strings.Contains(st.Pending[0].SQL, "index_storage_v2") {
		t.Fatalf("storage at version 1: %+v, %v", st, err)
	}
	sched, err := sqlite.ScheduleSchemaState(t.Context(), path)
	if err != nil || !sched.Exists || sched.Version != 0 || len(sched.Pending) != 2 {
		t.Fatalf("schedule never opened: %+v, %v", sched, err)
	}
	requireSameDir(t, dir, before)

	// Opening the stores applies what the status listed; it then lists nothing.
	s, err := sqlite.New(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	ss, err := sqlite.NewScheduleStore(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ss.Close()
	if st, err = sqlite.StorageSchemaState(t.Context(), path); err != nil || st.Version != 2 || len(st.Pending) != 0 {
		t.Fatalf("storage after Open: %+v, %v", st, err)
	}
	if sched, err = sqlite.ScheduleSchemaState(t.Context(), path); err != nil || sched.Version != 2 || len(sched.Pending) != 0 {
		t.Fatalf("schedule after OpenSchedule: %+v, %v", sched, err)
	}
}

// While a process has the file open (its write-ahead log beside it), the status reads through the log.
func TestSchemaState_ReadsAFileAnotherProcessHasOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "open.db")
	s, err := sqlite.New(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Fatalf("no write-ahead log while open: %v", err)
	}
	if st, err := sqlite.StorageSchemaState(t.Context(), path); err != nil || st.Version != sqlite.SchemaVersion || len(st.Pending) != 0 {
		t.Fatalf("%+v, %v", st, err)
	}
}

func TestSchemaState_ADirectoryIsNoDatabase(t *testing.T) {
	if _, err := sqlite.StorageSchemaState(t.Context(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("err %v", err)
	}
}
