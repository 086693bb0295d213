// Package multisqlite is an indexedstorage.Storage that keeps every index in a SQLite file of its own:
// one file per (namespace, key), named by a hash of the two, in a directory per namespace.
//
//	<dir>/ns-<escaped namespace>/<hex sha256(namespace NUL key)>.db
//
// Each file has the sqlite backend's schema and holds the rows of its one index, so every per-index
// operation is the sqlite backend's on that file, with its atomicity. Reads of a missing index never
// create a file; only writes do. Files are never removed: an emptied index keeps its file, which holds
// no rows, and scans pass over it.
//
// ScanStable walks a namespace's files in name order, count files a page, and resumes after the last
// file it finished (a FileResume). The directory listing is cached per namespace and found again by
// binary search each page, so a full pass over F files costs O(F). Open files sit in a bounded LRU.
package multisqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"time"

	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
)

// Defaults for Options.
const (
	// DefaultMaxOpenFiles bounds the open files (each a connection with its own page cache and three
	// descriptors: the database, its WAL and its shared-memory index). The sweep and the invocation
	// path touch a working set of recent agents; 64 covers that without holding a descriptor per
	// historical file.
	DefaultMaxOpenFiles = 64
	// DefaultListingTTL is the backstop after which a cached directory listing is read again even
	// though this process created nothing: it bounds how long a file made by another process can go
	// unseen by a walk.
	DefaultListingTTL = 10 * time.Second
)

// Options configures Open. The zero value is ready to use.
type Options struct {
	// MaxOpenFiles is how many files stay open at once. A file in use is never closed, so while more
	// than MaxOpenFiles operations run on distinct files the count exceeds it, and falls back as they
	// finish. 0 means DefaultMaxOpenFiles.
	MaxOpenFiles int
	// ListingTTL is how long a namespace's cached listing is trusted when this process has created no
	// file in it. 0 means DefaultListingTTL; a negative value trusts it until this process creates a
	// file.
	ListingTTL time.Duration
	// BusyTimeout is each file's SQLite busy timeout; 0 means sqlite.DefaultBusyTimeout.
	BusyTimeout time.Duration
	// OnList, if set, is called every time a namespace's directory is listed (a test hook).
	OnList func(ns string)
}

// Store is the multi-file SQLite backend. It is safe for concurrent use.
type Store struct {
	dir      string
	pool     *pool
	listings *listings
	closed   atomic.Bool
}

var _ is.Storage = (*Store)(nil)

// Stats is a snapshot of a Store's counters.
type Stats struct {
	OpenFiles   int   // files open now
	Listings    int64 // directory listings made since Open
	FilesOpened int64 // files opened since Open (a file opened again after eviction counts again)
}

// Open opens the store rooted at dir, creating the directory if needed.
func Open(_ context.Context, dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("multisqlite: open: %w: empty directory", is.ErrInvalidArgument)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("multisqlite: open %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("multisqlite: open %s: %w", dir, err)
	}
	maxOpen := opts.MaxOpenFiles
	if maxOpen <= 0 {
		maxOpen = DefaultMaxOpenFiles
	}
	ttl := opts.ListingTTL
	if ttl == 0 {
		ttl = DefaultListingTTL
	}
	s := &Store{dir: abs, listings: newListings(ttl, opts.OnList)}
	s.pool = newPool(maxOpen, sqlite.Options{BusyTimeout: opts.BusyTimeout}, s.listings.drop)
	return s, nil
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{OpenFiles: s.pool.openFiles(), Listings: s.listings.made(), FilesOpened: s.pool.openings.Load()}
}

// Dir returns the store's root directory.
func (s *Store) Dir() string { return s.dir }

// NamespaceDir returns the directory that holds ns's files.
func (s *Store) NamespaceDir(ns string) string { return filepath.Join(s.dir, dirName(ns)) }

// Capabilities: a walk visits each file once and a file holds one key, so keys are unique; they come
// back in the order of their hashes, not of the keys.
func (s *Store) Capabilities() is.Capabilities { return is.Capabilities{UniqueScan: true} }

// Close closes the open files (a file in use is closed when its operation finishes). Later calls
// return ErrClosed; Close itself is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if err := s.pool.close(); err != nil {
		return fmt.Errorf("multisqlite: close: %w", err)
	}
	return nil
}

// index runs fn on the file of (ns, key) after validation. Without create, a missing file is a missing
// index: fn is not called and found is false.
func (s *Store) index(ctx context.Context, ns, key string, create bool, fn func(st *sqlite.Store) error) (found bool, err error) {
	if err := is.ValidateIndex(ns, key); err != nil {
		return false, err
	}
	if s.closed.Load() {
		return false, is.ErrClosed
	}
	c, err := s.pool.acquire(ctx, ns, filepath.Join(s.NamespaceDir(ns), fileName(ns, key)), create)
	if err != nil || c == nil {
		return false, err
	}
	defer s.pool.release(c)
	return true, fn(c.st)
}

func (s *Store) Exists(ctx context.Context, ns, key string) (exists bool, err error) {
	_, err = s.index(ctx, ns, key, false, func(st *sqlite.Store) (err error) {
		exists, err = st.Exists(ctx, ns, key)
		return err
	})
	return exists, err
}

func (s *Store) Append(ctx context.Context, ns, key string, id uint64, value []byte) error {
	return s.AppendMany(ctx, ns, key, []is.Entry{{ID: id, Value: value}})
}

// AppendMany validates the whole batch before the file is created, so a rejected call creates nothing.
func (s *Store) AppendMany(ctx context.Context, ns, key string, entries []is.Entry) error {
	if err := is.ValidateIndex(ns, key); err != nil {
		return err
	}
	if err := is.ValidateBatch(entries); err != nil {
		return err
	}
	if len(entries) == 0 {
		if s.closed.Load() {
			return is.ErrClosed
		}
		return nil
	}
	_, err := s.index(ctx, ns, key, true, func(st *sqlite.Store) error {
		return st.AppendMany(ctx, ns, key, entries)
	})
	return err
}

