package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/stratalog/strata/internal/testenv"
)

// The batch statements seek the primary key for each key of the batch, on a table large enough that
// a sequential scan would be the planner's choice if the statement let it: in the plan the server
// picks for these values (custom) and in the one it caches for any values (generic). No Seq Scan.
func TestBatchSQL_SeeksThePrimaryKey(t *testing.T) {
	url := testenv.PostgresURL(t)
	ctx := t.Context()
	st, err := New(ctx, url, &Options{Schema: testenv.PostgresSchema(t, url)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e := st.engine
	// 20,000 keys of 10 entries, analyzed.
	if _, err := e.pool.Exec(ctx, `INSERT INTO `+e.table+` (namespace, key, id, value)
		SELECT 'ns', 'k' || k, i, '\x00'::bytea FROM generate_series(1, 20000) AS k, generate_series(1, 10) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `ANALYZE `+e.table); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 128)
	ids := make([]int64, len(keys))
	for i := range keys {
		keys[i], ids[i] = fmt.Sprint("k", i*150), int64(i%12)
	}
	for _, c := range []struct {
		name, sql, types string
		args             []any
	}{
		{"ClosestLastMany", e.sqlClosestLastMany, "text, text[], bigint[]", []any{"ns", keys, ids}},
		{"DropPrefixMany", e.sqlDropMany, "text, text[], bigint[], bigint, bigint", []any{"ns", keys, ids, dropBatch, dropManyRows}},
	} {
		// A connection of its own, for the prepared statement and the setting.
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		custom := explain(t, conn, "EXPLAIN (COSTS OFF) "+c.sql, c.args...)
		if _, err := conn.Exec(ctx, "PREPARE batch_plan_"+c.name+" ("+c.types+") AS "+c.sql); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
			t.Fatal(err)
		}
		// EXECUTE takes no parameters of the protocol: the values as literals.
		idText := make([]string, len(ids))
		for i, id := range ids {
			idText[i] = fmt.Sprint(id)
		}
		params := fmt.Sprintf("'ns', '{%s}', '{%s}'", strings.Join(keys, ","), strings.Join(idText, ","))
		if len(c.args) == 5 {
			params += fmt.Sprintf(", %d, %d", dropBatch, dropManyRows)
		}
		generic := explain(t, conn, "EXPLAIN (COSTS OFF) EXECUTE batch_plan_"+c.name+" ("+params+")")
		for kind, plan := range map[string]string{"custom": custom, "generic": generic} {
			if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "index_storage_pkey") {
				t.Errorf("%s, %s plan: want index scans of the primary key and no Seq Scan:\n%s", c.name, kind, plan)
			}
			t.Logf("%s, %s plan:\n%s", c.name, kind, plan)
		}
	}
}

func explain(t *testing.T, conn *pgx.Conn, sql string, args ...any) string {
	t.Helper()
	rows, _ := conn.Query(context.Background(), sql, args...)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return strings.Join(lines, "\n")
}
