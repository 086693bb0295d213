package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"maps"
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
		if len(applied) == 0 {
			// No record: either a new schema, or tables an operator made by hand from the documented
			// DDL before strata first started. Those are adopted when they match what the migrations
			// make, and refused, naming every difference, when they do not.
			adopted, err := adoptHandMade(ctx, tx, schema, tr, all)
			if err != nil {
				return err
			}
			for _, m := range all[:adopted] {
				if _, err := tx.Exec(ctx, "INSERT INTO "+record+" (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
					return err
				}
				applied = append(applied, int32(m.version))
			}
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

// adoptHandMade looks for the relations the track's migrations make already standing in schema with no
// record of any migration (made by hand from docs/storage-format.md, say). It returns how many of the
// migrations, from the first, they already match: 0 when none of those relations exists (a new
// schema: every migration runs), k when what stands is exactly what migrations 1…k make (those are
// recorded as applied, the rest run). Any other state is an error naming each difference, and changes
// nothing: guessing would leave, for example, a key column in the database's collation, whose order
// ScanStable's keyset paging cannot use.
//
// What the migrations make is learnt by running them, inside a savepoint rolled back afterwards, on
// the session's temporary schema (pg_temp, which needs no CREATE privilege on the database), and
// comparing the catalogs' description of both (describeSQL). Nothing of this runs for a schema that
// holds no relation at all.
func adoptHandMade(ctx context.Context, tx pgx.Tx, schema string, tr track, all []migration) (int, error) {
	var any bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND c.relname <> $2)`, schema, tr.record).Scan(&any); err != nil {
		return 0, err
	}
	if !any || len(all) == 0 {
		return 0, nil
	}
	probe, err := tx.Begin(ctx) // a savepoint
	if err != nil {
		return 0, err
	}
	defer probe.Rollback(ctx)
	// after[k] describes what migrations 1…k+1 make; names is every relation any of them makes.
	after := make([]relations, len(all))
	names := map[string]bool{}
	for k, m := range all {
		if _, err := probe.Exec(ctx, strings.ReplaceAll(m.sql, schemaPlaceholder, "pg_temp")); err != nil {
			return 0, fmt.Errorf("checking %s for tables made by hand: migration %s on a temporary schema: %w", schema, m.name, err)
		}
		if after[k], err = describe(ctx, probe, "", nil); err != nil {
			return 0, err
		}
		for name := range after[k] {
			names[name] = true
		}
	}
	if err := probe.Rollback(ctx); err != nil {
		return 0, err
	}
	standing, err := describe(ctx, tx, schema, slices.Sorted(maps.Keys(names)))
	if err != nil {
		return 0, err
	}
	if len(standing) == 0 {
		return 0, nil
	}
	for k := len(all) - 1; k >= 0; k-- {
		if standing.equal(after[k]) {
			return k + 1, nil
		}
	}
	which := "migration " + all[0].name
	if len(all) > 1 {
		which = "migrations " + all[0].name + "…" + all[len(all)-1].name
	}
	return 0, fmt.Errorf("%w: schema %q holds %s but %s records no migration, and they are not what %s make: %s. "+
		"Make them match the DDL in docs/storage-format.md (or drop them, if they hold nothing to keep), then start again",
		ErrSchemaMismatch, schema, strings.Join(slices.Sorted(maps.Keys(standing)), ", "), tr.record,
		which, standing.diff(after[len(all)-1]))
}

// ErrSchemaMismatch is returned by New and NewScheduleStore for a schema holding strata's tables,
// made without strata's migrations, in a shape other than the documented one.
var ErrSchemaMismatch = errors.New("tables made by hand differ from the documented schema")

// relations describes tables: for each name, the sorted lines of describeSQL.
type relations map[string][]string

func (r relations) equal(o relations) bool {
	return maps.EqualFunc(r, o, slices.Equal[[]string])
}

// diff names what r has that want lacks and the other way round.
func (r relations) diff(want relations) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		got, ok := r[name]
		if !ok {
			out = append(out, fmt.Sprintf("table %s is missing", name))
			continue
		}
		for _, line := range want[name] {
			if !slices.Contains(got, line) {
				out = append(out, fmt.Sprintf("%s needs %s", name, line))
			}
		}
		for _, line := range got {
			if !slices.Contains(want[name], line) {
				out = append(out, fmt.Sprintf("%s has %s", name, line))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r)) {
		if _, ok := want[name]; !ok {
			out = append(out, fmt.Sprintf("table %s is not made by these migrations", name))
		}
	}
	return strings.Join(out, "; ")
}

// describeSQL describes the relations of one schema ($1, or the session's temporary schema when it is
// empty) whose names are in $2 (every one when $2 is NULL) as lines that hold whatever strata relies
// on and nothing that depends on how the DDL was spelled or which schema it named: each column's
// type, collation, nullability, identity and default (not its position), each constraint's definition
// and each other index's (not their names), and an unlogged table's persistence. NOT NULL
// constraints, catalogued as constraints from PostgreSQL 18 on, are the columns' "not null".
const describeSQL = `WITH rel AS (
	SELECT c.oid, c.relname, c.relpersistence FROM pg_catalog.pg_class c
	WHERE c.relnamespace = CASE WHEN $1 = '' THEN pg_catalog.pg_my_temp_schema()
		ELSE (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1) END
	AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
	AND ($2::text[] IS NULL OR c.relname = ANY ($2::text[]))
)
SELECT rel.relname, 'column ' || pg_catalog.quote_ident(a.attname) || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
	|| CASE WHEN a.attcollation <> 0 THEN ' collate ' || pg_catalog.quote_ident(co.collname) ELSE '' END
	|| CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
	|| CASE a.attidentity WHEN 'a' THEN ' generated always as identity' WHEN 'd' THEN ' generated by default as identity' ELSE '' END
	|| CASE a.attgenerated WHEN 's' THEN ' generated always as stored' ELSE '' END
	|| COALESCE(' default ' || pg_catalog.pg_get_expr(d.adbin, d.adrelid), '')
FROM rel
JOIN pg_catalog.pg_attribute a ON a.attrelid = rel.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation
LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
UNION ALL
SELECT rel.relname, 'constraint ' || pg_catalog.pg_get_constraintdef(con.oid)
FROM rel JOIN pg_catalog.pg_constraint con ON con.conrelid = rel.oid AND con.contype <> 'n'
UNION ALL
SELECT rel.relname, 'index ' || CASE WHEN i.indisunique THEN 'unique ' ELSE '' END
	|| substring(pg_catalog.pg_get_indexdef(i.indexrelid) FROM ' USING .*$')
FROM rel JOIN pg_catalog.pg_index i ON i.indrelid = rel.oid
WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint con WHERE con.conindid = i.indexrelid AND con.conrelid = rel.oid)
UNION ALL
SELECT rel.relname, 'unlogged' FROM rel WHERE rel.relpersistence = 'u'`

// describe runs describeSQL on schema ("" for the temporary one) for names (nil for every relation).
func describe(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, schema string, names []string) (relations, error) {
	rows, err := q.Query(ctx, describeSQL, schema, names)
	if err != nil {
		return nil, err
	}
	out := relations{}
	var name, line string
	_, err = pgx.ForEachRow(rows, []any{&name, &line}, func() error {
		out[name] = append(out[name], line)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for name := range out {
		slices.Sort(out[name])
	}
	return out, nil
}
