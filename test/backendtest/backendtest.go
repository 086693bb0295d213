// Package backendtest opens every storage backend for cross-backend tests: memory, SQLite,
// multi-file SQLite, PostgreSQL, Redis and Redis Cluster, each fresh and isolated (its own file,
// directory, schema or key prefix). PostgreSQL, Redis and Redis Cluster skip, or fail under CI=true,
// without their URL (internal/testenv).
package backendtest

import (
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/backends/multisqlite"
	"github.com/stratalog/strata/backends/postgres"
	"github.com/stratalog/strata/backends/redis"
	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
)

// Backend opens fresh storage of one engine.
type Backend struct {
	Name string
	// Open returns empty storage of the test's own, closed when the test ends.
	Open func(tb testing.TB) is.Storage
	// Reopen returns a second handle on the storage Open returned (a process restarting over the same
	// data). The first handle stays usable.
	Reopen func(tb testing.TB, st is.Storage) is.Storage
}

// All lists every backend.
func All() []Backend {
	return []Backend{Memory(), SQLite(), MultiSQLite(), Postgres(), Redis(), RedisCluster()}
}

// Each runs fn as a subtest per backend.
func Each(t *testing.T, fn func(t *testing.T, b Backend)) {
	for _, b := range All() {
		t.Run(b.Name, func(t *testing.T) { fn(t, b) })
	}
}

func closing(tb testing.TB, st is.Storage) is.Storage {
	tb.Cleanup(func() { st.Close() })
	return st
}

// Memory: one store per Open; Reopen hands back the same store, memory being the process itself.
func Memory() Backend {
	return Backend{
		Name:   "memory",
		Open:   func(tb testing.TB) is.Storage { return closing(tb, memory.New()) },
		Reopen: func(_ testing.TB, st is.Storage) is.Storage { return st },
	}
}

func SQLite() Backend {
	open := func(tb testing.TB, path string) is.Storage {
		st, err := sqlite.Open(tb.Context(), path, sqlite.Options{})
		if err != nil {
			tb.Fatalf("sqlite: %v", err)
		}
		return closing(tb, st)
	}
	return Backend{
		Name:   "sqlite",
		Open:   func(tb testing.TB) is.Storage { return open(tb, filepath.Join(tb.TempDir(), "strata.db")) },
		Reopen: func(tb testing.TB, st is.Storage) is.Storage { return open(tb, st.(*sqlite.Store).Path()) },
	}
}

func MultiSQLite() Backend {
	open := func(tb testing.TB, dir string) is.Storage {
		st, err := multisqlite.Open(tb.Context(), dir, multisqlite.Options{})
		if err != nil {
			tb.Fatalf("multisqlite: %v", err)
		}
		return closing(tb, st)
	}
	dirs := map[is.Storage]string{}
	return Backend{
		Name: "multisqlite",
		Open: func(tb testing.TB) is.Storage {
			dir := tb.TempDir()
			st := open(tb, dir)
			dirs[st] = dir
			return st
		},
		Reopen: func(tb testing.TB, st is.Storage) is.Storage { return open(tb, dirs[st]) },
	}
}

func Postgres() Backend {
	open := func(tb testing.TB, schema string) is.Storage {
		st, err := postgres.New(tb.Context(), postgres.Config{
			ConnString: testenv.PostgresURL(tb),
			Schema:     schema,
			// An empty search_path: a query that forgets its schema fails instead of finding a table.
			ConfigurePool: func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["search_path"] = "" },
		})
		if err != nil {
			tb.Fatalf("postgres: %v", err)
		}
		return closing(tb, st)
	}
	return Backend{
		Name:   "postgres",
		Open:   func(tb testing.TB) is.Storage { return open(tb, testenv.PostgresSchema(tb, testenv.PostgresURL(tb))) },
		Reopen: func(tb testing.TB, st is.Storage) is.Storage { return open(tb, st.(*postgres.Store).Schema()) },
	}
}

func Redis() Backend {
	open := func(tb testing.TB, prefix string) is.Storage {
		st, err := redis.Open(tb.Context(), testenv.WithQuery(tb, testenv.RedisURL(tb), redis.PrefixParam, prefix))
		if err != nil {
			tb.Fatalf("redis: %v", err)
		}
		return closing(tb, st)
	}
	return Backend{
		Name:   "redis",
		Open:   func(tb testing.TB) is.Storage { return open(tb, testenv.RedisPrefix(tb, testenv.RedisURL(tb))) },
		Reopen: func(tb testing.TB, st is.Storage) is.Storage { return open(tb, st.(*redis.Store).KeyPrefix()) },
	}
}

// RedisCluster is Redis on a Redis Cluster (STRATA_TEST_REDIS_CLUSTER_URL), each Open a key prefix of
// its own.
func RedisCluster() Backend {
	open := func(tb testing.TB, prefix string) is.Storage {
		st, err := redis.Open(tb.Context(), testenv.WithQuery(tb, testenv.RedisClusterURL(tb), redis.PrefixParam, prefix))
		if err != nil {
			tb.Fatalf("redis cluster: %v", err)
		}
		return closing(tb, st)
	}
	return Backend{
		Name: "redis-cluster",
		Open: func(tb testing.TB) is.Storage {
			return open(tb, testenv.RedisClusterPrefix(tb, testenv.RedisClusterURL(tb)))
		},
		Reopen: func(tb testing.TB, st is.Storage) is.Storage { return open(tb, st.(*redis.Store).KeyPrefix()) },
	}
}

// URL returns the URL backends.Open takes to reach st, storage this package opened, from another
// process (the strata binary, a second sidecar): the same SQLite file, PostgreSQL schema or Redis key
// prefix. Memory and multi-file SQLite are not shared this way here.
func URL(tb testing.TB, st is.Storage) string {
	tb.Helper()
	switch st := st.(type) {
	case *sqlite.Store:
		return "sqlite://" + st.Path()
	case *postgres.Store:
		return testenv.WithQuery(tb, testenv.PostgresURL(tb), "schema", st.Schema())
	case *redis.Store:
		if st.IsCluster() {
			return testenv.WithQuery(tb, testenv.RedisClusterURL(tb), redis.PrefixParam, st.KeyPrefix())
		}
		return testenv.WithQuery(tb, testenv.RedisURL(tb), redis.PrefixParam, st.KeyPrefix())
	}
	tb.Fatalf("backendtest.URL: no URL for %T", st)
	return ""
}
