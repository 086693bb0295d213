package multisqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/indexedstorage/storagetest"
)

// poison overwrites the index's file with bytes that are not a database, as a disk fault or a stray
// writer would. The file's connection is closed first: SQLite then checkpoints the WAL into the file
// and removes it, so that neither its page cache nor a later checkpoint can mask or undo the damage.
func poison(tb testing.TB, st is.Storage, ns, key string) {
	tb.Helper()
	s := st.(*Store)
	path := s.filePath(ns, key)
	closeFile(tb, s.pool, path)
	if err := os.WriteFile(path, notADatabase, 0o644); err != nil {
		tb.Fatal(err)
	}
}

var notADatabase = []byte(strings.Repeat("this is not a database file. ", 200))

// closeFile closes the pool's connection to path, if it has one; it must be idle.
func closeFile(tb testing.TB, p *pool, path string) {
	tb.Helper()
	p.mu.Lock()
	c := p.conns[path]
	if c != nil {
		if c.refs > 0 {
			p.mu.Unlock()
			tb.Fatalf("closeFile: %s is in use", path)
		}
		p.idle.Remove(c.elem)
		c.elem = nil
		delete(p.conns, path)
		p.open--
	}
	p.mu.Unlock()
	if c != nil {
		if err := closeAll([]*conn{c}); err != nil {
			tb.Fatal(err)
		}
	}
	// The connection persists its WAL (see persistWAL), emptied once it is checkpointed: nothing in it
	// can mask or undo damage to the file.
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() != 0 {
		tb.Fatalf("closeFile: %s-wal holds %d bytes after the file's last connection closed", path, fi.Size())
	}
}

func open(tb testing.TB, dir string, opts Options) *Store {
	tb.Helper()
	st, err := New(context.Background(), dir, &opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

const testNS = "test/ns"

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("agent:%03d", i)
	}
	return out
}

func appendAll(t *testing.T, st *Store, ks []string) {
	t.Helper()
	for _, k := range ks {
		if err := st.Append(t.Context(), testNS, k, 1, []byte(k)); err != nil {
			t.Fatalf("Append(%q): %v", k, err)
		}
	}
}

// walk runs a whole ScanStable walk and calls between after each page.
func walk(t *testing.T, st *Store, prefix string, count int, between func(page is.Page)) []string {
	t.Helper()
	var all []string
	for from := (is.Resume{}); ; {
		page, err := st.ScanStable(t.Context(), testNS, is.PrefixRange(prefix), from, count)
		if err != nil {
			t.Fatalf("ScanStable: %v", err)
		}
		all = append(all, page.Keys...)
		if between != nil {
			between(page)
		}
		if page.Done {
			return all
		}
		from = page.Next
	}
}

func sorted(ks []string) []string {
	out := slices.Clone(ks)
	slices.Sort(out)
	return out
}

// longKeys are keys too long to name a file by: their files are named by a hash, and a walk reads
// their keys from them.
func longKeys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("agent:%03d:", i) + strings.Repeat("x", 300)
	}
	return out
}

// bucketedKeys are keys with a bucket prefix, spread over a few buckets as the oplog layers store them.
func bucketedKeys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = is.BucketPrefix(i%7*2000) + fmt.Sprintf("c:agent-%03d", i)
	}
	return out
}

