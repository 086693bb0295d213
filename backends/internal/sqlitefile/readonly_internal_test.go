package sqlitefile

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// SQLite's error for a file it could not create on a read-only file system carries the errno of its
// read-only retry, ENOENT; openFailure puts the file system's refusal in its place, and leaves every
// other error alone.
func TestOpenFailure_NamesTheFileSystemsRefusal(t *testing.T) {
	cantOpen := sqlite3.Error{Code: sqlite3.ErrCantOpen, SystemErrno: syscall.ENOENT}
	readonly := sqlite3.Error{Code: sqlite3.ErrReadonly}
	targets := []string{"/ro/strata.db", "/ro"}
	for _, c := range []struct {
		name     string
		err      error
		refusals []error
		want     error // nil: err comes back as it is
	}{
		{"create on a read-only file system", cantOpen, []error{nil, syscall.EROFS}, syscall.EROFS},
		{"write to a file opened read-only", readonly, []error{syscall.EROFS, syscall.EROFS}, syscall.EROFS},
		{"a directory the process may not write", cantOpen, []error{nil, syscall.EACCES}, fs.ErrPermission},
		{"everything writable", cantOpen, []error{nil, nil}, nil},
		{"another refusal", cantOpen, []error{syscall.ENOTDIR, nil}, nil},
		{"not SQLite's open or write failure", sqlite3.Error{Code: sqlite3.ErrCorrupt}, []error{syscall.EROFS, syscall.EROFS}, nil},
		{"not SQLite's", errors.New("boom"), []error{syscall.EROFS, syscall.EROFS}, nil},
	} {
		got, refused := openFailure(c.err, targets, c.refusals)
		if c.want == nil {
			if refused || got != c.err {
				t.Errorf("%s: %v, %v; want the error as it was", c.name, got, refused)
			}
			continue
		}
		if !refused || !errors.Is(got, c.want) || strings.Contains(got.Error(), "no such file") || errors.Is(got, fs.ErrNotExist) {
			t.Errorf("%s: %v, %v; want an error matching %v that does not say \"no such file\"", c.name, got, refused, c.want)
		}
	}
}
