package oplog_test

import (
	"strings"
	"testing"

	"github.com/stratalog/strata/oplog"
)

// shardVectors were computed by an independent implementation (Python, hashing the key's UTF-8 bytes)
// of DESIGN §11: bucket = fnv1a64(key) mod 16384, shard = floor(bucket × N / 16384). Executors in
// other languages check themselves against the same table (docs/storage-format.md).
var shardVectors = []struct {
	key    string
	fnv    uint64
	bucket int
	shards [4]int // N = 1, 7, 1024, 16384
}{
	{"c:a", 17768690753623394907, 2651, [4]int{0, 1, 165, 2651}},
	{"comp:agent-1", 3083881556970847, 3423, [4]int{0, 1, 213, 3423}},
	{"comp:agent-2", 3084981068599058, 3858, [4]int{0, 1, 241, 3858}},
	{"worker:0", 2622554883584333701, 6021, [4]int{0, 2, 376, 6021}},
	{"worker:1", 2622553784072705490, 5586, [4]int{0, 2, 349, 5586}},
	{"billing:invoice/2026-11", 2666946339575346305, 13441, [4]int{0, 5, 840, 13441}},
	{"a:b:c", 9688070025545052311, 12439, [4]int{0, 5, 777, 12439}},
	{"x: trailing ", 8562064916364174671, 9551, [4]int{0, 4, 596, 9551}},
	{"svc:日本語", 1603975031457693431, 16119, [4]int{0, 6, 1007, 16119}},
	{"svc:Ünïcödé", 6322476820375012994, 1666, [4]int{0, 0, 104, 1666}},
	{"svc:\u00dc", 12423177551529841178, 4634, [4]int{0, 1, 289, 4634}},    // Ü, NFC
	{"svc:U\u0308", 8106919782253428420, 16068, [4]int{0, 6, 1004, 16068}}, // Ü, NFD: another key, another bucket
	{"emoji:🦀", 5773403884751657158, 6342, [4]int{0, 2, 396, 6342}},
	{"c:" + strings.Repeat("n", 300), 10721702637793942528, 7168, [4]int{0, 3, 448, 7168}},
}

var vectorCounts = [4]int{1, 7, 1024, 16384}

func TestBucket_MatchesTheTestVectors(t *testing.T) {
	for _, v := range shardVectors {
		a, err := oplog.ParseAgentKey(v.key)
		if err != nil {
			t.Fatalf("%q: %v", v.key, err)
		}
		if got := a.Bucket(); got != v.bucket || uint64(got) != v.fnv%oplog.Buckets {
			t.Errorf("%q: bucket %d, want %d", v.key, got, v.bucket)
		}
		for i, n := range vectorCounts {
			if got := a.Shard(n); got != v.shards[i] {
				t.Errorf("%q: shard among %d = %d, want %d", v.key, n, got, v.shards[i])
			}
			if r := oplog.ShardBuckets(v.shards[i], n); !r.Contains(v.bucket) {
				t.Errorf("%q: bucket %d outside its shard %d's range %v (N=%d)", v.key, v.bucket, v.shards[i], r, n)
			}
		}
	}
}

func TestShard_OutsideOneToBucketsHasNoShard(t *testing.T) {
	a := oplog.AgentID{Component: "c", Name: "a"}
	for _, n := range []int{-1, 0, oplog.Buckets + 1, 1 << 40} {
		if got := a.Shard(n); got != -1 {
			t.Errorf("Shard(%d) = %d, want -1", n, got)
		}
		if r := oplog.ShardBuckets(0, n); !r.Empty() || r != (oplog.BucketRange{}) {
			t.Errorf("ShardBuckets(0, %d) = %v, want the empty range", n, r)
		}
	}
	for _, s := range []int{-1, 7, 8} {
		if r := oplog.ShardBuckets(s, 7); r != (oplog.BucketRange{}) {
			t.Errorf("ShardBuckets(%d, 7) = %v, want the empty range", s, r)
		}
	}
	if got := oplog.BucketShard(oplog.Buckets, 7); got != -1 {
		t.Errorf("BucketShard(Buckets, 7) = %d, want -1", got)
	}
	if got := oplog.BucketShard(-1, 7); got != -1 {
		t.Errorf("BucketShard(-1, 7) = %d, want -1", got)
	}
}

// The shards' ranges, in shard order, tile [0, Buckets) without gap or overlap, and each bucket's
// range is the one of the shard BucketShard gives it: the sweep, the scheduler and an executor
// computing either form agree.
func TestShardBuckets_PartitionTheBucketsAndAgreeWithShard(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 7, 10, 13, 100, 1000, 1024, 4095, 4096, 9999, 16383, 16384} {
		next := 0
		for s := range n {
			r := oplog.ShardBuckets(s, n)
			if !r.Valid() || r.Lo != next {
				t.Fatalf("N=%d shard %d: range %v, want it to start at %d", n, s, r, next)
			}
			if r.Empty() {
				t.Fatalf("N=%d shard %d owns no bucket", n, s) // N ≤ B: every shard owns at least one
			}
			for b := r.Lo; b < r.Hi; b++ {
				if got := oplog.BucketShard(b, n); got != s {
					t.Fatalf("N=%d: bucket %d is in shard %d's range %v, but BucketShard says %d", n, b, s, r, got)
				}
			}
			next = r.Hi
		}
		if next != oplog.Buckets {
			t.Fatalf("N=%d: ranges end at %d, want %d", n, next, oplog.Buckets)
		}
	}
}

func TestShardsBuckets_LeavesOutShardsThatOwnNothing(t *testing.T) {
	got := oplog.ShardsBuckets(7, []int{6, 9, 0, -1})
	want := []oplog.BucketRange{oplog.ShardBuckets(6, 7), oplog.ShardBuckets(0, 7)}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("ShardsBuckets = %v, want %v", got, want)
	}
	if got := oplog.ShardsBuckets(0, []int{0}); got != nil {
		t.Fatalf("ShardsBuckets with no shard count = %v", got)
	}
}