func TestScanStable_PageVisitsAtMostCountFiles(t *testing.T) {
	for _, c := range []struct {
		name  string
		ks    []string
		opens bool // the names are hashes: the walk opens each file once to read its key
	}{{"Unbucketed", keys(40), false}, {"Bucketed", bucketedKeys(40), false}, {"Long", longKeys(40), true}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ks := sorted(c.ks)
			appendAll(t, open(t, dir, Options{}), ks)
			// A second store over the same directory has nothing open, so every file a page reads is a
			// file it opens.
			st := open(t, dir, Options{MaxOpenFiles: 64})
			const count = 6
			pages := 0
			got := walk(t, st, "", count, func(page is.Page) {
				pages++
				if len(page.Keys) > count {
					t.Fatalf("page %d holds %d keys, more than count %d", pages, len(page.Keys), count)
				}
			})
			if !slices.Equal(sorted(got), ks) {
				t.Fatalf("walk returned %d keys, want %d", len(got), len(ks))
			}
			want := int64(0)
			if c.opens {
				want = int64(len(ks))
			}
			if opened := st.Stats().FilesOpened; opened != want {
				t.Fatalf("a pass over %d files opened %d files, want %d", len(ks), opened, want)
			}
			if want := (len(ks) + count - 1) / count; pages != want {
				t.Fatalf("walk took %d pages, want %d", pages, want)
			}
		})
	}
}

// A walk of a bucket range lists those buckets' directories only: a key of another bucket is neither
// handed back nor looked at (its directory is not listed; here, a file in it that is not a database
// would otherwise fail nothing but would be seen by a walk that opened it).
func TestScanStable_BucketRangeVisitsOnlyItsBuckets(t *testing.T) {
	st := open(t, t.TempDir(), Options{})
	ks := bucketedKeys(70) // buckets 0, 2000, 4000, ..., 12000
	appendAll(t, st, ks)
	// An unbucketed key that sorts inside the range is still found (it lives in "other").
	odd := is.BucketPrefix(4000)[:4] + "0-not-bucketed"
	appendAll(t, st, []string{odd})
	r := is.BucketsRange(3000, 6001)
	got := sorted(walk2(t, st, r, 5))
	var want []string
	for _, k := range append(slices.Clone(ks), odd) {
		if r.Contains(k) {
			want = append(want, k)
		}
	}
	if want = sorted(want); !slices.Equal(got, want) {
		t.Fatalf("walk of %v returned %q, want %q", r, got, want)
	}
	// A long-named file in a bucket outside the range is never opened.
	other := open(t, st.Dir(), Options{})
	outside := longKeys(1)[0]
	if err := st.Append(t.Context(), testNS, is.BucketPrefix(9000)+outside, 1, nil); err != nil {
		t.Fatal(err)
	}
	walk2(t, other, r, 5)
	if n := other.Stats().FilesOpened; n != 0 {
		t.Fatalf("a walk of %v opened %d files", r, n)
	}
}

// walk2 is walk over a range.
func walk2(t *testing.T, st *Store, r is.KeyRange, count int) []string {
	t.Helper()
	return walkNS(t, st, testNS, r, count)
}

// walkNS is a whole ScanStable walk of a range of ns.
func walkNS(t *testing.T, st *Store, ns string, r is.KeyRange, count int) []string {
	t.Helper()
	var all []string
	for from := (is.Resume{}); ; {
		page, err := st.ScanStable(t.Context(), ns, r, from, count)
		if err != nil {
			t.Fatalf("ScanStable: %v", err)
		}
		all = append(all, page.Keys...)
		if page.Done {
			return all
		}
		from = page.Next
	}
}

func TestScanStable_EmptiedFilesAreGone(t *testing.T) {
	st := open(t, t.TempDir(), Options{})
	ks := keys(30)
	appendAll(t, st, ks)
	for _, k := range ks[:29] {
		if err := st.Delete(t.Context(), testNS, k); err != nil {
			t.Fatal(err)
		}
	}
	// 29 emptied indexes and one that still holds its key: one page of one file.
	pages := 0
	got := walk(t, st, "", 4, func(page is.Page) { pages++ })
	if !slices.Equal(got, ks[29:]) || pages != 1 {
		t.Fatalf("walk over emptied indexes returned %q in %d pages, want %q in 1", got, pages, ks[29:])
	}
	if n := st.Stats().FilesRemoved; n != 29 {
		t.Fatalf("%d files removed, want 29", n)
	}
}

