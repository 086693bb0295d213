// Package multisqlite is an indexedstorage.Storage that keeps every index in a SQLite file of its own,
// placed by the index's bucket (DESIGN §11) and named by its key, and removes a file once a drop or a
// delete has emptied it:
//
//	<dir>/ns-<escaped namespace>/<bucket>/k<escaped rest of the key>.db   key "<bucket>/<rest>"
//	<dir>/ns-<escaped namespace>/other/k<escaped key>.db                    any other key
//
// <bucket> is the four hex digits of the key's bucket prefix (indexedstorage.BucketPrefix). A name
// that would exceed 255 bytes is "h", the hex SHA-256 of namespace NUL key, and ".db" instead, in the
// same directory. docs/multisqlite.md has the exact escaping.
//
// Each file has the sqlite backend's schema and holds the rows of its one index, so every per-index
// operation is the sqlite backend's on that file, with its atomicity: both run the one engine of
// backends/internal/sqlitefile, multi-SQLite on one connection per file. Reads of a missing index never
// create a file; only writes do.
//
// A blob layer's index namespace ("<mode>/blobindex/<level>", Shared) is the exception: its indexes,
// one row an archived agent, all live in one file, <dir>/ns-<escaped namespace>/shared.db, which the
// sqlite backend serves and which is never removed (shared.go).
//
// A file emptied by DropPrefix or Delete is removed, and its directory with it when that was the
// directory's last file, by a protocol that never loses an append racing the removal, within the
// process or from another process sharing the directory: flock(2) on the file's directory, shared
// for every operation and exclusive for the remover, who checks again under it that the file holds no
// row; and a check, under the shared lock, that the path still names the file a connection has open
// (lock.go; docs/multisqlite.md states it for foreign writers). A namespace thus holds the files of
// its live indexes only.
//
// ScanStable visits the directories of the buckets its range can hold keys of (indexedstorage
// .RangeBuckets) and "other", and learns each key from its file's name: a walk opens no file but the
// few whose keys were too long to name them (and reads their keys from them). A page visits count
// files at most and resumes after the last one (a FileResume of "<dir>/<name>"). The namespace
// directory's listing (its directories) is cached, dropped when this process makes or removes a
// directory, and read again after ListingTTL; each visited directory is listed afresh. Open files sit
// in a bounded LRU.
//
// A file this backend cannot read (not a database, truncated, a schema it does not know, locked by
// another process) fails the operations on its index, never the walk: a walk that has to open it lists
// it in the page's Unreadable and goes on; a walk that learns its key from its name hands the key back,
// and reads of it then fail. Files of the layout before buckets (a hex SHA-256 and ".db" directly in
// the namespace directory) are not read: every walk from the start lists each in Unreadable. Nothing
// here rewrites a file it cannot read.
package multisqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/stratalog/strata/backends/internal/sqlitefile"
	is "github.com/stratalog/strata/indexedstorage"
)

// Defaults for Options.
const (
	// DefaultMaxOpenFiles bounds the open files (each a connection with its own page cache and three
	// descriptors: the database, its WAL and its shared-memory index). Opening a file is most of what
	// an operation on it costs, and a sweep tick sights up to max_archives_per_tick (256) agents
	// before it reads and drops them in batches of 128: 512 keeps each file open from the sight to
	// its removal (one open instead of three), with room left for the invocation path's recent
	// agents, at about 1,500 descriptors (Go raises the soft RLIMIT_NOFILE to the hard one at start).
	DefaultMaxOpenFiles = 512
	// DefaultListingTTL is the backstop after which a cached directory listing is read again even
	// though this process created nothing: it bounds how long a file made by another process can go
	// unseen by a walk.
	DefaultListingTTL = 10 * time.Second
)

// Options configures New. A nil *Options is the zero Options, and a zero field means its default.
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
	// MustExist makes New fail with an error matching fs.ErrNotExist, creating nothing, when the
	// directory does not exist. (Reads never create a file; writes still do.)
	MustExist bool
	// ReadOnly opens the store for a reader that must change nothing (strata scan, strata inspect):
	// the directory must exist (as with MustExist), each file is opened with sqlite's ReadOnly (no
	// -wal or -shm created, no migration), no file or directory is created or removed (a read that
	// finds an index empty leaves its file), and writes fail with ErrInvalidArgument. The directory
	// locks it takes are shared ones.
	ReadOnly bool
	// OnList, if set, is called every time a namespace's directory is listed (a test hook).
	OnList func(ns string)
}

// Store is the multi-file SQLite backend. It is safe for concurrent use.
type Store struct {
	dir      string
	pool     *pool
	listings *listings
	dirLocks dirLocks
	busy     time.Duration // how long an operation waits for a directory's shared lock
	readOnly bool
	closed   atomic.Bool
	removed  atomic.Int64

	// shared holds the stores of the namespaces kept in one file (shared.go).
	shared sharedFiles
	// shareAll keeps every namespace in one file (tests only: the suite runs against the shared layout).
	shareAll bool

	// unsafeNoLock takes the removal protocol's locks out (tests only: it shows what they prevent).
	unsafeNoLock bool
	// hooks, set by tests only, run at the protocol's steps.
	hooks hooks
}

