// Package sqlitefile is the engine of one SQLite file holding index storage (mattn/go-sqlite3, WAL
// mode): its connections, its schema and migrations, and the per-index operations on it. The sqlite
// backend is one Engine; the multi-SQLite backend keeps a pool of them, one per index file. Each
// backend validates arguments, checks that it is open and shapes errors at its own choke point: the
// engine's methods return the engine's errors as they are (Classify maps them to the contract's
// sentinels), and name no backend.
//
// Every index lives in the table index_storage(namespace, key, id, value), whose primary key
// (namespace, key, id) is a WITHOUT ROWID B-tree in byte order (BINARY collation), so a key's entries
// are contiguous and a keyset walk seeks to the next key instead of counting positions.
//
// Writes go through one connection whose transactions start with BEGIN IMMEDIATE: the check that an
// id is above the index's last id and the insert take the write lock together, so they are atomic
// against this process's other goroutines and against another process on the same file. Reads use a
// small pool of their own connections, which WAL lets run beside the writer (or the writer itself,
// with SingleConnection).
package sqlitefile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratalog/strata/internal/backoff"

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

// Options configures Open. The zero value is ready to use.
type Options struct {
	// BusyTimeout is how long a statement waits for a lock held by another connection (of this
	// process or another) before failing with an error Classify reports as ErrTransient. 0 means
	// DefaultBusyTimeout.
	BusyTimeout time.Duration
	// Readers is the number of connections reads may use at once. 0 means DefaultReaders. Ignored
	// with SingleConnection.
	Readers int
	// SingleConnection makes the engine hold one connection that serves reads and writes alike, for
	// callers that open many files and count descriptors (multi-SQLite holds one engine per file).
	SingleConnection bool
	// MustExist makes Open fail with an error matching fs.ErrNotExist, creating nothing, when the file
	// does not exist.
	MustExist bool
	// RefuseForeignTables makes Open fail, creating no table, when the file has no schema version but
	// holds tables other than index_storage: for a caller whose files are its own alone (multi-SQLite),
	// such a file is someone else's database, not a blank one to migrate into shape.
	RefuseForeignTables bool
	// PersistWAL makes closing the connection leave the file's -wal (emptied) and -shm where they are,
	// rather than unlink them by path: for a caller that may remove the file under an open connection
	// and create another under its name, whose -wal and -shm are its own (multi-SQLite). It needs
	// SingleConnection; ignored with ReadOnly, whose connection never removes them.
	PersistWAL bool
	// SchemaChecked skips the schema check (and migration) of an existing file: for a caller that has
	// checked this very file before and knows it has not been replaced since (multi-SQLite, which
	// opens a file again each time its pool evicted it). Ignored with ReadOnly, and when Open creates
	// the file.
	SchemaChecked bool
	// ReadOnly opens an existing file for reading only, for a command that must change nothing
	// (strata scan, strata inspect): mode=ro, no journal-mode change, no migration, and no -wal or
	// -shm created (readonly.go says how). A file without index_storage fails with an error matching
	// fs.ErrNotExist, one of a schema version newer than this build's with a plain error; writes fail
	// with ErrInvalidArgument. It implies MustExist.
	ReadOnly bool
}

// Engine is one open SQLite file. It is safe for concurrent use.
type Engine struct {
	path   string
	writer *sql.DB // one connection; transactions BEGIN IMMEDIATE
	reader *sql.DB // the writer itself in single-connection mode

	closed  atomic.Bool
	closeMu sync.Mutex // serialises Close

	readOnly bool
	// unchanged, set for a file read as immutable (readonly.go), fails when a writer has touched the
	// file since the open; every read checks it after reading.
	unchanged func() error
}

// Open opens (creating it unless opts.MustExist) the SQLite file at path and brings its schema to the
// current version. Its errors start "open <path>: ", and are classified (Classify).
//
// A file another connection is creating (switching it to WAL, writing its schema) is reported locked
// at once, without SQLite's busy handler: Open retries it, as it retries any busy file, for as long as
// the busy timeout, so that processes starting together on a new file all open it.
func Open(ctx context.Context, path string, opts Options) (*Engine, error) {
	busy := opts.BusyTimeout
	if busy <= 0 {
		busy = DefaultBusyTimeout
	}
	deadline := time.Now().Add(busy)
	pauses := backoff.Policy{Initial: time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 2}
	for attempt := 1; ; attempt++ {
		eng, err := open(ctx, path, opts)
		if err == nil || !is.IsTransient(err) || !time.Now().Before(deadline) {
			return eng, err
		}
		if err := backoff.Wait(ctx, min(pauses.Delay(attempt), time.Until(deadline))); err != nil {
			return nil, fmt.Errorf("open %s: %w", path, Classify(err, false))
		}
	}
}

