package testenv

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// PostgresSchema creates a schema of the test's own on the server at url, drops it (with everything
// in it) when the test ends, and returns its name. Connections a test opens should also set an empty
// search_path, so that a query that forgets to name the schema fails instead of touching another
// test's tables.
func PostgresSchema(tb testing.TB, url string) string {
	tb.Helper()
	schema := UniqueName("strata_test_")
	ctx, cancel := Context()
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("connect to %s: %v", PostgresEnv, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		tb.Fatalf("create schema %s: %v", schema, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := Context()
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}