// hooks are test hooks; nil ones are skipped.
type hooks struct {
	// now, when set, is the clock a walk's change stamps measure a file's settling by (time.Now).
	now func() time.Time
	// dropRemoving runs when a drop found the file holding only the rows it drops, before the removal
	// that drops them with the file takes the exclusive lock.
	dropRemoving func(ns, key string)
	// locking runs when an operation or a remover is about to take a directory's lock (after the
	// in-process mutex, before flock).
	locking func(ns, dir string, exclusive bool)
	// checked runs in a per-index operation under the directory's shared lock, once the connection is
	// known to be on the file the path names, before the operation itself.
	checked func(op is.Operation, ns, key string)
	// removing runs when a drop has emptied a file, before the remover takes the exclusive lock.
	removing func(ns, key string)
	// unlinking runs under the exclusive lock once the file was found empty, before it is unlinked.
	unlinking func(ns, key string)
	// removalStep runs as a removal (lock.go) completes each step.
	removalStep func(step removalStep)
}

var (
	_ is.Storage           = (*Store)(nil)
	_ is.ClosestLastReader = (*Store)(nil)
	_ is.BatchReader       = (*Store)(nil)
	_ is.BatchDropper      = (*Store)(nil)
	_ is.BatchAppender     = (*Store)(nil)
)

// Stats is a snapshot of a Store's counters.
type Stats struct {
	OpenFiles    int   // files open now
	Listings     int64 // namespace directory listings made since Open
	FilesOpened  int64 // files opened since Open (a file opened again after eviction counts again)
	FilesRemoved int64 // emptied files removed since Open
}

// New opens the store rooted at dir, creating the directory if needed. A nil opts is the zero Options.
// It reads nothing from the files, so ctx goes unused: each file is opened (and migrated) under the
// context of the first operation that needs it.
func New(_ context.Context, dir string, options *Options) (*Store, error) {
	var opts Options
	if options != nil {
		opts = *options
	}
	if dir == "" {
		return nil, fmt.Errorf("multisqlite: open: %w: empty directory", is.ErrInvalidArgument)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("multisqlite: open %s: %w", dir, err)
	}
	if opts.MustExist || opts.ReadOnly {
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
	busy := opts.BusyTimeout
	if busy <= 0 {
		busy = sqlitefile.DefaultBusyTimeout
	}
	s := &Store{dir: abs, listings: newListings(ttl, opts.OnList), busy: busy, readOnly: opts.ReadOnly}
	s.pool = newPool(maxOpen, sqlitefile.Options{
		BusyTimeout:      opts.BusyTimeout,
		SingleConnection: true, // a file is one connection: the pool counts descriptors
		// A file of this store that holds someone else's tables is damaged, not blank: never migrate it.
		RefuseForeignTables: true,
		// Closing a connection to a removed file must not unlink, by path, the -wal and -shm of a file
		// created since under its name (lock.go).
		PersistWAL: true,
		ReadOnly:   opts.ReadOnly,
	})
	return s, nil
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{OpenFiles: s.pool.openFiles(), Listings: s.listings.made(), FilesOpened: s.pool.openings.Load(),
		FilesRemoved: s.removed.Load()}
}

// Dir returns the store's root directory.
func (s *Store) Dir() string { return s.dir }

// NamespaceDir returns the directory that holds ns's files.
func (s *Store) NamespaceDir(ns string) string { return filepath.Join(s.dir, dirName(ns)) }

// BucketDir returns the directory that holds the files of ns's keys in bucket b (0 ≤ b < Buckets).
func (s *Store) BucketDir(ns string, b int) string {
	return filepath.Join(s.NamespaceDir(ns), bucketDir(b))
}

// FilePath returns where the file of the index (ns, key) is, or would be (docs/multisqlite.md).
func (s *Store) FilePath(ns, key string) string { return s.filePath(ns, key) }

// filePath is where the file of (ns, key) is, or would be.
func (s *Store) filePath(ns, key string) string {
	return s.path(ns, locate(ns, key))
}

func (s *Store) path(ns string, loc location) string {
	return filepath.Join(s.NamespaceDir(ns), loc.dir, loc.name)
}

// Capabilities: a walk visits each file once and a key has one file, so keys are unique; they come
// back in the order of their files' names, not of the keys.
func (s *Store) Capabilities() is.Capabilities { return is.Capabilities{UniqueScan: true} }

// Close closes the open files (a file in use is closed when its operation finishes). Later calls
// return ErrClosed; Close itself is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if err := errors.Join(s.pool.close(), s.closeShared()); err != nil {
		return fmt.Errorf("multisqlite: close: %w", err)
	}
	return nil
}

