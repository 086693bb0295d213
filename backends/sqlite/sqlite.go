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
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	is "github.com/stratalog/strata/indexedstorage"
)

// Defaults for Options.
const (
	// DefaultBusyTimeout bounds how long a statement waits for a lock another connection holds. A
	// write transaction here lasts a few milliseconds, so 5 s only runs out when something is stuck;
	// the caller then gets a transient error to retry rather than an unbounded wait.
	DefaultBusyTimeout = 5 * time.Second
	// DefaultReaders is the size of the reader pool: WAL readers do not block each other or the
	// writer, and a handful covers the concurrent reads one process makes without holding many file
	// descriptors and page caches.
	DefaultReaders = 4
)

// stmtCacheSize is how many prepared statements each connection keeps: every query here is one of a
// fixed few, so they are prepared once per connection.
const stmtCacheSize = 32

// Options configures New (and NewScheduleStore). A nil *Options is the zero Options, and a zero field
// means its default.
type Options struct {
	// BusyTimeout is how long a statement waits for a lock held by another connection (of this
	// process or another) before failing with an error matching ErrTransient. 0 means
	// DefaultBusyTimeout.
	BusyTimeout time.Duration
	// Readers is the number of connections reads may use at once. 0 means DefaultReaders. Ignored
	// with SingleConnection.
	Readers int
	// SingleConnection makes the store hold one connection that serves reads and writes alike, for
	// callers that open many files and count descriptors (multisqlite holds one store per file).
	SingleConnection bool
	// MustExist makes New fail with an error matching fs.ErrNotExist, creating nothing, when the file
	// does not exist.
	MustExist bool
	// RefuseForeignTables makes New fail, creating no table, when the file has no schema version but
	// holds tables other than index_storage: for a caller whose files are its own alone (multisqlite),
	// such a file is someone else's database, not a blank one to migrate into shape.
	RefuseForeignTables bool
	// ReadOnly opens an existing file for reading only, for a command that must change nothing
	// (strata scan, strata inspect): mode=ro, no journal-mode change, no migration, and no -wal or
	// -shm created (readonly.go says how). A file without index_storage fails with an error matching
	// fs.ErrNotExist, one of a schema version newer than this build's with a plain error; writes fail
	// with ErrInvalidArgument. It implies MustExist.
	ReadOnly bool
}

// Store is the SQLite backend. It is safe for concurrent use.
type Store struct {
	path   string
	writer *sql.DB // one connection; transactions BEGIN IMMEDIATE
	reader *sql.DB // the writer itself in single-connection mode

	closed  atomic.Bool
	closeMu sync.Mutex

	readOnly bool
	// unchanged, set for a file read as immutable (readonly.go), fails when a writer has touched the
	// file since the open; every read checks it after reading.
	unchanged func() error
}

var _ is.Storage = (*Store)(nil)

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
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if opts.ReadOnly {
		return openReadOnly(ctx, path, abs, opts)
	}
	if opts.MustExist {
		if _, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
	} else if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		// SQLite creates the file, not its directory; "sqlite:strata-data/strata.db" in a fresh
		// checkout should just work.
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s := &Store{path: abs}
	writer, err := sql.Open("sqlite3", dsn(abs, opts))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	writer.SetConnMaxIdleTime(0)
	s.writer, s.reader = writer, writer
	if err := migrate(ctx, writer, opts.RefuseForeignTables); err != nil {
		writer.Close()
		err, _ := explainOpenFailure(abs, false, classify(err, false))
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if !opts.SingleConnection {
		readers := opts.Readers
		if readers <= 0 {
			readers = DefaultReaders
		}
		reader, err := sql.Open("sqlite3", dsn(abs, opts))
		if err != nil {
			writer.Close()
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
		reader.SetMaxOpenConns(readers)
		reader.SetMaxIdleConns(readers)
		reader.SetConnMaxLifetime(0)
		reader.SetConnMaxIdleTime(0)
		s.reader = reader
	}
	return s, nil
}

// dsn is a file: URI, so that any byte of the path ('?', '#', '%') is escaped rather than parsed.
func dsn(abs string, opts Options) string {
	busy := opts.BusyTimeout
	if busy <= 0 {
		busy = DefaultBusyTimeout
	}
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(busy.Milliseconds(), 10))
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "NORMAL") // in WAL, a power cut may lose the last commits but corrupts nothing
	q.Set("_txlock", "immediate")
	q.Set("_stmt_cache_size", strconv.Itoa(stmtCacheSize))
	if opts.MustExist {
		q.Set("mode", "rw") // sqlite refuses to create the file, even if it vanished since the Stat
	}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}
	return u.String() + "?" + q.Encode()
}

