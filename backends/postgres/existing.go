package postgres

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	is "github.com/stratalog/strata/indexedstorage"
)

// OpenExisting is Open for a reader that must change nothing: it runs no migration and creates no
// schema or table, and the Store it returns refuses writes with ErrInvalidArgument. When the URL's
// schema or its index_storage table does not exist it fails with an error matching fs.ErrNotExist that
// names them.
func OpenExisting(ctx context.Context, rawURL string) (*Store, error) {
	connString, schema, maxOps, err := splitURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if schema == "" {
		schema = DefaultSchema
	}
	poolConfig, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w: %v", is.ErrInvalidArgument, err)
	}
	if maxOps == 0 {
		maxOps = max(int(poolConfig.MaxConns)-reservedConns, 1)
	}
	pool, err := newPool(ctx, poolConfig)
	if err != nil {
		return nil, fmt.Errorf("postgres: open pool: %w", classify(err))
	}
	var schemaExists, tableExists bool
	err = pool.QueryRow(ctx, `SELECT
		EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1),
		EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = $2)`,
		schema, tableName).Scan(&schemaExists, &tableExists)
	switch {
	case err != nil:
		pool.Close()
		return nil, fmt.Errorf("postgres: open: %w", classify(err))
	case !schemaExists:
		pool.Close()
		return nil, fmt.Errorf("postgres: schema %q does not exist (nothing was created): %w", schema, fs.ErrNotExist)
	case !tableExists:
		pool.Close()
		return nil, fmt.Errorf("postgres: schema %q has no %s table (nothing was created): %w", schema, tableName, fs.ErrNotExist)
	}
	e := &engine{pool: pool, schema: schema, table: pgx.Identifier{schema, tableName}.Sanitize(), readOnly: true}
	e.prepareSQL()
	return limited(e, maxOps), nil
}
