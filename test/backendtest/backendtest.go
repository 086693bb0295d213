// Package backendtest opens every storage backend for tests: memory, SQLite, multi-file SQLite,
// PostgreSQL, Redis and Redis Cluster, each fresh and isolated (its own file, directory, schema or key
// prefix). It is each backend's one harness: cross-backend tests take Open and Reopen, and each
// backend's conformance test runs storagetest on Backend.Harness (from an external test package,
// since this package imports the backends). PostgreSQL, Redis and Redis Cluster skip, or fail under CI=true,
// without their URL (internal/testenv).
package backendtest

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/backends/multisqlite"
	"github.com/stratalog/strata/backends/postgres"
	"github.com/stratalog/strata/backends/redis"
	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/indexedstorage/storagetest"
	"github.com/stratalog/strata/internal/testenv"
)

// Backend opens fresh storage of one engine. It is the one harness of that engine: cross-backend tests
// take Open and Reopen, and the backend's conformance test runs storagetest on Harness.
type Backend struct {
	Name string
	// Open returns empty storage of the test's own, closed when the test ends.
	Open func(tb testing.TB) is.Storage
	// Reopen returns a second handle on the storage Open returned (a process restarting over the same
	// data). The first handle stays usable. Memory's storage is its handle: Reopen hands back st
	// itself, and Harness leaves the suite's Reopen out.
	Reopen func(tb testing.TB, st is.Storage) is.Storage
	// Unreachable opens the engine pointed at a loopback port nothing listens on (storagetest.Harness's
	// Unreachable); nil for an engine without a server.
	Unreachable func(tb testing.TB) (is.Storage, error)

	// The suite's knobs, as storagetest.Harness documents them: zero takes the suite's default.
	ModelSinglePages      int
	ModelWalks            int
	LinearizableHistories int
	RaceRounds            int
	RawWalk               func(ctx context.Context, st is.Storage, ns string, pageSize int) (int, error)
	Poison                func(tb testing.TB, st is.Storage, ns, key string)

	sharesItsHandle bool // Reopen hands back the handle it is given
}

// Harness is the conformance suite's harness of b.
func (b Backend) Harness() storagetest.Harness {
	h := storagetest.Harness{
		New:                   b.Open,
		ModelSinglePages:      b.ModelSinglePages,
		ModelWalks:            b.ModelWalks,
		LinearizableHistories: b.LinearizableHistories,
		RaceRounds:            b.RaceRounds,
		RawWalk:               b.RawWalk,
		Poison:                b.Poison,
		Unreachable:           b.Unreachable,
	}
	if !b.sharesItsHandle {
		h.Reopen = b.Reopen
	}
	return h
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

// Memory: one store per Open; Reopen hands back the same store, memory being the process itself. An
// in-process engine runs thousands of model and racing rounds: each costs microseconds, and a lock bug
// shows in a small share of them.
func Memory() Backend {
	return Backend{
		Name:                  "memory",
		Open:                  func(tb testing.TB) is.Storage { return closing(tb, memory.New()) },
		Reopen:                func(_ testing.TB, st is.Storage) is.Storage { return st },
		sharesItsHandle:       true,
		ModelSinglePages:      200_000,
		ModelWalks:            20_000,
		LinearizableHistories: 5000,
		RaceRounds:            5000,
		RawWalk:               memoryRawWalk,
		// No Poison: nothing outside the Store reaches its indexes.
	}
}

func SQLite() Backend {
	open := func(tb testing.TB, path string) is.Storage {
		st, err := sqlite.New(tb.Context(), path, nil)
		if err != nil {
			tb.Fatalf("sqlite: %v", err)
		}
		return closing(tb, st)
	}
	return Backend{
		Name:       "sqlite",
		Open:       func(tb testing.TB) is.Storage { return open(tb, filepath.Join(tb.TempDir(), "strata.db")) },
		Reopen:     func(tb testing.TB, st is.Storage) is.Storage { return open(tb, st.(*sqlite.Store).Path()) },
		ModelWalks: 500,
		RawWalk:    sqliteRawWalk,
		Poison:     SQLitePoison,
	}
}

// MultiSQLite is multi-file SQLite with the default options.
func MultiSQLite() Backend { return MultiSQLiteWith(multisqlite.Options{}) }

// MultiSQLiteWith is multi-file SQLite opened with opts. Its raw walk and poison reach the files
// through the package's internals, so its own test sets them.
func MultiSQLiteWith(opts multisqlite.Options) Backend { return MultiSQLiteSetUp(opts, nil) }

// MultiSQLiteSetUp is MultiSQLiteWith with setUp called on each store it opens, before its first
// operation (a test's way into the package's insides). A nil setUp does nothing.
func MultiSQLiteSetUp(opts multisqlite.Options, setUp func(*multisqlite.Store)) Backend {
	open := func(tb testing.TB, dir string) is.Storage {
		st, err := multisqlite.New(tb.Context(), dir, &opts)
		if err != nil {
			tb.Fatalf("multisqlite: %v", err)
		}
		if setUp != nil {
			setUp(st)
		}
		return closing(tb, st)
	}
	var mu sync.Mutex // Open and Reopen may run on parallel tests
	dirs := map[is.Storage]string{}
	// A walk opens a file per key, ten times the cost of one on SQLite: the quick mode walks 200, the
	// long run 500.
	walks := 500
	if !testenv.Long() {
		walks = 200
	}
	return Backend{
		Name: "multisqlite",
		Open: func(tb testing.TB) is.Storage {
			dir := tb.TempDir()
			st := open(tb, dir)
			mu.Lock()
			defer mu.Unlock()
			dirs[st] = dir
			return st
		},
		Reopen: func(tb testing.TB, st is.Storage) is.Storage {
			mu.Lock()
			dir := dirs[st]
			mu.Unlock()
			return open(tb, dir)
		},
		ModelWalks: walks,
	}
}

func Postgres() Backend {
	open := func(tb testing.TB, connString, schema string) (*postgres.Store, error) {
		st, err := postgres.New(tb.Context(), connString, &postgres.Options{
			Schema: schema,
			// An empty search_path: a query that forgets its schema fails instead of finding a table.
			ConfigurePool: func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["search_path"] = "" },
		})
		if err != nil {
			return nil, err
		}
		closing(tb, st)
		return st, nil
	}
	mustOpen := func(tb testing.TB, schema string) is.Storage {
		st, err := open(tb, testenv.PostgresURL(tb), schema)
		if err != nil {
			tb.Fatalf("postgres: %v", err)
		}
		return st
	}
	return Backend{
		Name: "postgres",
		Open: func(tb testing.TB) is.Storage {
			return mustOpen(tb, testenv.PostgresSchema(tb, testenv.PostgresURL(tb)))
		},
		Reopen: func(tb testing.TB, st is.Storage) is.Storage { return mustOpen(tb, st.(*postgres.Store).Schema()) },
		Unreachable: func(tb testing.TB) (is.Storage, error) {
			st, err := open(tb, "postgres://postgres@"+ClosedAddr(tb)+"/test?sslmode=disable&connect_timeout=5", "s")
			if err != nil {
				return nil, err
			}
			return st, nil
		},
		// Every model step is a round trip or two: these keep the package under two minutes with -race
		// on a shared two-core machine.
		ModelSinglePages: 4000,
		ModelWalks:       600,
		// Under READ COMMITTED a guarded INSERT without the index lock lets two racing appends both
		// see the same last id: 150 rounds in the quick mode catch it.
		RaceRounds: 1500,
		RawWalk:    postgresRawWalk,
		// No Poison: the table's types, NOT NULLs and CHECK (id > 0) refuse every row that could break
		// the reads of one index, and what a writer can break (a dropped table, a revoked grant) breaks
		// every index alike.
	}
}

