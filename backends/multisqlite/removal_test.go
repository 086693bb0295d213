package multisqlite

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
)

// The removal protocol's interleavings, forced with hooks. Two stores over one directory stand for two
// processes: each has its own pool and its own descriptors, and flock(2) locks held through different
// open descriptions exclude each other within a process as across processes. Each test runs with the
// protocol and, as a mutant, with its locks taken out (unsafeNoLock), where the same interleaving must
// lose the append: that shows the check can fail, and that the locks are what prevent the loss.

// pair opens a drainer and a writer store over one directory.
func pair(t *testing.T, unsafe bool) (drainer, writer *Store) {
	dir := t.TempDir()
	drainer, writer = open(t, dir, Options{}), open(t, dir, Options{})
	drainer.unsafeNoLock, writer.unsafeNoLock = unsafe, unsafe
	return drainer, writer
}

// ids reads every id of the index through st.
func ids(t *testing.T, st *Store, key string) []uint64 {
	t.Helper()
	entries, err := st.Read(t.Context(), testNS, key, 0, is.MaxID)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, e := range entries {
		out = append(out, e.ID)
	}
	return out
}

// The remover has found the file empty, under its exclusive lock, and is about to unlink it, when the
// writer appends: the writer must wait for the lock, then find the path gone and create the file anew.
func TestRemoval_AppendWhileTheRemoverUnlinks(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		t.Run(mode(unsafe), func(t *testing.T) {
			drainer, writer := pair(t, unsafe)
			ctx := t.Context()
			key := is.BucketPrefix(42) + "c:agent"
			if err := writer.Append(ctx, testNS, key, 1, []byte("one")); err != nil {
				t.Fatal(err)
			}
			appended := make(chan error, 1)
			reached := make(chan struct{}, 1)
			writer.hooks.locking = func(string, string, bool) {
				select {
				case reached <- struct{}{}:
				default:
				}
			}
			drainer.hooks.unlinking = func(string, string) {
				drainer.hooks.unlinking = nil
				go func() { appended <- writer.Append(ctx, testNS, key, 2, []byte("two")) }()
				if unsafe {
					// Nothing holds the writer back: its append lands in the file about to be unlinked.
					if err := <-appended; err != nil {
						t.Error(err)
					}
					appended <- nil
				} else {
					<-reached // the writer is at the lock, which it cannot take before this returns
				}
			}
			if _, err := drainer.DropPrefix(ctx, testNS, key, 1); err != nil {
				t.Fatal(err)
			}
			if err := <-appended; err != nil {
				t.Fatal(err)
			}
			got := ids(t, drainer, key)
			if unsafe {
				if len(got) != 0 {
					t.Fatalf("without the locks the append racing the unlink was kept (%v); the test no longer forces the race", got)
				}
				return
			}
			if !slices.Equal(got, []uint64{2}) {
				t.Fatalf("after an append raced the removal the index holds %v, want [2]", got)
			}
			if got := ids(t, writer, key); !slices.Equal(got, []uint64{2}) {
				t.Fatalf("the writer reads %v, want [2]", got)
			}
		})
	}
}

// The writer has checked, under its shared lock, that its open connection is on the file the path
// names, and is about to append, when the drainer empties the file and tries to remove it: the remover
// must wait for the writer's lock, then find the append and keep the file.
func TestRemoval_DrainWhileTheWriterAppends(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		t.Run(mode(unsafe), func(t *testing.T) {
			drainer, writer := pair(t, unsafe)
			ctx := t.Context()
			key := is.BucketPrefix(42) + "c:agent"
			if err := writer.Append(ctx, testNS, key, 1, []byte("one")); err != nil {
				t.Fatal(err)
			}
			dropped := make(chan error, 1)
			reached := make(chan struct{}, 1)
			drainer.hooks.locking = func(_, _ string, exclusive bool) {
				if exclusive {
					select {
					case reached <- struct{}{}:
					default:
					}
				}
			}
			writer.hooks.checked = func(op is.Operation, _, _ string) {
				if op != is.OpAppend {
					return
				}
				writer.hooks.checked = nil
				go func() {
					_, err := drainer.DropPrefix(ctx, testNS, key, 1)
					dropped <- err
				}()
				if unsafe {
					if err := <-dropped; err != nil {
						t.Error(err)
					}
					dropped <- nil
				} else {
					<-reached // the drop committed and the remover waits for this append's lock
				}
			}
			if err := writer.Append(ctx, testNS, key, 2, []byte("two")); err != nil {
				t.Fatal(err)
			}
			if err := <-dropped; err != nil {
				t.Fatal(err)
			}
			got := ids(t, drainer, key)
			if unsafe {
				if len(got) != 0 {
					t.Fatalf("without the locks the append into the removed file was kept (%v); the test no longer forces the race", got)
				}
				return
			}
			if !slices.Equal(got, []uint64{2}) {
				t.Fatalf("after a drop raced an append the index holds %v, want [2]", got)
			}
			if n := drainer.Stats().FilesRemoved; n != 0 {
				t.Fatalf("the remover removed %d files; the file held the racing append", n)
			}
		})
	}
}