func TestScanStable_DirectoryIsListedOncePerWalk(t *testing.T) {
	var lists atomic.Int64
	st := open(t, t.TempDir(), Options{ListingTTL: -1, OnList: func(ns string) {
		if ns == testNS {
			lists.Add(1)
		}
	}})
	ks := keys(30)
	appendAll(t, st, ks)
	lists.Store(0)
	if got := walk(t, st, "", 4, nil); len(got) != len(ks) {
		t.Fatalf("walk returned %d keys, want %d", len(got), len(ks))
	}
	if n := lists.Load(); n != 1 {
		t.Fatalf("a walk of 8 pages listed the directory %d times, want 1", n)
	}
	walk(t, st, "agent:01", 2, nil)
	if n := lists.Load(); n != 1 {
		t.Fatalf("a second walk with nothing created listed the directory again (%d listings)", n)
	}
}

func TestScanStable_FileCreatedAfterWalkIsSeenByNextWalk(t *testing.T) {
	// No TTL: only the invalidation on create can make the new file visible.
	st := open(t, t.TempDir(), Options{ListingTTL: -1})
	ks := keys(10)
	appendAll(t, st, ks)
	walk(t, st, "", 3, nil)
	appendAll(t, st, []string{"late"})
	if got := walk(t, st, "", 3, nil); !slices.Contains(got, "late") {
		t.Fatalf("a walk after %q was created returned %q", "late", got)
	}
}

func TestScanStable_ReopeningEvictedFileKeepsListing(t *testing.T) {
	var lists atomic.Int64
	st := open(t, t.TempDir(), Options{MaxOpenFiles: 1, ListingTTL: -1, OnList: func(string) { lists.Add(1) }})
	ks := keys(5)
	appendAll(t, st, ks)
	walk(t, st, "", 10, nil)
	before := lists.Load()
	for _, k := range ks {
		// Each read reopens a file the pool evicted: that file existed, so nothing is news to the
		// listing.
		if ok, err := st.Exists(t.Context(), testNS, k); err != nil || !ok {
			t.Fatalf("Exists(%q) = %v, %v", k, ok, err)
		}
		if err := st.Append(t.Context(), testNS, k, 2, nil); err != nil {
			t.Fatal(err)
		}
	}
	walk(t, st, "", 10, nil)
	if n := lists.Load() - before; n != 0 {
		t.Fatalf("reopening evicted files re-listed the directory %d times", n)
	}
}

func TestScanStable_TokenNotNamingAFileIsInvalid(t *testing.T) {
	st := open(t, t.TempDir(), Options{})
	appendAll(t, st, keys(3))
	for _, token := range []is.Resume{is.FileResume("b"), is.FileResume(strings.Repeat("g", 64) + ".db"), is.MarkerResume("agent:000"),
		is.FileResume("other/kx"), is.FileResume("zzzz/kx.db"), is.FileResume("4000/kx.db"), is.FileResume("0001/k=41.db"),
		is.FileResume("other/k0001=2fx.db"), is.FileResume(strings.Repeat("7f", 32) + ".db")} {
		if _, err := st.ScanStable(t.Context(), testNS, is.AllKeys, token, 10); !errors.Is(err, is.ErrInvalidArgument) {
			t.Fatalf("ScanStable from %v: %v, want ErrInvalidArgument", token, err)
		}
	}
}

