package sweeps_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/multisqlite"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/baseline"
	"github.com/stratalog/strata/test/baseline/baselinetest"
	"github.com/stratalog/strata/test/oplogtest"
)

// agentsEnv sizes BenchmarkSweepStrandedBesideBaselines: stranded agents per archiver and round;
// layoutEnv chooses the sweep's blob layout (benchLayout).
const (
	agentsEnv = "STRATA_BENCH_AGENTS"
	layoutEnv = "STRATA_BENCH_LAYOUT"
)

// BenchmarkSweepStrandedBesideBaselines: per backend with an engine (memory has none; BesideRaw
// measures it) and blob store, in one run on one store, each iteration a round of three drains of
// freshly stranded agents (STRATA_BENCH_AGENTS, default 10,000, three entries each), in an order that
// rotates from round to round: the sweep (default budgets, ticks back to back, both passes of the gate;
// its blob layout STRATA_BENCH_LAYOUT's, packed by default);
// baseline's per-agent archiver (an independent one: the engine's own client, 4 workers, a page of keys
// with their last ids, then per agent its rows, a blob a row, one bounded delete under the index's
// lock); and baseline's batched one (a page of 128 agents read in one statement and dropped in one).
// Each drain must leave no agent in the namespace and every agent's entries in its blobs, or the
// benchmark fails.
//
// Reported, totals over the rounds: agents/s of each, sweep/raw and sweep/batched, and per archived
// agent:
//   - rt: round trips. The sweep's are its storage calls (each one round trip on PostgreSQL, a call into
//     SQLite in process), on Redis the requests its client sent (a hook on it: a command or a pipeline
//     each; a cluster's pipeline counted once); the baselines count their own the same way.
//   - commits (PostgreSQL): pg_stat_database.xact_commit of a database the benchmark holds alone
//     (strata_bench, created once), read and write transactions alike, every connection's counts
//     flushed before each reading (pg_stat_force_next_flush), the readings' own commits subtracted.
//   - commits (SQLite, multi-SQLite): the baselines' commit hooks (sqlite3_commit_hook on each of
//     their connections); the sweep's write calls (append, drop_prefix, delete and their batch forms,
//     each one transaction on SQLite; on multi-SQLite a batch call commits once a file, so there it is
//     a lower bound).
//   - cmds and scripts (Redis, Redis Cluster): INFO commandstats calls (commands scripts run included)
//     and script calls (EVALSHA, EVAL, …), and server-µs, the servers' CPU time (INFO cpu, user and
//     system), server-wide: other clients of the server count too, so run it alone.
func BenchmarkSweepStrandedBesideBaselines(b *testing.B) {
	n := testenv.PositiveInt(b, agentsEnv, benchAgents)
	ns := oplog.CompressedNamespace(oplog.Ephemeral, 1)
	for _, be := range backendtest.All() {
		for _, bs := range benchBlobStores {
			b.Run(be.Name+"/"+bs.name, func(b *testing.B) {
				if be.Name == "memory" {
					b.Skip("memory has no engine to reach but strata's own: BenchmarkSweepStrandedBesideRaw measures it")
				}
				if be.Name == "postgres" {
					isolatePostgres(b)
				}
				cfg := oplogtest.SweepConfig()
				var calls oplogtest.CallCounter
				st := be.Open(b)
				blobs := bs.open(b)
				r := oplogtest.NewSweepRigOn(b, oplogtest.NewLayersIn(b, calls.Wrap(st), blobs, benchLayout()), cfg)
				var counts [2]baseline.Counts // raw, batched
				opts := baseline.Options{Blobs: blobs, Workers: cfg.MaxConcurrency, PageSize: cfg.PageSize, Counts: &counts[0]}
				batchedOpts := opts
				batchedOpts.Counts = &counts[1]
				eng, ok := baselinetest.For(b, st, opts, batchedOpts)
				if !ok {
					b.Skipf("no engine under %s", be.Name)
				}
				b.Logf("%s; the sweep's blob layout: %s; rt: %s", eng.Describe(), benchLayout(), map[bool]string{true: "requests strata's client sent", false: "strata's storage calls"}[eng.StrataRoundTrips != nil])

				type tally struct {
					time time.Duration
					// rt and commits as the archiver counts them (the sweep: its storage calls, or
					// its client's requests on Redis, and its write calls); engine and scripts as
					// the engine counts them (xact_commit, or commandstats calls and script calls),
					// and writes the write transactions PostgreSQL assigned an id to.
					agents, rt, commits, engine, scripts, writes int64
					serverCPU                                    time.Duration
				}
				var sweep, rawT, batchT tally
				phases := []struct {
					name   string
					t      *tally
					run    func(ctx context.Context) (int, error)
					counts *baseline.Counts // nil for the sweep
				}{
					{"sweep", &sweep, func(ctx context.Context) (int, error) {
						r.Drained.Store(0)
						sweepUntilDrained(b, r, int64(n))
						return int(r.Drained.Load()), nil
					}, nil},
					{"raw", &rawT, func(ctx context.Context) (int, error) { return eng.PerAgent(ctx, ns) }, &counts[0]},
					{"batched", &batchT, func(ctx context.Context) (int, error) { return eng.Batched(ctx, ns) }, &counts[1]},
				}
				if eng.Batched == nil { // multi-SQLite: a file an index, nothing to batch but the walk
					phases = phases[:2]
				}
				for i := 0; b.Loop(); i++ {
					for k := range phases {
						ph := phases[(i+k)%len(phases)]
						agents := r.StrandAgents(b, fmt.Sprintf("%s-%d", ph.name, i), n, 3)
						ctx := b.Context()
						var before baselinetest.Counted
						if eng.Counter != nil {
							var err error
							if before, err = eng.Counter(ctx); err != nil {
								b.Fatal(err)
							}
						}
						calls.Reset()
						var rt0, commits0, strataRT0 int64
						if ph.counts != nil {
							rt0, commits0 = ph.counts.RoundTrips.Load(), ph.counts.Commits.Load()
						}
						if eng.StrataRoundTrips != nil {
							strataRT0 = eng.StrataRoundTrips.Load()
						}

						start := time.Now()
						got, err := ph.run(ctx)
						elapsed := time.Since(start)

						if err != nil || got != n {
							b.Fatalf("%s archived %d agents of %d: %v", ph.name, got, n, err)
						}
						ph.t.time += elapsed
						ph.t.agents += int64(got)
						if ph.counts != nil {
							ph.t.rt += ph.counts.RoundTrips.Load() - rt0
							ph.t.commits += ph.counts.Commits.Load() - commits0
						} else {
							byOp := calls.Reset()
							if eng.StrataRoundTrips != nil {
								ph.t.rt += eng.StrataRoundTrips.Load() - strataRT0
							} else {
								ph.t.rt += int64(total(byOp))
							}
							for _, op := range []is.Operation{is.OpAppend, is.OpAppendMany, is.OpDropPrefix, is.OpDelete, is.OpDropPrefixMany} {
								ph.t.commits += int64(byOp[op])
							}
						}
						if eng.Counter != nil {
							after, err := eng.Counter(ctx)
							if err != nil {
								b.Fatal(err)
							}
							d := after.Minus(before)
							ph.t.engine += d.N
							ph.t.scripts += d.Scripts
							ph.t.writes += d.Writes
							ph.t.serverCPU += d.ServerCPU
						}
						requireDrainedBy(b, ph.name, r, st, blobs, ns, agents)
						calls.Reset()
					}
				}
				report := func(name string, t tally) {
					agents := float64(t.agents)
					b.ReportMetric(agents/t.time.Seconds(), name+"-agents/s")
					b.ReportMetric(float64(t.rt)/agents, name+"-rt/agent")
					switch eng.Unit {
					case "commits":
						b.ReportMetric(float64(t.engine)/agents, name+"-commits/agent")
						b.ReportMetric(float64(t.writes)/agents, name+"-writes/agent")
					case "cmds":
						b.ReportMetric(float64(t.engine)/agents, name+"-cmds/agent")
						b.ReportMetric(float64(t.scripts)/agents, name+"-scripts/agent")
						b.ReportMetric(float64(t.serverCPU.Microseconds())/agents, name+"-server-µs/agent")
					default:
						b.ReportMetric(float64(t.commits)/agents, name+"-commits/agent")
					}
				}
				report("sweep", sweep)
				report("raw", rawT)
				rate := func(t tally) float64 { return float64(t.agents) / t.time.Seconds() }
				b.ReportMetric(rate(sweep)/rate(rawT), "sweep/raw")
				if eng.Batched != nil {
					report("batched", batchT)
					b.ReportMetric(rate(sweep)/rate(batchT), "sweep/batched")
				}
			})
		}
	}
}

