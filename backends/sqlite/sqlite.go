// Package sqlite is an indexedstorage.Storage in one SQLite file (mattn/go-sqlite3), in WAL mode.
//
// Every index lives in the table index_storage(namespace, key, id, value), whose primary key
// (namespace, key, id) is a WITHOUT ROWID B-tree in byte order (BINARY collation), so a key's entries
// are contiguous and ScanStable seeks to the next key instead of counting positions.
//
// Writes go through one connection whose transactions start with BEGIN IMMEDIATE: the check that an
// id is above the index's last id and the insert take the write lock together, so they are atomic
// against this process's other goroutines and against another process on the same file. Reads use a
// small pool of their own connections, which WAL lets run beside the writer.
//
// The file's engine (connections, schema, queries) is backends/internal/sqlitefile, which the
// multi-SQLite backend shares; this package validates, checks it is open, and shapes the errors.
package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/stratalog/strata/backends/internal/sqlitefile"
	is "github.com/stratalog/strata/indexedstorage"
)

// Defaults for Options.
const (
	// DefaultBusyTimeout bounds how long a statement waits for a lock another connection holds. A
	// write transaction here lasts a few milliseconds, so 5 s only runs out when something is stuck;
	// the caller then gets a transient error to retry rather than an unbounded wait.
	DefaultBusyTimeout = sqlitefile.DefaultBusyTimeout
	// DefaultReaders is the size of the reader pool: WAL readers do not block each other or the
	// writer, and a handful covers the concurrent reads one process makes without holding many file
	// descriptors and page caches.
	DefaultReaders = sqlitefile.DefaultReaders
)

// Options configures New (and NewScheduleStore). A nil *Options is the zero Options, and a zero field
// means its default.
type Options struct {
	// BusyTimeout is how long a statement waits for a lock held by another connection (of this
	// process or another) before failing with an error matching ErrTransient. 0 means
	// DefaultBusyTimeout.
	BusyTimeout time.Duration
	// Readers is the number of connections reads may use at once. 0 means DefaultReaders.
	Readers int
	// MustExist makes New fail with an error matching fs.ErrNotExist, creating nothing, when the file
	// does not exist.
	MustExist bool
	// ReadOnly opens an existing file for reading only, for a command that must change nothing
	// (strata scan, strata inspect): mode=ro, no journal-mode change, no migration, and no -wal or
	// -shm created (a file whose every commit is in the main file is read as immutable, and each read
	// checks afterwards that no writer has touched it since). A file without index_storage fails with
	// an error matching fs.ErrNotExist, one of a schema version newer than this build's with a plain
	// error; writes fail with ErrInvalidArgument. It implies MustExist.
	ReadOnly bool
}

// engineOptions is how Open asks the engine for a file.
func (o Options) engineOptions() sqlitefile.Options {
	return sqlitefile.Options{BusyTimeout: o.BusyTimeout, Readers: o.Readers, MustExist: o.MustExist, ReadOnly: o.ReadOnly}
}

// Store is the SQLite backend. It is safe for concurrent use.
type Store struct {
	eng *sqlitefile.Engine
}

var (
	_ is.Storage           = (*Store)(nil)
	_ is.ClosestLastReader = (*Store)(nil)
	_ is.DeepScanner       = (*Store)(nil)
	_ is.BatchReader       = (*Store)(nil)
	_ is.BatchDropper      = (*Store)(nil)
	_ is.BatchAppender     = (*Store)(nil)
)

// SchemaVersion is the user_version this build writes and reads.
const SchemaVersion = sqlitefile.SchemaVersion

// ErrRowsBreakSchema is returned by New for a file that holds rows of a type or value the current
// schema refuses (written by a foreign writer under an older schema), which the migration will not
// drop and cannot carry over. The file is left as it was; the error names one such row and how many
// there are, and docs/storage-format.md says how to find and repair them.
var ErrRowsBreakSchema = sqlitefile.ErrRowsBreakSchema

