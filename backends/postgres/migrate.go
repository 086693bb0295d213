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

//go:embed migrations/*.sql migrations/schedule/*.sql
var migrationFiles embed.FS

// A track is one store's migrations: a directory of NNNN_name.sql files and the table that records
// which of them a schema has had. Each store keeps its own record, so the index storage and the
// schedule store version their tables independently while sharing a schema.
type track struct {
	dir    string
	record string
}

var (
	indexStorageTrack = track{dir: "migrations", record: "index_storage_migrations"}
	scheduleTrack     = track{dir: "migrations/schedule", record: "scheduled_actions_migrations"}
)

// migrationLockPrefix names the advisory lock every track takes, keyed by schema. The tracks share it
// because each may create the schema, and two creators under different locks would race on CREATE
// SCHEMA; it keeps the index storage's name so that processes of earlier versions, which take only
// that lock, still exclude the new ones.
const migrationLockPrefix = "strata.index_storage.migrate:"

// schemaPlaceholder stands for the quoted schema name in migration files.
const schemaPlaceholder = "{{schema}}"

type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations of dir in version order. A file is named NNNN_name.sql;
// subdirectories hold other tracks.
func migrations(dir string) ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, dir)
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		digits, _, ok := strings.Cut(e.Name(), "_")
		version, err := strconv.Atoi(digits)
		if !ok || err != nil || version < 1 {
			return nil, fmt.Errorf("migration file %q is not named NNNN_name.sql", e.Name())
		}
		body, err := fs.ReadFile(migrationFiles, dir+"/"+e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: version, name: strings.TrimSuffix(e.Name(), ".sql"), sql: string(body)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	return out, nil
}

// migrate brings schema up to the latest embedded index storage migration.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	return migrateTrack(ctx, pool, schema, indexStorageTrack)
}

// migrateTrack brings schema up to the latest migration of tr in one transaction. The transaction first
// takes an advisory lock keyed by the schema, so that concurrent callers (several processes starting at
// once) apply each migration once, one after the other, instead of racing on CREATE TABLE; a caller that
// finds everything applied commits having changed nothing.
func migrateTrack(ctx context.Context, pool *pgxpool.Pool, schema string, tr track) error {
	all, err := migrations(tr.dir)
	if err != nil {
		return err
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	record := pgx.Identifier{schema, tr.record}.Sanitize()
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended($1, 0))", migrationLockPrefix+schema); err != nil {
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
