package sqlite_test

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stratalog/strata/internal/testenv"

	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
)

// roNamespaces are the namespaces the read-only tests fill, each with a few keys of a few entries.
var roNamespaces = []string{"ephemeral/primary", "ephemeral/compressed/1", "durable/compressed/1"}

// fillStore writes roNamespaces' keys through a store opened for writing.
func fillStore(t *testing.T, st is.Storage) {
	t.Helper()
	for _, ns := range roNamespaces {
		for k := range 3 {
			key := fmt.Sprintf("%sc:agent-%d", is.BucketPrefix(k*5000), k)
			for id := uint64(1); id <= 4; id++ {
				if err := st.Append(t.Context(), ns, key, id, fmt.Appendf(nil, "%s/%s/%d", ns, key, id)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// readEverything walks every namespace with ScanStable and reads every key it hands back, as strata
// scan and inspect do, and checks what it read is what fillStore wrote.
func readEverything(t *testing.T, st is.Storage) {
	t.Helper()
	ctx := t.Context()
	for _, ns := range roNamespaces {
		keys := 0
		for from := (is.Resume{}); ; {
			page, err := st.ScanStable(ctx, ns, is.KeyRange{}, from, 2)
			if err != nil {
				t.Fatalf("ScanStable %s: %v", ns, err)
			}
			for _, key := range page.Keys {
				keys++
				entries, err := st.Read(ctx, ns, key, 1, is.MaxID)
				if err != nil || len(entries) != 4 || string(entries[3].Value) != fmt.Sprintf("%s/%s/4", ns, key) {
					t.Fatalf("Read %s %q: %v, %v", ns, key, entries, err)
				}
				if last, ok, err := st.LastID(ctx, ns, key); err != nil || !ok || last != 4 {
					t.Fatalf("LastID %s %q: %d %v %v", ns, key, last, ok, err)
				}
				if n, err := st.Length(ctx, ns, key); err != nil || n != 4 {
					t.Fatalf("Length %s %q: %d %v", ns, key, n, err)
				}
				if e, ok, err := st.First(ctx, ns, key); err != nil || !ok || e.ID != 1 {
					t.Fatalf("First %s %q: %v %v %v", ns, key, e, ok, err)
				}
			}
			if page.Done {
				break
			}
			from = page.Next
		}
		if keys != 3 {
			t.Fatalf("%s: walked %d keys, want 3", ns, keys)
		}
		if ok, err := st.Exists(ctx, ns, "no-such-key"); err != nil || ok {
			t.Fatalf("Exists of a missing key: %v %v", ok, err)
		}
	}
}

func openReadOnly(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.New(t.Context(), path, &sqlite.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A read-only open of a database a writer closed (WAL mode, no -wal or -shm left) reads every entry
// and leaves the directory as it found it: the file byte for byte, still in WAL mode, and no -wal,
// -shm or anything else created. Writes through it fail and change nothing.
func TestReadOnly_AClosedDatabaseIsReadAndLeftAsItWas(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "strata.db")
	st, err := sqlite.New(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	fillStore(t, st)
	st.Close()
	before := testenv.FileDigests(t, dir)
	if len(before) != 1 || testenv.JournalMode(t, path) != "wal" {
		t.Fatalf("before: %v, journal mode %s; want the database alone, in WAL mode", before, testenv.JournalMode(t, path))
	}

	ro := openReadOnly(t, path)
	readEverything(t, ro)
	if err := ro.Append(t.Context(), roNamespaces[0], "new", 1, nil); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("Append through a read-only store: %v, want ErrInvalidArgument", err)
	}
	if _, err := ro.DropPrefix(t.Context(), roNamespaces[0], is.BucketPrefix(0)+"c:agent-0", 4); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("DropPrefix through a read-only store: %v, want ErrInvalidArgument", err)
	}
	if err := ro.Delete(t.Context(), roNamespaces[0], is.BucketPrefix(0)+"c:agent-0"); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("Delete through a read-only store: %v, want ErrInvalidArgument", err)
	}
	if _, err := ro.AppendKeys(t.Context(), roNamespaces[0], []is.KeyEntries{{Key: "new", Entries: []is.Entry{{ID: 1}}}}); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("AppendKeys through a read-only store: %v, want ErrInvalidArgument", err)
	}
	if during := testenv.FileDigests(t, dir); !maps.Equal(before, during) {
		t.Fatalf("while open read-only: %v, want %v", during, before)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if after := testenv.FileDigests(t, dir); !maps.Equal(before, after) {
		t.Fatalf("after a read-only open: %v, want %v", after, before)
	}
	if mode := testenv.JournalMode(t, path); mode != "wal" {
		t.Fatalf("journal mode %s after a read-only open, want wal", mode)
	}
}

// Beside a live writer (its -wal holding commits the main file does not have yet), a read-only open
// reads them through SQLite's -shm, creates no file and writes no byte of the database or its -wal.
func TestReadOnly_BesideALiveWriterReadsItsCommitsAndCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "strata.db")
	w, err := sqlite.New(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fillStore(t, w)
	wal, err := os.Stat(path + "-wal")
	if err != nil || wal.Size() == 0 {
		t.Fatalf("the writer's -wal: %v, %v; the test needs commits in it", wal, err)
	}
	before := withoutSHMBytes(testenv.FileDigests(t, dir))
	ro := openReadOnly(t, path)
	readEverything(t, ro)
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	// The -shm is SQLite's shared memory, which every reader writes its read marks into.
	if after := withoutSHMBytes(testenv.FileDigests(t, dir)); !maps.Equal(before, after) {
		t.Fatalf("after a read-only open beside a writer: %v, want %v", after, before)
	}
}

func withoutSHMBytes(files map[string]string) map[string]string {
	for name := range files {
		if strings.HasSuffix(name, "-shm") {
			files[name] = "exists"
		}
	}
	return files
}

// A writer that comes along while a read-only store reads a file it opened immutable fails the next
// read with ErrTransient rather than let it see a file changing under it; opened again, the store
// reads the writer's commits.
func TestReadOnly_AWriterArrivingMidReadFailsTheNextRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "strata.db")
	w, err := sqlite.New(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	fillStore(t, w)
	w.Close()
	ro := openReadOnly(t, path)
	defer ro.Close()
	ns, key := roNamespaces[0], is.BucketPrefix(0)+"c:agent-0"
	if last, _, err := ro.LastID(t.Context(), ns, key); err != nil || last != 4 {
		t.Fatalf("LastID: %d, %v", last, err)
	}
	w, err = sqlite.New(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Append(t.Context(), ns, key, 5, []byte("five")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ro.LastID(t.Context(), ns, key); !errors.Is(err, is.ErrTransient) || !strings.Contains(err.Error(), "changed") {
		t.Fatalf("LastID after a writer committed: %v, want ErrTransient saying the file changed", err)
	}
	if _, err := ro.ScanStable(t.Context(), ns, is.KeyRange{}, is.Resume{}, 10); !errors.Is(err, is.ErrTransient) {
		t.Fatalf("ScanStable after a writer committed: %v, want ErrTransient", err)
	}
	again := openReadOnly(t, path)
	defer again.Close()
	if last, _, err := again.LastID(t.Context(), ns, key); err != nil || last != 5 {
		t.Fatalf("LastID opened again: %d, %v, want 5", last, err)
	}
}

// A foreign database (rollback journal, no index_storage) is refused with an error matching
// fs.ErrNotExist that names the missing table, and left byte for byte as it was, in its own journal
// mode, with nothing created beside it. A file of a schema version newer than this build's is refused
// the same way, also unchanged.
func TestReadOnly_AForeignOrNewerDatabaseIsRefusedAndLeftAsItWas(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "foreign.db")
	newer := filepath.Join(dir, "newer.db")
	for path, stmts := range map[string][]string{
		foreign: {`CREATE TABLE t (x)`, `INSERT INTO t VALUES (1)`},
		newer:   {`CREATE TABLE index_storage (namespace, key, id, value)`, fmt.Sprintf(`PRAGMA user_version = %d`, sqlite.SchemaVersion+1)},
	} {
		db, err := sql.Open("sqlite3", path) // the driver's defaults: a rollback journal
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range stmts {
			if _, err := db.Exec(stmt); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
	}
	before := testenv.FileDigests(t, dir)
	_, err := sqlite.New(t.Context(), foreign, &sqlite.Options{ReadOnly: true})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "no index_storage table") {
		t.Fatalf("read-only open of a foreign database: %v, want fs.ErrNotExist naming index_storage", err)
	}
	_, err = sqlite.New(t.Context(), newer, &sqlite.Options{ReadOnly: true})
	if err == nil || !strings.Contains(err.Error(), "newer than this build reads") {
		t.Fatalf("read-only open of a newer schema: %v", err)
	}
	if after := testenv.FileDigests(t, dir); !maps.Equal(before, after) {
		t.Fatalf("after read-only opens: %v, want %v", after, before)
	}
	for _, path := range []string{foreign, newer} {
		if mode := testenv.JournalMode(t, path); mode != "rollback" {
			t.Fatalf("%s: journal mode %s, want rollback", path, mode)
		}
	}
	// A missing file is fs.ErrNotExist, and is not created.
	if _, err := sqlite.New(t.Context(), filepath.Join(dir, "none.db"), &sqlite.Options{ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read-only open of a missing file: %v", err)
	}
	if after := testenv.FileDigests(t, dir); !maps.Equal(before, after) {
		t.Fatalf("after a read-only open of a missing file: %v, want %v", after, before)
	}
}

// On a read-only file system a read-only open of a database a writer closed reads it; an open for
// writing, of that file or of a new one (a store or a schedule store), fails saying the file system is
// read-only (SQLite's own error says "no such file or directory"); and a read-only open of a database
// whose -wal holds commits but whose -shm is gone says the same, and why it needed to write.
func TestReadOnlyFileSystem_OpensReadOrSayWhyNot(t *testing.T) {
	dir, seal := testenv.ReadOnlyMount(t)
	closed := filepath.Join(dir, "closed.db")
	st, err := sqlite.New(t.Context(), closed, nil)
	if err != nil {
		t.Fatal(err)
	}
	fillStore(t, st)
	st.Close()
	// A database whose -wal holds commits and whose -shm is gone: a copy of a live writer's files
	// without its -shm.
	live := filepath.Join(t.TempDir(), "live.db")
	w, err := sqlite.New(t.Context(), live, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fillStore(t, w)
	crashed := filepath.Join(dir, "crashed.db")
	for _, suffix := range []string{"", "-wal"} {
		data, err := os.ReadFile(live + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(crashed+suffix, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seal()
	before := testenv.FileDigests(t, dir)

	ro := openReadOnly(t, closed)
	readEverything(t, ro)
	ro.Close()

	for _, path := range []string{closed, filepath.Join(dir, "new.db")} {
		_, err := sqlite.New(t.Context(), path, nil)
		if !errors.Is(err, syscall.EROFS) || !strings.Contains(err.Error(), "read-only file system") ||
			strings.Contains(err.Error(), "no such file") || errors.Is(err, fs.ErrNotExist) {
			t.Errorf("open %s for writing on a read-only file system: %v, want EROFS and no \"no such file\"", filepath.Base(path), err)
		}
	}
	_, err = sqlite.New(t.Context(), crashed, &sqlite.Options{ReadOnly: true})
	if !errors.Is(err, syscall.EROFS) || !strings.Contains(err.Error(), "-shm") || strings.Contains(err.Error(), "no such file") {
		t.Errorf("read-only open of a -wal without its -shm on a read-only file system: %v, want EROFS naming the -shm", err)
	}
	if _, err := sqlite.NewScheduleStore(t.Context(), filepath.Join(dir, "schedule.db"), nil); !errors.Is(err, syscall.EROFS) ||
		strings.Contains(err.Error(), "no such file") {
		t.Errorf("OpenSchedule of a new file on a read-only file system: %v, want EROFS and no \"no such file\"", err)
	}
	if after := testenv.FileDigests(t, dir); !maps.Equal(before, after) {
		t.Fatalf("the read-only file system changed: %v, want %v", after, before)
	}
}