// SchemaVersion is the user_version this build writes and reads.
const SchemaVersion = 2

// A migration takes the schema from one user_version to the next: check, when set, runs first in the
// same transaction and refuses a file the statements cannot carry over intact.
type migration struct {
	check func(ctx context.Context, tx *sql.Tx) error
	sql   string
}

// migrations[v] takes the schema from user_version v to v+1. Append only, raising SchemaVersion with
// it (the array's length makes the compiler hold the two together); never edit one that shipped.
var migrations = [SchemaVersion]migration{
	// BINARY collation (the default) compares keys byte by byte, which is the contract's order. Ids
	// are at most 2^63−1 and fit INTEGER.
	{sql: `CREATE TABLE IF NOT EXISTS index_storage (
		namespace TEXT    NOT NULL,
		key       TEXT    NOT NULL,
		id        INTEGER NOT NULL,
		value     BLOB    NOT NULL,
		PRIMARY KEY (namespace, key, id)
	) WITHOUT ROWID`},
	// The schema refuses what the contract forbids, so that a foreign writer's mistake fails its
	// INSERT instead of leaving a row no read can use (a blob key that never equals any text, a text
	// id that sorts above every integer). The columns are declared without a type: a declared TEXT or
	// INTEGER gives them an affinity, which would quietly turn an integer key 5 into the text '5' and a
	// text id '7' into 7 before the check sees them; without one, the engine stores what was bound and
	// the check refuses anything of the wrong type (STRICT would do it too, but older SQLite libraries
	// a foreign writer may link cannot open a file with a STRICT table at all). SQLite cannot add a
	// constraint to a table, so the table is rebuilt: the copy runs in the migration's transaction,
	// after checkIndexRows has made sure every row fits, so a file is upgraded whole or not at all.
	{check: checkIndexRows, sql: `CREATE TABLE index_storage_v2 (
		namespace NOT NULL CHECK (typeof(namespace) = 'text'),
		key       NOT NULL CHECK (typeof(key) = 'text'),
		id        NOT NULL CHECK (typeof(id) = 'integer' AND id > 0),
		value     BLOB NOT NULL,
		PRIMARY KEY (namespace, key, id)
	) WITHOUT ROWID;
	INSERT INTO index_storage_v2 (namespace, key, id, value) SELECT namespace, key, id, value FROM index_storage;
	DROP TABLE index_storage;
	ALTER TABLE index_storage_v2 RENAME TO index_storage`},
}

// qBadRows finds the rows schema version 2 refuses (NOT NULL held already).
const qBadRows = `SELECT namespace, key, id, typeof(namespace), typeof(key), typeof(id), COUNT(*) OVER ()
	FROM index_storage
	WHERE typeof(namespace) <> 'text' OR typeof(key) <> 'text' OR typeof(id) <> 'integer' OR id <= 0
	LIMIT 1`

// ErrRowsBreakSchema is returned by Open for a file that holds rows of a type or value the current
// schema refuses (written by a foreign writer under an older schema), which the migration will not
// drop and cannot carry over. The file is left as it was; the error names one such row and how many
// there are, and docs/storage-format.md says how to find and repair them.
var ErrRowsBreakSchema = errors.New("rows of index_storage break the schema")