func (s *Store) Length(ctx context.Context, ns, key string) (n uint64, err error) {
	_, err = s.index(ctx, ns, key, false, func(st *sqlite.Store) (err error) {
		n, err = st.Length(ctx, ns, key)
		return err
	})
	return n, err
}

func (s *Store) Read(ctx context.Context, ns, key string, from, to uint64) (out []is.Entry, err error) {
	_, err = s.index(ctx, ns, key, false, func(st *sqlite.Store) (err error) {
		out, err = st.Read(ctx, ns, key, from, to)
		return err
	})
	return out, err
}

func (s *Store) First(ctx context.Context, ns, key string) (is.Entry, bool, error) {
	return s.Closest(ctx, ns, key, 0)
}

func (s *Store) Last(ctx context.Context, ns, key string) (e is.Entry, ok bool, err error) {
	_, err = s.index(ctx, ns, key, false, func(st *sqlite.Store) (err error) {
		e, ok, err = st.Last(ctx, ns, key)
		return err
	})
	return e, ok, err
}

func (s *Store) Closest(ctx context.Context, ns, key string, id uint64) (e is.Entry, ok bool, err error) {
	_, err = s.index(ctx, ns, key, false, func(st *sqlite.Store) (err error) {
		e, ok, err = st.Closest(ctx, ns, key, id)
		return err
	})
	return e, ok, err
}

func (s *Store) DropPrefix(ctx context.Context, ns, key string, upTo uint64) (n uint64, err error) {
	_, err = s.index(ctx, ns, key, false, func(st *sqlite.Store) (err error) {
		n, err = st.DropPrefix(ctx, ns, key, upTo)
		return err
	})
	return n, err
}

// Delete removes the index's rows; its file stays (files are never removed) and scans pass over it.
func (s *Store) Delete(ctx context.Context, ns, key string) error {
	_, err := s.index(ctx, ns, key, false, func(st *sqlite.Store) error {
		return st.Delete(ctx, ns, key)
	})
	return err
}

// ScanStable visits at most count files a page, in name order, and hands back the keys with the prefix
// found in them (a file normally holds one key, so a page normally holds at most count keys; it holds
// fewer when files are emptied or their keys lack the prefix). Next is the last file visited; the next
// page finds its place in the cached listing by binary search, so resuming costs O(log F), not a scan
// of the files before it. A file created after the listing was made may or may not be visited by a
// walk under way, as the contract allows; the listing is dropped when this process creates a file, so
// the next walk sees it.
func (s *Store) ScanStable(ctx context.Context, ns, prefix string, from is.Resume, count int) (is.Page, error) {
	if err := is.ValidateScan(ns, prefix, count); err != nil {
		return is.Page{}, err
	}
	after, start, err := from.File()
	if err != nil {
		return is.Page{}, err
	}
	if !start && !isFileName(after) {
		return is.Page{}, fmt.Errorf("%w: resume file %q is not one this backend names", is.ErrInvalidArgument, after)
	}
	if s.closed.Load() {
		return is.Page{}, is.ErrClosed
	}
	names, err := s.listings.get(ns, s.NamespaceDir(ns))
	if err != nil {
		return is.Page{}, err
	}
	i := 0
	if !start {
		i = sort.Search(len(names), func(j int) bool { return names[j] > after })
	}
	end := len(names)
	if count < end-i {
		end = i + count
	}
	var page is.Page
	for _, name := range names[i:end] {
		keys, err := s.fileKeys(ctx, ns, name, prefix)
		if err != nil {
			return is.Page{}, err
		}
		page.Keys = append(page.Keys, keys...)
	}
	if end == len(names) {
		page.Done = true
	} else {
		page.Next = is.FileResume(names[end-1])
	}
	return page, nil
}

// Scan is a positional cursor over the listing: cursor is how many files earlier calls visited. It
// visits count files a call.
func (s *Store) Scan(ctx context.Context, ns, prefix string, cursor uint64, count int) (uint64, []string, error) {
	if err := is.ValidateScan(ns, prefix, count); err != nil {
		return 0, nil, err
	}
	if s.closed.Load() {
		return 0, nil, is.ErrClosed
	}
	names, err := s.listings.get(ns, s.NamespaceDir(ns))
	if err != nil {
		return 0, nil, err
	}
	if cursor >= uint64(len(names)) {
		return 0, nil, nil
	}
	i := int(cursor)
	end := len(names)
	if count < end-i {
		end = i + count
	}
	var keys []string
	for _, name := range names[i:end] {
		found, err := s.fileKeys(ctx, ns, name, prefix)
		if err != nil {
			return 0, nil, err
		}
		keys = append(keys, found...)
	}
	if end == len(names) {
		return 0, keys, nil
	}
	return uint64(end), keys, nil
}

// fileKeys returns the keys with the prefix that the file holds rows for: its one key, or none once
// the index was emptied.
func (s *Store) fileKeys(ctx context.Context, ns, name, prefix string) ([]string, error) {
	c, err := s.pool.acquire(ctx, ns, filepath.Join(s.NamespaceDir(ns), name), false)
	if err != nil || c == nil {
		return nil, err
	}
	defer s.pool.release(c)
	var keys []string
	for from := (is.Resume{}); ; {
		page, err := c.st.ScanStable(ctx, ns, prefix, from, 8)
		if err != nil {
			return nil, err
		}
		keys = append(keys, page.Keys...)
		if page.Done {
			return keys, nil
		}
		from = page.Next
	}
}