// index runs fn on the file of (ns, key) after validation, under the shared lock of the file's
// directory and on a connection to the file the path names now. Without create, a missing file is a
// missing index: fn is not called and found is false. Every error, fn's (its engine's, classified)
// and a file's that cannot be opened or locked, goes through fail.
func (s *Store) index(ctx context.Context, op is.Operation, ns, key string, create bool, fn func(f *sqlitefile.Engine) error) (found bool, err error) {
	if err := is.ValidateIndex(ns, key); err != nil {
		return false, fail(op, ns, key, err)
	}
	if s.closed.Load() {
		return false, fail(op, ns, key, is.ErrClosed)
	}
	loc := locate(ns, key)
	found, err = s.withFile(ctx, ns, loc, create, func(c *conn) error {
		if s.hooks.checked != nil {
			s.hooks.checked(op, ns, key)
		}
		return fn(c.eng)
	})
	return found, fail(op, ns, key, err)
}

// backendName names this backend in its errors.
const backendName = "multisqlite"

// fail is the one place an operation's error takes its shape: an is.OpError naming this backend, the
// operation (as metrics name it) and the index. An engine's error reaches it classified (withFile). A
// nil err returns nil.
func fail(op is.Operation, ns, key string, err error) error {
	return is.NewOpError(backendName, op, ns, key, err)
}

// withFile runs fn on a connection to the file at loc under its directory's shared lock (see lock.go):
// the connection is on the file the path names, and no remover can unlink it until fn returns. found is
// false, and fn is not called, when the file does not exist and create is not set. fn's error, the
// file engine's, comes back classified.
func (s *Store) withFile(ctx context.Context, ns string, loc location, create bool, fn func(c *conn) error) (found bool, err error) {
	lk, err := s.lockDir(ctx, ns, loc.dir, false, create, s.busy)
	if err != nil || lk == nil {
		return false, err
	}
	defer lk.unlock()
	c, err := s.current(ctx, s.path(ns, loc), create)
	if err != nil || c == nil {
		return false, err
	}
	defer s.pool.release(c)
	if err := c.eng.Classify(fn(c)); err != nil {
		// The schema-check cache trusts a file only while its operations succeed (pool.go).
		s.pool.forgetChecked(c.path)
		if s.readOnly && is.IsTransient(err) {
			// A file read as immutable that a writer has touched since fails every read (sqlitefile's
			// ReadOnly): the next operation opens it afresh.
			s.pool.discard(c)
		}
		return true, err
	}
	return true, nil
}

// current returns a connection to the file path names now, opening (or, with create, creating) it if
// needed; nil when the file does not exist and create is not set. The caller holds the directory's
// lock. A pooled connection whose file was removed (and maybe created again) since it was opened is
// discarded: an operation on it would read a file that no longer has a name, or write to one.
func (s *Store) current(ctx context.Context, path string, create bool) (*conn, error) {
	for {
		c, err := s.pool.acquire(ctx, path, create)
		if err != nil || c == nil {
			return nil, err
		}
		now, err := os.Stat(path)
		switch {
		case err == nil && os.SameFile(now, c.id):
			return c, nil
		case err == nil || errors.Is(err, fs.ErrNotExist):
			s.pool.discard(c)
			s.pool.release(c)
			if err != nil && !create {
				return nil, nil
			}
		default:
			s.pool.release(c)
			return nil, err
		}
	}
}

// tidy removes the file of (ns, key) if a read found the index empty: a file a drop could not remove
// (its lock was busy) or a writer left empty (it died before its first commit). It does not wait for
// the lock, and a failure changes nothing.
func (s *Store) tidy(ctx context.Context, found, empty bool, ns, key string) {
	if found && empty && !s.readOnly && !s.closed.Load() {
		_ = s.remove(ctx, ns, key, 0)
	}
}

func (s *Store) Exists(ctx context.Context, ns, key string) (exists bool, err error) {
	if routed, err := s.onShared(ctx, is.OpExists, ns, key, reads, func(st sharedIndexes) (err error) {
		exists, err = st.Exists(ctx, ns, key)
		return err
	}); routed {
		return exists, err
	}
	found, err := s.index(ctx, is.OpExists, ns, key, false, func(f *sqlitefile.Engine) (err error) {
		exists, err = f.Exists(ctx, ns, key)
		return err
	})
	s.tidy(ctx, found, err == nil && !exists, ns, key)
	return exists, err
}

func (s *Store) Append(ctx context.Context, ns, key string, id uint64, value []byte) error {
	return s.appendEntries(ctx, is.OpAppend, ns, is.KeyEntries{Key: key, Entries: []is.Entry{{ID: id, Value: value}}})
}

// AppendMany validates the whole batch before the file is created, so a rejected call creates nothing.
func (s *Store) AppendMany(ctx context.Context, ns, key string, entries []is.Entry) error {
	return s.appendEntries(ctx, is.OpAppendMany, ns, is.KeyEntries{Key: key, Entries: entries})
}