// New opens (creating it unless opts.MustExist) the SQLite file at path and brings its schema to the
// current version. A nil opts is the zero Options.
func New(ctx context.Context, path string, options *Options) (*Store, error) {
	var opts Options
	if options != nil {
		opts = *options
	}
	if path == "" {
		return nil, fmt.Errorf("sqlite: open: %w: empty path", is.ErrInvalidArgument)
	}
	eng, err := sqlitefile.Open(ctx, path, opts.engineOptions())
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return &Store{eng: eng}, nil
}

// DB returns the connection pool reads use, for code that talks to the engine directly (the
// benchmark's raw loop). Writing through it bypasses the store's write serialisation.
func (s *Store) DB() *sql.DB { return s.eng.DB() }

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.eng.Path() }

// Capabilities: keyset paging over the primary key hands back each key once, ascending.
func (s *Store) Capabilities() is.Capabilities {
	return is.Capabilities{OrderedScan: true, UniqueScan: true}
}

// Close closes the connections. Later calls return ErrClosed; Close itself is idempotent.
func (s *Store) Close() error {
	if err := s.eng.Close(); err != nil {
		return fmt.Errorf("sqlite: close %s: %w", s.eng.Path(), err)
	}
	return nil
}

// backendName names this backend in its errors.
const backendName = "sqlite"

// fail is the one place an operation's error takes its shape: classified, and named by the operation
// (as metrics name it) and the index, in an is.OpError. A nil err returns nil.
func (s *Store) fail(op is.Operation, ns, key string, err error) error {
	return is.NewOpError(backendName, op, ns, key, s.eng.Classify(err))
}

// failScan is fail for the scans, which name a namespace, not an index: the walk is named by what it
// covers (a prefix, quoted, or a range), when what is not empty.
func (s *Store) failScan(op is.Operation, ns, what string, err error) error {
	if err != nil && what != "" {
		err = fmt.Errorf("%s: %w", what, s.eng.Classify(err))
	}
	return s.fail(op, ns, "", err)
}

// begin validates the index and checks the store is open, the first thing every per-index operation
// does. Its error has been through fail.
func (s *Store) begin(op is.Operation, ns, key string) error {
	if err := is.ValidateIndex(ns, key); err != nil {
		return s.fail(op, ns, key, err)
	}
	if s.eng.Closed() {
		return s.fail(op, ns, key, is.ErrClosed)
	}
	return nil
}

func (s *Store) Exists(ctx context.Context, ns, key string) (bool, error) {
	if err := s.begin(is.OpExists, ns, key); err != nil {
		return false, err
	}
	ok, err := s.eng.Exists(ctx, ns, key)
	return ok, s.fail(is.OpExists, ns, key, err)
}

func (s *Store) Append(ctx context.Context, ns, key string, id uint64, value []byte) error {
	return s.appendEntries(ctx, is.OpAppend, ns, key, []is.Entry{{ID: id, Value: value}})
}

func (s *Store) AppendMany(ctx context.Context, ns, key string, entries []is.Entry) error {
	return s.appendEntries(ctx, is.OpAppendMany, ns, key, entries)
}

func (s *Store) appendEntries(ctx context.Context, op is.Operation, ns, key string, entries []is.Entry) error {
	if err := s.begin(op, ns, key); err != nil {
		return err
	}
	if err := is.ValidateBatch(entries); err != nil {
		return s.fail(op, ns, key, err)
	}
	if len(entries) == 0 {
		return nil
	}
	return s.fail(op, ns, key, s.eng.Append(ctx, ns, key, entries))
}

func (s *Store) Length(ctx context.Context, ns, key string) (uint64, error) {
	if err := s.begin(is.OpLength, ns, key); err != nil {
		return 0, err
	}
	n, err := s.eng.Length(ctx, ns, key)
	return n, s.fail(is.OpLength, ns, key, err)
}