// A connection left open on a file another process removed is not used again: the next operation finds
// the path no longer names its file and opens (or creates) the file that is there now.
func TestRemoval_StaleConnectionIsNotUsed(t *testing.T) {
	drainer, writer := pair(t, false)
	ctx := t.Context()
	key := "agent" // in "other", beside a key that keeps the directory there
	for _, k := range []string{key, "neighbour"} {
		if err := writer.Append(ctx, testNS, k, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := drainer.DropPrefix(ctx, testNS, key, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(drainer.filePath(testNS, key)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the drained file: %v, want it removed", err)
	}
	// The writer still holds its connection to the removed file.
	if ok, err := writer.Exists(ctx, testNS, key); ok || err != nil {
		t.Fatalf("Exists through a connection to the removed file: %v %v", ok, err)
	}
	if err := writer.Append(ctx, testNS, key, 2, nil); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, drainer, key); !slices.Equal(got, []uint64{2}) {
		t.Fatalf("the drainer reads %v, want the append made after the removal", got)
	}
	// Removed again, and created again by the drainer: the writer reads the new file.
	if _, err := drainer.DropPrefix(ctx, testNS, key, 2); err != nil {
		t.Fatal(err)
	}
	if err := drainer.Append(ctx, testNS, key, 3, nil); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, writer, key); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("the writer reads %v, want [3]", got)
	}
}

// A drop whose file is appended to between its commit and its exclusive lock keeps the file: the
// remover checks again under the lock.
func TestRemoval_AppendBeforeTheRemoverLocks(t *testing.T) {
	drainer, writer := pair(t, false)
	ctx := t.Context()
	key := is.BucketPrefix(1) + "c:agent"
	if err := writer.Append(ctx, testNS, key, 1, nil); err != nil {
		t.Fatal(err)
	}
	drainer.hooks.removing = func(string, string) {
		drainer.hooks.removing = nil
		if err := writer.Append(ctx, testNS, key, 2, nil); err != nil {
			t.Error(err)
		}
	}
	if _, err := drainer.DropPrefix(ctx, testNS, key, 1); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, drainer, key); !slices.Equal(got, []uint64{2}) {
		t.Fatalf("the index holds %v, want [2]", got)
	}
}

// A file left empty (a drop whose removal found the lock busy, a writer that died before its first
// commit) is removed by the first read that finds it empty.
func TestRemoval_ReadTidiesAnEmptyFile(t *testing.T) {
	st := open(t, t.TempDir(), Options{})
	ctx := t.Context()
	key := is.BucketPrefix(3) + "c:agent"
	appendAll(t, st, []string{key})
	// Empty the file behind the store's back, as a writer that died before committing leaves it.
	execFile(t, st.filePath(testNS, key), `DELETE FROM index_storage`)
	if got := walk(t, st, "", 10, nil); !slices.Equal(got, []string{key}) {
		t.Fatalf("walk before the read: %q", got)
	}
	if _, ok, err := st.LastID(ctx, testNS, key); ok || err != nil {
		t.Fatalf("LastID of the emptied index: %v %v", ok, err)
	}
	if _, err := os.Stat(st.filePath(testNS, key)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the empty file after a read: %v, want it removed", err)
	}
	if got := walk(t, st, "", 10, nil); len(got) != 0 {
		t.Fatalf("walk after the read: %q", got)
	}
}

// A drop that empties a file removes it in the protocol's steps, in its order: the exclusive lock, the
// check under it that the file holds no row, the unlink, the directory.
func TestRemoval_StepsRunInTheProtocolsOrder(t *testing.T) {
	st := open(t, t.TempDir(), Options{})
	key := is.BucketPrefix(5) + "c:agent"
	appendAll(t, st, []string{key})
	var steps []removalStep
	st.hooks.removalStep = func(step removalStep) { steps = append(steps, step) }
	if _, err := st.DropPrefix(t.Context(), testNS, key, 1); err != nil {
		t.Fatal(err)
	}
	if want := []removalStep{removalLocked, removalFoundEmpty, removalUnlinked, removalDirRemoved}; !slices.Equal(steps, want) {
		t.Fatalf("the removal ran %v, want %v", steps, want)
	}
	if _, err := os.Stat(filepath.Dir(st.filePath(testNS, key))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the emptied file's directory: %v, want it removed", err)
	}
}