// checkIndexRows refuses to rebuild index_storage while any row would fail the new table's checks:
// the copy would fail on it with a bare "CHECK constraint failed", and dropping it would lose what a
// writer meant to store. The error names the first such row.
func checkIndexRows(ctx context.Context, tx *sql.Tx) error {
	var ns, key, id any
	var nsType, keyType, idType string
	var n int64
	switch err := tx.QueryRowContext(ctx, qBadRows).Scan(&ns, &key, &id, &nsType, &keyType, &idType, &n); {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("%w: %d rows have a namespace or key that is not text, or an id that is not an integer of 1 or more; "+
		"the first is namespace %s (%s), key %s (%s), id %s (%s). Nothing was changed: repair or delete them (docs/storage-format.md), then open again",
		ErrRowsBreakSchema, n, quoteValue(ns), nsType, quoteValue(key), keyType, quoteValue(id), idType)
}

// quoteValue prints a value read back from a row of any type, bounded, for an error message.
func quoteValue(v any) string {
	var s string
	switch v := v.(type) {
	case []byte:
		s = fmt.Sprintf("x'%x'", v)
	case string:
		s = strconv.Quote(v)
	default:
		s = fmt.Sprint(v)
	}
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "") + "…"
	}
	return s
}

// migrate brings the schema to SchemaVersion. The common case, a current file, costs one read and no
// lock; otherwise the version is read again under the write lock, so two processes opening a new file
// at once apply each migration once. refuseForeign: see Options.RefuseForeignTables.
func migrate(ctx context.Context, db *sql.DB, refuseForeign bool) error {
	version, err := userVersion(ctx, db)
	if err != nil {
		return err
	}
	if version == SchemaVersion {
		return nil
	}
	if version > SchemaVersion {
		return fmt.Errorf("schema version %d is newer than this build supports (%d)", version, SchemaVersion)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return err
	}
	if version > SchemaVersion {
		return fmt.Errorf("schema version %d is newer than this build supports (%d)", version, SchemaVersion)
	}
	if version == 0 && refuseForeign {
		var table string
		switch err := tx.QueryRowContext(ctx, qForeignTable).Scan(&table); {
		case err == nil:
			return fmt.Errorf("no strata schema version, and a table %q of another schema: not migrating someone else's database", table)
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
	}
	for v := version; v < SchemaVersion; v++ {
		m := migrations[v]
		if m.check != nil {
			if err := m.check(ctx, tx); err != nil {
				return fmt.Errorf("migration %d: %w", v+1, err)
			}
		}
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("migration %d: %w", v+1, err)
		}
	}
	// PRAGMA takes no bound parameters; the value is our own integer.
	if _, err := tx.ExecContext(ctx, `PRAGMA user_version = `+strconv.Itoa(SchemaVersion)); err != nil {
		return err
	}
	return tx.Commit()
}

// qForeignTable finds a table the schema does not make (SQLite's own sqlite_* tables aside).
const qForeignTable = `SELECT name FROM sqlite_master WHERE type = 'table' AND name <> 'index_storage' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' LIMIT 1`

func userVersion(ctx context.Context, db *sql.DB) (int, error) {
	var v int
	err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v)
	return v, err
}

// DB returns the connection pool reads use, for code that talks to the engine directly (the
// benchmark's raw loop). Writing through it bypasses the store's write serialisation.
func (s *Store) DB() *sql.DB { return s.reader }

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// Capabilities: keyset paging over the primary key hands back each key once, ascending.
func (s *Store) Capabilities() is.Capabilities {
	return is.Capabilities{OrderedScan: true, UniqueScan: true}
}

// Close closes the connections. Later calls return ErrClosed; Close itself is idempotent.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	var errs []error
	if s.reader != s.writer {
		errs = append(errs, s.reader.Close())
	}
	errs = append(errs, s.writer.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sqlite: close %s: %w", s.path, err)
	}
	return nil
}