func TestReadsOfMissingIndexCreateNoFile(t *testing.T) {
	st := open(t, t.TempDir(), Options{})
	ctx := t.Context()
	const key = "missing"
	if ok, err := st.Exists(ctx, testNS, key); ok || err != nil {
		t.Fatalf("Exists: %v %v", ok, err)
	}
	if n, err := st.Length(ctx, testNS, key); n != 0 || err != nil {
		t.Fatalf("Length: %v %v", n, err)
	}
	if es, err := st.Read(ctx, testNS, key, 0, 10); len(es) != 0 || err != nil {
		t.Fatalf("Read: %v %v", es, err)
	}
	for name, fn := range map[string]func(context.Context, string, string) (is.Entry, bool, error){"First": st.First, "Last": st.Last} {
		if _, ok, err := fn(ctx, testNS, key); ok || err != nil {
			t.Fatalf("%s: %v %v", name, ok, err)
		}
	}
	if _, ok, err := st.Closest(ctx, testNS, key, 1); ok || err != nil {
		t.Fatalf("Closest: %v %v", ok, err)
	}
	if n, err := st.DropPrefix(ctx, testNS, key, 10); n != 0 || err != nil {
		t.Fatalf("DropPrefix: %v %v", n, err)
	}
	if err := st.Delete(ctx, testNS, key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := st.AppendMany(ctx, testNS, key, nil); err != nil {
		t.Fatalf("empty AppendMany: %v", err)
	}
	if err := st.AppendMany(ctx, testNS, key, []is.Entry{{ID: 2}, {ID: 1}}); !errors.Is(err, is.ErrConflict) {
		t.Fatalf("AppendMany out of order: %v", err)
	}
	if err := st.Append(ctx, testNS, key, 0, nil); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("Append of id 0: %v", err)
	}
	if page, err := st.ScanStable(ctx, testNS, is.AllKeys, is.Resume{}, 10); err != nil || !page.Done || len(page.Keys) != 0 {
		t.Fatalf("ScanStable: %+v %v", page, err)
	}
	entries, err := os.ReadDir(st.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("reads and rejected writes of a missing index left %q in the store", entries[0].Name())
	}
	if opened := st.Stats().FilesOpened; opened != 0 {
		t.Fatalf("reads of a missing index opened %d files", opened)
	}
}