// requireDrainedBy fails the benchmark unless the namespace holds none of agents (nor anything else)
// and each agent's three entries are in the blobs of the archiver that drained them: the sweep's blob
// level, or the baselines' BlobDir, once each.
func requireDrainedBy(b *testing.B, archiver string, r *oplogtest.SweepRig, st is.Storage, blobs archive.BlobStore, ns string, agents []oplog.AgentID) {
	b.Helper()
	if s, ok := st.(*multisqlite.Store); ok {
		// Before any strata read, which would remove an emptied file an archiver left.
		var left []string
		err := filepath.WalkDir(s.NamespaceDir(ns), func(path string, d fs.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(path, ".db") {
				left = append(left, path)
			}
			return nil
		})
		if err != nil || len(left) > 0 {
			b.Fatalf("%s left %d files (%v): %q", archiver, len(left), err, left[:min(len(left), 3)])
		}
	}
	if left := r.StrandedCount(b, agents); left != 0 {
		b.Fatalf("%s left %d agents of %d", archiver, left, len(agents))
	}
	if page, err := st.ScanStable(b.Context(), ns, is.AllKeys, is.Resume{}, 1); err != nil || len(page.Keys) > 0 {
		b.Fatalf("%s left %q in %s (%v)", archiver, page.Keys, ns, err)
	}
	want := oplogtest.SpanIndexes(1, 3)
	for _, a := range agents {
		var covered []oplog.Index
		if archiver == "sweep" {
			covered = r.BlobCoverage(b, a, oplog.Ephemeral)
		} else {
			paths, err := blobs.List(b.Context(), baseline.BlobDir(a.StoredKey()))
			if err != nil {
				b.Fatal(err)
			}
			for _, p := range paths {
				data, err := blobs.Get(b.Context(), p)
				if err != nil {
					b.Fatal(err)
				}
				first, last, err := archive.ChunkSpan(data)
				if err != nil || !strings.HasSuffix(p, fmt.Sprintf("%020d", last)) {
					b.Fatalf("%s: blob %s holds %d..%d (%v)", archiver, p, first, last, err)
				}
				for i := first; i <= last; i++ {
					covered = append(covered, i)
				}
			}
		}
		if !slices.Equal(covered, want) {
			b.Fatalf("%s: the blobs of %s cover %v, want %v", archiver, a, covered, want)
		}
	}
}