// classify is the one place SQLite's errors become the contract's sentinels. closed says the store
// was closed, so that an operation racing Close reports ErrClosed however the driver phrased it.
func classify(err error, closed bool) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, is.ErrTransient), errors.Is(err, is.ErrConflict),
		errors.Is(err, is.ErrClosed), errors.Is(err, is.ErrInvalidArgument):
		return err
	case closed, errors.Is(err, sql.ErrConnDone):
		return is.Classify(is.ErrClosed, err)
	}
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrBusy, sqlite3.ErrLocked:
			return is.Classify(is.ErrTransient, err)
		case sqlite3.ErrConstraint:
			return is.Classify(is.ErrConflict, err)
		}
	}
	classified, _ := is.ClassifyCommon(err)
	return classified
}

// backendName names this backend in its errors. Multi-SQLite, whose files are Stores, renames them at
// its own boundary (is.NewOpError replaces an OpError's names rather than nesting it).
const backendName = "sqlite"

// fail is the one place an operation's error takes its shape: classified, and named by the operation
// (as metrics name it) and the index, in an is.OpError. A nil err returns nil.
func (s *Store) fail(op is.Operation, ns, key string, err error) error {
	return is.NewOpError(backendName, op, ns, key, classify(err, s.closed.Load()))
}

// failScan is fail for the scans, which name a namespace, not an index: the walk is named by what it
// covers (a prefix, quoted, or a range), when what is not empty.
func (s *Store) failScan(op is.Operation, ns, what string, err error) error {
	if err != nil && what != "" {
		err = fmt.Errorf("%s: %w", what, classify(err, s.closed.Load()))
	}
	return s.fail(op, ns, "", err)
}

// begin validates the index and checks the store is open, the first thing every per-index operation
// does. Its error has been through fail.
func (s *Store) begin(op is.Operation, ns, key string) error {
	if err := is.ValidateIndex(ns, key); err != nil {
		return s.fail(op, ns, key, err)
	}
	if s.closed.Load() {
		return s.fail(op, ns, key, is.ErrClosed)
	}
	return nil
}

// write runs fn in a BEGIN IMMEDIATE transaction on the writer: the write lock is held from the first
// read, so what fn checks still holds when it writes.
func (s *Store) write(ctx context.Context, op is.Operation, ns, key string, fn func(tx *sql.Tx) error) error {
	if s.readOnly {
		return s.fail(op, ns, key, errReadOnly)
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return s.fail(op, ns, key, err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return s.fail(op, ns, key, err)
	}
	return s.fail(op, ns, key, tx.Commit())
}

const (
	qExists  = `SELECT 1 FROM index_storage WHERE namespace = ? AND key = ? LIMIT 1`
	qLastID  = `SELECT id FROM index_storage WHERE namespace = ? AND key = ? ORDER BY id DESC LIMIT 1`
	qInsert  = `INSERT INTO index_storage (namespace, key, id, value) VALUES (?, ?, ?, ?)`
	qLength  = `SELECT COUNT(*) FROM index_storage WHERE namespace = ? AND key = ?`
	qRead    = `SELECT id, value FROM index_storage WHERE namespace = ? AND key = ? AND id >= ? AND id <= ? ORDER BY id`
	qClosest = `SELECT id, value FROM index_storage WHERE namespace = ? AND key = ? AND id >= ? ORDER BY id LIMIT 1`
	qLast    = `SELECT id, value FROM index_storage WHERE namespace = ? AND key = ? ORDER BY id DESC LIMIT 1`
	// One statement, so one snapshot: the last id and the closest entry of one state of the index.
	qClosestLast = `SELECT (SELECT id FROM index_storage WHERE namespace = ?1 AND key = ?2 ORDER BY id DESC LIMIT 1), c.id, c.value
	FROM (SELECT 1) LEFT JOIN (SELECT id, value FROM index_storage WHERE namespace = ?1 AND key = ?2 AND id >= ?3 ORDER BY id LIMIT 1) AS c ON 1`
	qDrop   = `DELETE FROM index_storage WHERE namespace = ? AND key = ? AND id <= ?`
	qDelete = `DELETE FROM index_storage WHERE namespace = ? AND key = ?`
)

func (s *Store) Exists(ctx context.Context, ns, key string) (bool, error) {
	if err := s.begin(is.OpExists, ns, key); err != nil {
		return false, err
	}
	var one int
	err := s.reader.QueryRowContext(ctx, qExists, ns, key).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	if err := s.settled(err); err != nil {
		return false, s.fail(is.OpExists, ns, key, err)
	}
	return one == 1, nil
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
	return s.write(ctx, op, ns, key, func(tx *sql.Tx) error {
		var last int64
		switch err := tx.QueryRowContext(ctx, qLastID, ns, key).Scan(&last); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case entries[0].ID <= uint64(last):
			return fmt.Errorf("%w: id %d is not above the index's last id %d", is.ErrConflict, entries[0].ID, last)
		}
		return insert(ctx, tx, ns, key, entries)
	})
}

