package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/sqlite"
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
	}
}

func TestConformance(t *testing.T) { storagetest.Run(t, harness()) }

func BenchmarkStorage(b *testing.B) { storagetest.Bench(b, harness(), 0) }

// rawWalk is the keyset loop an application would write against the table itself, through the same
// connection pool ScanStable reads with.
func rawWalk(ctx context.Context, st is.Storage, ns string, pageSize int) (int, error) {
	db := st.(*sqlite.Store).DB()
	n, last := 0, ""
	for {
		rows, err := db.QueryContext(ctx,
			`SELECT DISTINCT key FROM index_storage WHERE namespace = ? AND key > ? ORDER BY key LIMIT ?`, ns, last, pageSize)
		if err != nil {
			return n, err
		}
		got := 0
		for rows.Next() {
			if err := rows.Scan(&last); err != nil {
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
