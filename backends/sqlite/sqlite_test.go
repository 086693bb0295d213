package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/sqlite"
	"github.com/stratalog/strata/backends/sqlite/sqlitetest"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/indexedstorage/storagetest"
)

func harness() storagetest.Harness {
	return storagetest.Harness{
		New: func(tb testing.TB) is.Storage {
			st, err := sqlite.Open(context.Background(), filepath.Join(tb.TempDir(), "strata.db"), sqlite.Options{})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { st.Close() })
			return st
		},
		ModelWalks: 500,
		RawWalk:    rawWalk,
		Poison:     poison,
	}
}

// poison adds to the index a row whose id is text, as a foreign writer that gets the documented
// schema's types wrong does: 'abc' sorts above every integer, so the index's last entry is the one no
// int64 can hold. The schema's checks refuse such a row, so the writer here is one that told its
// connection to skip them (PRAGMA ignore_check_constraints), as any other program with the file open
// can; the store must still fail that one index loudly and nothing else.
func poison(tb testing.TB, st is.Storage, ns, key string) {
	tb.Helper()
	if err := sqlitetest.ExecUnchecked(context.Background(), st.(*sqlite.Store).DB(),
		`INSERT INTO index_storage (namespace, key, id, value) VALUES (?, ?, 'abc', x'00')`, ns, key); err != nil {
		tb.Fatalf("poison %s:%q: %v", ns, key, err)
	}
}

func TestConformance(t *testing.T) { storagetest.Run(t, harness()) }

func BenchmarkStorage(b *testing.B) { storagetest.Bench(b, harness(), 0) }

// BenchmarkWalkDepth: ScanStable (GROUP BY) and ScanDeep (the skip scan) walks of one-entry and deep keys.
func BenchmarkWalkDepth(b *testing.B) { storagetest.BenchWalkDepth(b, harness(), 0, nil) }

// rawWalk is the keyset loop an application would write against the table itself, through the same
// connection pool ScanStable reads with: keys with their last id, as an archiver needs them and as
// ScanStable's pages carry them.
func rawWalk(ctx context.Context, st is.Storage, ns string, pageSize int) (int, error) {
	db := st.(*sqlite.Store).DB()
	n, last := 0, ""
	var lastID int64
	for {
		rows, err := db.QueryContext(ctx,
			`SELECT key, max(id) FROM index_storage WHERE namespace = ? AND key > ? GROUP BY key ORDER BY key LIMIT ?`, ns, last, pageSize)
		if err != nil {
			return n, err
		}
		got := 0
		for rows.Next() {
			if err := rows.Scan(&last, &lastID); err != nil {
				rows.Close()
				return n, err
			}
			got++
		}
		if err := rows.Close(); err != nil {
			return n, err
		}
		if err := rows.Err(); err != nil {
			return n, err
		}
		n += got
		if got < pageSize {
			return n, nil
		}
	}
}