// insertChunk is how many rows one multi-row INSERT writes: a batch costs one statement per chunk
// rather than one per entry, and 4 parameters a row stays far below SQLite's variable limit.
const insertChunk = 64

var qInsertChunk = func() string {
	var b strings.Builder
	b.WriteString(`INSERT INTO index_storage (namespace, key, id, value) VALUES (?, ?, ?, ?)`)
	for range insertChunk - 1 {
		b.WriteString(`, (?, ?, ?, ?)`)
	}
	return b.String()
}()

// insert writes entries in whole chunks, then the remainder row by row, so that only two statement
// texts exist and both stay in the connection's statement cache.
func insert(ctx context.Context, tx *sql.Tx, ns, key string, entries []is.Entry) error {
	args := make([]any, 0, 4*insertChunk)
	for len(entries) >= insertChunk {
		args = args[:0]
		for _, e := range entries[:insertChunk] {
			args = append(args, ns, key, int64(e.ID), orEmpty(e.Value))
		}
		if _, err := tx.ExecContext(ctx, qInsertChunk, args...); err != nil {
			return err
		}
		entries = entries[insertChunk:]
	}
	for _, e := range entries {
		if _, err := tx.ExecContext(ctx, qInsert, ns, key, int64(e.ID), orEmpty(e.Value)); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) Length(ctx context.Context, ns, key string) (uint64, error) {
	if err := s.begin(is.OpLength, ns, key); err != nil {
		return 0, err
	}
	var n int64
	if err := s.settled(s.reader.QueryRowContext(ctx, qLength, ns, key).Scan(&n)); err != nil {
		return 0, s.fail(is.OpLength, ns, key, err)
	}
	return uint64(n), nil
}

func (s *Store) Read(ctx context.Context, ns, key string, from, to uint64) ([]is.Entry, error) {
	if err := s.begin(is.OpRead, ns, key); err != nil {
		return nil, err
	}
	lo, hi, ok := is.ClampRange(from, to)
	if !ok {
		return nil, nil
	}
	rows, err := s.reader.QueryContext(ctx, qRead, ns, key, int64(lo), int64(hi))
	if err != nil {
		return nil, s.fail(is.OpRead, ns, key, err)
	}
	defer rows.Close()
	var out []is.Entry
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, s.fail(is.OpRead, ns, key, err)
		}
		out = append(out, e)
	}
	if err := s.settled(rows.Err()); err != nil {
		return nil, s.fail(is.OpRead, ns, key, err)
	}
	return out, nil
}

func (s *Store) First(ctx context.Context, ns, key string) (is.Entry, bool, error) {
	if err := s.begin(is.OpFirst, ns, key); err != nil {
		return is.Entry{}, false, err
	}
	return s.one(ctx, is.OpFirst, ns, key, qClosest, int64(0))
}

func (s *Store) Last(ctx context.Context, ns, key string) (is.Entry, bool, error) {
	if err := s.begin(is.OpLast, ns, key); err != nil {
		return is.Entry{}, false, err
	}
	return s.one(ctx, is.OpLast, ns, key, qLast)
}

