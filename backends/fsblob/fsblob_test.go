package fsblob_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/archive/blobtest"
	"github.com/stratalog/strata/backends/fsblob"
)

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(tb testing.TB) archive.BlobStore {
		s, err := fsblob.New(tb.Context(), tb.TempDir(), nil)
		if err != nil {
			tb.Fatal(err)
		}
		return s
	})
}

func TestDeleteRemovesEmptyDirectoriesButNotTheRoot(t *testing.T) {
	root := t.TempDir()
	s, err := fsblob.New(t.Context(), root, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, p := range []string{"e/0/c/n/1", "e/0/c/other/1"} {
		if err := s.Put(ctx, p, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, "e/0/c/n/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "e/0/c/n")); !os.IsNotExist(err) {
		t.Fatalf("the drained agent's directory is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "e/0/c/other/1")); err != nil {
		t.Fatalf("a sibling blob went with it: %v", err)
	}
	if err := s.Delete(ctx, "e/0/c/other/1"); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(root); err != nil || len(entries) != 0 {
		t.Fatalf("root after deleting everything: %v %v", entries, err)
	}
}

func TestTemporaryFilesAreNeverListed(t *testing.T) {
	root := t.TempDir()
	s, err := fsblob.New(t.Context(), root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	// What a crash between CreateTemp and Rename leaves behind.
	if err := os.WriteFile(filepath.Join(root, "a", ".put-123"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if paths, err := s.List(t.Context(), ""); err != nil || len(paths) != 0 {
		t.Fatalf("List: %q %v", paths, err)
	}
}
