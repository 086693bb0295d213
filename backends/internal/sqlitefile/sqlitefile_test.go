package sqlitefile_test

import (
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stratalog/strata/backends/internal/sqlitefile"
	is "github.com/stratalog/strata/indexedstorage"
)

func openFile(t *testing.T, path string, opts sqlitefile.Options) *sqlitefile.Engine {
	t.Helper()
	e, err := sqlitefile.Open(t.Context(), path, opts)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() { e.Close() })
	return e
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
	if e, err := sqlitefile.Open(t.Context(), path, sqlitefile.Options{MustExist: true, RefuseForeignTables: true}); err == nil {
		e.Close()
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
	openFile(t, path, sqlitefile.Options{}).Close()
	if got := tables(); len(got) != 2 {
		t.Fatalf("tables after a plain Open: %q, want events and index_storage", got)
	}
	// A blank file, or one whose only table is the documented DDL made by hand, still migrates.
	blank := filepath.Join(t.TempDir(), "blank.db")
	if err := os.WriteFile(blank, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	openFile(t, blank, sqlitefile.Options{MustExist: true, RefuseForeignTables: true})
	byHand := filepath.Join(t.TempDir(), "by-hand.db")
	if db, err = sql.Open("sqlite3", "file:"+byHand); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE index_storage (namespace TEXT NOT NULL, key TEXT NOT NULL, id INTEGER NOT NULL,
		value BLOB NOT NULL, PRIMARY KEY (namespace, key, id)) WITHOUT ROWID`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	openFile(t, byHand, sqlitefile.Options{MustExist: true, RefuseForeignTables: true})
}

// With PersistWAL, closing the engine leaves the -wal and -shm in place (a file removed under the
// connection must not take its successor's with it); without it, the last connection removes them.
func TestClose_PersistWALLeavesTheSideFiles(t *testing.T) {
	for _, persist := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "f.db")
		e := openFile(t, path, sqlitefile.Options{SingleConnection: true, PersistWAL: persist})
		if err := e.Append(t.Context(), "ns", "k", []is.Entry{{ID: 1}}); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		_, err := os.Stat(path + "-wal")
		if persist && err != nil {
			t.Fatalf("with PersistWAL the -wal is gone after Close: %v", err)
		}
		if !persist && !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("without PersistWAL the -wal stays after Close: %v", err)
		}
	}
}

// An operation on a closed engine fails with an error Classify reports as ErrClosed.
func TestClassify_AfterCloseIsErrClosed(t *testing.T) {
	e := openFile(t, filepath.Join(t.TempDir(), "f.db"), sqlitefile.Options{SingleConnection: true})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Exists(t.Context(), "ns", "k"); !errors.Is(e.Classify(err), is.ErrClosed) {
		t.Fatalf("Exists after Close: %v, want ErrClosed once classified", err)
	}
}
