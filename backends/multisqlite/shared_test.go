package multisqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
)

// sharedPoison adds to the shared file of ns a row of key whose id is text, as SQLitePoison does to a
// SQLite file (test/backendtest): a foreign writer that got the schema's types wrong.
func sharedPoison(tb testing.TB, st is.Storage, ns, key string) {
	tb.Helper()
	s := st.(*Store)
	f, _, err := s.sharedStore(context.Background(), ns, true)
	if err != nil {
		tb.Fatalf("poison %s:%q: %v", ns, key, err)
	}
	defer s.releaseShared(ns, f, false)
	if err := testenv.ExecUnchecked(context.Background(), f.st.DB(),
		`INSERT INTO index_storage (namespace, key, id, value) VALUES (?, ?, 'abc', x'00')`, ns, key); err != nil {
		tb.Fatalf("poison %s:%q: %v", ns, key, err)
	}
}

func TestShared_Rule(t *testing.T) {
	for ns, want := range map[string]bool{
		"sweep/blobindex/0":    true,
		"durable/blobindex/12": true,
		"sweep/blobindex/":     false,
		"sweep/blobindex/0x":   false,
		"/blobindex/0":         false,
		"a/b/blobindex/0":      false,
		"sweep/blob/0":         false,
		"sweep/blobindex/0/x":  false,
		"sweep/compressed/0":   false,
		"sweep/blobindexes/0":  false,
		"sweep/xblobindex/0":   false,
	} {
		if got := Shared(ns); got != want {
			t.Errorf("Shared(%q) = %v, want %v", ns, got, want)
		}
	}
}

// blobIndexNS is a namespace of the shared layout, as the archive names its blob index.
const blobIndexNS = "sweep/blobindex/0"

// dbFiles lists the SQLite files (not their -wal and -shm) under dir.
func dbFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Ext(path) == ".db" {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestShared_OneFileForManyIndexes: a batch of a blob index's rows lands in the namespace's one file,
// and what a reader gets back is what was written; reads before the first write create nothing.
func TestShared_OneFileForManyIndexes(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	st := open(t, dir, Options{})

	// Reads of a shared namespace that has no file yet: empty answers, and no file made.
	if ok, err := st.Exists(ctx, blobIndexNS, "0001/a"); err != nil || ok {
		t.Fatalf("Exists before any write = %v, %v", ok, err)
	}
	res, err := st.ClosestLastMany(ctx, blobIndexNS, []is.KeyID{{Key: "0001/a", ID: is.MaxID + 1}})
	if err != nil || res[0].Err != nil || res[0].Exists {
		t.Fatalf("ClosestLastMany before any write = %+v, %v", res, err)
	}
	if page, err := st.ScanStable(ctx, blobIndexNS, is.KeyRange{}, is.Resume{}, 10); err != nil || !page.Done || len(page.Keys) != 0 {
		t.Fatalf("ScanStable before any write = %+v, %v", page, err)
	}
	if n, err := st.DropPrefix(ctx, blobIndexNS, "0001/a", 5); err != nil || n != 0 {
		t.Fatalf("DropPrefix before any write = %d, %v", n, err)
	}
	if files := dbFiles(t, dir); len(files) != 0 {
		t.Fatalf("reads made files: %v", files)
	}

	const keys = 128
	reqs := make([]is.KeyEntries, keys)
	for i := range reqs {
		// The longest key, non-ASCII and a bucketed key among them.
		key := fmt.Sprintf("%04x/agent-%d-é", i, i)
		if i == 7 {
			key = "other:" + strings.Repeat("k", is.MaxKeyLen-len("other:"))
		}
		reqs[i] = is.KeyEntries{Key: key, Entries: []is.Entry{{ID: uint64(i + 1), Value: []byte(key)}}}
	}
	errs, err := st.AppendKeys(ctx, blobIndexNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("key %d: %v", i, e)
		}
	}
	if files := dbFiles(t, dir); len(files) != 1 || files[0] != filepath.Join(dirName(blobIndexNS), SharedFileName) {
		t.Fatalf("files after a batch of %d = %v, want the one shared file", keys, files)
	}
	// A second store on the directory (another sidecar) reads every row back.
	other := open(t, dir, Options{ReadOnly: true})
	for i, r := range reqs {
		got, err := other.Read(ctx, blobIndexNS, r.Key, 0, is.MaxID)
		if err != nil || len(got) != 1 || got[0].ID != uint64(i+1) || string(got[0].Value) != r.Key {
			t.Fatalf("key %d read back %+v, %v", i, got, err)
		}
	}
	if walked := walkNS(t, other, blobIndexNS, is.AllKeys, 50); len(walked) != keys {
		t.Fatalf("walk found %d keys, want %d", len(walked), keys)
	}
	// A conflict fails its key alone, named by this backend and the batch's operation.
	errs, err = st.AppendKeys(ctx, blobIndexNS, []is.KeyEntries{
		{Key: reqs[0].Key, Entries: []is.Entry{{ID: 1, Value: []byte("again")}}},
		{Key: reqs[1].Key, Entries: []is.Entry{{ID: 10, Value: []byte("more")}}},
	})
	if err != nil || !errors.Is(errs[0], is.ErrConflict) || errs[1] != nil {
		t.Fatalf("conflicting batch = %v, %v", errs, err)
	}
	var oe *is.OpError
	if !errors.As(errs[0], &oe) || oe.Backend != backendName || oe.Op != is.OpAppendKeys || oe.Key != reqs[0].Key {
		t.Fatalf("conflict error %v is not named multisqlite append_keys of its key", errs[0])
	}
	// The read-only store writes nothing, whether the file exists or not.
	if err := other.Append(ctx, blobIndexNS, reqs[2].Key, 100, []byte("x")); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("read-only Append = %v", err)
	}
	if err := other.Delete(ctx, "sweep/blobindex/1", "k"); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("read-only Delete of a namespace without a file = %v", err)
	}
	// Dropping every row keeps the file (its namespace goes on), and the indexes are gone.
	drops := make([]is.KeyID, keys)
	for i, r := range reqs {
		drops[i] = is.KeyID{Key: r.Key, ID: is.MaxID}
	}
	dropped, err := st.DropPrefixMany(ctx, blobIndexNS, drops)
	if err != nil {
		t.Fatal(err)
	}
	total := uint64(0)
	for _, d := range dropped {
		if d.Err != nil {
			t.Fatal(d.Err)
		}
		total += d.Dropped
	}
	if total != keys+1 {
		t.Fatalf("dropped %d entries, want %d", total, keys+1)
	}
	if ok, err := other.Exists(ctx, blobIndexNS, reqs[1].Key); err != nil || ok {
		t.Fatalf("Exists after the drop = %v, %v", ok, err)
	}
}

