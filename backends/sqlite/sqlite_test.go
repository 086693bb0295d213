package sqlite_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/indexedstorage/storagetest"
	"github.com/stratalog/strata/test/backendtest"
)

func harness() storagetest.Harness { return backendtest.SQLite().Harness() }

func TestConformance(t *testing.T) { storagetest.Run(t, harness()) }

func BenchmarkStorage(b *testing.B) { storagetest.Bench(b, harness(), 0) }

// BenchmarkWalkDepth: ScanStable (GROUP BY) and ScanDeep (the skip scan) walks of one-entry and deep keys.
func BenchmarkWalkDepth(b *testing.B) { storagetest.BenchWalkDepth(b, harness(), 0, nil) }

func openFile(t *testing.T, path string, opts sqlite.Options) *sqlite.Store {
	t.Helper()
	st, err := sqlite.New(t.Context(), path, &opts)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestOpen_NewerSchemaIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "strata.db")
	st := openFile(t, path, sqlite.Options{})
	if _, err := st.DB().Exec(fmt.Sprintf("PRAGMA user_version = %d", sqlite.SchemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if st, err := sqlite.New(t.Context(), path, nil); err == nil {
		st.Close()
		t.Fatal("Open accepted a file whose schema is newer than this build")
	}
}

func TestOpen_MustExistCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "absent.db")
	if _, err := sqlite.New(t.Context(), path, &sqlite.Options{MustExist: true}); !errors.Is(err, fs.ErrNotExist) {
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

// A write lock held elsewhere past the busy timeout is a transient error, worth a retry.
func TestBusy_IsTransient(t *testing.T) {
	path := filepath.Join(t.TempDir(), "strata.db")
	st := openFile(t, path, sqlite.Options{BusyTimeout: time.Millisecond})
	other := openFile(t, path, sqlite.Options{})
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

// A read or write that meets a row the schema's types do not allow fails permanently, naming the
// backend, the operation and the index, so the operator can find what to repair.
func TestPoisonedRow_FailedWritesWriteNothing(t *testing.T) {
	st := openFile(t, filepath.Join(t.TempDir(), "strata.db"), sqlite.Options{})
	ctx := t.Context()
	if err := st.AppendMany(ctx, "test/ns", "agent:7", []is.Entry{{ID: 1}, {ID: 2}}); err != nil {
		t.Fatal(err)
	}
	backendtest.SQLitePoison(t, st, "test/ns", "agent:7")
	for op, call := range map[is.Operation]func() error{
		is.OpLast:       func() error { _, _, err := st.Last(ctx, "test/ns", "agent:7"); return err },
		is.OpAppend:     func() error { return st.Append(ctx, "test/ns", "agent:7", 3, nil) },
		is.OpAppendMany: func() error { return st.AppendMany(ctx, "test/ns", "agent:7", []is.Entry{{ID: 3}}) },
	} {
		if err := call(); err == nil {
			t.Fatalf("%s on a row with a text id succeeded", op)
		}
	}
	if n, err := st.Length(ctx, "test/ns", "agent:7"); err != nil || n != 3 {
		t.Fatalf("Length after the failed writes: %d, %v; want the 3 rows, nothing written", n, err)
	}
}

// Stores opened at once on a file none of them has created yet (sidecars starting together, or two
// multi-SQLite stores' first writes to a shared file) all open it: SQLite reports a file another
// connection is creating as locked at once, without its busy handler, so Open waits it out as any
// busy file, within the busy timeout.
func TestOpen_ManyAtOnceOnAFileNotYetCreated(t *testing.T) {
	for round := range 20 {
		path := filepath.Join(t.TempDir(), fmt.Sprint("fresh-", round, ".db"))
		const n = 4
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				st, err := sqlite.New(t.Context(), path, nil)
				if err == nil {
					err = st.Append(t.Context(), "ns", fmt.Sprint("key-", i), 1, []byte("x"))
					st.Close()
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, store %d of %d opened at once: %v", round, i, n, err)
			}
		}
	}
}
