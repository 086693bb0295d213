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
	// AppendKeys: an entry a key, above the key's last id half the time; each entry's key by ordinal.
	firsts := make([]int64, len(keys))
	ords := make([]int64, len(keys))
	values := make([][]byte, len(keys))
	for i := range keys {
		firsts[i], ords[i], values[i] = 10+int64(i%2), int64(i+1), []byte{0}
	}
	// EXECUTE takes no parameters of the protocol: the values as literals.
	idText, firstText, ordText := make([]string, len(ids)), make([]string, len(ids)), make([]string, len(ids))
	for i, id := range ids {
		idText[i], firstText[i], ordText[i] = fmt.Sprint(id), fmt.Sprint(firsts[i]), fmt.Sprint(ords[i])
	}
	keysAndIDs := fmt.Sprintf("'ns', '{%s}', '{%s}'", strings.Join(keys, ","), strings.Join(idText, ","))
	for _, c := range []struct {
		name, sql, types string
		args             []any
		literals         string
	}{
		{"ClosestLastMany", e.sqlClosestLastMany, "text, text[], bigint[]", []any{"ns", keys, ids}, keysAndIDs},
		{"DropPrefixMany", e.sqlDropMany, "text, text[], bigint[], bigint, bigint", []any{"ns", keys, ids, dropBatch, dropManyRows},
			keysAndIDs + fmt.Sprintf(", %d, %d", dropBatch, dropManyRows)},
		{"DropPrefixManyWithin", e.sqlDropManyWithin, "text, text[], bigint[]", []any{"ns", keys, ids}, keysAndIDs},
		{"AppendKeys", e.sqlAppendKeys, "text, text[], bigint[], bigint[], bytea[], bigint[]", []any{"ns", keys, firsts, firsts, values, ords},
			fmt.Sprintf("'ns', '{%s}', '{%[2]s}', '{%[2]s}', array_fill('\\x00'::bytea, ARRAY[%d]), '{%s}'",
				strings.Join(keys, ","), strings.Join(firstText, ","), len(keys), strings.Join(ordText, ","))},
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
		generic := explain(t, conn, "EXPLAIN (COSTS OFF) EXECUTE batch_plan_"+c.name+" ("+c.literals+")")
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
