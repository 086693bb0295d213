package sqlite

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

	"github.com/stratalog/strata/backends/internal/sqlitefile"
)

// Migration is one step of a store's schema in a SQLite file: the version it brings the schema to, a
// name, and what it runs.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// SchemaState is what a SQLite file holds of one store's schema, read without changing the file.
type SchemaState struct {
	Exists  bool        // the file exists; when it does not, Version is 0 and every migration is pending
	Version int         // the schema version the file records (0: none)
	Latest  int         // the latest version this build knows
	Pending []Migration // what opening the store would apply, in order; none when Version ≥ Latest
}

// storageMigrationNames names migrations[v]; the array's length holds it to SchemaVersion.
var storageMigrationNames = [SchemaVersion]string{"index_storage", "index_storage_type_checks"}

// scheduleMigrationSteps describes scheduleMigrations[v] for a dry run (a test holds the lengths equal).
var scheduleMigrationSteps = []Migration{
	{Version: 1, Name: "scheduled_actions", SQL: scheduleTableDDL},
	{Version: 2, Name: "scheduled_actions_subject", SQL: "-- Go code, not SQL alone (backends/sqlite/schedule.go, migrateScheduleBuckets): " +
		"adds the columns bucket and subject, filled from each row's decoded action; drops shard_id and its claim index; " +
		"keeps one lease per agent and one pending row per action; creates the indexes scheduled_actions_claim " +
		"(bucket, due_at_ms, available_at_ms), scheduled_actions_subject (subject, action) and the unique " +
		"scheduled_actions_one_lease (subject) WHERE lease_owner IS NOT NULL."},
}

// StorageSchemaState reads the index storage's schema version (PRAGMA user_version) of the file at
// path. It creates nothing: a missing file is Exists false, not an error.
func StorageSchemaState(ctx context.Context, path string) (SchemaState, error) {
	st := SchemaState{Latest: SchemaVersion}
	db, exists, err := openForStatus(path)
	if err != nil || !exists {
		st.Pending = storagePending(0)
		return st, err
	}
	defer db.Close()
	st.Exists = true
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&st.Version); err != nil {
		return st, fmt.Errorf("sqlite: read the schema version of %s: %w", path, sqlitefile.Classify(err, false))
	}
	st.Pending = storagePending(st.Version)
	return st, nil
}

func storagePending(from int) []Migration {
	var out []Migration
	for v := max(from, 0); v < SchemaVersion; v++ {
		out = append(out, Migration{Version: v + 1, Name: storageMigrationNames[v], SQL: sqlitefile.MigrationSQL(v)})
	}
	return out
}

// ScheduleSchemaState reads the scheduled_actions schema version (the scheduled_actions_migrations
// table) of the file at path. It creates nothing: a missing file is Exists false, not an error.
func ScheduleSchemaState(ctx context.Context, path string) (SchemaState, error) {
	st := SchemaState{Latest: len(scheduleMigrations)}
	db, exists, err := openForStatus(path)
	if err != nil || !exists {
		st.Pending = schedulePending(0)
		return st, err
	}
	defer db.Close()
	st.Exists = true
	var recorded int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'scheduled_actions_migrations'`).Scan(&recorded); err != nil {
		return st, fmt.Errorf("sqlite schedule: read the schema version of %s: %w", path, sqlitefile.Classify(err, false))
	}
	if recorded > 0 {
		if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM scheduled_actions_migrations`).Scan(&st.Version); err != nil {
			return st, fmt.Errorf("sqlite schedule: read the schema version of %s: %w", path, sqlitefile.Classify(err, false))
		}
	}
	st.Pending = schedulePending(st.Version)
	return st, nil
}

func schedulePending(from int) []Migration {
	if from >= len(scheduleMigrationSteps) {
		return nil
	}
	return append([]Migration(nil), scheduleMigrationSteps[max(from, 0):]...)
}

// openForStatus opens the file at path to read its schema, creating nothing and changing nothing: no
// file, no journal mode. A file with no write-ahead log beside it (no process has it open, or the
// last one checkpointed) is read as immutable, which takes no lock and makes no -wal or -shm file; one
// with a log is read mode=ro, through the log that is already there. exists is false, with no error,
// when there is no file.
func openForStatus(path string) (_ *sql.DB, exists bool, _ error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, false, fmt.Errorf("sqlite: %s: %w", path, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("sqlite: %s: %w", path, err)
	case fi.IsDir():
		return nil, false, fmt.Errorf("sqlite: %s is a directory, not a database file", path)
	}
	q := url.Values{}
	q.Set("mode", "ro")
	q.Set("_busy_timeout", strconv.FormatInt(DefaultBusyTimeout.Milliseconds(), 10))
	if _, err := os.Stat(abs + "-wal"); errors.Is(err, fs.ErrNotExist) {
		q.Set("immutable", "1")
	}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}
	db, err := sql.Open("sqlite3", u.String()+"?"+q.Encode())
	if err != nil {
		return nil, true, fmt.Errorf("sqlite: %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	return db, true, nil
}