// LastID reads the greatest id from the primary key's B-tree alone (one seek); the value is never read.
func (s *Store) LastID(ctx context.Context, ns, key string) (uint64, bool, error) {
	if err := s.begin(is.OpLastID, ns, key); err != nil {
		return 0, false, err
	}
	var id int64
	err := s.reader.QueryRowContext(ctx, qLastID, ns, key).Scan(&id)
	found := err == nil
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	if err := s.settled(err); err != nil {
		return 0, false, s.fail(is.OpLastID, ns, key, err)
	}
	return uint64(id), found, nil
}

func (s *Store) Closest(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, error) {
	if err := s.begin(is.OpClosest, ns, key); err != nil {
		return is.Entry{}, false, err
	}
	if id > is.MaxID {
		return is.Entry{}, false, nil
	}
	return s.one(ctx, is.OpClosest, ns, key, qClosest, int64(id))
}

// ClosestLast is one statement (is.ClosestLastReader).
func (s *Store) ClosestLast(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, uint64, bool, error) {
	if err := s.begin(is.OpClosestLast, ns, key); err != nil {
		return is.Entry{}, false, 0, false, err
	}
	if id > is.MaxID {
		last, exists, err := s.LastID(ctx, ns, key) // no entry can be at or above id
		return is.Entry{}, false, last, exists, s.fail(is.OpClosestLast, ns, key, err)
	}
	var last, found sql.NullInt64
	var value []byte
	if err := s.settled(s.reader.QueryRowContext(ctx, qClosestLast, ns, key, int64(id)).Scan(&last, &found, &value)); err != nil {
		return is.Entry{}, false, 0, false, s.fail(is.OpClosestLast, ns, key, err)
	}
	var e is.Entry
	if found.Valid {
		e = is.Entry{ID: uint64(found.Int64), Value: orEmpty(value)}
	}
	return e, found.Valid, uint64(last.Int64), last.Valid, nil
}

// one runs a query for at most one entry of (ns, key); extra are the query's arguments after those two.
func (s *Store) one(ctx context.Context, op is.Operation, ns, key, query string, extra ...any) (is.Entry, bool, error) {
	e, err := scanEntry(s.reader.QueryRowContext(ctx, query, append([]any{ns, key}, extra...)...))
	found := err == nil
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	if err := s.settled(err); err != nil {
		return is.Entry{}, false, s.fail(op, ns, key, err)
	}
	return e, found, nil
}

func scanEntry(row interface{ Scan(...any) error }) (is.Entry, error) {
	var id int64
	var value []byte
	if err := row.Scan(&id, &value); err != nil {
		return is.Entry{}, err
	}
	return is.Entry{ID: uint64(id), Value: orEmpty(value)}, nil
}

func (s *Store) DropPrefix(ctx context.Context, ns, key string, upTo uint64) (uint64, error) {
	if err := s.begin(is.OpDropPrefix, ns, key); err != nil {
		return 0, err
	}
	if upTo == 0 {
		return 0, nil
	}
	var dropped int64
	err := s.write(ctx, is.OpDropPrefix, ns, key, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, qDrop, ns, key, int64(min(upTo, is.MaxID)))
		if err != nil {
			return err
		}
		dropped, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	return uint64(dropped), nil
}

func (s *Store) Delete(ctx context.Context, ns, key string) error {
	if err := s.begin(is.OpDelete, ns, key); err != nil {
		return err
	}
	return s.write(ctx, is.OpDelete, ns, key, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, qDelete, ns, key)
		return err
	})
}

// The scans bound a literal prefix by the byte interval [prefix, PrefixEnd(prefix)) so that the
// primary key seeks; LIKE would treat '%' and '_' as patterns and GLOB '*', '?' and '['. The lower
// bound is a single term (the resume marker or the prefix, whichever is greater), so the planner
// cannot start the range at the prefix and filter its way up to the marker.
var (
	// scanStableQuery[strict][bounded]: strict is key > marker rather than key >= prefix; bounded adds
	// the prefix's end. GROUP BY key: one range read of the page's rows, the cheapest page where a key
	// holds one entry or a few (an archive layer's chunks). scanDeepQuery is ScanDeep's (walkQuery).
	scanStableQuery = [2][2]string{}
	scanDeepQuery   = [2][2]string{}
	// scanQuery[bounded] is the native, positional Scan.
	scanQuery = [2]string{}
)

