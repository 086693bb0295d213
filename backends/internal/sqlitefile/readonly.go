package sqlitefile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	sqlite3 "github.com/mattn/go-sqlite3"

	is "github.com/stratalog/strata/indexedstorage"
)

// A read-only open (Options.ReadOnly) must leave the file as it found it: its bytes, its journal
// mode, and which of its -wal, -shm and -journal exist. mode=ro alone does not do that for a database
// in WAL mode: SQLite reads one through its -wal and -shm, creates both when they are missing (a
// writer that closed cleanly removed them), and a read-only connection, which cannot take the
// exclusive lock a closing writer takes to remove them, leaves them behind. On a read-only file system
// it cannot create them, and the open fails.
//
// So a file whose -wal is missing or empty, and that has no -journal, is opened immutable=1: SQLite
// reads the main file alone, without locks, and creates nothing. That is safe only while no writer
// touches the file, and the open is made when none is: every commit is in the main file (a WAL
// database's -wal would hold the later ones, a rollback database's -journal would be there while a
// transaction writes the main file). A writer may still come along in the middle of a read-only
// command, so every read checks afterwards that the main file and the -wal are as they were at the
// open, and fails with ErrTransient when they are not (a read of a file changing under an immutable
// connection may be torn): the caller opens again and finds the -wal or the -journal then. The check
// is stat(2) of two paths, which a command that reads and exits can afford. (Which mode the file is in
// is not read from its header: opening and closing the file here would drop the POSIX locks SQLite
// holds on it for this process's other connections.)
//
// A file whose -wal holds commits, or that has a -journal, is opened mode=ro with SQLite's locking as
// usual: only the -shm reads such a -wal consistently beside a writer (the -shm exists then; if a
// crashed writer's was removed, SQLite creates one, and on a read-only file system the open fails and
// the error says why), and a -journal may be a hot one, which SQLite reports rather than read around.

// errReadOnly is what a write to a store opened with ReadOnly fails with.
var errReadOnly = fmt.Errorf("%w: the store was opened read-only", is.ErrInvalidArgument)

// errChanged is what a read of a file opened immutable fails with once a writer has touched it.
var errChanged = is.Classify(is.ErrTransient,
	errors.New("the file changed while this read-only store read it as immutable (a writer opened it since): open it again"))

// files is what a read-only open sees of the database file and the files beside it.
type files struct {
	main    os.FileInfo
	walSize int64 // -1 when there is no -wal
	journal bool  // a -journal exists
}

// readImmutable says whether a file is read as immutable: every commit is in the main file and no
// writer is at work on it (see above).
func readImmutable(f files) bool { return f.walSize <= 0 && !f.journal }

// unchanged says whether a file read as immutable is still as it was at the open: the same main file,
// neither written nor resized, and a -wal neither created nor grown.
func unchanged(at, now files) bool {
	return os.SameFile(at.main, now.main) && at.main.Size() == now.main.Size() &&
		at.main.ModTime().Equal(now.main.ModTime()) && at.walSize == now.walSize
}

// look stats the database file and the files beside it.
func look(abs string) (files, error) {
	f := files{walSize: -1}
	var err error
	if f.main, err = os.Stat(abs); err != nil {
		return f, err
	}
	if !f.main.Mode().IsRegular() {
		return f, fmt.Errorf("%w: not a regular file", is.ErrInvalidArgument)
	}
	switch wal, err := os.Stat(abs + "-wal"); {
	case err == nil:
		f.walSize = wal.Size()
	case !errors.Is(err, fs.ErrNotExist):
		return f, err
	}
	switch _, err := os.Stat(abs + "-journal"); {
	case err == nil:
		f.journal = true
	case !errors.Is(err, fs.ErrNotExist):
		return f, err
	}
	return f, nil
}