func (s *Store) Read(ctx context.Context, ns, key string, from, to uint64) ([]is.Entry, error) {
	if err := s.begin(is.OpRead, ns, key); err != nil {
		return nil, err
	}
	out, err := s.eng.Read(ctx, ns, key, from, to)
	return out, s.fail(is.OpRead, ns, key, err)
}

func (s *Store) First(ctx context.Context, ns, key string) (is.Entry, bool, error) {
	if err := s.begin(is.OpFirst, ns, key); err != nil {
		return is.Entry{}, false, err
	}
	e, ok, err := s.eng.First(ctx, ns, key)
	return e, ok, s.fail(is.OpFirst, ns, key, err)
}

func (s *Store) Last(ctx context.Context, ns, key string) (is.Entry, bool, error) {
	if err := s.begin(is.OpLast, ns, key); err != nil {
		return is.Entry{}, false, err
	}
	e, ok, err := s.eng.Last(ctx, ns, key)
	return e, ok, s.fail(is.OpLast, ns, key, err)
}

// LastID reads the greatest id from the primary key's B-tree alone (one seek); the value is never read.
func (s *Store) LastID(ctx context.Context, ns, key string) (uint64, bool, error) {
	if err := s.begin(is.OpLastID, ns, key); err != nil {
		return 0, false, err
	}
	id, ok, err := s.eng.LastID(ctx, ns, key)
	return id, ok, s.fail(is.OpLastID, ns, key, err)
}

func (s *Store) Closest(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, error) {
	if err := s.begin(is.OpClosest, ns, key); err != nil {
		return is.Entry{}, false, err
	}
	e, ok, err := s.eng.Closest(ctx, ns, key, id)
	return e, ok, s.fail(is.OpClosest, ns, key, err)
}

// ClosestLast is one statement (is.ClosestLastReader).
func (s *Store) ClosestLast(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, uint64, bool, error) {
	if err := s.begin(is.OpClosestLast, ns, key); err != nil {
		return is.Entry{}, false, 0, false, err
	}
	e, found, last, exists, err := s.eng.ClosestLast(ctx, ns, key, id)
	return e, found, last, exists, s.fail(is.OpClosestLast, ns, key, err)
}

// ClosestLastMany reads every key in one read transaction, one prepared statement for all of them: each
// key's part is of one snapshot of the file (is.BatchReader).
func (s *Store) ClosestLastMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.ClosestLastResult, error) {
	if err := s.beginBatch(is.OpClosestLastMany, ns, reqs); err != nil {
		return nil, err
	}
	out, err := s.eng.ClosestLastMany(ctx, ns, reqs)
	if err != nil {
		return nil, s.fail(is.OpClosestLastMany, ns, "", err)
	}
	for i := range out {
		if out[i].Err != nil {
			out[i].Err = s.fail(is.OpClosestLastMany, ns, reqs[i].Key, out[i].Err)
		}
	}
	return out, nil
}

// DropPrefixMany drops every key's prefix in one write transaction and one commit (is.BatchDropper):
// each key's drop is one statement under the file's write lock, as DropPrefix is.
func (s *Store) DropPrefixMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.DropResult, error) {
	if err := s.beginBatch(is.OpDropPrefixMany, ns, reqs); err != nil {
		return nil, err
	}
	out, err := s.eng.DropPrefixMany(ctx, ns, reqs)
	if err != nil {
		return nil, s.fail(is.OpDropPrefixMany, ns, "", err)
	}
	for i := range out {
		if out[i].Err != nil {
			out[i] = is.DropResult{Err: s.fail(is.OpDropPrefixMany, ns, reqs[i].Key, out[i].Err)}
		}
	}
	return out, nil
}