// appendEntries is one index's append, with r.Below's condition where set (AppendKeys's parts). It
// creates the file if needed and commits the entries under one shared lock of its directory, so that
// no remover ever finds it empty in between.
func (s *Store) appendEntries(ctx context.Context, op is.Operation, ns string, r is.KeyEntries) error {
	key, entries := r.Key, r.Entries
	if err := is.ValidateIndex(ns, key); err != nil {
		return fail(op, ns, key, err)
	}
	if err := is.ValidateBatch(entries); err != nil {
		return fail(op, ns, key, err)
	}
	if s.readOnly {
		return fail(op, ns, key, fmt.Errorf("%w: the store was opened read-only", is.ErrInvalidArgument))
	}
	if len(entries) == 0 {
		if s.closed.Load() {
			return fail(op, ns, key, is.ErrClosed)
		}
		return nil
	}
	if routed, err := s.onShared(ctx, op, ns, key, creates, func(st sharedIndexes) error {
		if r.Below == 0 {
			return st.AppendMany(ctx, ns, key, entries)
		}
		errs, err := st.AppendKeys(ctx, ns, []is.KeyEntries{r})
		if err != nil {
			return err
		}
		return errs[0]
	}); routed {
		return err
	}
	empty := false
	found, err := s.index(ctx, op, ns, key, true, func(f *sqlitefile.Engine) error {
		err := f.AppendKey(ctx, ns, r)
		if err != nil {
			// A failed first append leaves a file created for nothing.
			empty, _ = f.Empty(ctx)
		}
		return err
	})
	s.tidy(ctx, found, empty, ns, key)
	return err
}

func (s *Store) Length(ctx context.Context, ns, key string) (n uint64, err error) {
	if routed, err := s.onShared(ctx, is.OpLength, ns, key, reads, func(st sharedIndexes) (err error) {
		n, err = st.Length(ctx, ns, key)
		return err
	}); routed {
		return n, err
	}
	found, err := s.index(ctx, is.OpLength, ns, key, false, func(f *sqlitefile.Engine) (err error) {
		n, err = f.Length(ctx, ns, key)
		return err
	})
	s.tidy(ctx, found, err == nil && n == 0, ns, key)
	return n, err
}

func (s *Store) Read(ctx context.Context, ns, key string, from, to uint64) (out []is.Entry, err error) {
	if routed, err := s.onShared(ctx, is.OpRead, ns, key, reads, func(st sharedIndexes) (err error) {
		out, err = st.Read(ctx, ns, key, from, to)
		return err
	}); routed {
		return out, err
	}
	_, err = s.index(ctx, is.OpRead, ns, key, false, func(f *sqlitefile.Engine) (err error) {
		out, err = f.Read(ctx, ns, key, from, to)
		return err
	})
	return out, err
}

func (s *Store) First(ctx context.Context, ns, key string) (e is.Entry, ok bool, err error) {
	if routed, err := s.onShared(ctx, is.OpFirst, ns, key, reads, func(st sharedIndexes) (err error) {
		e, ok, err = st.First(ctx, ns, key)
		return err
	}); routed {
		return e, ok, err
	}
	found, err := s.index(ctx, is.OpFirst, ns, key, false, func(f *sqlitefile.Engine) (err error) {
		e, ok, err = f.First(ctx, ns, key)
		return err
	})
	s.tidy(ctx, found, err == nil && !ok, ns, key)
	return e, ok, err
}

func (s *Store) Last(ctx context.Context, ns, key string) (e is.Entry, ok bool, err error) {
	if routed, err := s.onShared(ctx, is.OpLast, ns, key, reads, func(st sharedIndexes) (err error) {
		e, ok, err = st.Last(ctx, ns, key)
		return err
	}); routed {
		return e, ok, err
	}
	found, err := s.index(ctx, is.OpLast, ns, key, false, func(f *sqlitefile.Engine) (err error) {
		e, ok, err = f.Last(ctx, ns, key)
		return err
	})
	s.tidy(ctx, found, err == nil && !ok, ns, key)
	return e, ok, err
}

func (s *Store) LastID(ctx context.Context, ns, key string) (id uint64, ok bool, err error) {
	if routed, err := s.onShared(ctx, is.OpLastID, ns, key, reads, func(st sharedIndexes) (err error) {
		id, ok, err = st.LastID(ctx, ns, key)
		return err
	}); routed {
		return id, ok, err
	}
	found, err := s.index(ctx, is.OpLastID, ns, key, false, func(f *sqlitefile.Engine) (err error) {
		id, ok, err = f.LastID(ctx, ns, key)
		return err
	})
	s.tidy(ctx, found, err == nil && !ok, ns, key)
	return id, ok, err
}

func (s *Store) Closest(ctx context.Context, ns, key string, id uint64) (e is.Entry, ok bool, err error) {
	if routed, err := s.onShared(ctx, is.OpClosest, ns, key, reads, func(st sharedIndexes) (err error) {
		e, ok, err = st.Closest(ctx, ns, key, id)
		return err
	}); routed {
		return e, ok, err
	}
	_, err = s.index(ctx, is.OpClosest, ns, key, false, func(f *sqlitefile.Engine) (err error) {
		e, ok, err = f.Closest(ctx, ns, key, id)
		return err
	})
	return e, ok, err
}

// ClosestLast reads the index's file once (is.ClosestLastReader).
func (s *Store) ClosestLast(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, uint64, bool, error) {
	r := s.closestLast(ctx, is.OpClosestLast, ns, key, id)
	return r.Entry, r.Found, r.Last, r.Exists, r.Err
}

