package testenv

// ExecUnchecked and the file snapshots (files.go) let a test play a foreign writer or a disk fault
// against a SQLite store's file.

import (
	"context"
	"database/sql"
)

// ExecUnchecked runs one statement on a connection of db that ignores CHECK constraints, the way a
// foreign writer on an older schema, or a disk fault, could leave a row the schema forbids.
func ExecUnchecked(ctx context.Context, db *sql.DB, stmt string, args ...any) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `PRAGMA ignore_check_constraints = ON`); err != nil {
		return err
	}
	defer conn.ExecContext(ctx, `PRAGMA ignore_check_constraints = OFF`)
	_, err = conn.ExecContext(ctx, stmt, args...)
	return err
}
