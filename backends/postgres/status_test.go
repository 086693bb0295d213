package postgres_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/stratalog/strata/backends/postgres"
	"github.com/stratalog/strata/internal/testenv"
)

// relationsIn counts the schema's relations and whether it exists, on a connection of its own.
func relationsIn(t *testing.T, schema string) (exists bool, relations int) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	if err := conn.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1),
		(SELECT count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1)`,
		schema).Scan(&exists, &relations); err != nil {
		t.Fatal(err)
	}
	return exists, relations
}

func pendingVersions(st postgres.MigrationState) []int {
	var out []int
	for _, m := range st.Pending {
		out = append(out, m.Version)
	}
	return out
}

// The state of a schema that does not exist lists every migration, for that schema, and creates nothing.
func TestMigrationState_OfAMissingSchemaCreatesNothing(t *testing.T) {
	pg := testenv.PostgresURL(t)
	schema := testenv.UniqueName("strata_absent_")
	st, err := postgres.StorageMigrationState(t.Context(), pg+"&schema="+schema)
	if err != nil || st.SchemaExists || len(st.Applied) != 0 || st.Latest != 1 || !slices.Equal(pendingVersions(st), []int{1}) ||
		!strings.Contains(st.Pending[0].SQL, `CREATE TABLE "`+schema+`".index_storage`) {
		t.Fatalf("storage: %+v, %v", st, err)
	}
	sched, err := postgres.ScheduleMigrationState(t.Context(), pg+"&schema="+schema)
	if err != nil || sched.SchemaExists || sched.Latest != 2 || !slices.Equal(pendingVersions(sched), []int{1, 2}) {
		t.Fatalf("schedule: %+v, %v", sched, err)
	}
	if exists, _ := relationsIn(t, schema); exists {
		t.Fatalf("the state created schema %s", schema)
	}
}

// Each store's record is read apart: opening the index storage applies its migration and leaves the
// schedule store's pending. Reading changes nothing.
func TestMigrationState_ReadsEachStoresRecord(t *testing.T) {
	pg := testenv.PostgresURL(t)
	schema := testenv.PostgresSchema(t, pg)
	url := pg + "&schema=" + schema
	if st, err := postgres.StorageMigrationState(t.Context(), url); err != nil || !st.SchemaExists || len(st.Pending) != 1 || st.Unrecorded {
		t.Fatalf("empty schema: %+v, %v", st, err)
	}
	if _, n := relationsIn(t, schema); n != 0 {
		t.Fatalf("the state made %d relations", n)
	}
	s, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	st, err := postgres.StorageMigrationState(t.Context(), url)
	if err != nil || !slices.Equal(st.Applied, []int{1}) || len(st.Pending) != 0 {
		t.Fatalf("after Open: %+v, %v", st, err)
	}
	sched, err := postgres.ScheduleMigrationState(t.Context(), url)
	if err != nil || len(sched.Applied) != 0 || !slices.Equal(pendingVersions(sched), []int{1, 2}) {
		t.Fatalf("schedule store never opened: %+v, %v", sched, err)
	}
	ss, err := postgres.OpenSchedule(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	ss.Close()
	if sched, err = postgres.ScheduleMigrationState(t.Context(), url); err != nil || !slices.Equal(sched.Applied, []int{1, 2}) || len(sched.Pending) != 0 {
		t.Fatalf("after OpenSchedule: %+v, %v", sched, err)
	}
}

// A table made by hand from the documented DDL, with no record, is reported as such: opening adopts it.
func TestMigrationState_SaysWhenATableStandsWithoutARecord(t *testing.T) {
	pg := testenv.PostgresURL(t)
	schema := testenv.PostgresSchema(t, pg)
	execAll(t, documentedDDL(t, "index_storage", schema))
	st, err := postgres.StorageMigrationState(t.Context(), pg+"&schema="+schema)
	if err != nil || !st.Unrecorded || len(st.Pending) != 1 {
		t.Fatalf("%+v, %v", st, err)
	}
}
