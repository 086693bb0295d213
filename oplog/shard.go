package oplog

import (
	"slices"

	is "github.com/stratalog/strata/indexedstorage"
)

// Buckets is how many buckets agents hash into (DESIGN §11): as many as Redis Cluster has slots.
// Shards are contiguous bucket ranges, so a change of the shard count moves no agent between buckets.
const Buckets = is.Buckets

// Bucket returns the agent's bucket: FNV-1a (64-bit) of the agent's key, modulo Buckets. Executors,
// the sweep and the scheduled rows must agree on it; an executor written in another language computes
// the same function (test vectors in docs/storage-format.md).
func (a AgentID) Bucket() int {
	h := fnv1a64(fnvOffset, a.Component)
	h = fnv1a64(h, ":")
	return int(fnv1a64(h, a.Name) % Buckets)
}

// keyBucket is the bucket of an agent key, as Bucket computes it.
func keyBucket(key string) int { return int(fnv1a64(fnvOffset, key) % Buckets) }

// FNV-1a, 64-bit (hash/fnv's New64a), over a string without copying it.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnv1a64(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// Shard returns the agent's shard among count shards: floor(bucket × count / Buckets), for
// 1 ≤ count ≤ Buckets. Shard s owns the buckets of ShardBuckets(s, count). Any other count has no
// shard: -1.
func (a AgentID) Shard(count int) int {
	return BucketShard(a.Bucket(), count)
}

// BucketShard is the shard that owns bucket among count shards, floor(bucket × count / Buckets), or -1
// for a bucket outside [0, Buckets) or a count outside [1, Buckets].
func BucketShard(bucket, count int) int {
	if count < 1 || count > Buckets || bucket < 0 || bucket >= Buckets {
		return -1
	}
	return bucket * count / Buckets
}

// BucketRange is the half-open range of buckets [Lo, Hi). It is empty when Lo ≥ Hi.
type BucketRange struct {
	Lo, Hi int
}

// Contains reports whether bucket is in the range.
func (r BucketRange) Contains(bucket int) bool { return r.Lo <= bucket && bucket < r.Hi }

// Empty reports whether the range holds no bucket.
func (r BucketRange) Empty() bool { return r.Lo >= r.Hi }

// Keys is the range of the stored keys of the range's agents (see AgentID.StoredKey).
func (r BucketRange) Keys() is.KeyRange { return is.BucketsRange(r.Lo, r.Hi) }

// Valid reports whether the range lies within [0, Buckets] with Lo ≤ Hi.
func (r BucketRange) Valid() bool { return 0 <= r.Lo && r.Lo <= r.Hi && r.Hi <= Buckets }

// ShardBuckets returns the buckets shard owns among count shards: [ceil(shard·B/count),
// ceil((shard+1)·B/count)), B = Buckets. The ranges of shards 0..count-1 partition [0, Buckets), and
// bucket b is in the range of shard BucketShard(b, count). A shard outside [0, count) or a count
// outside [1, Buckets] owns nothing: the empty range {0, 0}.
func ShardBuckets(shard, count int) BucketRange {
	if count < 1 || count > Buckets || shard < 0 || shard >= count {
		return BucketRange{}
	}
	ceilDiv := func(n int) int { return (n + count - 1) / count }
	return BucketRange{Lo: ceilDiv(shard * Buckets), Hi: ceilDiv((shard + 1) * Buckets)}
}

// ShardsBuckets returns the bucket ranges of shards among count shards, one per shard in the order
// given; shards that own nothing (outside [0, count), or a count outside [1, Buckets]) are left out.
func ShardsBuckets(count int, shards []int) []BucketRange {
	var out []BucketRange
	for _, s := range shards {
		if r := ShardBuckets(s, count); !r.Empty() {
			out = append(out, r)
		}
	}
	return out
}

// CoalesceBuckets returns the buckets of ranges as few ranges as possible, ascending: overlapping and
// adjacent ranges are merged and empty ones left out. A walk of an assignment's shards walks these, so
// that neighbouring shards cost one range, not one each.
func CoalesceBuckets(ranges []BucketRange) []BucketRange {
	sorted := slices.DeleteFunc(slices.Clone(ranges), BucketRange.Empty)
	slices.SortFunc(sorted, func(a, b BucketRange) int { return a.Lo - b.Lo })
	var out []BucketRange
	for _, r := range sorted {
		if n := len(out); n > 0 && r.Lo <= out[n-1].Hi {
			out[n-1].Hi = max(out[n-1].Hi, r.Hi)
			continue
		}
		out = append(out, r)
	}
	return out
}