func openFile(t *testing.T, path string, opts sqlite.Options) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), path, opts)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestReopen_KeepsEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "strata.db")
	st := openFile(t, path, sqlite.Options{})
	if err := st.AppendMany(t.Context(), "ns", "k", []is.Entry{{ID: 1, Value: []byte("a")}, {ID: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	again := openFile(t, path, sqlite.Options{})
	entries, err := again.Read(t.Context(), "ns", "k", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || string(entries[0].Value) != "a" || entries[1].Value == nil || len(entries[1].Value) != 0 {
		t.Fatalf("after reopening: %+v", entries)
	}
}

func TestOpen_NewerSchemaIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "strata.db")
	st := openFile(t, path, sqlite.Options{SingleConnection: true})
	if _, err := st.DB().Exec(fmt.Sprintf("PRAGMA user_version = %d", sqlite.SchemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if st, err := sqlite.Open(t.Context(), path, sqlite.Options{}); err == nil {
		st.Close()
		t.Fatal("Open accepted a file whose schema is newer than this build")
	}
}

func TestOpen_MustExistCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "absent.db")
	if _, err := sqlite.Open(t.Context(), path, sqlite.Options{MustExist: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of a missing file with MustExist: %v, want fs.ErrNotExist", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("Open with MustExist left %q behind", entries[0].Name())
	}
}

func TestOpen_PathWithURICharacters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a?b#c%20d e.db")
	st := openFile(t, path, sqlite.Options{})
	if err := st.Append(t.Context(), "ns", "k", 1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the database is not at the path asked for: %v", err)
	}
}

// Two stores on one file stand for two processes: the conflict check and the insert must be atomic
// across connections too, which BEGIN IMMEDIATE gives.
func TestTwoStoresOnOneFile_RacingAppendsAreSerialized(t *testing.T) {
	path := filepath.Join(t.TempDir(), "strata.db")
	stores := []*sqlite.Store{openFile(t, path, sqlite.Options{}), openFile(t, path, sqlite.Options{SingleConnection: true})}
	ctx := t.Context()
	var won atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		st := stores[w%2]
		wg.Go(func() {
			for range 40 {
				last, _, err := st.Last(ctx, "ns", "hot")
				if err != nil {
					errs <- err
					return
				}
				switch err := st.Append(ctx, "ns", "hot", last.ID+1, nil); {
				case err == nil:
					won.Add(1)
				case !errors.Is(err, is.ErrConflict):
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	entries, err := stores[0].Read(ctx, "ns", "hot", 0, is.MaxID)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(entries)) != won.Load() {
		t.Fatalf("%d entries for %d successful appends", len(entries), won.Load())
	}
	for i, e := range entries {
		if e.ID != uint64(i+1) {
			t.Fatalf("entry %d has id %d: ids must be dense", i, e.ID)
		}
	}
}

// A write lock held elsewhere past the busy timeout is a transient error, worth a retry.
func TestBusy_IsTransient(t *testing.T) {
	path := filepath.Join(t.TempDir(), "strata.db")
	st := openFile(t, path, sqlite.Options{BusyTimeout: time.Millisecond})
	other := openFile(t, path, sqlite.Options{SingleConnection: true})
	tx, err := other.DB().BeginTx(t.Context(), nil) // BEGIN IMMEDIATE: holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	err = st.Append(t.Context(), "ns", "k", 1, nil)
	if !errors.Is(err, is.ErrTransient) {
		t.Fatalf("Append while another connection holds the write lock: %v, want ErrTransient", err)
	}
	tx.Rollback()
	if err := st.Append(t.Context(), "ns", "k", 1, nil); err != nil {
		t.Fatalf("Append once the lock is released: %v", err)
	}
}

func TestCancelledContext_IsNotTransient(t *testing.T) {
	st := openFile(t, filepath.Join(t.TempDir(), "strata.db"), sqlite.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := st.Append(ctx, "ns", "k", 1, nil)
	if !errors.Is(err, context.Canceled) || errors.Is(err, is.ErrTransient) {
		t.Fatalf("Append with a cancelled context: %v, want context.Canceled and not transient", err)
	}
}

// A read or write that meets a row the schema's types do not allow fails permanently, naming the
// backend, the operation and the index, so the operator can find what to repair.
func TestPoisonedRow_FailsPermanentlyNamingTheIndex(t *testing.T) {
	st := openFile(t, filepath.Join(t.TempDir(), "strata.db"), sqlite.Options{})
	ctx := t.Context()
	if err := st.AppendMany(ctx, "test/ns", "agent:7", []is.Entry{{ID: 1}, {ID: 2}}); err != nil {
		t.Fatal(err)
	}
	poison(t, st, "test/ns", "agent:7")
	for op, call := range map[is.Operation]func() error{
		is.OpLast:       func() error { _, _, err := st.Last(ctx, "test/ns", "agent:7"); return err },
		is.OpAppend:     func() error { return st.Append(ctx, "test/ns", "agent:7", 3, nil) },
		is.OpAppendMany: func() error { return st.AppendMany(ctx, "test/ns", "agent:7", []is.Entry{{ID: 3}}) },
	} {
		err := call()
		if err == nil || is.IsTransient(err) || errors.Is(err, is.ErrConflict) {
			t.Fatalf("%s on a row with a text id: %v, want a permanent error", op, err)
		}
		if want := fmt.Sprintf(`sqlite %s (ns "test/ns", key "agent:7"): `, op); !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("%s: %q, want it to start %q", op, err, want)
		}
	}
	if n, err := st.Length(ctx, "test/ns", "agent:7"); err != nil || n != 3 {
		t.Fatalf("Length after the failed writes: %d, %v; want the 3 rows, nothing written", n, err)
	}
}

// With RefuseForeignTables, a file that is someone else's database is refused, not given a table.
func TestOpen_RefuseForeignTablesLeavesAForeignDatabaseAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "theirs.db")
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE events (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if st, err := sqlite.Open(t.Context(), path, sqlite.Options{MustExist: true, RefuseForeignTables: true}); err == nil {
		st.Close()
		t.Fatal("Open with RefuseForeignTables migrated a database holding another schema's table")
	}
	tables := func() []string {
		db, err := sql.Open("sqlite3", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var names []string
		for rows.Next() {
			var n string
			rows.Scan(&n)
			names = append(names, n)
		}
		return names
	}
	if got := tables(); len(got) != 1 || got[0] != "events" {
		t.Fatalf("tables after the refused Open: %q, want only [events]", got)
	}
	// Without the option, the same file is shared: the schema is added beside the other tables.
	openFile(t, path, sqlite.Options{}).Close()
	if got := tables(); len(got) != 2 {
		t.Fatalf("tables after a plain Open: %q, want events and index_storage", got)
	}
	// A blank file, or one whose only table is the documented DDL made by hand, still migrates.
	blank := filepath.Join(t.TempDir(), "blank.db")
	if err := os.WriteFile(blank, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	openFile(t, blank, sqlite.Options{MustExist: true, RefuseForeignTables: true})
	byHand := filepath.Join(t.TempDir(), "by-hand.db")
	if db, err = sql.Open("sqlite3", "file:"+byHand); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE index_storage (namespace TEXT NOT NULL, key TEXT NOT NULL, id INTEGER NOT NULL,
		value BLOB NOT NULL, PRIMARY KEY (namespace, key, id)) WITHOUT ROWID`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	openFile(t, byHand, sqlite.Options{MustExist: true, RefuseForeignTables: true})
}