// openReadOnly is Open with opts.ReadOnly.
func openReadOnly(ctx context.Context, path, abs string, opts Options) (*Engine, error) {
	at, err := look(abs)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	immutable := readImmutable(at)
	db, err := sql.Open("sqlite3", readOnlyDSN(abs, opts, immutable))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	readers := opts.Readers
	if readers <= 0 {
		readers = DefaultReaders
	}
	if opts.SingleConnection {
		readers = 1
	}
	db.SetMaxOpenConns(readers)
	db.SetMaxIdleConns(readers)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	e := &Engine{path: abs, writer: db, reader: db, readOnly: true}
	if immutable {
		e.unchanged = func() error {
			now, err := look(abs)
			switch {
			case err != nil:
				return fmt.Errorf("%w (%w)", errChanged, err)
			case !unchanged(at, now):
				return errChanged
			}
			return nil
		}
	}
	if err := e.settled(checkReadable(ctx, db)); err != nil {
		db.Close()
		err, refused := ExplainOpenFailure(abs, true, Classify(err, false))
		if _, serr := os.Stat(abs + "-shm"); refused && at.walSize > 0 && errors.Is(serr, fs.ErrNotExist) {
			err = fmt.Errorf("its -wal holds commits, which SQLite reads through a -shm it must create: %w", err)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return e, nil
}

// readOnlyDSN is dsn for a read-only open: mode=ro, and none of the settings that write (the journal
// mode) or only matter to writes.
func readOnlyDSN(abs string, opts Options, immutable bool) string {
	busy := opts.BusyTimeout
	if busy <= 0 {
		busy = DefaultBusyTimeout
	}
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(busy.Milliseconds(), 10))
	q.Set("_stmt_cache_size", strconv.Itoa(stmtCacheSize))
	q.Set("mode", "ro")
	if immutable {
		q.Set("immutable", "1")
	}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}
	return u.String() + "?" + q.Encode()
}

// checkReadable makes sure this build reads the file: it holds index_storage, of a schema version
// this build knows or an older one (their columns are the same; only the checks on them grew).
func checkReadable(ctx context.Context, db *sql.DB) error {
	version, err := userVersion(ctx, db)
	if err != nil {
		return err
	}
	if version > SchemaVersion {
		return fmt.Errorf("schema version %d is newer than this build reads (%d)", version, SchemaVersion)
	}
	var one int
	switch err := db.QueryRowContext(ctx, qHasIndexStorage).Scan(&one); {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("no index_storage table (schema version %d): a database strata has not written, and a read-only open creates nothing: %w",
			version, fs.ErrNotExist)
	case err != nil:
		return err
	}
	return nil
}

const qHasIndexStorage = `SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'index_storage'`

// settled is a read's outcome: err, unless the file was read as immutable and has changed since the
// open, which makes whatever the read saw, an error included, untrustworthy.
func (e *Engine) settled(err error) error {
	if e.unchanged != nil {
		if changed := e.unchanged(); changed != nil {
			return changed
		}
	}
	return err
}

// ExplainOpenFailure names the file system's refusal behind a failed open, which SQLite's own error
// hides. SQLite opens a file it may have to create (the database, its -wal, its -shm) with O_CREAT and,
// when that fails (EROFS on a read-only file system, EACCES in a directory the process may not write),
// tries again read-only and reports that attempt: "unable to open database file: no such file or
// directory" for a file that does not exist yet, or "attempt to write a readonly database" once it has
// the database open read-only. When err is such an error and the file system refuses to write where
// SQLite needed to (the file, unless readOnly, and its directory), the error says so and matches the
// errno (syscall.EROFS, fs.ErrPermission), and refused is true; otherwise err is returned as it is.
func ExplainOpenFailure(abs string, readOnly bool, err error) (_ error, refused bool) {
	var targets []string
	if !readOnly {
		targets = append(targets, abs)
	}
	targets = append(targets, filepath.Dir(abs))
	var refusals []error
	for _, target := range targets {
		refusals = append(refusals, writeRefusal(target))
	}
	return openFailure(err, targets, refusals)
}

// writeRefusal is the error access(2) gives for writing path: nil when it may be written or does not
// exist (SQLite creates it then, and its directory is asked).
func writeRefusal(path string) error {
	err := syscall.Access(path, 2 /* W_OK */)
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	return err
}

// openFailure is ExplainOpenFailure's decision: refusals[i] is what writing targets[i] fails with
// (nil: it may be written). The first refusal that is the file system's (read-only, or permission)
// explains err when err is SQLite's failure to open or to write.
func openFailure(err error, targets []string, refusals []error) (_ error, refused bool) {
	var se sqlite3.Error
	if !errors.As(err, &se) || (se.Code != sqlite3.ErrCantOpen && se.Code != sqlite3.ErrReadonly) {
		return err, false
	}
	for i, refusal := range refusals {
		var errno syscall.Errno
		if !errors.As(refusal, &errno) || (errno != syscall.EROFS && errno != syscall.EACCES && errno != syscall.EPERM) {
			continue
		}
		// SQLite's own text without the errno of its read-only retry, which is the misleading part.
		return fmt.Errorf("%w (SQLite: %s)", &fs.PathError{Op: "write", Path: targets[i], Err: errno}, se.Code.Error()), true
	}
	return err, false
}
