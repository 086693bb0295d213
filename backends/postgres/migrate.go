package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationsTable records which migrations a schema has had. It is named after this package's table so
// that other strata stores sharing the schema (the schedule store) keep their own record.
const migrationsTable = "index_storage_migrations"

// schemaPlaceholder stands for the quoted schema name in migration files.
const schemaPlaceholder = "{{schema}}"

type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order. A file is named NNNN_name.sql.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		digits, _, ok := strings.Cut(e.Name(), "_")
		version, err := strconv.Atoi(digits)
		if !ok || err != nil || version < 1 {
			return nil, fmt.Errorf("migration file %q is not named NNNN_name.sql", e.Name())
		}
		body, err := fs.ReadFile(migrationFiles, "migrations/"+e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: version, name: strings.TrimSuffix(e.Name(), ".sql"), sql: string(body)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	return out, nil
}

// migrate brings schema up to the latest embedded migration in one transaction. The transaction first
// takes an advisory lock keyed by the schema, so that concurrent callers (several processes starting at
// once) apply each migration once, one after the other, instead of racing on CREATE TABLE; a caller that
// finds everything applied commits having changed nothing.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	all, err := migrations()
	if err != nil {
		return err
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	record := pgx.Identifier{schema, migrationsTable}.Sanitize()
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended($1, 0))", "strata.index_storage.migrate:"+schema); err != nil {
			return err
		}
		// CREATE SCHEMA IF NOT EXISTS would demand the CREATE privilege on the database even when the
		// schema is there; ask first so a role confined to an existing schema can start.
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA "+quoted); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+record+` (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "SELECT version FROM "+record)
		if err != nil {
			return err
		}
		applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return err
		}
		for _, m := range all {
			if slices.Contains(applied, int32(m.version)) {
				continue
			}
			if _, err := tx.Exec(ctx, strings.ReplaceAll(m.sql, schemaPlaceholder, quoted)); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+record+" (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
				return err
			}
		}
		return nil
	})
}
