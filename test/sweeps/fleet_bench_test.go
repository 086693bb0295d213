package sweeps_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/backends/redis"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/sweeper"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
)

// The cost model of DESIGN §11: 23,000 oplogs in flight (10^9 invocations a day), all resident, and
// E sidecars that each own 1/E of 1,024 shards walk one full pass each. With the bucketed layout a
// sidecar reads its own keys only, so the keys the fleet reads per pass stay at ≈ 23,000 whatever E.
const (
	fleetAgents = 23_000
	fleetShards = 1024
)

// BenchmarkSweepFleetPass: per backend and E = 1, 10, 100, the keys and storage calls of one pass of
// every sidecar of the fleet; "redis+1M" is Redis with a million unrelated keys in the same database.
func BenchmarkSweepFleetPass(b *testing.B) {
	type backend struct {
		backendtest.Backend
		unrelated int
	}
	for _, be := range []backend{{backendtest.SQLite(), 0}, {backendtest.Postgres(), 0}, {backendtest.Redis(), 0},
		{backendtest.Redis(), 1_000_000}} {
		name := be.Name
		if be.unrelated > 0 {
			name = fmt.Sprintf("%s+%dM", name, be.unrelated/1_000_000)
		}
		b.Run(name, func(b *testing.B) {
			var calls oplogtest.CallCounter
			st := be.Open(b)
			if be.unrelated > 0 {
				fillUnrelated(b, st.(*redis.Store).Client(), be.unrelated)
			}
			l := oplogtest.NewLayers(b, calls.Wrap(st), nil)
			cfg := oplogtest.SweepConfig()
			cfg.MaxScannedPerTick = sweeper.MaxScannedPerTickRange.Max
			oplogtest.NewSweepRigOn(b, l, cfg).StrandAgents(b, "inflight", fleetAgents, 1)
			for _, e := range []int{1, 10, 100} {
				b.Run(fmt.Sprintf("E=%d", e), func(b *testing.B) {
					rigs := make([]*oplogtest.SweepRig, e)
					for i := range rigs {
						var shards []int
						for s := i * fleetShards / e; s < (i+1)*fleetShards/e; s++ {
							shards = append(shards, s)
						}
						rigs[i] = oplogtest.NewSweepRigOwning(b, l, cfg, sweeper.Assignment{ShardCount: fleetShards, Shards: shards})
						rigs[i].AllResident.Store(true)
					}
					var keys, pages, most int
					var elapsed time.Duration
					for b.Loop() {
						keys, pages, most, elapsed = 0, 0, 0, 0
						for _, r := range rigs {
							start, scanned := time.Now(), 0
							calls.Reset()
							for done := false; !done; {
								rep := r.Sweeper.SweepOnce(b.Context())
								rr := rep.Routes[0]
								scanned += rr.Scanned
								done = rr.PassCompleted
								if rr.Outcomes[sweeper.OutcomeArchived] > 0 || rr.Errors > 0 {
									b.Fatalf("a steady-state pass archived or failed: %+v", rr.Outcomes)
								}
							}
							elapsed += time.Since(start)
							got := calls.Reset()
							if others := total(got) - got[is.OpScanStable]; others != 0 {
								b.Fatalf("calls %v: a resident agent cost more than its page", got)
							}
							keys, pages, most = keys+scanned, pages+got[is.OpScanStable], max(most, scanned)
						}
						if keys < fleetAgents {
							b.Fatalf("the fleet read %d keys in a pass, fewer than the %d in flight", keys, fleetAgents)
						}
					}
					b.ReportMetric(float64(keys), "fleet-keys/pass")
					b.ReportMetric(float64(keys)/float64(e), "keys/pass/sidecar")
					b.ReportMetric(float64(most), "max-keys/pass/sidecar")
					b.ReportMetric(float64(pages)/float64(e), "calls/pass/sidecar")
					b.ReportMetric(float64(elapsed.Nanoseconds())/float64(keys), "fleet-ns/key")
				})
			}
		})
	}
}

// fillUnrelated writes n small keys that are no strata store's into the database, and removes them when
// the benchmark ends.
func fillUnrelated(b *testing.B, c goredis.UniversalClient, n int) {
	prefix := fmt.Sprintf("unrelated-%d-", time.Now().UnixNano())
	const batch = 10_000
	put := func(do func(p goredis.Pipeliner, key string)) {
		for i := 0; i < n; i += batch {
			if _, err := c.Pipelined(context.Background(), func(p goredis.Pipeliner) error {
				for j := i; j < min(i+batch, n); j++ {
					do(p, fmt.Sprint(prefix, j))
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
	}
	put(func(p goredis.Pipeliner, key string) { p.Set(context.Background(), key, "x", 0) })
	b.Cleanup(func() { put(func(p goredis.Pipeliner, key string) { p.Del(context.Background(), key) }) })
}

func total(calls map[is.Operation]int) int {
	n := 0
	for _, c := range calls {
		n += c
	}
	return n
}