// closestLast is ClosestLast as operation op: one statement on the index's file, so of one state of it.
func (s *Store) closestLast(ctx context.Context, op is.Operation, ns, key string, id uint64) (r is.ClosestLastResult) {
	if routed, err := s.onShared(ctx, op, ns, key, reads, func(st sharedIndexes) (err error) {
		r.Entry, r.Found, r.Last, r.Exists, err = st.ClosestLast(ctx, ns, key, id)
		return err
	}); routed {
		if err != nil {
			return is.ClosestLastResult{Err: err}
		}
		return r
	}
	ok, err := s.index(ctx, op, ns, key, false, func(f *sqlitefile.Engine) (err error) {
		r.Entry, r.Found, r.Last, r.Exists, err = f.ClosestLast(ctx, ns, key, id)
		return err
	})
	if err != nil {
		return is.ClosestLastResult{Err: err}
	}
	s.tidy(ctx, ok, !r.Exists, ns, key)
	return r
}

// DropPrefix drops the entries up to upTo; a file it leaves without rows is removed before it returns
// (see lock.go), so that the index no longer exists anywhere: no walk that starts afterwards meets it.
func (s *Store) DropPrefix(ctx context.Context, ns, key string, upTo uint64) (n uint64, err error) {
	r := s.dropPrefix(ctx, is.OpDropPrefix, ns, key, upTo)
	return r.Dropped, r.Err
}

// dropPrefix is DropPrefix as operation op. A failure to remove the emptied file keeps the count: the
// entries are gone.
func (s *Store) dropPrefix(ctx context.Context, op is.Operation, ns, key string, upTo uint64) (r is.DropResult) {
	if routed, err := s.onShared(ctx, op, ns, key, modifies, func(st sharedIndexes) (err error) {
		r.Dropped, err = st.DropPrefix(ctx, ns, key, upTo)
		return err
	}); routed {
		if err != nil {
			return is.DropResult{Err: err}
		}
		return r
	}
	return s.drop(ctx, op, ns, key, upTo, true)
}

// drop is dropPrefix on the index's own file. look says to look first whether the drop would leave the
// file without rows, and if so to drop by removing it (dropRemoving).
func (s *Store) drop(ctx context.Context, op is.Operation, ns, key string, upTo uint64, look bool) (r is.DropResult) {
	empty, whole := false, false
	found, err := s.index(ctx, op, ns, key, false, func(f *sqlitefile.Engine) (err error) {
		if look && upTo > 0 && !s.readOnly {
			if whole, err = f.OnlyPrefix(ctx, ns, key, upTo); err != nil || whole {
				return err
			}
		}
		if r.Dropped, err = f.DropPrefix(ctx, ns, key, upTo); err != nil {
			return err
		}
		empty, err = f.Empty(ctx)
		return err
	})
	switch {
	case err != nil || !found:
		r.Err = err
		return r
	case whole:
		return s.dropRemoving(ctx, op, ns, key, upTo)
	case !empty:
		return r
	}
	if err := s.remove(ctx, ns, key, removalPatience); err != nil {
		r.Err = fail(op, ns, key, fmt.Errorf("the index is empty, its file stays: %w", err))
	}
	return r
}

// dropRemoving is a drop whose look (under the shared lock) found the file holding nothing but the
// rows it drops: it removes the file with them, by a removal that drops (see findEmpty), so that no
// delete is written, nor copied into the file by the checkpoint of its close, for a file about to go.
// If the exclusive lock stays busy (another process is using the directory), it drops as any drop does.
func (s *Store) dropRemoving(ctx context.Context, op is.Operation, ns, key string, upTo uint64) is.DropResult {
	if s.hooks.dropRemoving != nil {
		s.hooks.dropRemoving(ns, key)
	}
	rm := s.newRemoval(ns, key)
	rm.upTo = upTo
	err := func() error {
		defer rm.release()
		held, err := rm.lockExclusively(context.WithoutCancel(ctx), removalPatience)
		if !held || err != nil {
			return err
		}
		if empty, err := rm.findEmpty(context.WithoutCancel(ctx)); !empty || err != nil {
			return err
		}
		if err := rm.unlink(); err != nil {
			return err
		}
		rm.deleted = true
		return rm.removeDirIfEmpty()
	}()
	switch {
	case rm.done == removalStarted && err == nil:
		// The lock stayed busy, or the directory went: nothing was dropped here.
		return s.drop(ctx, op, ns, key, upTo, false)
	case err != nil && !rm.deleted:
		return is.DropResult{Err: fail(op, ns, key, err)}
	case err != nil:
		return is.DropResult{Dropped: rm.dropped, Err: fail(op, ns, key, fmt.Errorf("the rows are dropped, the file stays: %w", err))}
	}
	return is.DropResult{Dropped: rm.dropped}
}

// batchConcurrency is how many files of one batch are worked on at once: each key of a batch is a file
// of its own (its own lock, connection and commit), so a batch is per-file work, and the files' reads,
// fsyncs and lock waits overlap as the per-key calls of the sweep's archive phase did
// (sweep.max_concurrency, default 4), without more connections open at once than the pool's bound
// is meant to hold.
const batchConcurrency = 4