// TestShared_TwoStoresRace: two stores on one directory (two sidecars) append batches to the same
// shared namespace at once, one chunk id per agent each; every row lands once, and each index refuses
// the id the other store wrote first.
func TestShared_TwoStoresRace(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	stores := make([]*Store, 2)
	for i := range stores {
		stores[i] = open(t, dir, Options{})
	}
	const rounds, keys = 20, 32
	var mu sync.Mutex
	won := map[string]int{}
	var wg sync.WaitGroup
	for w, st := range stores {
		wg.Go(func() {
			for r := range rounds {
				reqs := make([]is.KeyEntries, keys)
				for k := range reqs {
					reqs[k] = is.KeyEntries{Key: fmt.Sprintf("0000/a%d", k), Entries: []is.Entry{{ID: uint64(r + 1), Value: []byte{byte(w)}}}}
				}
				errs, err := st.AppendKeys(ctx, blobIndexNS, reqs)
				if err != nil {
					t.Error(err)
					return
				}
				for k, e := range errs {
					switch {
					case e == nil:
						mu.Lock()
						won[fmt.Sprintf("%s@%d", reqs[k].Key, r+1)]++
						mu.Unlock()
					case !errors.Is(e, is.ErrConflict):
						t.Error(e)
					}
				}
			}
		})
	}
	wg.Wait()
	for k := range keys {
		key := fmt.Sprintf("0000/a%d", k)
		got, err := stores[0].Read(ctx, blobIndexNS, key, 0, is.MaxID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != rounds {
			t.Fatalf("%s holds %d entries, want %d", key, len(got), rounds)
		}
		for _, e := range got {
			if n := won[fmt.Sprintf("%s@%d", key, e.ID)]; n != 1 {
				t.Fatalf("%s id %d: %d appends reported it written, want 1", key, e.ID, n)
			}
		}
	}
}

// TestShared_ReadOnlySeesLaterWrites: a read-only store (strata verify, strata scan) that read the
// shared file while no writer had it open (immutable) reads what a writer appends afterwards, after at
// most one read that fails transiently, as with a file an index; it does not fail every read from then on.
func TestShared_ReadOnlySeesLaterWrites(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	w := open(t, dir, Options{})
	if err := w.Append(ctx, blobIndexNS, "0001/a", 1, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil { // the file is idle: every commit in the main file
		t.Fatal(err)
	}
	ro := open(t, dir, Options{ReadOnly: true})
	if got, err := ro.Read(ctx, blobIndexNS, "0001/a", 0, is.MaxID); err != nil || len(got) != 1 {
		t.Fatalf("read-only read = %+v, %v", got, err)
	}
	w2 := open(t, dir, Options{})
	if err := w2.Append(ctx, blobIndexNS, "0001/a", 2, []byte("two")); err != nil {
		t.Fatal(err)
	}
	var got []is.Entry
	var err error
	for attempt := 1; ; attempt++ {
		got, err = ro.Read(ctx, blobIndexNS, "0001/a", 0, is.MaxID)
		if err == nil {
			break
		}
		if !is.IsTransient(err) || attempt == 3 {
			t.Fatalf("read-only read after a write, attempt %d: %v", attempt, err)
		}
	}
	if len(got) != 2 || string(got[1].Value) != "two" {
		t.Fatalf("read-only read after a write = %+v", got)
	}
}

// TestShared_CorruptFile: a shared file that is not a database fails its namespace's operations with
// an error naming the file, is left as it was (a write does not replace it), and touches no other
// namespace.
func TestShared_CorruptFile(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	st := open(t, dir, Options{})
	path := filepath.Join(dir, dirName(blobIndexNS), SharedFileName)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, notADatabase, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, op := range map[string]func() error{
		"Append": func() error { return st.Append(ctx, blobIndexNS, "0001/a", 1, []byte("x")) },
		"Read":   func() error { _, err := st.Read(ctx, blobIndexNS, "0001/a", 0, 9); return err },
		"AppendKeys": func() error {
			_, err := st.AppendKeys(ctx, blobIndexNS, []is.KeyEntries{{Key: "0001/a", Entries: []is.Entry{{ID: 1}}}})
			return err
		},
		"ScanStable": func() error {
			_, err := st.ScanStable(ctx, blobIndexNS, is.AllKeys, is.Resume{}, 10)
			return err
		},
	} {
		err := op()
		var oe *is.OpError
		if err == nil || !errors.As(err, &oe) || oe.Backend != backendName || !strings.Contains(err.Error(), SharedFileName) {
			t.Errorf("%s on a corrupt shared file = %v, want a multisqlite error naming %s", name, err, SharedFileName)
		}
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != string(notADatabase) {
		t.Fatalf("the corrupt file was changed (%v)", err)
	}
	if err := st.Append(ctx, "sweep/blobindex/1", "0001/a", 1, []byte("x")); err != nil {
		t.Fatalf("another shared namespace: %v", err)
	}
	if err := st.Append(ctx, "sweep/primary", "0001/a", 1, []byte("x")); err != nil {
		t.Fatalf("a namespace of a file an index: %v", err)
	}
}

// TestShared_StrayFilesAreReported: a file an index in a shared namespace's directory (a build before
// shared files wrote it) is not read, and a walk from the start says so in its Unreadable instead of
// leaving its rows silently unseen.
func TestShared_StrayFilesAreReported(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	st := open(t, dir, Options{})
	if err := st.Append(ctx, blobIndexNS, "0002/b", 1, []byte("row")); err != nil {
		t.Fatal(err)
	}
	// A file of the per-key layout, made for another namespace and moved where the shared one lives.
	if err := st.Append(ctx, "sweep/elsewhere", "0001/a", 1, []byte("stray")); err != nil {
		t.Fatal(err)
	}
	from := st.FilePath("sweep/elsewhere", "0001/a")
	closeFile(t, st.pool, from)
	to := filepath.Join(st.NamespaceDir(blobIndexNS), "0001", filepath.Base(from))
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
	page, err := st.ScanStable(ctx, blobIndexNS, is.AllKeys, is.Resume{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := dirName(blobIndexNS) + "/0001/" + filepath.Base(from)
	if len(page.Keys) != 1 || page.Keys[0] != "0002/b" || len(page.Unreadable) != 1 ||
		page.Unreadable[0].Where != want || !errors.Is(page.Unreadable[0].Err, errStray) {
		t.Fatalf("walk from the start = %+v, want key 0002/b and %s unreadable", page, want)
	}
	if !page.Done {
		if next, err := st.ScanStable(ctx, blobIndexNS, is.AllKeys, page.Next, 1); err != nil || len(next.Unreadable) != 0 {
			t.Fatalf("a later page = %+v, %v: the stray is listed once a walk", next, err)
		}
	}
}
