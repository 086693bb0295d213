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
//
// A file this backend cannot read (not a database, truncated, a schema it does not know, locked by
// another process) fails the operations on its index, never the walk: ScanStable lists it in the
// page's Unreadable and goes on with the next file. Nothing here rewrites such a file.
package multisqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync/atomic"
	"syscall"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

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
	// MustExist makes Open fail with an error matching fs.ErrNotExist, creating nothing, when the
	// directory does not exist. (Reads never create a file; writes still do.)
	MustExist bool
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
	if opts.MustExist {
		if fi, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("multisqlite: open %s: %w", dir, err)
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("multisqlite: open %s: %w: not a directory", dir, is.ErrInvalidArgument)
		}
	} else if err := os.MkdirAll(abs, 0o755); err != nil {
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
	// A file of this store that holds someone else's tables is damaged, not blank: never migrate it.
	fileOpts := sqlite.Options{BusyTimeout: opts.BusyTimeout, RefuseForeignTables: true}
	s.pool = newPool(maxOpen, fileOpts, s.listings.drop)
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

// filePath is where the file of (ns, key) is, or would be.
func (s *Store) filePath(ns, key string) string {
	return filepath.Join(s.NamespaceDir(ns), fileName(ns, key))
}

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
// index: fn is not called and found is false. fn's errors carry the file store's context already; a
// file that cannot be opened gets op and the index here.
func (s *Store) index(ctx context.Context, op is.Operation, ns, key string, create bool, fn func(st *sqlite.Store) error) (found bool, err error) {
	if err := is.ValidateIndex(ns, key); err != nil {
		return false, err
	}
	if s.closed.Load() {
		return false, is.ErrClosed
	}
	c, err := s.pool.acquire(ctx, ns, s.filePath(ns, key), create)
	if err != nil {
		return false, fmt.Errorf("multisqlite %s %s:%q: %w", op, ns, key, err)
	}
	if c == nil {
		return false, nil
	}
	defer s.pool.release(c)
	return true, fn(c.st)
}

func (s *Store) Exists(ctx context.Context, ns, key string) (exists bool, err error) {
	_, err = s.index(ctx, is.OpExists, ns, key, false, func(st *sqlite.Store) (err error) {
		exists, err = st.Exists(ctx, ns, key)
		return err
	})
	return exists, err
}

func (s *Store) Append(ctx context.Context, ns, key string, id uint64, value []byte) error {
	return s.appendEntries(ctx, is.OpAppend, ns, key, []is.Entry{{ID: id, Value: value}})
}

// AppendMany validates the whole batch before the file is created, so a rejected call creates nothing.
func (s *Store) AppendMany(ctx context.Context, ns, key string, entries []is.Entry) error {
	return s.appendEntries(ctx, is.OpAppendMany, ns, key, entries)
}

func (s *Store) appendEntries(ctx context.Context, op is.Operation, ns, key string, entries []is.Entry) error {
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
	_, err := s.index(ctx, op, ns, key, true, func(st *sqlite.Store) error {
		if op == is.OpAppend {
			return st.Append(ctx, ns, key, entries[0].ID, entries[0].Value)
		}
		return st.AppendMany(ctx, ns, key, entries)
	})
	return err
}

func (s *Store) Length(ctx context.Context, ns, key string) (n uint64, err error) {
	_, err = s.index(ctx, is.OpLength, ns, key, false, func(st *sqlite.Store) (err error) {
		n, err = st.Length(ctx, ns, key)
		return err
	})
	return n, err
}

func (s *Store) Read(ctx context.Context, ns, key string, from, to uint64) (out []is.Entry, err error) {
	_, err = s.index(ctx, is.OpRead, ns, key, false, func(st *sqlite.Store) (err error) {
		out, err = st.Read(ctx, ns, key, from, to)
		return err
	})
	return out, err
}

func (s *Store) First(ctx context.Context, ns, key string) (e is.Entry, ok bool, err error) {
	_, err = s.index(ctx, is.OpFirst, ns, key, false, func(st *sqlite.Store) (err error) {
		e, ok, err = st.First(ctx, ns, key)
		return err
	})
	return e, ok, err
}

func (s *Store) Last(ctx context.Context, ns, key string) (e is.Entry, ok bool, err error) {
	_, err = s.index(ctx, is.OpLast, ns, key, false, func(st *sqlite.Store) (err error) {
		e, ok, err = st.Last(ctx, ns, key)
		return err
	})
	return e, ok, err
}

func (s *Store) LastID(ctx context.Context, ns, key string) (id uint64, ok bool, err error) {
	_, err = s.index(ctx, is.OpLastID, ns, key, false, func(st *sqlite.Store) (err error) {
		id, ok, err = st.LastID(ctx, ns, key)
		return err
	})
	return id, ok, err
}

func (s *Store) Closest(ctx context.Context, ns, key string, id uint64) (e is.Entry, ok bool, err error) {
	_, err = s.index(ctx, is.OpClosest, ns, key, false, func(st *sqlite.Store) (err error) {
		e, ok, err = st.Closest(ctx, ns, key, id)
		return err
	})
	return e, ok, err
}

func (s *Store) DropPrefix(ctx context.Context, ns, key string, upTo uint64) (n uint64, err error) {
	_, err = s.index(ctx, is.OpDropPrefix, ns, key, false, func(st *sqlite.Store) (err error) {
		n, err = st.DropPrefix(ctx, ns, key, upTo)
		return err
	})
	return n, err
}

// Delete removes the index's rows; its file stays (files are never removed) and scans pass over it.
func (s *Store) Delete(ctx context.Context, ns, key string) error {
	_, err := s.index(ctx, is.OpDelete, ns, key, false, func(st *sqlite.Store) error {
		return st.Delete(ctx, ns, key)
	})
	return err
}

// ScanStable visits at most count files a page, in name order, and hands back the keys in the range
// found in them (a file normally holds one key, so a page normally holds at most count keys; it holds
// fewer when files are emptied or their keys lie outside the range). Next is the last file visited; the next
// page finds its place in the cached listing by binary search, so resuming costs O(log F), not a scan
// of the files before it. A file created after the listing was made may or may not be visited by a
// walk under way, as the contract allows; the listing is dropped when this process creates a file, so
// the next walk sees it.
//
// A visited file whose keys cannot be read is listed in the page's Unreadable (Where is its path
// under the store's directory; Key is "", the name being a hash) and the page goes on: Next and Done
// move as if it had been read. A failure that is not the file's own (see fileFault) fails the page.
func (s *Store) ScanStable(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	if err := is.ValidateScanRange(ns, r, count); err != nil {
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
		keys, err := s.fileKeys(ctx, ns, name, r)
		if err != nil {
			if !fileFault(ctx.Err(), err) {
				return is.Page{}, s.walkFailed(ctx, is.OpScanStable, ns, r.String(), err)
			}
			page.Unreadable = append(page.Unreadable, is.Unreadable{Where: where(ns, name), Err: err})
			continue
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
// visits count files a call. Unlike ScanStable, a file it cannot read fails the call, naming the file:
// Scan is kept for parity and has no way to say it passed a file over, and skipping one silently would
// hide its key from the caller.
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
		found, err := s.fileKeys(ctx, ns, name, is.PrefixRange(prefix))
		if err != nil {
			if fileFault(ctx.Err(), err) {
				err = fmt.Errorf("file %s: %w", where(ns, name), err)
			}
			return 0, nil, s.walkFailed(ctx, is.OpScan, ns, fmt.Sprintf("prefix %q", prefix), err)
		}
		keys = append(keys, found...)
	}
	if end == len(names) {
		return 0, keys, nil
	}
	return uint64(end), keys, nil
}

// walkFailed is the error of a scan that stops at a file: the caller's own ctx error when it has one
// (an interrupted statement need not say why it stopped), else err.
func (s *Store) walkFailed(ctx context.Context, op is.Operation, ns, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		err, _ = is.ClassifyCommon(ctxErr)
	}
	return fmt.Errorf("multisqlite %s %s %s: %w", op, ns, what, err)
}

// fileFault reports whether err, met reading one file of a walk, is that file's own: it is not a
// database, is truncated, has a schema this build does not know, is locked by another process. The
// walk passes over such a file. What is not the file's own would fail every file alike, and a walk
// that listed them all as unreadable would seem complete having read nothing, so it fails the page:
// the caller's cancellation or deadline (ctxErr, taken from the caller's ctx since an interrupted
// statement need not say why it stopped), a closed store, a process out of descriptors or memory, a
// full disk.
func fileFault(ctxErr, err error) bool {
	if ctxErr != nil || errors.Is(err, is.ErrClosed) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var se sqlite3.Error
	if errors.As(err, &se) &&
		(se.Code == sqlite3.ErrNomem || se.Code == sqlite3.ErrFull || slices.Contains(outOfSomething, se.SystemErrno)) {
		return false
	}
	for _, errno := range outOfSomething {
		if errors.Is(err, errno) {
			return false
		}
	}
	return true
}

// outOfSomething are the system errors of a process or machine out of descriptors, memory or space.
var outOfSomething = []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.ENOSPC}

// where names a file of ns for an operator: its path under the store's directory.
func where(ns, name string) string { return dirName(ns) + "/" + name }

// fileKeys returns the keys in the range that the file holds rows for: its one key, or none once
// the index was emptied.
func (s *Store) fileKeys(ctx context.Context, ns, name string, r is.KeyRange) ([]string, error) {
	c, err := s.pool.acquire(ctx, ns, filepath.Join(s.NamespaceDir(ns), name), false)
	if err != nil || c == nil {
		return nil, err
	}
	defer s.pool.release(c)
	var keys []string
	for from := (is.Resume{}); ; {
		page, err := c.st.ScanStable(ctx, ns, r, from, 8)
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
