package sweeper_test

import (
	"slices"
	"strings"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
)

// Keys a foreign writer put in the namespace the sweep walks that are no agent's stored key: outside
// every bucket's key range (below "0000/", at "4000/" and above); inside it, in each half of the
// buckets, one with the prefix of another bucket than its agent's and one with the right prefix for an
// agent key whose component or name is empty (docs/storage-format.md).
var (
	keysOutsideBuckets = []string{"!below-every-bucket", "000/x", "4000/", "4001/c:a", "nobucket", "zzzz"}
	keysInShardZero    = []string{"0a5c/c:a", "11a4/:a"} // c:a is bucket 0x0a5b; ":a" is 0x11a4
	keysInShardOne     = []string{"30d8/c:", "3fff/c:a"} // "c:" is 0x30d8
)

func allForeignKeys() []string {
	return slices.Concat(keysOutsideBuckets, keysInShardZero, keysInShardOne)
}

// plantForeign writes one entry under each key in the namespace of compressed level 1, as a foreign
// writer would, and returns what it wrote under each.
func plantForeign(t *testing.T, st is.Storage, keys []string) map[string][]byte {
	t.Helper()
	written := map[string][]byte{}
	for _, key := range keys {
		written[key] = []byte("foreign " + key)
		if err := st.Append(t.Context(), oplog.CompressedNamespace(oplog.Ephemeral, 1), key, 1, written[key]); err != nil {
			t.Fatal(err)
		}
	}
	return written
}

// requireUntouched checks every planted key still holds exactly what its writer wrote.
func requireUntouched(t *testing.T, st is.Storage, written map[string][]byte) {
	t.Helper()
	for key, value := range written {
		got, err := st.Read(t.Context(), oplog.CompressedNamespace(oplog.Ephemeral, 1), key, 1, 10)
		if err != nil || len(got) != 1 || string(got[0].Value) != string(value) {
			t.Fatalf("foreign key %q now holds %v (%v), want its one entry %q", key, got, err, value)
		}
	}
}

func listedKeys(listed []sweeper.UnparseableKey) []string {
	var keys []string
	for _, u := range listed {
		keys = append(keys, u.Key)
	}
	slices.Sort(keys)
	return keys
}

// Keys outside every bucket's range are walked once a pass, by the sidecar that owns bucket 0: each is
// counted unparseable, listed in the route's report and the status and logged with its key, and never
// archived or deleted; the agents beside them are archived as ever.
func TestSweep_KeysOutsideEveryBucketAreCountedUnparseableAndNamedOncePerPass(t *testing.T) {
	e := newEnv(t, config())
	written := plantForeign(t, e.st.Storage, allForeignKeys())
	a := agent("stranded-beside-foreign-keys")
	e.strand(a, 1, 3)
	want := slices.Sorted(slices.Values(allForeignKeys()))
	for pass := 1; pass <= 3; pass++ {
		rep := e.tick()
		rr := rep.Routes[0]
		if !rr.PassCompleted {
			t.Fatalf("pass %d did not complete in one tick", pass)
		}
		if n := rr.Outcomes[sweeper.OutcomeUnparseable]; n != len(want) {
			t.Fatalf("pass %d counted %d unparseable keys, want %d: %+v", pass, n, len(want), rr.Outcomes)
		}
		if got := listedKeys(rr.Unparseable); !slices.Equal(got, want) {
			t.Fatalf("pass %d listed %q, want %q", pass, got, want)
		}
		for _, u := range rr.Unparseable {
			if u.Why == "" || u.Route != "ephemeral-l1" || u.Pass != uint64(pass) {
				t.Fatalf("pass %d: listed %+v", pass, u)
			}
		}
		if archived := rr.Outcomes[sweeper.OutcomeArchived]; archived != map[int]int{1: 0, 2: 1, 3: 0}[pass] {
			t.Fatalf("pass %d archived %d", pass, archived)
		}
	}
	if got := listedKeys(e.sw.Status().Unparseable); !slices.Equal(got, want) {
		t.Fatalf("the status lists %q, want each of %q once", got, want)
	}
	logs := e.logs.String()
	for _, key := range want {
		if !strings.Contains(logs, "key="+key+" ") && !strings.Contains(logs, "key=\""+key+"\"") {
			t.Errorf("no log line names %q", key)
		}
	}
	requireUntouched(t, e.st.Storage, written)
	e.requireArchived(a, 3)
}