// eachKey runs fn(i) for every key of a batch of n, at most batchConcurrency at once, and returns when
// all have.
func eachKey(n int, fn func(i int)) {
	workers := min(n, batchConcurrency)
	if workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// untried is why a key of a batch is not tried, when the caller has given up: the keys after a
// cancellation fail at once rather than each open its file (a file's open does not stop for ctx).
func untried(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		classified, _ := is.ClassifyCommon(err)
		return classified
	}
	return nil
}

// beginBatch validates a batch and checks the store is open; its error names the namespace, no key.
func (s *Store) beginBatch(op is.Operation, ns string, reqs []is.KeyID) error {
	if err := is.ValidateBatchKeys(ns, reqs); err != nil {
		return fail(op, ns, "", err)
	}
	if s.closed.Load() {
		return fail(op, ns, "", is.ErrClosed)
	}
	return nil
}

// ClosestLastMany is ClosestLast of each key, each a file of its own read once under its directory's
// shared lock, a few files at once (is.BatchReader). A file that cannot be opened or read fails its
// key only; so does the store's closing or the caller's cancellation midway, key by key.
func (s *Store) ClosestLastMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.ClosestLastResult, error) {
	var out []is.ClosestLastResult
	if routed, err := s.onShared(ctx, is.OpClosestLastMany, ns, "", reads, func(st sharedIndexes) (err error) {
		out, err = st.ClosestLastMany(ctx, ns, reqs)
		return err
	}); routed {
		relabelEach(is.OpClosestLastMany, out, func(r *is.ClosestLastResult) *error { return &r.Err })
		return out, err
	}
	if err := s.beginBatch(is.OpClosestLastMany, ns, reqs); err != nil {
		return nil, err
	}
	out = make([]is.ClosestLastResult, len(reqs))
	eachKey(len(reqs), func(i int) {
		if err := untried(ctx); err != nil {
			out[i].Err = fail(is.OpClosestLastMany, ns, reqs[i].Key, err)
			return
		}
		out[i] = s.closestLast(ctx, is.OpClosestLastMany, ns, reqs[i].Key, reqs[i].ID)
	})
	return out, nil
}

// DropPrefixMany is DropPrefix of each key, a few files at once (is.BatchDropper): each key's drop is
// its own file's transaction, and a file it empties is removed by the removal protocol before the call
// returns. One key's failure is its own.
func (s *Store) DropPrefixMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.DropResult, error) {
	var out []is.DropResult
	if routed, err := s.onShared(ctx, is.OpDropPrefixMany, ns, "", modifies, func(st sharedIndexes) (err error) {
		out, err = st.DropPrefixMany(ctx, ns, reqs)
		return err
	}); routed {
		relabelEach(is.OpDropPrefixMany, out, func(r *is.DropResult) *error { return &r.Err })
		return out, err
	}
	if err := s.beginBatch(is.OpDropPrefixMany, ns, reqs); err != nil {
		return nil, err
	}
	if s.readOnly {
		return nil, fail(is.OpDropPrefixMany, ns, "", fmt.Errorf("%w: the store was opened read-only", is.ErrInvalidArgument))
	}
	out = make([]is.DropResult, len(reqs))
	eachKey(len(reqs), func(i int) {
		if err := untried(ctx); err != nil {
			out[i].Err = fail(is.OpDropPrefixMany, ns, reqs[i].Key, err)
			return
		}
		out[i] = s.dropPrefix(ctx, is.OpDropPrefixMany, ns, reqs[i].Key, reqs[i].ID)
		if out[i].Err != nil {
			out[i].Dropped = 0 // as the per-key fallback: a failed part counts nothing
		}
	})
	return out, nil
}

// AppendKeys is AppendMany of each key, a few files at once (is.BatchAppender): each key's part is
// its own file's transaction, created if needed and committed under its directory's shared lock as
// AppendMany's is. One key's failure (a conflict, a file that cannot be opened or read) is its own.
func (s *Store) AppendKeys(ctx context.Context, ns string, reqs []is.KeyEntries) ([]error, error) {
	const op = is.OpAppendKeys
	if err := is.ValidateAppendKeys(ns, reqs); err != nil {
		return nil, fail(op, ns, "", err)
	}
	if s.closed.Load() {
		return nil, fail(op, ns, "", is.ErrClosed)
	}
	if s.readOnly {
		return nil, fail(op, ns, "", fmt.Errorf("%w: the store was opened read-only", is.ErrInvalidArgument))
	}
	var out []error
	if routed, err := s.onShared(ctx, op, ns, "", creates, func(st sharedIndexes) (err error) {
		out, err = st.AppendKeys(ctx, ns, reqs)
		return err
	}); routed {
		relabelEach(op, out, func(e *error) *error { return e })
		return out, err
	}
	out = make([]error, len(reqs))
	eachKey(len(reqs), func(i int) {
		if len(reqs[i].Entries) == 0 {
			return // AppendMany of nothing touches nothing: no file is opened or made
		}
		if err := untried(ctx); err != nil {
			out[i] = fail(op, ns, reqs[i].Key, err)
			return
		}
		out[i] = s.appendEntries(ctx, op, ns, reqs[i])
	})
	return out, nil
}