func Redis() Backend {
	b := redisBackend("redis", testenv.RedisURL, testenv.RedisPrefix)
	b.Unreachable = func(tb testing.TB) (is.Storage, error) {
		client := goredis.NewClient(&goredis.Options{Addr: ClosedAddr(tb), MaxRetries: -1, DialerRetries: 1})
		st, err := redis.New(tb.Context(), client, &redis.Options{Prefix: "p:"})
		if err != nil {
			return nil, err
		}
		return closing(tb, st), nil
	}
	return b
}

// RedisCluster is Redis on a Redis Cluster (STRATA_TEST_REDIS_CLUSTER_URL), each Open a key prefix of
// its own.
func RedisCluster() Backend {
	b := redisBackend("redis-cluster", testenv.RedisClusterURL, testenv.RedisClusterPrefix)
	b.Unreachable = func(tb testing.TB) (is.Storage, error) {
		client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{ClosedAddr(tb)}, MaxRetries: -1, DialerRetries: 1})
		st, err := redis.New(tb.Context(), client, &redis.Options{Prefix: "p:"})
		if err != nil {
			return nil, err
		}
		return closing(tb, st), nil
	}
	return b
}

// redisBackend opens a Store of a key prefix of its own on the server url names, through Open, the way
// an application does.
func redisBackend(name string, url func(testing.TB) string, prefix func(tb testing.TB, url string) string) Backend {
	open := func(tb testing.TB, prefix string) is.Storage {
		st, err := redis.Open(tb.Context(), testenv.WithQuery(tb, url(tb), redis.PrefixParam, prefix))
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		return closing(tb, st)
	}
	return Backend{
		Name:             name,
		Open:             func(tb testing.TB) is.Storage { return open(tb, prefix(tb, url(tb))) },
		Reopen:           func(tb testing.TB, st is.Storage) is.Storage { return open(tb, st.(*redis.Store).KeyPrefix()) },
		ModelSinglePages: 10_000,
		ModelWalks:       1000,
		RawWalk:          redisRawWalk,
		Poison:           redisPoison,
	}
}

// ClosedAddr returns a loopback address nothing listens on.
func ClosedAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
	return addr
}

// URL returns the URL backends.Open takes to reach st, storage this package opened, from another
// process (the strata binary, a second sidecar): the same SQLite file, PostgreSQL schema or Redis key
// prefix. Memory and multi-file SQLite are not shared this way here.
func URL(tb testing.TB, st is.Storage) string {
	tb.Helper()
	switch st := st.(type) {
	case *sqlite.Store:
		return "sqlite://" + st.Path()
	case *multisqlite.Store:
		return "multisqlite://" + st.Dir()
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
