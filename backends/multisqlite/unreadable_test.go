package multisqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	sqlite3 "github.com/mattn/go-sqlite3"

	is "github.com/stratalog/strata/indexedstorage"
)

// corruptions damage an index's file, closed and checkpointed, the ways a disk fault or a foreign
// writer does.
var corruptions = []struct {
	name    string
	corrupt func(t *testing.T, path string)
}{
	{"NotADatabase", func(t *testing.T, path string) {
		if err := os.WriteFile(path, notADatabase, 0o644); err != nil {
			t.Fatal(err)
		}
	}},
	{"Truncated", func(t *testing.T, path string) {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
	}},
	{"NewerSchema", func(t *testing.T, path string) {
		execFile(t, path, `PRAGMA user_version = 7`)
	}},
	{"SchemaWithoutTable", func(t *testing.T, path string) {
		execFile(t, path, `DROP TABLE index_storage`)
	}},
	{"OldSchemaWithAForbiddenRow", func(t *testing.T, path string) {
		// A file an earlier build left at schema version 1, before the table refused rows of the
		// wrong type, into which a foreign writer put a text id: the upgrade refuses to carry it over
		// or drop it, so the file stays as it was and cannot be opened.
		key := damagedKey(t, path)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		execFile(t, path, `PRAGMA journal_mode = WAL`,
			`CREATE TABLE index_storage (namespace TEXT NOT NULL, key TEXT NOT NULL, id INTEGER NOT NULL, value BLOB NOT NULL,
				PRIMARY KEY (namespace, key, id)) WITHOUT ROWID`,
			`PRAGMA user_version = 1`,
			fmt.Sprintf(`INSERT INTO index_storage VALUES (%s, %s, 1, x'00'), (%[1]s, %[2]s, 'seven', x'00')`,
				sqlQuote(testNS), sqlQuote(key)))
	}},
	{"ForeignDatabase", func(t *testing.T, path string) {
		// Someone else's database under this index's name: no schema version, tables of its own.
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		execFile(t, path, `PRAGMA journal_mode = WAL`, `CREATE TABLE events (id INTEGER PRIMARY KEY, body TEXT)`,
			`INSERT INTO events (body) VALUES ('theirs')`)
	}},
	{"NoPermission", func(t *testing.T, path string) {
		if os.Geteuid() == 0 {
			t.Skip("running as root, which reads a file whatever its mode")
		}
		if err := os.Chmod(path, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(path, 0o644) })
	}},
}

// sqlQuote is s as an SQL string literal.
func sqlQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// damagedKey returns the key whose rows the file at path holds, read from the file itself.
func damagedKey(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var key string
	if err := db.QueryRow(`SELECT key FROM index_storage LIMIT 1`).Scan(&key); err != nil {
		t.Fatal(err)
	}
	return key
}

