// Package fsblob is an archive.BlobStore on a local directory. A blob path maps to a file path as it
// is: archive.ValidateBlobPath admits only segments of [A-Za-z0-9%._-] that do not start with '.' and
// fit a file name (255 bytes), and the blob layer turns agent names into such segments
// (archive.PathSegment), so no path can climb out of the directory or be too long for it.
package fsblob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/stratalog/strata/archive"
)

// Store keeps each blob in a file under its root directory.
type Store struct {
	root   string
	closed atomic.Bool
}

var (
	_ archive.BlobStore   = (*Store)(nil)
	_ archive.RangeReader = (*Store)(nil)
)

// Options configures New. It has no fields yet: it is there so that one can come without changing
// New's signature. A nil *Options is the zero Options.
type Options struct{}

// New returns a Store rooted at dir, creating it if needed. ctx goes unused: creating a directory
// takes none.
func New(_ context.Context, dir string, _ *Options) (*Store, error) {
	if dir == "" {
		return nil, errors.New("fsblob: empty directory")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fsblob: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("fsblob: %w", err)
	}
	return &Store{root: abs}, nil
}

// Root is the directory the store writes under.
func (s *Store) Root() string { return s.root }

var errClosed = errors.New("store is closed")

// fail is the one place an operation's error takes its shape, the storage backends' (is.OpError):
// `fsblob <op> (path "<path>"): <err>`, op being the blob metric's label (put, get, get_range, delete,
// list). A nil err returns nil.
func fail(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("fsblob %s (path %q): %w", op, path, err)
}

// file is the file of path, checked; its error has been through fail.
func (s *Store) file(op, path string, isPrefix bool) (string, error) {
	if s.closed.Load() {
		return "", fail(op, path, errClosed)
	}
	if err := archive.ValidateBlobPath(path, isPrefix); err != nil {
		return "", fail(op, path, err)
	}
	return filepath.Join(s.root, filepath.FromSlash(path)), nil
}

// Put writes data to a temporary file beside the target, syncs it and renames it into place, then syncs
// the directory: a reader sees the old blob or the whole new one, and once Put returns the blob
// survives a crash (the archive step drops the layer above right after).
func (s *Store) Put(_ context.Context, path string, data []byte) error {
	name, err := s.file("put", path, false)
	if err != nil {
		return err
	}
	dir := filepath.Dir(name)
	// A concurrent Delete may remove the (empty) directory between MkdirAll and CreateTemp: try again.
	for attempt := 0; ; attempt++ {
		err = s.put(dir, name, data)
		if err == nil || !errors.Is(err, fs.ErrNotExist) || attempt == 2 {
			break
		}
	}
	if err != nil {
		return fail("put", path, err)
	}
	return nil
}

func (s *Store) put(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".put-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename this finds nothing
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (s *Store) Get(_ context.Context, path string) ([]byte, error) {
	name, err := s.file("get", path, false)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fail("get", path, archive.ErrBlobNotFound)
	}
	if err != nil {
		return nil, fail("get", path, err)
	}
	return data, nil
}

// GetRange opens the file, checks its size and reads the range with one pread (os.File.ReadAt). Put
// replaces a file by renaming a new one over it and never writes into it, so the open file is one
// version of the blob from Stat to ReadAt. A directory is not a blob: it reads as missing, as a key
// prefix does on an object store.
func (s *Store) GetRange(_ context.Context, path string, offset, length int64) ([]byte, error) {
	name, err := s.file("get_range", path, false)
	if err != nil {
		return nil, err
	}
	if err := archive.ValidateBlobRange(offset, length); err != nil {
		return nil, fail("get_range", path, err)
	}
	data, err := readRange(name, offset, length)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fail("get_range", path, archive.ErrBlobNotFound)
	}
	return data, fail("get_range", path, err)
}

func readRange(name string, offset, length int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, fs.ErrNotExist
	}
	// Checked before allocating: a wrong length must fail, not allocate it.
	if err := archive.CheckBlobSize(offset, length, fi.Size()); err != nil {
		return nil, err
	}
	data := make([]byte, length)
	n, err := f.ReadAt(data, offset)
	if err == io.EOF {
		// Shorter than Stat said: something other than Put truncated the file.
		return nil, fmt.Errorf("%w: read %d of the %d bytes at %d of a file that shrank under the read", archive.ErrBlobTooShort, n, length, offset)
	}
	if err != nil {
		return nil, err
	}
	return data, nil
}

// Delete removes the blob and then whichever of its parent directories it left empty, so that drained
// agents do not leave directories behind. Deleting a missing blob is not an error.
func (s *Store) Delete(_ context.Context, path string) error {
	name, err := s.file("delete", path, false)
	if err != nil {
		return err
	}
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail("delete", path, err)
	}
	for dir := filepath.Dir(name); dir != s.root && strings.HasPrefix(dir, s.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break // not empty, or already gone: either way, stop climbing
		}
	}
	return nil
}

// List walks the deepest directory the prefix names in full and returns the blob paths under it that
// start with prefix, ascending. Temporary files (names starting with '.') are never listed.
func (s *Store) List(_ context.Context, prefix string) ([]string, error) {
	if _, err := s.file("list", prefix, true); err != nil {
		return nil, err
	}
	dirPart := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dirPart = prefix[:i]
	}
	start := filepath.Join(s.root, filepath.FromSlash(dirPart))
	var paths []string
	err := filepath.WalkDir(start, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // the directory, or one under it, went away during the walk
			}
			return err
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() && name != start {
				return fs.SkipDir
			}
			if !d.IsDir() {
				return nil
			}
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(s.root, name)
		if err != nil {
			return err
		}
		if p := filepath.ToSlash(rel); strings.HasPrefix(p, prefix) {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, fail("list", prefix, err)
	}
	slices.Sort(paths)
	return paths, nil
}

// Close marks the store closed; files stay on disk.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}
