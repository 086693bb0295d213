package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stratalog/strata/backends/postgres"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/indexedstorage/storagetest"
	"github.com/stratalog/strata/internal/testenv"
)

func harness() storagetest.Harness {
	return storagetest.Harness{
		New: func(tb testing.TB) is.Storage {
			return newStore(tb, testenv.PostgresSchema(tb, testenv.PostgresURL(tb)))
		},
		// Every model step is a round trip or two: these keep the package under two minutes with -race
		// on a shared two-core machine.
		ModelSinglePages: 4000,
		ModelWalks:       600,
		RawWalk:          rawWalk,
		// No Poison: the table's types, NOT NULLs and CHECK (id > 0) refuse every row that could break
		// the reads of one index, and what a writer can break (a dropped table, a revoked grant) breaks
		// every index alike.
	}
}

func TestConformance(t *testing.T) { storagetest.Run(t, harness()) }

func BenchmarkStorage(b *testing.B) { storagetest.Bench(b, harness(), 0) }

// BenchmarkWalkDepth: ScanStable (GROUP BY) and ScanDeep (the skip scan) walks of one-entry and deep
// keys. Fresh walks the rows as written: the test server runs no autovacuum, so every index-only scan
// still reads the heap to check visibility. Vacuumed walks them after VACUUM (ANALYZE), as a server with autovacuum
// on holds rows that stopped changing.
func BenchmarkWalkDepth(b *testing.B) {
	b.Run("Fresh", func(b *testing.B) { storagetest.BenchWalkDepth(b, harness(), 0, nil) })
	b.Run("Vacuumed", func(b *testing.B) { storagetest.BenchWalkDepth(b, harness(), 0, vacuum) })
}

func vacuum(ctx context.Context, st is.Storage) error {
	store, ok := unwrap(st)
	if !ok {
		return fmt.Errorf("vacuum: %T is not a postgres store", st)
	}
	_, err := store.Pool().Exec(ctx, `VACUUM (ANALYZE) `+store.Table())
	return err
}

// newStore opens a Store on the test server in schema, closed when the test ends. Its connections run
// with an empty search_path, so a query that does not name the schema fails.
func newStore(tb testing.TB, schema string, configure ...func(*pgxpool.Config)) *postgres.Store {
	tb.Helper()
	st, err := postgres.New(tb.Context(), postgres.Config{
		ConnString: testenv.PostgresURL(tb),
		Schema:     schema,
		ConfigurePool: func(c *pgxpool.Config) {
			emptySearchPath(c)
			for _, fn := range configure {
				fn(c)
			}
		},
	})
	if err != nil {
		tb.Fatalf("postgres.New: %v", err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

func emptySearchPath(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["search_path"] = "" }

// rawWalk is the keyset loop a Postgres user would write without strata, on the store's own pool: keys
// with their last id, as an archiver needs them and as ScanStable's pages carry them.
func rawWalk(ctx context.Context, st is.Storage, ns string, pageSize int) (int, error) {
	store, ok := unwrap(st)
	if !ok {
		return 0, fmt.Errorf("raw walk: %T is not a postgres store", st)
	}
	query := `SELECT key, max(id) FROM ` + store.Table() + ` WHERE namespace = $1 AND key > $2 GROUP BY key ORDER BY key LIMIT $3`
	n, last := 0, ""
	for {
		rows, _ := store.Pool().Query(ctx, query, ns, last, pageSize)
		var keys []string
		var key string
		var id int64
		_, err := pgx.ForEachRow(rows, []any{&key, &id}, func() error { keys = append(keys, key); return nil })
		if err != nil {
			return n, err
		}
		n += len(keys)
		if len(keys) < pageSize {
			return n, nil
		}
		last = keys[len(keys)-1]
	}
}

// unwrap finds the *postgres.Store under any wrappers.
func unwrap(st is.Storage) (*postgres.Store, bool) {
	for {
		switch s := st.(type) {
		case *postgres.Store:
			return s, true
		case is.Wrapper:
			st = s.Unwrap()
		default:
			return nil, false
		}
	}
}
