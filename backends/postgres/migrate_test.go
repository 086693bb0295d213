package postgres_test

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/stratalog/strata/backends/postgres"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
)

// documentedDDL returns the SQL block of docs/storage-format.md whose first line is
// "-- postgres: <name>", with its schema ("public.") replaced by schema.
func documentedDDL(t *testing.T, name, schema string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/storage-format.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(doc), "```sql\n")[1:] {
		body, _, _ := strings.Cut(block, "```")
		if strings.HasPrefix(body, "-- postgres: "+name+"\n") {
			return strings.ReplaceAll(body, "public.", pgx.Identifier{schema}.Sanitize()+".")
		}
	}
	t.Fatalf("docs/storage-format.md has no block starting -- postgres: %s", name)
	return ""
}

// execAll runs statements on a connection of its own, as an operator's psql would.
func execAll(t *testing.T, stmts ...string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	for _, stmt := range stmts {
		if _, err := conn.Exec(t.Context(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}

func migrationRecord(t *testing.T, st *postgres.Store, table string) []string {
	t.Helper()
	rows, _ := st.Pool().Query(t.Context(), "SELECT version || ' ' || name FROM "+pgx.Identifier{st.Schema(), table}.Sanitize()+" ORDER BY version")
	record, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return record
}

// An operator who ran the documented DDL by hand before strata first started, with or without the
// migration record, has strata start on it as it is, keeping what the table holds.
func TestNew_AdoptsTheDocumentedDDLMadeByHand(t *testing.T) {
	for _, withRecord := range []bool{false, true} {
		name := "WithoutRecord"
		if withRecord {
			name = "WithRecord"
		}
		t.Run(name, func(t *testing.T) {
			schema := testenv.PostgresSchema(t, testenv.PostgresURL(t))
			q := pgx.Identifier{schema, "index_storage"}.Sanitize()
			stmts := []string{documentedDDL(t, "index_storage", schema),
				`INSERT INTO ` + q + ` (namespace, key, id, value) VALUES ('test/ns', 'by-hand', 1, 'a'), ('test/ns', 'by-hand', 2, 'b')`}
			if withRecord {
				stmts = append(stmts, documentedDDL(t, "index_storage_migrations", schema))
			}
			execAll(t, stmts...)
			st := newStore(t, schema)
			requireMigratedOnce(t, st)
			if got := migrationRecord(t, st, "index_storage_migrations"); !slices.Equal(got, []string{"1 0001_index_storage"}) {
				t.Fatalf("migration record %q", got)
			}
			if got := readIDs(t, st, "by-hand"); !slices.Equal(got, []uint64{1, 2}) {
				t.Fatalf("rows made by hand: ids %v, want 1, 2", got)
			}
			if err := st.Append(t.Context(), testNS, "by-hand", 2, nil); !errors.Is(err, is.ErrConflict) {
				t.Fatalf("Append at the last id: %v, want ErrConflict", err)
			}
			if err := st.AppendMany(t.Context(), testNS, "by-hand", entriesFrom(3, 5)); err != nil {
				t.Fatal(err)
			}
			page, err := st.ScanStable(t.Context(), testNS, is.PrefixRange("by-"), is.Resume{}, 10)
			if err != nil || !slices.Equal(page.Keys, []string{"by-hand"}) {
				t.Fatalf("ScanStable: %+v, %v", page, err)
			}
			// And again, now that the record exists.
			st.Close()
			again := newStore(t, schema)
			if got := readIDs(t, again, "by-hand"); !slices.Equal(got, span(1, 5)) {
				t.Fatalf("after a second start: ids %v", got)
			}
		})
	}
}

// A table made by hand in another shape than the documented one is refused: New fails naming the
// difference, and changes nothing (no record, the table as it was).
func TestNew_RefusesAHandMadeTableOfAnotherShape(t *testing.T) {
	documented := func(schema string) string { return documentedDDL(t, "index_storage", schema) }
	for _, c := range []struct {
		name, want string
		ddl        func(schema string) string
	}{
		{"KeyInTheDefaultCollation", `column key text collate "C" not null`, func(schema string) string {
			return strings.Replace(documented(schema), `key       text COLLATE "C"`, `key       text`, 1)
		}},
		{"IntegerID", "column id integer not null", func(schema string) string {
			return strings.Replace(documented(schema), "id        bigint", "id        integer", 1)
		}},
		{"NullableValue", "column value bytea not null", func(schema string) string {
			return strings.Replace(documented(schema), "bytea NOT NULL", "bytea", 1)
		}},
		{"NoPrimaryKey", "constraint PRIMARY KEY (namespace, key, id)", func(schema string) string {
			return strings.Replace(documented(schema), ",\n    PRIMARY KEY (namespace, key, id)", "", 1)
		}},
		{"NoIDCheck", "constraint CHECK ((id > 0))", func(schema string) string {
			return strings.Replace(documented(schema), " CHECK (id > 0)", "", 1)
		}},
		{"Unlogged", "has unlogged", func(schema string) string {
			return strings.Replace(documented(schema), "CREATE TABLE", "CREATE UNLOGGED TABLE", 1)
		}},
		{"ExtraColumn", "has column extra", func(schema string) string {
			return strings.Replace(documented(schema), "value     bytea NOT NULL,", "value     bytea NOT NULL,\n    extra int,", 1)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := testenv.PostgresURL(t)
			schema := testenv.PostgresSchema(t, url)
			ddl := c.ddl(schema)
			if ddl == documented(schema) {
				t.Fatal("the test's edit of the documented DDL changed nothing: the docs' spelling moved")
			}
			execAll(t, ddl)
			st, err := postgres.New(t.Context(), url, &postgres.Options{Schema: schema, ConfigurePool: emptySearchPath})
			if err == nil {
				st.Close()
				t.Fatalf("New on a hand-made table with %s: accepted", c.name)
			}
			if !errors.Is(err, postgres.ErrSchemaMismatch) || is.IsTransient(err) {
				t.Fatalf("New: %v, want ErrSchemaMismatch", err)
			}
			for _, want := range []string{"index_storage", c.want, "docs/storage-format.md"} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("New: %q does not say %q", err, want)
				}
			}
			conn, err := pgx.Connect(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(t.Context())
			var record *string
			if err := conn.QueryRow(t.Context(), "SELECT pg_catalog.to_regclass($1)::text", pgx.Identifier{schema, "index_storage_migrations"}.Sanitize()).Scan(&record); err != nil || record != nil {
				t.Fatalf("the refused start left a migration record table (%v, %v)", record, err)
			}
		})
	}
}

// The tolerance is the migration runner's, so the schedule store's track has it too: its documented
// DDL made by hand is adopted. The documented DDL is the current one: were it an earlier migration's,
// the later ones would run on it, and a later migration that dropped or renamed anything it made would
// fail (today's 0002 drops shard_id, which the current DDL does not have), so this also fails when
// the docs fall behind the migrations.
func TestNewScheduleStore_AdoptsTheDocumentedDDLMadeByHand(t *testing.T) {
	for _, withRecord := range []bool{false, true} {
		name := "WithoutRecord"
		if withRecord {
			name = "WithRecord"
		}
		t.Run(name, func(t *testing.T) {
			url := testenv.PostgresURL(t)
			schema := testenv.PostgresSchema(t, url)
			stmts := []string{documentedDDL(t, "scheduled_actions", schema)}
			if withRecord {
				stmts = append(stmts, documentedDDL(t, "scheduled_actions_migrations", schema))
			}
			execAll(t, stmts...)
			newScheduleStore(t, schema)
			conn, err := pgx.Connect(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(t.Context())
			rows, _ := conn.Query(t.Context(), "SELECT version || ' ' || name FROM "+pgx.Identifier{schema, "scheduled_actions_migrations"}.Sanitize()+" ORDER BY version")
			record, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			// A fresh schema's record, for comparison: the same versions and names.
			fresh := testenv.PostgresSchema(t, url)
			newScheduleStore(t, fresh)
			rows, _ = conn.Query(t.Context(), "SELECT version || ' ' || name FROM "+pgx.Identifier{fresh, "scheduled_actions_migrations"}.Sanitize()+" ORDER BY version")
			want, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(record, want) {
				t.Fatalf("schedule migration record on the hand-made tables %q, on a fresh schema %q", record, want)
			}
			// And the hand-made tables describe as the migrated ones do.
			for _, q := range []string{
				`SELECT column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(collation_name, '') || ' ' || coalesce(column_default, '') || ' ' || is_identity
				 FROM information_schema.columns WHERE table_schema = $1 ORDER BY 1`,
				`SELECT regexp_replace(indexdef, '^.* USING ', '') FROM pg_catalog.pg_indexes WHERE schemaname = $1 ORDER BY 1`,
			} {
				describe := func(schema string) []string {
					rows, _ := conn.Query(t.Context(), q, schema)
					out, err := pgx.CollectRows(rows, pgx.RowTo[string])
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				if got, want := describe(schema), describe(fresh); !slices.Equal(got, want) {
					t.Fatalf("hand-made tables:\n%q\nmigrated:\n%q", got, want)
				}
			}
		})
	}
}
