package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// FileDigests is every file and directory under dir: path relative to dir → the hex SHA-256 of the file's
// bytes, or "dir". Two snapshots are equal when nothing under dir was created, removed or written.
//
// Reading a database file opens and closes it, which drops the POSIX locks this process's SQLite
// connections hold on it: take snapshots while no connection of the test relies on its locks.
func FileDigests(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			out[rel] = "dir"
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// JournalMode reads a database file's journal mode from its header (bytes 18 and 19: 1 for a
// rollback journal, 2 for WAL), without opening it through SQLite: "wal", "rollback", or "" for a file
// too short to have a header.
func JournalMode(tb testing.TB, path string) string {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	switch {
	case len(data) < 100:
		return ""
	case data[18] == 2 && data[19] == 2:
		return "wal"
	case data[18] == 1 && data[19] == 1:
		return "rollback"
	}
	tb.Fatalf("%s: header bytes 18, 19 are %d, %d", path, data[18], data[19])
	return ""
}

// ReadOnlyMount mounts a fresh tmpfs on a directory of the test's own and returns it with seal, which
// remounts it read-only: fill the directory, seal it, and the files are on a read-only file system. It
// skips the test where the process may not mount (it needs root, or CAP_SYS_ADMIN). The mount is
// removed when the test ends.
func ReadOnlyMount(tb testing.TB) (dir string, seal func()) {
	tb.Helper()
	dir = tb.TempDir()
	if err := syscall.Mount("strata-test", dir, "tmpfs", 0, "size=64m,mode=0755"); err != nil {
		tb.Skipf("cannot mount a tmpfs to make a read-only file system here (%v): run as root to test one", err)
	}
	tb.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			tb.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir, func() {
		tb.Helper()
		if err := syscall.Mount("strata-test", dir, "tmpfs", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			tb.Fatalf("remount %s read-only: %v", dir, err)
		}
	}
}
