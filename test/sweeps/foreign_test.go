package sweeps_test

import (
	"slices"
	"testing"

	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
)

// On every backend, keys a foreign writer put in compressed level 1's namespace outside every bucket's
// range ("nobucket", "4001/c:a", "zzzz", below "0000/") are met once a pass by the one sidecar of a
// fleet of two that owns bucket 0: counted unparseable and named, never archived, never deleted, while
// the stranded agents of both sidecars' shards are archived as ever.
func TestSweep_KeysOutsideTheBucketsAreCountedAndNamedOnceByTheFleetOnEveryBackend(t *testing.T) {
	outside := []string{"!below", "000/x", "4000/", "4001/c:a", "nobucket", "zzzz"}
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		st, blobs := b.Open(t), memory.NewBlobStore()
		cfg := oplogtest.SweepConfig()
		cfg.PageSize = 3 // several pages a pass, the outside parts among them
		fleet := []*oplogtest.SweepRig{
			oplogtest.NewSweepRigOwning(t, oplogtest.NewLayers(t, st, blobs), cfg, sweeper.Assignment{ShardCount: 2, Shards: []int{1}}),
			oplogtest.NewSweepRigOwning(t, oplogtest.NewLayers(t, st, blobs), cfg, sweeper.Assignment{ShardCount: 2, Shards: []int{0}}),
		}
		ns := oplog.CompressedNamespace(oplog.Ephemeral, 1)
		for _, key := range outside {
			if err := st.Append(t.Context(), ns, key, 7, []byte("foreign "+key)); err != nil {
				t.Fatal(err)
			}
		}
		stranded := fleet[0].StrandAgents(t, "beside-foreign", 10, 4)
		for pass := 1; pass <= 3; pass++ {
			var named []string
			counted := 0
			for i, sc := range fleet {
				for ticks := 0; ; ticks++ {
					if ticks == 20 {
						t.Fatalf("sidecar %d: pass %d did not complete in 20 ticks", i, pass)
					}
					rr := sc.Sweeper.SweepOnce(t.Context()).Routes[0]
					counted += rr.Outcomes[sweeper.OutcomeUnparseable]
					for _, u := range rr.Unparseable {
						named = append(named, u.Key)
						if i == 0 {
							t.Errorf("pass %d: the sidecar without bucket 0 named %q", pass, u.Key)
						}
					}
					if rr.PassCompleted {
						break
					}
				}
			}
			if slices.Sort(named); counted != len(outside) || !slices.Equal(named, outside) {
				t.Fatalf("pass %d: the fleet counted %d unparseable keys and named %q; want each of %q once", pass, counted, named, outside)
			}
		}
		for _, key := range outside {
			got, err := st.Read(t.Context(), ns, key, 1, 100)
			if err != nil || len(got) != 1 || got[0].ID != 7 || string(got[0].Value) != "foreign "+key {
				t.Fatalf("foreign key %q holds %v (%v) after the sweeps", key, got, err)
			}
		}
		plain := oplogtest.NewLayers(t, st, blobs)
		for _, a := range stranded {
			plain.RequireExact(t, a, oplog.Ephemeral, 4)
			plain.RequireDrained(t, a, oplog.Ephemeral, 4)
		}
	})
}