// Delete removes the index's rows and then its file.
func (s *Store) Delete(ctx context.Context, ns, key string) error {
	if routed, err := s.onShared(ctx, is.OpDelete, ns, key, modifies, func(st sharedIndexes) error {
		return st.Delete(ctx, ns, key)
	}); routed {
		return err
	}
	found, err := s.index(ctx, is.OpDelete, ns, key, false, func(f *sqlitefile.Engine) error {
		return f.Delete(ctx, ns, key)
	})
	if err != nil || !found {
		return err
	}
	if err := s.remove(ctx, ns, key, removalPatience); err != nil {
		return fail(is.OpDelete, ns, key, fmt.Errorf("the index is empty, its file stays: %w", err))
	}
	return nil
}

// errLegacy is the Unreadable error of a file of the layout before buckets.
var errLegacy = errors.New("a file of the layout before buckets (a hash named in the namespace directory), which this build does not read: see docs/multisqlite.md")

// parseResume reads a FileResume this backend minted: "<dir>/<file>".
func parseResume(from is.Resume) (dir, name string, start bool, err error) {
	after, start, err := from.File()
	if err != nil || start {
		return "", "", start, err
	}
	dir, name, ok := strings.Cut(after, "/")
	if !ok || !isDirName(dir) || !isFileName(dir, name) {
		return "", "", false, fmt.Errorf("%w: resume file %q is not one this backend names", is.ErrInvalidArgument, after)
	}
	return dir, name, false, nil
}

// ScanStable visits at most count files a page, directory by directory in name order (the buckets the
// range can hold keys of, then "other"), and hands back the keys in the range: each learnt from its
// file's name, or read from the file when the name is a hash (a long key). It opens no other file. A
// page normally holds at most count keys, fewer when files' keys lie outside the range. Next is the
// last file visited; the next page lists that file's directory again and goes on after it. A file
// created or removed during a walk may or may not be visited, as the contract allows.
//
// A hash-named file whose key cannot be read is listed in the page's Unreadable (Where is its path
// under the store's directory; Key is "") and the page goes on: Next and Done move as if it had been
// read. A failure that is not the file's own (see fileFault) fails the page. A walk from the start
// lists the files of the layout before buckets in its first page's Unreadable too.
//
// Each key comes with its file's change stamp (Page.Stamps; changeStamp): metadata of the file and its
// -wal, two statx calls, no open. A caller that compares two walks' stamps (the sweep's gate) learns
// that an index did not change without opening its file; a file changed within the last second gets
// an empty stamp, which vouches for nothing.
func (s *Store) ScanStable(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	var page is.Page
	if routed, err := s.onShared(ctx, is.OpScanStable, ns, "", reads, func(st sharedIndexes) (err error) {
		page, err = st.ScanStable(ctx, ns, r, from, count)
		return err
	}); routed {
		if err == nil && from.IsStart() {
			page.Unreadable = append(page.Unreadable, s.strayFiles(ns)...)
		}
		return page, err
	}
	if err := is.ValidateScanRange(ns, r, count); err != nil {
		return is.Page{}, fail(is.OpScanStable, ns, "", err)
	}
	afterDir, afterName, start, err := parseResume(from)
	if err != nil {
		return is.Page{}, fail(is.OpScanStable, ns, "", err)
	}
	if s.closed.Load() {
		return is.Page{}, fail(is.OpScanStable, ns, "", is.ErrClosed)
	}
	nsDir := s.NamespaceDir(ns)
	lst, err := s.listings.get(ns, nsDir)
	if err != nil {
		return is.Page{}, fail(is.OpScanStable, ns, "", err)
	}
	if start {
		for _, name := range lst.legacy {
			page.Unreadable = append(page.Unreadable, is.Unreadable{Where: dirName(ns) + "/" + name, Err: errLegacy})
		}
	}
	dirs := dirsInRange(lst.dirs, r)
	if !start {
		dirs = dirs[sort.SearchStrings(dirs, afterDir):]
	}
	visited, last := 0, ""
	now := time.Now()
	if s.hooks.now != nil {
		now = s.hooks.now()
	}
	for _, d := range dirs {
		// A walk that opens no file would not otherwise notice its caller gave up, or a Close.
		if err := ctx.Err(); err != nil {
			return is.Page{}, s.walkFailed(ctx, is.OpScanStable, ns, r.String(), err)
		}
		if s.closed.Load() {
			return is.Page{}, fail(is.OpScanStable, ns, "", is.ErrClosed)
		}
		names, err := readFiles(nsDir, d)
		if err != nil {
			return is.Page{}, s.walkFailed(ctx, is.OpScanStable, ns, r.String(), err)
		}
		if !start && d == afterDir {
			names = names[sort.Search(len(names), func(j int) bool { return names[j] > afterName }):]
		}
		for _, name := range names {
			if visited == count {
				// There is a file after the page's last: the walk goes on from there.
				page.Next = is.FileResume(last)
				return page, nil
			}
			visited++
			last = d + "/" + name
			keys, err := s.fileKeys(ctx, ns, location{dir: d, name: name}, r)
			if err != nil {
				if !fileFault(ctx.Err(), err) {
					return is.Page{}, s.walkFailed(ctx, is.OpScanStable, ns, r.String(), err)
				}
				page.Unreadable = append(page.Unreadable, is.Unreadable{Where: where(ns, last), Err: err})
				continue
			}
			page.Keys = append(page.Keys, keys...)
			if len(keys) > 0 {
				stamp := changeStamp(filepath.Join(nsDir, d, name), now)
				for range keys {
					page.Stamps = append(page.Stamps, stamp)
				}
			}
		}
	}
	page.Done = true
	return page, nil
}

