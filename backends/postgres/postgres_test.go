package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stratalog/strata/backends/postgres"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/indexedstorage/storagetest"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/test/backendtest"
)

func harness() storagetest.Harness { return backendtest.Postgres().Harness() }

func TestConformance(t *testing.T) { storagetest.Run(t, harness()) }

func BenchmarkStorage(b *testing.B) { storagetest.Bench(b, harness(), 0) }

// BenchmarkWalkDepth: ScanStable (GROUP BY) and ScanDeep (the skip scan) walks of one-entry and
// deep keys. Fresh walks the rows as written: the test server runs no autovacuum, so every
// index-only scan still reads the heap to check visibility. Vacuumed walks them after VACUUM
// (ANALYZE), as a server with autovacuum on holds rows that stopped changing.
func BenchmarkWalkDepth(b *testing.B) {
	b.Run("Fresh", func(b *testing.B) { storagetest.BenchWalkDepth(b, harness(), 0, nil) })
	b.Run("Vacuumed", func(b *testing.B) { storagetest.BenchWalkDepth(b, harness(), 0, vacuum) })
}

func vacuum(ctx context.Context, st is.Storage) error {
	store, ok := backendtest.PostgresStore(st)
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
	st, err := postgres.New(tb.Context(), testenv.PostgresURL(tb), &postgres.Options{
		Schema: schema,
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
