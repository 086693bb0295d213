package backends

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// OpenExisting creates nothing, fails with fs.ErrNotExist on a missing store, and returns a nil
// interface then.
func TestOpenExisting_MissingStoresFailAndNothingIsCreated(t *testing.T) {
	dir := t.TempDir()
	for _, u := range []string{"sqlite://" + dir + "/none/strata.db", "sqlite://" + dir + "/strata.db", "multisqlite://" + dir + "/multi"} {
		st, err := OpenExisting(t.Context(), u)
		if err == nil || !errors.Is(err, fs.ErrNotExist) || st != nil {
			t.Errorf("OpenExisting(%s): %v, %v; want a nil store and fs.ErrNotExist", u, st, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("OpenExisting created %v", entries)
	}
	bs, err := OpenBlobExisting(t.Context(), "fs://"+filepath.Join(dir, "blobs"))
	if !errors.Is(err, fs.ErrNotExist) || bs != nil {
		t.Fatalf("OpenBlobExisting: %v, %v", bs, err)
	}
	// An existing file opens.
	st, err := Open(t.Context(), "sqlite://"+dir+"/made.db", nil)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = OpenExisting(t.Context(), "sqlite://"+dir+"/made.db")
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
}