// execFile runs statements on the SQLite file at path with a connection of its own, then closes it.
func execFile(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, stmt := range stmts {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}

// corruptStore writes ks, each with ids 1 and 2, through a store it then closes (so that every file is
// checkpointed and alone), damages the file of ks[bad], and opens a new store over the directory.
func corruptStore(t *testing.T, ks []string, bad int, corrupt func(t *testing.T, path string)) (st *Store, path string) {
	t.Helper()
	dir := t.TempDir()
	first := open(t, dir, Options{})
	for _, k := range ks {
		if err := first.AppendMany(t.Context(), testNS, k, []is.Entry{{ID: 1, Value: []byte(k)}, {ID: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	path = first.filePath(testNS, ks[bad])
	corrupt(t, path)
	return open(t, dir, Options{}), path
}

// A walk opens a file only when its name is a hash (a long key): such a damaged file is listed in
// Unreadable. (A file named by its key is not opened: its key comes back, and its reads fail; see
// TestScanStable_DamagedFileNamedByItsKeyIsHandedBack.)
func TestScanStable_UnreadableFileIsListedAndTheWalkGoesOn(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			ks := longKeys(7)
			st, path := corruptStore(t, ks, 3, c.corrupt)
			for _, count := range []int{1, 2, 100} {
				var unreadable []is.Unreadable
				pages, wantPages := 0, (len(ks)+count-1)/count
				got := walk(t, st, "", count, func(page is.Page) {
					pages++
					unreadable = append(unreadable, page.Unreadable...)
				})
				if want := slices.Delete(slices.Clone(ks), 3, 4); !slices.Equal(sorted(got), want) {
					t.Fatalf("pages of %d: keys %q, want every other key %q", count, sorted(got), want)
				}
				// The unreadable file counts as visited: the walk moves exactly as if it had been read.
				if pages != wantPages {
					t.Fatalf("pages of %d: %d pages, want %d", count, pages, wantPages)
				}
				if len(unreadable) != 1 {
					t.Fatalf("pages of %d: Unreadable %+v, want the one damaged file", count, unreadable)
				}
				u := unreadable[0]
				if want := dirName(testNS) + "/" + otherDir + "/" + filepath.Base(path); u.Where != want || u.Key != "" {
					t.Fatalf("pages of %d: Unreadable{Key: %q, Where: %q}, want Where %q and no key (the name is a hash)", count, u.Key, u.Where, want)
				}
				if u.Err == nil || is.IsTransient(u.Err) {
					t.Fatalf("pages of %d: Unreadable.Err = %v, want a permanent error", count, u.Err)
				}
			}
		})
	}
}

func TestScanStable_DamagedFileNamedByItsKeyIsHandedBack(t *testing.T) {
	ks := bucketedKeys(5)
	st, _ := corruptStore(t, ks, 2, corruptions[0].corrupt)
	if got := sorted(walk(t, st, "", 2, nil)); !slices.Equal(got, sorted(ks)) {
		t.Fatalf("walk returned %q, want every key %q", got, sorted(ks))
	}
	if n := st.Stats().FilesOpened; n != 0 {
		t.Fatalf("the walk opened %d files", n)
	}
	if _, _, err := st.LastID(t.Context(), testNS, ks[2]); err == nil || is.IsTransient(err) {
		t.Fatalf("LastID of the damaged index: %v, want a permanent error", err)
	}
}

func TestUnreadableFile_OperationsFailAndLeaveItAsItWas(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			ks := keys(3)
			st, path := corruptStore(t, ks, 1, c.corrupt)
			before, err := os.ReadFile(path)
			if err != nil && !errors.Is(err, os.ErrPermission) {
				t.Fatal(err)
			}
			ctx, key := t.Context(), ks[1]
			ops := map[string]func() error{
				"Exists":     func() error { _, err := st.Exists(ctx, testNS, key); return err },
				"Length":     func() error { _, err := st.Length(ctx, testNS, key); return err },
				"Read":       func() error { _, err := st.Read(ctx, testNS, key, 0, 10); return err },
				"First":      func() error { _, _, err := st.First(ctx, testNS, key); return err },
				"Last":       func() error { _, _, err := st.Last(ctx, testNS, key); return err },
				"Closest":    func() error { _, _, err := st.Closest(ctx, testNS, key, 1); return err },
				"Append":     func() error { return st.Append(ctx, testNS, key, 3, []byte("v")) },
				"AppendMany": func() error { return st.AppendMany(ctx, testNS, key, []is.Entry{{ID: 4}, {ID: 5}}) },
				"DropPrefix": func() error { _, err := st.DropPrefix(ctx, testNS, key, 1); return err },
				"Delete":     func() error { return st.Delete(ctx, testNS, key) },
			}
			for name, op := range ops {
				err := op()
				if err == nil {
					t.Fatalf("%s of the damaged file's index succeeded", name)
				}
				for _, wrong := range []error{is.ErrTransient, is.ErrConflict, is.ErrInvalidArgument, is.ErrClosed} {
					if errors.Is(err, wrong) {
						t.Fatalf("%s: %v matches %v", name, err, wrong)
					}
				}
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			after, err := os.ReadFile(path)
			if err != nil && !errors.Is(err, os.ErrPermission) {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Fatalf("the damaged file changed under operations that all failed (%d bytes, then %d)", len(before), len(after))
			}
			st = open(t, st.Dir(), Options{})
			for _, k := range []string{ks[0], ks[2]} {
				if e, ok, err := st.Last(ctx, testNS, k); err != nil || !ok || e.ID != 2 {
					t.Fatalf("the index beside the damaged file: Last(%q) = %d %v %v", k, e.ID, ok, err)
				}
			}
		})
	}
}

func TestScanStable_StoreClosedMidPageFailsIt(t *testing.T) {
	dir := t.TempDir()
	appendAll(t, open(t, dir, Options{}), keys(4))
	var st *Store
	// Close lands between the listing and the files the page reads.
	st = open(t, dir, Options{OnList: func(string) { st.Close() }})
	page, err := st.ScanStable(t.Context(), testNS, is.AllKeys, is.Resume{}, 10)
	if !errors.Is(err, is.ErrClosed) {
		t.Fatalf("ScanStable as the store closed = %d keys, %d unreadable, %v; want ErrClosed", len(page.Keys), len(page.Unreadable), err)
	}
}