// StampSettle is how long ago a file and its -wal must have last changed for a walk to stamp them
// (is.Page.Stamps; changeStamp) on a file system that records whole seconds: at least its granule, so
// that any later write moves ctime. A file changed more recently is not stamped: the sweep's gate reads
// its index.
const StampSettle = time.Second

// StampSettleFine is StampSettle on a file system whose times carry a fraction of a second: Linux
// stamps them from its coarse clock, whose tick is 1–10 ms, so ten of the longest ticks are enough.
// Most files a walk meets changed longer ago than either; what the finer bound spares is the read of
// a file written in the second before its first sighting (an agent stranded just before a tick).
const StampSettleFine = 100 * time.Millisecond

// stampSettle is how old a change recorded at a ctime with ctimeNsec nanoseconds must be for a stamp to
// vouch for the file. A ctime with nanoseconds comes from a file system that keeps them; one of zero
// may come from one that keeps whole seconds (or fell on the second: the longer bound is then only
// cautious).
func stampSettle(ctimeNsec uint32) time.Duration {
	if ctimeNsec != 0 {
		return StampSettleFine
	}
	return StampSettle
}

// Scan is a positional cursor over the files of the directories the prefix's range visits: cursor is
// how many files earlier calls visited, and each call lists those directories again (Scan is kept for
// parity; ScanStable is the walk). It visits count files a call. Unlike ScanStable, a file it cannot
// read fails the call, naming the file: Scan has no way to say it passed a file over, and skipping one
// silently would hide its key from the caller.
func (s *Store) Scan(ctx context.Context, ns, prefix string, cursor uint64, count int) (uint64, []string, error) {
	var next uint64
	var keys []string
	if routed, err := s.onShared(ctx, is.OpScan, ns, "", reads, func(st sharedIndexes) (err error) {
		next, keys, err = st.Scan(ctx, ns, prefix, cursor, count)
		return err
	}); routed {
		return next, keys, err
	}
	if err := is.ValidateScan(ns, prefix, count); err != nil {
		return 0, nil, fail(is.OpScan, ns, "", err)
	}
	if s.closed.Load() {
		return 0, nil, fail(is.OpScan, ns, "", is.ErrClosed)
	}
	r := is.PrefixRange(prefix)
	nsDir := s.NamespaceDir(ns)
	lst, err := s.listings.get(ns, nsDir)
	if err != nil {
		return 0, nil, fail(is.OpScan, ns, "", err)
	}
	var files []location
	for _, d := range dirsInRange(lst.dirs, r) {
		names, err := readFiles(nsDir, d)
		if err != nil {
			return 0, nil, s.walkFailed(ctx, is.OpScan, ns, fmt.Sprintf("prefix %q", prefix), err)
		}
		for _, name := range names {
			files = append(files, location{dir: d, name: name})
		}
	}
	if cursor >= uint64(len(files)) {
		return 0, nil, nil
	}
	i := int(cursor)
	end := len(files)
	if count < end-i {
		end = i + count
	}
	for _, loc := range files[i:end] {
		found, err := s.fileKeys(ctx, ns, loc, r)
		if err != nil {
			if fileFault(ctx.Err(), err) {
				err = fmt.Errorf("file %s: %w", where(ns, loc.rel()), err)
			}
			return 0, nil, s.walkFailed(ctx, is.OpScan, ns, fmt.Sprintf("prefix %q", prefix), err)
		}
		keys = append(keys, found...)
	}
	if end == len(files) {
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
	return fail(op, ns, "", fmt.Errorf("%s: %w", what, err))
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
func where(ns, rel string) string { return dirName(ns) + "/" + rel }

// fileKeys returns the keys in the range of the file at loc: the key its name stands for, read from
// the name alone, or, for a hash-named file, the keys it holds rows for (its one key, or none), read
// from it under the protocol of lock.go.
func (s *Store) fileKeys(ctx context.Context, ns string, loc location, r is.KeyRange) ([]string, error) {
	if key, known, _ := nameKey(loc.dir, loc.name); known {
		if r.Contains(key) {
			return []string{key}, nil
		}
		return nil, nil
	}
	var keys []string
	_, err := s.withFile(ctx, ns, loc, false, func(c *conn) error {
		for after := ""; ; after = keys[len(keys)-1] {
			page, err := c.eng.ScanStable(ctx, ns, r, after, 8)
			if err != nil {
				return err
			}
			keys = append(keys, page.Keys...)
			if page.Done {
				return nil
			}
		}
	})
	return keys, err
}