// walkQuery is ScanDeep's page, a loose index scan (skip scan) of the primary key: ?1 namespace, ?2
// the lower bound, ?3 how many keys, ?4 the range's end when upper names it.
//
// Each step of the recursive CTE seeks to the first key above the one before (ORDER BY key LIMIT 1,
// NULL past the last), and each key's last id is the same seek as qLastID: a page costs two B-tree
// descents a key, however many entries a key holds, where GROUP BY key read every row of every key in
// the page. ORDER BY id DESC LIMIT 1 yields what max(id) did, a broken id included (a text id sorts
// above every integer in both), so keysWithLastIDs still drops the page's ids on it. One statement:
// the keys and their last ids are of one snapshot.
//
// EXPLAIN QUERY PLAN through this driver (SQLite 3.54.1): CO-ROUTINE walk, whose SETUP (the anchor)
// and RECURSIVE STEP (over SCAN walk) each run a scalar subquery that is SEARCH i USING PRIMARY KEY
// (namespace=? AND key>? AND key<?); each last id a CORRELATED SCALAR SUBQUERY, SEARCH i USING PRIMARY
// KEY (namespace=? AND key=?) with no sort (the B-tree read backward); and USE TEMP B-TREE FOR ORDER BY
// over the page's own rows only. No SCAN of index_storage.
//
// On keys of one entry this costs more than GROUP BY did (about 1.4 µs a key against 0.6 µs, walking
// 100,000 such keys in pages of 129 through this driver): two seeks a key instead of one row. A head
// of ?3+1 rows read in B-tree order before the walk, serving such pages from one range read, cost as
// much as it saved or more through the materialized CTEs it takes (1.5 to 2.5 µs a key), so the page
// is the walk alone, and ScanStable keeps GROUP BY: only a walk of deep keys (the primary layer's)
// takes this one.
func walkQuery(lower, upper string) string {
	return `WITH RECURSIVE walk (key, n) AS (
		SELECT (SELECT i.key FROM index_storage AS i WHERE i.namespace = ?1 AND ` + lower + upper + ` ORDER BY i.key LIMIT 1), 1
		UNION ALL
		SELECT (SELECT i.key FROM index_storage AS i WHERE i.namespace = ?1 AND i.key > walk.key` + upper + ` ORDER BY i.key LIMIT 1), walk.n + 1
		FROM walk WHERE walk.key IS NOT NULL AND walk.n < ?3
	)
	SELECT walk.key, (SELECT i.id FROM index_storage AS i WHERE i.namespace = ?1 AND i.key = walk.key ORDER BY i.id DESC LIMIT 1)
	FROM walk WHERE walk.key IS NOT NULL ORDER BY walk.key`
}

func init() {
	for strict, lower := range []string{"i.key >= ?2", "i.key > ?2"} {
		for bounded, upper := range []string{"", " AND i.key < ?4"} {
			scanStableQuery[strict][bounded] = `SELECT i.key, max(i.id) FROM index_storage AS i WHERE i.namespace = ?1 AND ` +
				lower + upper + ` GROUP BY i.key ORDER BY i.key LIMIT ?3`
			scanDeepQuery[strict][bounded] = walkQuery(lower, upper)
		}
	}
	for bounded, upper := range []string{"", " AND key < ?"} {
		scanQuery[bounded] = `SELECT DISTINCT key FROM index_storage WHERE namespace = ? AND key >= ?` +
			upper + ` ORDER BY key LIMIT ? OFFSET ?`
	}
}

// ScanStable is keyset paging: each page seeks past the last key of the one before, so keys deleted
// behind the walk shift nothing. Next is a MarkerResume of the page's last key.
func (s *Store) ScanStable(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	return s.scanStable(ctx, &scanStableQuery, ns, r, from, count)
}

