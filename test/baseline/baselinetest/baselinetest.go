// Package baselinetest points package baseline's archivers at the engine under a strata store a test
// opened (backendtest), each with a client of its own, and reads the engine's own counters around a
// run. It imports strata's backends to learn where the store is (a file, a directory, a schema, a key
// prefix); the archivers it builds reach the engine without them.
package baselinetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/backends/multisqlite"
	"github.com/stratalog/strata/backends/redis"
	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/baseline"
)

// Archive archives every index of a namespace and returns how many.
type Archive func(ctx context.Context, ns string) (int, error)

// ApplicationName names the PostgreSQL sessions of the baselines For builds (pg_stat_activity).
const ApplicationName = "strata-baseline"

// Engine is the baselines over one strata store's engine.
type Engine struct {
	PerAgent Archive
	Batched  Archive // nil where there is none (multi-SQLite)
	// Counter reads the engine's own count of what it did (nil on SQLite, which keeps none: there the
	// archivers count commits with a commit hook, and strata's by its write calls).
	Counter func(ctx context.Context) (Counted, error)
	// Unit names what Counter counts: "commits" (PostgreSQL's xact_commit) or "cmds" (Redis's
	// commandstats calls).
	Unit string
	// StrataRoundTrips counts the requests strata's own client sends, where the engine's client can
	// be hooked (Redis: a command or a pipeline each); nil elsewhere.
	StrataRoundTrips *atomic.Int64
}

// Counted is one reading of an engine's counter.
type Counted struct {
	N       int64 // xact_commit, or commandstats calls
	Scripts int64 // Redis: script calls among N
	Writes  int64 // PostgreSQL: write transactions (transaction ids assigned), of the whole cluster
	// ServerCPU is the server's CPU time (Redis: used_cpu_user + used_cpu_sys of every master); zero
	// where it is not read.
	ServerCPU time.Duration
	overhead  int64 // commits the reading itself made and counted (PostgreSQL)
}

// Minus is what the engine counted between before and c, less what the readings themselves cost.
func (c Counted) Minus(before Counted) Counted {
	// PostgreSQL: the reading before made one more commit (its SELECT of the sum), counted now.
	extra := c.overhead
	if before.overhead > 0 {
		extra++
	}
	return Counted{N: c.N - before.N - extra, Scripts: c.Scripts - before.Scripts, Writes: c.Writes - before.Writes, ServerCPU: c.ServerCPU - before.ServerCPU}
}

// For builds the baselines over st's engine, the per-agent one with opts and the batched one with
// batched (each counting into its own Counts), sharing one client. Memory has no engine: it returns
// false.
func For(tb testing.TB, st is.Storage, opts, batched baseline.Options) (Engine, bool) {
	tb.Helper()
	for {
		w, ok := st.(is.Wrapper)
		if !ok {
			break
		}
		st = w.Unwrap()
	}
	switch s := st.(type) {
	case *sqlite.Store:
		a := &baseline.SQLite{Path: s.Path(), Options: opts}
		c := &baseline.SQLite{Path: s.Path(), Options: batched}
		tb.Cleanup(func() { a.Close(); c.Close() })
		return Engine{PerAgent: a.PerAgent, Batched: c.Batched}, true
	case *multisqlite.Store:
		a := &baseline.MultiSQLite{Dir: s.Dir(), Options: opts}
		return Engine{PerAgent: a.PerAgent}, true
	case *redis.Store:
		var client goredis.UniversalClient
		if s.IsCluster() {
			client = testenv.RedisClusterClient(tb, testenv.RedisClusterURL(tb))
		} else {
			o := *s.Client().(*goredis.Client).Options()
			client = goredis.NewClient(&o)
			tb.Cleanup(func() { client.Close() })
		}
		a := &baseline.Redis{Client: client, Prefix: s.KeyPrefix(), Options: opts}
		c := &baseline.Redis{Client: client, Prefix: s.KeyPrefix(), Options: batched}
		var strata atomic.Int64
		s.Client().AddHook(roundTrips{&strata})
		return Engine{
			PerAgent: a.PerAgent,
			Batched:  c.Batched,
			Unit:     "cmds",
			Counter: func(ctx context.Context) (Counted, error) {
				st, err := baseline.RedisCommandStats(ctx, client)
				return Counted{N: st.Calls, Scripts: st.Scripts, ServerCPU: st.CPU}, err
			},
			StrataRoundTrips: &strata,
		}, true
	}
	if s, ok := backendtest.PostgresStore(st); ok {
		open := func(conns int32) *pgxpool.Pool {
			cfg, err := pgxpool.ParseConfig(s.Pool().Config().ConnString())
			if err != nil {
				tb.Fatal(err)
			}
			cfg.ConnConfig.RuntimeParams["search_path"] = ""
			cfg.ConnConfig.RuntimeParams["application_name"] = ApplicationName
			cfg.MaxConns = conns
			if conns == 1 { // the counter: no statement preparation, whose transactions would count
				cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
			}
			pool, err := pgxpool.NewWithConfig(tb.Context(), cfg)
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(pool.Close)
			return pool
		}
		pool, counter := open(int32(max(opts.Workers, batched.Workers, baseline.DefaultWorkers))), open(1)
		a := &baseline.PG{Pool: pool, Schema: s.Schema(), Options: opts}
		c := &baseline.PG{Pool: pool, Schema: s.Schema(), Options: batched}
		return Engine{
			PerAgent: a.PerAgent,
			Batched:  c.Batched,
			Unit:     "commits",
			Counter: func(ctx context.Context) (Counted, error) {
				n, overhead, err := baseline.PGCommits(ctx, counter, s.Pool(), pool)
				if err != nil {
					return Counted{}, err
				}
				writes, err := baseline.PGWriteTransactions(ctx, counter)
				return Counted{N: n, Writes: writes, overhead: overhead}, err
			},
		}, true
	}
	return Engine{}, false
}

// roundTrips counts a go-redis client's requests: a command or a pipeline each (a cluster's pipeline
// once, though go-redis sends it to each node it touches, in parallel).
type roundTrips struct{ n *atomic.Int64 }

func (r roundTrips) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (r roundTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r roundTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// Describe is a one-line account of what Engine's counters count, for a benchmark's log.
func (e Engine) Describe() string {
	switch e.Unit {
	case "commits":
		return "commits: pg_stat_database.xact_commit of the database (read and write transactions alike), every connection flushed"
	case "cmds":
		return "cmds: INFO commandstats calls of the server (commands scripts run included; other clients' too)"
	}
	return "commits: the archivers' commit hooks; strata's write calls"
}