// open is one attempt of Open.
func open(ctx context.Context, path string, opts Options) (*Engine, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if opts.ReadOnly {
		return openReadOnly(ctx, path, abs, opts)
	}
	if opts.MustExist {
		if _, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	} else if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		// SQLite creates the file, not its directory; "sqlite:strata-data/strata.db" in a fresh
		// checkout should just work.
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	writer, err := OpenWriter(abs, opts)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	e := &Engine{path: abs, writer: writer, reader: writer}
	// A file the caller checked before (SchemaChecked) and that existed (MustExist: Open creates
	// nothing) is taken at the caller's word: no user_version read.
	if !opts.SchemaChecked || !opts.MustExist {
		if err := migrate(ctx, writer, opts.RefuseForeignTables); err != nil {
			writer.Close()
			err, _ := ExplainOpenFailure(abs, false, Classify(err, false))
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}
	if opts.PersistWAL && opts.SingleConnection {
		if err := persistWAL(ctx, writer); err != nil {
			writer.Close()
			err, _ := ExplainOpenFailure(abs, false, Classify(err, false))
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}
	if !opts.SingleConnection {
		readers := opts.Readers
		if readers <= 0 {
			readers = DefaultReaders
		}
		reader, err := sql.Open("sqlite3", dsn(abs, opts))
		if err != nil {
			writer.Close()
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		reader.SetMaxOpenConns(readers)
		reader.SetMaxIdleConns(readers)
		reader.SetConnMaxLifetime(0)
		reader.SetConnMaxIdleTime(0)
		e.reader = reader
	}
	return e, nil
}

// OpenWriter opens the one read-write connection of the file at abs (an absolute path) that every
// write goes through: WAL, transactions BEGIN IMMEDIATE, opts.BusyTimeout, and mode=rw with
// opts.MustExist. It neither creates the schema nor touches the file before the first statement.
func OpenWriter(abs string, opts Options) (*sql.DB, error) {
	db, err := sql.Open("sqlite3", dsn(abs, opts))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return db, nil
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

// persistWAL makes closing db's one connection leave its -wal (emptied: journal_size_limit 0) and
// -shm where they are rather than unlink them by path (Options.PersistWAL).
func persistWAL(ctx context.Context, db *sql.DB) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `PRAGMA journal_size_limit = 0`); err != nil {
		return fmt.Errorf("journal_size_limit: %w", err)
	}
	return c.Raw(func(dc any) error {
		sc, ok := dc.(*sqlite3.SQLiteConn)
		if !ok {
			return fmt.Errorf("driver connection is a %T, not a go-sqlite3 connection", dc)
		}
		if err := sc.SetFileControlInt("main", sqlite3.SQLITE_FCNTL_PERSIST_WAL, 1); err != nil {
			return fmt.Errorf("SQLITE_FCNTL_PERSIST_WAL: %w", err)
		}
		return nil
	})
}

// DB returns the connection pool reads use, for code that talks to the engine directly (the
// benchmark's raw loop). Writing through it bypasses the engine's write serialisation.
func (e *Engine) DB() *sql.DB { return e.reader }

// Path returns the absolute path of the database file.
func (e *Engine) Path() string { return e.path }

// Closed reports whether Close was called.
func (e *Engine) Closed() bool { return e.closed.Load() }

// Close closes the connections. Later calls return nil; the methods fail with an error Classify
// reports as ErrClosed.
func (e *Engine) Close() error {
	e.closeMu.Lock()
	defer e.closeMu.Unlock()
	if e.closed.Swap(true) {
		return nil
	}
	var errs []error
	if e.reader != e.writer {
		errs = append(errs, e.reader.Close())
	}
	errs = append(errs, e.writer.Close())
	return errors.Join(errs...)
}

// Classify is Classify with the engine's closed state: an operation racing Close reports ErrClosed.
func (e *Engine) Classify(err error) error { return Classify(err, e.closed.Load()) }

// Classify is the one place SQLite's errors become the contract's sentinels. closed says the engine
// was closed, so that an operation racing Close reports ErrClosed however the driver phrased it. A
// nil err returns nil.
func Classify(err error, closed bool) error {
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
