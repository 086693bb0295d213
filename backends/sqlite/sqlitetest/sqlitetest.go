// Package sqlitetest helps tests play a foreign writer against a SQLite store's file.
package sqlitetest

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