// ScanDeep is ScanStable with a loose index scan for a page (walkQuery): a page of deep keys costs
// its keys, not their entries (is.DeepScanner).
func (s *Store) ScanDeep(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	return s.scanStable(ctx, &scanDeepQuery, ns, r, from, count)
}

// scanStable pages with queries[strict][bounded].
func (s *Store) scanStable(ctx context.Context, queries *[2][2]string, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
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
	if s.closed.Load() {
		return is.Page{}, s.failScan(is.OpScanStable, ns, "", is.ErrClosed)
	}
	lower, strict := r.Start, false
	if !start {
		lower, strict = r.After(marker)
	}
	if r.Bounded() && lower >= r.End {
		return is.Page{Done: true}, nil
	}
	// One key more than the page tells whether the walk is done without another round trip (short of
	// the largest count, which no table can fill).
	args := []any{ns, lower, int64(min(count, math.MaxInt-1)) + 1}
	if r.Bounded() {
		args = append(args, r.End)
	}
	keys, ids, err := s.keysWithLastIDs(ctx, queries[b2i(strict)][b2i(r.Bounded())], count, args...)
	if err := s.settled(err); err != nil {
		return is.Page{}, s.failScan(is.OpScanStable, ns, r.String(), err)
	}
	if len(keys) <= count {
		return is.Page{Keys: keys, LastIDs: ids, Done: true}, nil
	}
	keys = keys[:count]
	if ids != nil {
		ids = ids[:count]
	}
	return is.Page{Keys: keys, LastIDs: ids, Next: is.MarkerResume(keys[count-1])}, nil
}

// Scan pages by position (LIMIT … OFFSET): cursor is how many matching keys earlier calls returned.
func (s *Store) Scan(ctx context.Context, ns, prefix string, cursor uint64, count int) (uint64, []string, error) {
	if err := is.ValidateScan(ns, prefix, count); err != nil {
		return 0, nil, s.failScan(is.OpScan, ns, "", err)
	}
	if s.closed.Load() {
		return 0, nil, s.failScan(is.OpScan, ns, "", is.ErrClosed)
	}
	if cursor > is.MaxID-uint64(count) {
		return 0, nil, nil // past any table this engine can hold
	}
	end, bounded := is.PrefixEnd(prefix)
	args := []any{ns, prefix}
	if bounded {
		args = append(args, end)
	}
	args = append(args, int64(count)+1, int64(cursor))
	keys, err := s.keys(ctx, scanQuery[b2i(bounded)], count, args...)
	if err := s.settled(err); err != nil {
		return 0, nil, s.failScan(is.OpScan, ns, fmt.Sprintf("prefix %q", prefix), err)
	}
	if len(keys) <= count {
		return 0, keys, nil
	}
	return cursor + uint64(count), keys[:count], nil
}

// keys runs a query for keys; count is the page size, to size the slice.
func (s *Store) keys(ctx context.Context, query string, count int, args ...any) ([]string, error) {
	rows, err := s.reader.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	keys := make([]string, 0, min(count, 1024)+1)
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// keysWithLastIDs runs a query of (key, max(id)) rows. A max(id) that is no positive integer (a row a
// foreign writer broke, in a file from before the schema's CHECKs) drops the page's ids, not the page:
// the caller then reads each key's LastID, and that read fails for the broken index alone.
func (s *Store) keysWithLastIDs(ctx context.Context, query string, count int, args ...any) ([]string, []uint64, error) {
	rows, err := s.reader.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	keys, ids := make([]string, 0, min(count, 1024)+1), make([]uint64, 0, min(count, 1024)+1)
	for rows.Next() {
		var k string
		var id any
		if err := rows.Scan(&k, &id); err != nil {
			return nil, nil, err
		}
		keys = append(keys, k)
		if n, ok := id.(int64); ok && n > 0 && ids != nil {
			ids = append(ids, uint64(n))
		} else {
			ids = nil
		}
	}
	return keys, ids, rows.Err()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// orEmpty stores a nil value as an empty blob (the column is NOT NULL) and hands an empty value back
// as a non-nil empty slice, as the memory backend does.
func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
