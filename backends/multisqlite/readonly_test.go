package multisqlite

import (
	"errors"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stratalog/strata/internal/testenv"

	is "github.com/stratalog/strata/indexedstorage"
)

// fillForReading writes, through a store it closes, bucketed keys, keys too long to name a file by
// (a walk opens their files to learn them) and one index whose file a writer emptied (a read through
// a store opened for writing removes it), and returns the keys that hold entries and the emptied one.
func fillForReading(t *testing.T, dir string) (live []string, emptied string) {
	t.Helper()
	st, err := New(t.Context(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	live = append(bucketedKeys(10), longKeys(3)...)
	emptied = is.BucketPrefix(9) + "c:emptied"
	appendAll(t, st, append(slices.Clone(live), emptied))
	// The emptied index: its rows gone behind the store's back, as a writer that died before its
	// first commit leaves a file.
	execFile(t, st.filePath(testNS, emptied), `DELETE FROM index_storage`)
	st.Close()
	return live, emptied
}

// A read-only store walks and reads every index, leaves an emptied file where it is, refuses writes,
// and leaves the directory as it found it: the same files and directories, each byte for byte, the
// -wal and -shm the writer left included.
func TestReadOnly_LeavesTheDirectoryAsItWas(t *testing.T) {
	dir := t.TempDir()
	live, emptied := fillForReading(t, dir)
	before := testenv.FileDigests(t, dir)

	st := open(t, dir, Options{ReadOnly: true})
	if got := walk(t, st, "", 4, nil); !slices.Equal(sorted(got), sorted(append(slices.Clone(live), emptied))) {
		t.Fatalf("walk: %q", got)
	}
	for _, k := range live {
		entries, err := st.Read(t.Context(), testNS, k, 1, is.MaxID)
		if err != nil || len(entries) != 1 || string(entries[0].Value) != k {
			t.Fatalf("Read(%q): %v, %v", k, entries, err)
		}
	}
	if n, err := st.Length(t.Context(), testNS, emptied); err != nil || n != 0 {
		t.Fatalf("Length of the emptied index: %d, %v", n, err)
	}
	if err := st.Append(t.Context(), testNS, "agent:new", 1, nil); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("Append through a read-only store: %v, want ErrInvalidArgument", err)
	}
	if _, err := st.DropPrefix(t.Context(), testNS, live[0], 1); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("DropPrefix through a read-only store: %v, want ErrInvalidArgument", err)
	}
	if err := st.Delete(t.Context(), testNS, live[0]); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("Delete through a read-only store: %v, want ErrInvalidArgument", err)
	}
	if _, err := st.AppendKeys(t.Context(), testNS, []is.KeyEntries{{Key: "agent:new", Entries: []is.Entry{{ID: 1}}}}); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("AppendKeys through a read-only store: %v, want ErrInvalidArgument", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if after := testenv.FileDigests(t, dir); !maps.Equal(before, after) {
		t.Fatalf("after a read-only store: %v\nwant %v", after, before)
	}
	// A missing directory is fs.ErrNotExist, and is not made.
	if _, err := New(t.Context(), filepath.Join(dir, "none"), &Options{ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read-only open of a missing directory: %v", err)
	}
	if after := testenv.FileDigests(t, dir); !maps.Equal(before, after) {
		t.Fatalf("after a read-only open of a missing directory: %v", after)
	}
}

// On a read-only file system a read-only store reads every index.
func TestReadOnlyFileSystem_ReadOnlyStoreReads(t *testing.T) {
	dir, seal := testenv.ReadOnlyMount(t)
	live, _ := fillForReading(t, dir)
	seal()
	st := open(t, dir, Options{ReadOnly: true})
	for _, k := range live {
		if last, ok, err := st.LastID(t.Context(), testNS, k); err != nil || !ok || last != 1 {
			t.Fatalf("LastID(%q) on a read-only file system: %d %v %v", k, last, ok, err)
		}
	}
	if got := walk(t, st, "", 100, nil); len(got) != len(live)+1 {
		t.Fatalf("walk on a read-only file system: %q", got)
	}
}