func TestScan_UnreadableFileFailsTheCallNamingIt(t *testing.T) {
	ks := longKeys(4)
	// A file that opens but cannot be read: the engine's error names no file, so Scan must.
	st, path := corruptStore(t, ks, 2, func(t *testing.T, path string) { execFile(t, path, `DROP TABLE index_storage`) })
	var err error
	for cursor := uint64(0); ; {
		var next uint64
		if next, _, err = st.Scan(t.Context(), testNS, "", cursor, 10); err != nil || next == 0 {
			break
		}
		cursor = next
	}
	if err == nil || !strings.Contains(err.Error(), dirName(testNS)+"/"+otherDir+"/"+filepath.Base(path)) {
		t.Fatalf("Scan over a damaged file: %v, want an error naming the file", err)
	}
}

func TestFileFault_OnlyTheFilesOwnFailuresPassItOver(t *testing.T) {
	for _, c := range []struct {
		name   string
		ctxErr error
		err    error
		own    bool
	}{
		{"NotADatabase", nil, sqlite3.Error{Code: sqlite3.ErrNotADB}, true},
		{"Corrupt", nil, fmt.Errorf("sqlite: open x: %w", sqlite3.Error{Code: sqlite3.ErrCorrupt}), true},
		{"LockedByAnotherProcess", nil, is.Classify(is.ErrTransient, sqlite3.Error{Code: sqlite3.ErrBusy}), true},
		{"UnknownSchema", nil, errors.New("schema version 7 is newer than this build supports (1)"), true},
		{"PermissionDenied", nil, sqlite3.Error{Code: sqlite3.ErrCantOpen, SystemErrno: syscall.EACCES}, true},
		{"InterruptedByCallersDeadline", context.DeadlineExceeded, sqlite3.Error{Code: sqlite3.ErrInterrupt}, false},
		{"CorruptButCallerGaveUp", context.Canceled, sqlite3.Error{Code: sqlite3.ErrNotADB}, false},
		{"Canceled", nil, fmt.Errorf("sqlite read: %w", context.Canceled), false},
		{"StoreClosed", nil, fmt.Errorf("x: %w", is.ErrClosed), false},
		{"OutOfDescriptors", nil, sqlite3.Error{Code: sqlite3.ErrCantOpen, SystemErrno: syscall.EMFILE}, false},
		{"SystemOutOfDescriptors", nil, &os.PathError{Op: "stat", Path: "x", Err: syscall.ENFILE}, false},
		{"OutOfMemory", nil, sqlite3.Error{Code: sqlite3.ErrNomem}, false},
		{"DiskFull", nil, sqlite3.Error{Code: sqlite3.ErrFull}, false},
	} {
		if got := fileFault(c.ctxErr, c.err); got != c.own {
			t.Errorf("%s: fileFault(%v, %v) = %v, want %v", c.name, c.ctxErr, c.err, got, c.own)
		}
	}
}

// A file that fails to open is not kept: no descriptor, no pool entry, nothing counted as open; each
// operation tries the file afresh, so one repaired from outside is read again.
func TestPool_FailedOpenKeepsNothing(t *testing.T) {
	fds := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd to count descriptors in")
		}
		return len(entries)
	}
	ks := keys(3)
	st, path := corruptStore(t, ks, 1, corruptions[0].corrupt)
	good := st.filePath(testNS, ks[0])
	if _, _, err := st.Last(t.Context(), testNS, ks[0]); err != nil {
		t.Fatal(err)
	}
	before := fds()
	for range 50 {
		if _, _, err := st.Last(t.Context(), testNS, ks[1]); err == nil {
			t.Fatal("Last of the damaged file succeeded")
		}
	}
	if after := fds(); after > before+2 {
		t.Fatalf("50 failed opens of one file: %d descriptors, %d before", after, before)
	}
	st.pool.mu.Lock()
	_, kept := st.pool.conns[path]
	_, goodKept := st.pool.conns[good]
	st.pool.mu.Unlock()
	if kept || !goodKept {
		t.Fatalf("pool entries: damaged file %v (want none), healthy file %v", kept, goodKept)
	}
	if n := st.Stats().OpenFiles; n != 1 {
		t.Fatalf("%d files open, want only the healthy one", n)
	}
	// Repaired from outside (here: a healthy file copied over it), the index reads again.
	healthy, err := os.ReadFile(st.filePath(testNS, ks[2]))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, healthy, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Last(t.Context(), testNS, ks[1]); err != nil {
		t.Fatalf("Last after the file was replaced by a healthy one: %v", err)
	}
}