// A removal step called before the step it follows refuses to run and changes nothing: an unlink
// without the lock and the check under it leaves the empty file where it is.
func TestRemoval_AStepOutOfOrderIsRefused(t *testing.T) {
	st := open(t, t.TempDir(), Options{})
	ctx := t.Context()
	key := is.BucketPrefix(6) + "c:agent"
	appendAll(t, st, []string{key})
	execFile(t, st.filePath(testNS, key), `DELETE FROM index_storage`)
	r := st.newRemoval(testNS, key)
	defer r.release()
	if err := r.unlink(); !errors.Is(err, errStepOutOfOrder) {
		t.Fatalf("unlink before the lock and the check: %v, want errStepOutOfOrder", err)
	}
	if _, err := r.findEmpty(ctx); !errors.Is(err, errStepOutOfOrder) {
		t.Fatalf("the check before the lock: %v, want errStepOutOfOrder", err)
	}
	if _, err := os.Stat(st.filePath(testNS, key)); err != nil {
		t.Fatalf("the file after the refused steps: %v, want it kept", err)
	}
	// The same removal, its steps in order, removes the file.
	if held, err := r.lockExclusively(ctx, time.Second); !held || err != nil {
		t.Fatalf("lockExclusively: %v, %v", held, err)
	}
	if empty, err := r.findEmpty(ctx); !empty || err != nil {
		t.Fatalf("findEmpty: %v, %v", empty, err)
	}
	if err := r.removeDirIfEmpty(); !errors.Is(err, errStepOutOfOrder) {
		t.Fatalf("the directory before the unlink: %v, want errStepOutOfOrder", err)
	}
	if err := r.unlink(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(st.filePath(testNS, key)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the file after the removal: %v, want it removed", err)
	}
}

func mode(unsafe bool) string {
	if unsafe {
		return "WithoutTheLocks"
	}
	return "Protocol"
}

// A drop that would leave its file without rows removes the file with them (no delete written): it
// looks under the shared lock, then looks again under the exclusive one. An append that comes between
// the two looks makes the second drop the rows as any drop does and keep the file with the append.
func TestRemoval_DropThatEmptiesRemovesTheFileWithItsRows(t *testing.T) {
	drainer, writer := pair(t, false)
	ctx := t.Context()
	whole, raced := is.BucketPrefix(7)+"c:whole", is.BucketPrefix(8)+"c:raced"
	for _, key := range []string{whole, raced} {
		if err := writer.AppendMany(ctx, testNS, key, []is.Entry{{ID: 1, Value: []byte("one")}, {ID: 2, Value: []byte("two")}}); err != nil {
			t.Fatal(err)
		}
	}
	looked := 0
	drainer.hooks.dropRemoving = func(_, key string) {
		looked++
		if key == raced {
			if err := writer.Append(ctx, testNS, raced, 3, []byte("three")); err != nil {
				t.Error(err)
			}
		}
	}
	removed := drainer.removed.Load()
	if n, err := drainer.DropPrefix(ctx, testNS, whole, is.MaxID); err != nil || n != 2 {
		t.Fatalf("drop of a whole file: %d dropped, %v; want 2", n, err)
	}
	if _, err := os.Stat(drainer.filePath(testNS, whole)); !errors.Is(err, os.ErrNotExist) || drainer.removed.Load() != removed+1 {
		t.Fatalf("the emptied file is still there (%v), %d removals", err, drainer.removed.Load()-removed)
	}
	if n, err := drainer.DropPrefix(ctx, testNS, raced, 2); err != nil || n != 2 {
		t.Fatalf("drop raced by an append: %d dropped, %v; want 2", n, err)
	}
	if got := ids(t, writer, raced); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("after a drop up to 2 raced by an append of 3, the index holds %v, want [3]", got)
	}
	if looked != 2 {
		t.Fatalf("%d drops removed their file with its rows, want 2", looked)
	}
	// A drop that leaves rows looks no further.
	if n, err := drainer.DropPrefix(ctx, testNS, raced, 2); err != nil || n != 0 || looked != 2 {
		t.Fatalf("a drop below the first row: %d dropped, %v, %d looks", n, err, looked)
	}
}

// A row of another index in the file (a foreign writer's) keeps the file: the drop deletes its own
// rows, as any drop does, and the other row stays.
func TestRemoval_ARowOfAnotherIndexKeepsTheFile(t *testing.T) {
	st := open(t, t.TempDir(), Options{})
	ctx := t.Context()
	key := is.BucketPrefix(9) + "c:mine"
	if err := st.AppendMany(ctx, testNS, key, []is.Entry{{ID: 1, Value: []byte("one")}, {ID: 2, Value: []byte("two")}}); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite3", st.filePath(testNS, key))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO index_storage (namespace, key, id, value) VALUES (?, ?, 1, x'00')`, testNS, key+"-other"); err != nil {
		t.Fatal(err)
	}
	if n, err := st.DropPrefix(ctx, testNS, key, is.MaxID); err != nil || n != 2 {
		t.Fatalf("drop: %d dropped, %v; want 2", n, err)
	}
	var rows int
	if err := db.QueryRow(`SELECT count(*) FROM index_storage`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("the file holds %d rows (%v), want the other index's one", rows, err)
	}
}