// benchDatabase is the PostgreSQL database the baselines benchmark runs in, alone, so that the
// database's commit count is its own.
const benchDatabase = "strata_bench"

// isolatePostgres points the test's PostgreSQL URL at benchDatabase on the same server, creating it
// the first time.
func isolatePostgres(b *testing.B) {
	raw := testenv.PostgresURL(b)
	conn, err := pgx.Connect(b.Context(), raw)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(b.Context(), `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, benchDatabase).Scan(&exists); err != nil {
		b.Fatal(err)
	}
	if !exists {
		var pgErr *pgconn.PgError
		if _, err := conn.Exec(b.Context(), "CREATE DATABASE "+benchDatabase); err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42P04") {
			b.Fatal(err)
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	u.Path = "/" + benchDatabase
	b.Setenv(testenv.PostgresEnv, u.String())
}

// benchLayout is the blob layout of the sweep's stack in BenchmarkSweepStrandedBesideBaselines:
// STRATA_BENCH_LAYOUT, or the default (packed). "chunks" gives the sweep the baselines' own work below
// (a blob an agent, no blob index), to compare the archive phases like for like; packed also writes
// a blob index row an agent into the same storage, which the baselines do not. A layout the stack
// does not know fails the benchmark when the stack is built.
func benchLayout() string {
	if l := os.Getenv(layoutEnv); l != "" {
		return l
	}
	return archive.LayoutPacked
}
