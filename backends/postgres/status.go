package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	is "github.com/stratalog/strata/indexedstorage"
)

// Migration is one step of a store's schema: its version, its name (the file's, NNNN_name) and the SQL
// it runs, written for the schema it would run in.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// MigrationState is what a schema holds of one store's migrations, read without changing anything.
type MigrationState struct {
	Schema       string
	SchemaExists bool
	// Applied lists the versions the store's record (index_storage_migrations,
	// scheduled_actions_migrations) holds, ascending; none when the record does not exist.
	Applied []int
	// Unrecorded: the store's table stands in the schema with no record of any migration (made by hand
	// from the documented DDL). Opening the store adopts it when it matches what the migrations make,
	// and refuses it, naming every difference, when it does not.
	Unrecorded bool
	Pending    []Migration // the embedded migrations not applied, in version order
	Latest     int         // the highest version this build embeds
}

// StorageMigrationState reads the index storage's migrations in the schema a postgres:// URL names. It
// creates nothing: a schema or table that does not exist is reported, not made.
func StorageMigrationState(ctx context.Context, rawURL string) (MigrationState, error) {
	return migrationState(ctx, rawURL, indexStorageTrack, tableName)
}

// ScheduleMigrationState is StorageMigrationState for the schedule store's table.
func ScheduleMigrationState(ctx context.Context, rawURL string) (MigrationState, error) {
	return migrationState(ctx, rawURL, scheduleTrack, scheduleTable)
}

func migrationState(ctx context.Context, rawURL string, tr track, table string) (MigrationState, error) {
	connString, schema, _, err := splitURL(rawURL)
	if err != nil {
		return MigrationState{}, fmt.Errorf("postgres: %w", err)
	}
	all, err := migrations(tr.dir)
	if err != nil {
		return MigrationState{}, err
	}
	st := MigrationState{Schema: schema}
	if len(all) > 0 {
		st.Latest = all[len(all)-1].version
	}
	poolConfig, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return st, fmt.Errorf("postgres: %w: %v", is.ErrInvalidArgument, err)
	}
	poolConfig.MaxConns = 1
	pool, err := newPool(ctx, poolConfig)
	if err != nil {
		return st, fmt.Errorf("postgres: open pool: %w", classify(err))
	}
	defer pool.Close()
	var recorded, tableExists bool
	if err := pool.QueryRow(ctx, `SELECT
		EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1),
		EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = $2),
		EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = $3)`,
		schema, tr.record, table).Scan(&st.SchemaExists, &recorded, &tableExists); err != nil {
		return st, fmt.Errorf("postgres: read the migrations of schema %q: %w", schema, classify(err))
	}
	if recorded {
		rows, err := pool.Query(ctx, "SELECT version FROM "+pgx.Identifier{schema, tr.record}.Sanitize()+" ORDER BY version")
		if err != nil {
			return st, fmt.Errorf("postgres: read %s: %w", tr.record, classify(err))
		}
		applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return st, fmt.Errorf("postgres: read %s: %w", tr.record, classify(err))
		}
		for _, v := range applied {
			st.Applied = append(st.Applied, int(v))
		}
	}
	st.Unrecorded = tableExists && len(st.Applied) == 0
	quoted := pgx.Identifier{schema}.Sanitize()
	for _, m := range all {
		if !slices.Contains(st.Applied, m.version) {
			st.Pending = append(st.Pending, Migration{Version: m.version, Name: m.name,
				SQL: strings.ReplaceAll(m.sql, schemaPlaceholder, quoted)})
		}
	}
	return st, nil
}