func TestEmptiedIndexLosesItsFileAndDirectory(t *testing.T) {
	st := open(t, t.TempDir(), Options{})
	ctx := t.Context()
	gone, dropped, kept := is.BucketPrefix(7)+"c:gone", is.BucketPrefix(8)+"c:dropped", is.BucketPrefix(8)+"c:kept"
	long := is.BucketPrefix(9) + longKeys(1)[0]
	appendAll(t, st, []string{gone, dropped, kept, long, "other-key"})
	if err := st.Append(ctx, testNS, dropped, 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, testNS, gone); err != nil {
		t.Fatal(err)
	}
	// A drop that leaves an entry keeps the file.
	if _, err := st.DropPrefix(ctx, testNS, dropped, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(st.filePath(testNS, dropped)); err != nil {
		t.Fatalf("a drop that left an entry: %v", err)
	}
	for _, k := range []string{dropped, long, "other-key"} {
		if _, err := st.DropPrefix(ctx, testNS, k, 2); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{gone, dropped, long, "other-key"} {
		if _, err := os.Stat(st.filePath(testNS, k)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the file of emptied %q: %v, want it removed", k, err)
		}
		for _, side := range []string{"-wal", "-shm"} {
			if _, err := os.Stat(st.filePath(testNS, k) + side); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s of emptied %q: %v, want it removed", side, k, err)
			}
		}
		if ok, err := st.Exists(ctx, testNS, k); ok || err != nil {
			t.Fatalf("Exists(%q) after emptying: %v %v", k, ok, err)
		}
	}
	// Bucket 7's and 9's directories held nothing else, and "other" neither; bucket 8's holds kept.
	entries, err := os.ReadDir(st.NamespaceDir(testNS))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != bucketDir(8) {
		t.Fatalf("namespace directory holds %v, want only %s", entries, bucketDir(8))
	}
	if got := walk(t, st, "", 10, nil); !slices.Equal(got, []string{kept}) {
		t.Fatalf("walk after emptying returned %q, want %q", got, kept)
	}
	// An index emptied and written again is there again.
	appendAll(t, st, []string{gone})
	if got := sorted(walk(t, st, "", 10, nil)); !slices.Equal(got, []string{gone, kept}) {
		t.Fatalf("walk after re-creating %q returned %q", gone, got)
	}
}

func TestPool_OpenFilesStayWithinBound(t *testing.T) {
	const bound = 4
	st := open(t, t.TempDir(), Options{MaxOpenFiles: bound})
	ctx := t.Context()
	check := func(after string) {
		t.Helper()
		if n := st.Stats().OpenFiles; n > bound {
			t.Fatalf("after %s: %d files open, bound %d", after, n, bound)
		}
	}
	ks := keys(40)
	for _, k := range ks {
		appendAll(t, st, []string{k})
		check("Append " + k)
	}
	for _, k := range ks {
		if _, err := st.Read(ctx, testNS, k, 0, 10); err != nil {
			t.Fatal(err)
		}
		check("Read " + k)
	}
	walk(t, st, "", 7, func(is.Page) { check("a page") })
	if opened := st.Stats().FilesOpened; opened <= int64(len(ks)) {
		t.Fatalf("only %d files opened for %d files with room for %d: nothing was evicted", opened, len(ks), bound)
	}
}

// With two files open at most and many goroutines on more keys than that, files are evicted and
// reopened constantly under concurrent use: no operation may fail, and every file goes back to the
// pool. (That no write is lost under such a pool is the suite's, run by TestConformance_TinyPool.)
func TestPool_ConcurrentOperationsWithTinyPoolStayWithinBound(t *testing.T) {
	st := open(t, t.TempDir(), Options{MaxOpenFiles: 2})
	ctx := t.Context()
	ks := keys(6)
	const writers, rounds = 6, 15
	var wg sync.WaitGroup
	errs := make(chan error, writers+1)
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				i := (w + r) % len(ks)
				last, _, err := st.Last(ctx, testNS, ks[i])
				if err != nil {
					errs <- err
					return
				}
				if err := st.Append(ctx, testNS, ks[i], last.ID+1, []byte("v")); err != nil && !errors.Is(err, is.ErrConflict) {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range rounds {
			for from := (is.Resume{}); ; {
				page, err := st.ScanStable(ctx, testNS, is.AllKeys, from, 2)
				if err != nil {
					errs <- err
					return
				}
				if page.Done {
					break
				}
				from = page.Next
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := st.Stats().OpenFiles; n > 2 {
		t.Fatalf("%d files open after every operation finished, bound 2", n)
	}
}

func TestClose_ClosesFilesInUseWhenReleased(t *testing.T) {
	st := open(t, t.TempDir(), Options{})
	appendAll(t, st, keys(3))
	c, err := st.pool.acquire(t.Context(), st.filePath(testNS, "agent:000"), false)
	if err != nil || c == nil {
		t.Fatalf("acquire: %v %v", c, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// The file in use is still usable by the operation that holds it.
	if ok, err := c.eng.Exists(t.Context(), testNS, "agent:000"); err != nil || !ok {
		t.Fatalf("a file in use was closed under its user: %v %v", ok, err)
	}
	if n := st.Stats().OpenFiles; n != 1 {
		t.Fatalf("%d files open after Close with one in use, want 1", n)
	}
	st.pool.release(c)
	if n := st.Stats().OpenFiles; n != 0 {
		t.Fatalf("%d files open after the last one was released", n)
	}
	if _, err := c.eng.Exists(t.Context(), testNS, "agent:000"); !errors.Is(c.eng.Classify(err), is.ErrClosed) {
		t.Fatalf("released file after Close: %v, want ErrClosed", err)
	}
}

func TestDirName_IsInjectiveAndSafe(t *testing.T) {
	namespaces := []string{".", "..", "a", "A", "a/b", "a/b/c", "a.b", "a_b", "a-b", "ab", "a/B",
		strings.Repeat("/", 128), strings.Repeat("Z", 128), strings.Repeat("Z", 127) + "z", strings.Repeat("y", 128)}
	seen := map[string]string{}
	for _, ns := range namespaces {
		if err := is.ValidateNamespace(ns); err != nil {
			t.Fatalf("test namespace %q is invalid: %v", ns, err)
		}
		d := dirName(ns)
		if d == "." || d == ".." || strings.ContainsAny(d, `/\`) || len(d) > 255 {
			t.Fatalf("dirName(%q) = %q is not a safe directory name", ns, d)
		}
		if other, dup := seen[strings.ToLower(d)]; dup {
			t.Fatalf("namespaces %q and %q share directory %q (ignoring case)", ns, other, d)
		}
		seen[strings.ToLower(d)] = ns
	}
}

func TestFileNames_AreReversibleSafeAndOnePerKey(t *testing.T) {
	ks := []string{"a", "A", "../../etc/passwd", "..", ".", strings.Repeat("k/", 512), "日本語", "c:a", "%41", "=41", "a=b", "^a", "a b",
		is.BucketPrefix(0) + "c:x", is.BucketPrefix(16383) + "Z", is.BucketPrefix(5), "4000/x", "0a5B/x", "0a5b0",
		is.BucketPrefix(3) + strings.Repeat("é", 300), strings.Repeat("z", 251), strings.Repeat("z", 252), strings.Repeat("Z", 126)}
	seen := map[string]string{}
	for _, k := range ks {
		if err := is.ValidateKey(k); err != nil {
			t.Fatalf("test key %q: %v", k, err)
		}
		loc := locate(testNS, k)
		if !isDirName(loc.dir) || len(loc.name) > maxFileName || loc.name == "." || loc.name == ".." || strings.ContainsAny(loc.name, `/\`) {
			t.Fatalf("locate(%q) = %+v is not a safe place", k, loc)
		}
		if other, dup := seen[strings.ToLower(loc.rel())]; dup {
			t.Fatalf("keys %q and %q share file %q (ignoring case)", k, other, loc.rel())
		}
		seen[strings.ToLower(loc.rel())] = k
		key, known, ok := nameKey(loc.dir, loc.name)
		if !ok {
			t.Fatalf("nameKey(%+v) does not take the name locate gave %q", loc, k)
		}
		rest := k
		if _, bucketed := is.KeyBucket(k); bucketed {
			rest = k[is.BucketPrefixLen:]
		}
		if wantKnown := len(escapedPrefix+escapeKey(rest)+fileExt) <= maxFileName; known != wantKnown {
			t.Fatalf("the name of %q tells its key: %v, want %v", k, known, wantKnown)
		}
		if known && key != k {
			t.Fatalf("the name of %q reads back as %q", k, key)
		}
		if b, bucketed := is.KeyBucket(k); bucketed != (loc.dir != otherDir) || bucketed && loc.dir != bucketDir(b) {
			t.Fatalf("locate(%q) = %+v: wrong directory", k, loc)
		}
	}
	if hashedName("a", "b/c") == hashedName("a/b", "c") {
		t.Fatal("namespace and key are not separated in the hash")
	}
	// Names this backend would not give a file are not its files.
	for _, bad := range [][2]string{{otherDir, "kA.db"}, {otherDir, "k=61.db"}, {otherDir, "k=4.db"}, {otherDir, "k%41.db"}, {otherDir, "k^.db"}, {otherDir, "k.db"},
		{otherDir, "k0001=2fx.db"}, {bucketDir(1), "kx.db-wal"}, {bucketDir(1), "kx"}, {otherDir, "k=00.db"}, {otherDir, "h" + strings.Repeat("g", 64) + ".db"}} {
		if isFileName(bad[0], bad[1]) {
			t.Fatalf("isFileName(%q, %q) = true", bad[0], bad[1])
		}
	}
}

// BenchmarkFullPass times one whole ScanStable pass (pages of 128) as the namespace grows: ns/file
// staying flat from 1,000 to 16,000 files is the O(F) pass (not O(F² log F / P)).
func BenchmarkFullPass(b *testing.B) {
	for _, files := range []int{1_000, 4_000, 16_000} {
		b.Run(fmt.Sprintf("files=%d", files), func(b *testing.B) {
			ctx := b.Context()
			st := open(b, b.TempDir(), Options{})
			if err := storagetest.Populate(ctx, st, testNS, files); err != nil {
				b.Fatal(err)
			}
			start := st.Stats()
			for b.Loop() {
				if n, err := storagetest.WalkAll(ctx, st, testNS, storagetest.BenchPageSize); err != nil || n != files {
					b.Fatalf("pass: %d keys, %v", n, err)
				}
			}
			end := st.Stats()
			passes := float64(b.N)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/passes/float64(files), "ns/file")
			b.ReportMetric(float64(end.FilesOpened-start.FilesOpened)/passes/float64(files), "opens/file")
			b.ReportMetric(float64(end.Listings-start.Listings)/passes, "listings/pass")
		})
	}
}

// rawWalk is what a program would do without strata: list the namespace's directories and open each
// file in turn to read its key, with database/sql and the same driver.
func rawWalk(ctx context.Context, st is.Storage, ns string, _ int) (int, error) {
	nsDir := st.(*Store).NamespaceDir(ns)
	dirs, err := os.ReadDir(nsDir)
	if err != nil {
		return 0, err
	}
	var files []string
	for _, d := range dirs {
		entries, err := os.ReadDir(filepath.Join(nsDir, d.Name()))
		if err != nil {
			return 0, err
		}
		for _, e := range entries {
			if isFileName(d.Name(), e.Name()) {
				files = append(files, filepath.Join(nsDir, d.Name(), e.Name()))
			}
		}
	}
	n := 0
	for _, path := range files {
		db, err := sql.Open("sqlite3", "file:"+path+"?mode=rw&_busy_timeout=5000&_journal_mode=WAL")
		if err != nil {
			return n, err
		}
		rows, err := db.QueryContext(ctx, `SELECT DISTINCT key FROM index_storage WHERE namespace = ? ORDER BY key`, ns)
		if err != nil {
			db.Close()
			return n, err
		}
		for rows.Next() {
			n++
		}
		err = rows.Err()
		rows.Close()
		db.Close()
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func TestScanStable_NewBucketDirectoryIsSeenByNextWalk(t *testing.T) {
	// No TTL: only the drop of the listing when this process makes a directory can show it.
	st := open(t, t.TempDir(), Options{ListingTTL: -1})
	appendAll(t, st, bucketedKeys(3))
	walk(t, st, "", 3, nil)
	late := is.BucketPrefix(16000) + "c:late"
	appendAll(t, st, []string{late})
	if got := walk(t, st, "", 3, nil); !slices.Contains(got, late) {
		t.Fatalf("a walk after %q was created in a new bucket directory returned %q", late, got)
	}
}

// A file of the layout before buckets (a hash directly in the namespace directory) holds data this
// build does not read: every walk from the start names it in Unreadable, and later pages do not.
func TestScanStable_FileOfTheOldLayoutIsListedUnreadable(t *testing.T) {
	st := open(t, t.TempDir(), Options{})
	appendAll(t, st, keys(5))
	old := strings.Repeat("7f", 32) + ".db"
	if err := os.WriteFile(filepath.Join(st.NamespaceDir(testNS), old), []byte("an index of the old layout"), 0o644); err != nil {
		t.Fatal(err)
	}
	st = open(t, st.Dir(), Options{})
	for range 2 {
		var unreadable []is.Unreadable
		got := walk(t, st, "", 2, func(page is.Page) { unreadable = append(unreadable, page.Unreadable...) })
		if len(got) != 5 {
			t.Fatalf("walk returned %q, want the 5 keys", got)
		}
		if len(unreadable) != 1 || unreadable[0].Where != dirName(testNS)+"/"+old || !errors.Is(unreadable[0].Err, errLegacy) {
			t.Fatalf("Unreadable %+v, want the old layout's file once", unreadable)
		}
	}
}