// AppendKeys appends every key's entries in one write transaction and one commit (is.BatchAppender):
// each key's part is AppendMany's check and insert under the file's write lock, all or nothing on its
// index; a key's conflict or unreadable rows fail that key alone.
func (s *Store) AppendKeys(ctx context.Context, ns string, reqs []is.KeyEntries) ([]error, error) {
	const op = is.OpAppendKeys
	if err := is.ValidateAppendKeys(ns, reqs); err != nil {
		return nil, s.fail(op, ns, "", err)
	}
	if s.eng.Closed() {
		return nil, s.fail(op, ns, "", is.ErrClosed)
	}
	out, err := s.eng.AppendKeys(ctx, ns, reqs)
	if err != nil {
		return nil, s.fail(op, ns, "", err)
	}
	for i := range out {
		if out[i] != nil {
			out[i] = s.fail(op, ns, reqs[i].Key, out[i])
		}
	}
	return out, nil
}

// beginBatch is begin for a batch operation: its errors name the namespace, with no key.
func (s *Store) beginBatch(op is.Operation, ns string, reqs []is.KeyID) error {
	if err := is.ValidateBatchKeys(ns, reqs); err != nil {
		return s.fail(op, ns, "", err)
	}
	if s.eng.Closed() {
		return s.fail(op, ns, "", is.ErrClosed)
	}
	return nil
}

func (s *Store) DropPrefix(ctx context.Context, ns, key string, upTo uint64) (uint64, error) {
	if err := s.begin(is.OpDropPrefix, ns, key); err != nil {
		return 0, err
	}
	n, err := s.eng.DropPrefix(ctx, ns, key, upTo)
	return n, s.fail(is.OpDropPrefix, ns, key, err)
}

func (s *Store) Delete(ctx context.Context, ns, key string) error {
	if err := s.begin(is.OpDelete, ns, key); err != nil {
		return err
	}
	return s.fail(is.OpDelete, ns, key, s.eng.Delete(ctx, ns, key))
}

// ScanStable is keyset paging: each page seeks past the last key of the one before, so keys deleted
// behind the walk shift nothing. Next is a MarkerResume of the page's last key.
func (s *Store) ScanStable(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	return s.scanStable(ctx, s.eng.ScanStable, ns, r, from, count)
}

// ScanDeep is ScanStable with a loose index scan for a page: a page of deep keys costs its keys, not
// their entries (is.DeepScanner).
func (s *Store) ScanDeep(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	return s.scanStable(ctx, s.eng.ScanDeep, ns, r, from, count)
}

// scanStable validates a keyset walk's page and reads it with page.
func (s *Store) scanStable(ctx context.Context, page func(ctx context.Context, ns string, r is.KeyRange, after string, count int) (is.Page, error),
	ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	if err := is.ValidateScanRange(ns, r, count); err != nil {
		return is.Page{}, s.failScan(is.OpScanStable, ns, "", err)
	}
	marker, start, err := from.Marker()
	if err != nil {
		return is.Page{}, s.failScan(is.OpScanStable, ns, "", err)
	}
	if !start {
		if err := is.ValidateKey(marker); err != nil {
			return is.Page{}, s.failScan(is.OpScanStable, ns, "", fmt.Errorf("%w: resume marker is not a key this backend handed back", is.ErrInvalidArgument))
		}
	}
	if s.eng.Closed() {
		return is.Page{}, s.failScan(is.OpScanStable, ns, "", is.ErrClosed)
	}
	p, err := page(ctx, ns, r, marker, count)
	if err != nil {
		return is.Page{}, s.failScan(is.OpScanStable, ns, r.String(), err)
	}
	return p, nil
}

// Scan pages by position (LIMIT … OFFSET): cursor is how many matching keys earlier calls returned.
func (s *Store) Scan(ctx context.Context, ns, prefix string, cursor uint64, count int) (uint64, []string, error) {
	if err := is.ValidateScan(ns, prefix, count); err != nil {
		return 0, nil, s.failScan(is.OpScan, ns, "", err)
	}
	if s.eng.Closed() {
		return 0, nil, s.failScan(is.OpScan, ns, "", is.ErrClosed)
	}
	next, keys, err := s.eng.Scan(ctx, ns, prefix, cursor, count)
	if err != nil {
		return 0, nil, s.failScan(is.OpScan, ns, fmt.Sprintf("prefix %q", prefix), err)
	}
	return next, keys, nil
}
