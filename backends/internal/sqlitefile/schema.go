package sqlitefile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

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

// MigrationSQL is what migration v (taking the schema from user_version v to v+1) runs, for a dry
// run's report; 0 ≤ v < SchemaVersion.
func MigrationSQL(v int) string { return migrations[v].sql }