// A fleet of two sidecars with a shard each counts every foreign key once a pass between them: the keys
// outside every bucket on the owner of bucket 0 only, each key inside the buckets on the owner of its
// range.
func TestSweep_AFleetCountsKeysOutsideTheBucketsOnce(t *testing.T) {
	e0 := newEnv(t, config())
	e1 := newEnvOn(t, e0.st.Storage, config())
	e0.setAssignment(sweeper.Assignment{ShardCount: 2, Shards: []int{0}}, true)
	e1.setAssignment(sweeper.Assignment{ShardCount: 2, Shards: []int{1}}, true)
	written := plantForeign(t, e0.st.Storage, allForeignKeys())
	for pass := 1; pass <= 2; pass++ {
		r0, r1 := e0.tick().Routes[0], e1.tick().Routes[0]
		if !r0.PassCompleted || !r1.PassCompleted {
			t.Fatalf("pass %d did not complete in one tick", pass)
		}
		want0 := slices.Sorted(slices.Values(slices.Concat(keysOutsideBuckets, keysInShardZero)))
		if got := listedKeys(r0.Unparseable); r0.Outcomes[sweeper.OutcomeUnparseable] != len(want0) || !slices.Equal(got, want0) {
			t.Fatalf("pass %d, owner of bucket 0: counted %d, listed %q; want %q", pass, r0.Outcomes[sweeper.OutcomeUnparseable], got, want0)
		}
		if got := listedKeys(r1.Unparseable); r1.Outcomes[sweeper.OutcomeUnparseable] != len(keysInShardOne) || !slices.Equal(got, keysInShardOne) {
			t.Fatalf("pass %d, the other sidecar: counted %d, listed %q; want %q", pass, r1.Outcomes[sweeper.OutcomeUnparseable], got, keysInShardOne)
		}
	}
	requireUntouched(t, e0.st.Storage, written)
}

// The walk of the parts outside the buckets is part of the pass and keeps to its budgets: with one page
// of two keys a tick, a pass takes many ticks, and over each pass every foreign key is counted once.
func TestSweep_KeysOutsideEveryBucketAreWalkedWithinTheBudgets(t *testing.T) {
	cfg := config()
	cfg.PageSize, cfg.MaxScannedPerTick = 2, 2
	e := newEnv(t, cfg)
	written := plantForeign(t, e.st.Storage, allForeignKeys())
	agents := strandMany(e, 3)
	want := slices.Sorted(slices.Values(allForeignKeys()))
	for pass := 1; pass <= 2; pass++ {
		var counted []string
		for ticks := 1; ; ticks++ {
			if ticks > 20 {
				t.Fatalf("pass %d did not complete in 20 ticks", pass)
			}
			rr := e.tick().Routes[0]
			if rr.Pages > 1 || rr.Scanned > cfg.PageSize {
				t.Fatalf("pass %d, tick %d: %d pages, %d keys; the budget is one page of %d", pass, ticks, rr.Pages, rr.Scanned, cfg.PageSize)
			}
			if rr.Outcomes[sweeper.OutcomeUnparseable] != len(rr.Unparseable) {
				t.Fatalf("counted %d, listed %d", rr.Outcomes[sweeper.OutcomeUnparseable], len(rr.Unparseable))
			}
			counted = append(counted, listedKeys(rr.Unparseable)...)
			if rr.PassCompleted {
				break
			}
		}
		if slices.Sort(counted); !slices.Equal(counted, want) {
			t.Fatalf("pass %d counted %q, want each of %q once", pass, counted, want)
		}
	}
	requireUntouched(t, e.st.Storage, written)
	for _, a := range agents {
		e.requireArchived(a, 2)
	}
}
