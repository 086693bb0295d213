package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/backends/redis"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
)

// eachStore runs fn on a fresh Store of one node and, where the test cluster is set, of the cluster.
func eachStore(t *testing.T, fn func(t *testing.T, st *redis.Store)) {
	t.Run("node", func(t *testing.T) { fn(t, newStore(t)) })
	t.Run("cluster", func(t *testing.T) { fn(t, newClusterStore(t)) })
}

// Buckets the keys of the bucket model come from: both ends of the range, neighbours, and a few
// anywhere, so that walks cross bucket borders and meet runs of empty buckets.
var modelBuckets = []int{0, 1, 2, 0x0a5b, 0x0a5c, 0x1000, 0x2fff, 0x3ffe, 0x3fff}

// Keys without a bucket prefix that sort between, before and after bucketed ones.
var looseKeys = []string{
	"!", "0", "0000", "0000x", "0001", "0a5b", "0a5b0", "0a5b:x", "0A5B/x", "0a5g/x", "3fff", "3fffz",
	"4000/", "4000/x", "ffff/x", "agent:x", "z{x}", "é", "\U0010ffff",
}

// suffixes follow a bucket prefix; braces and colons must not move a key's hash tag.
var suffixes = []string{"", "/", "a", "a:b", "{t}", "}", "{", "c:agent", "é", "zz", "\x7f"}

func randomModelKey(rng *rand.Rand) string {
	if rng.IntN(4) == 0 {
		return looseKeys[rng.IntN(len(looseKeys))]
	}
	b := modelBuckets[rng.IntN(len(modelBuckets))]
	if rng.IntN(5) == 0 {
		b = rng.IntN(is.Buckets)
	}
	return is.BucketPrefix(b) + suffixes[rng.IntN(len(suffixes))]
}

func randomModelRange(rng *rand.Rand) is.KeyRange {
	switch rng.IntN(5) {
	case 0:
		return is.AllKeys
	case 1:
		lo := rng.IntN(is.Buckets)
		if rng.IntN(2) == 0 {
			lo = modelBuckets[rng.IntN(len(modelBuckets))]
		}
		return is.BucketsRange(lo, lo+1+rng.IntN(is.Buckets-lo))
	case 2:
		k := []rune(randomModelKey(rng))
		return is.PrefixRange(string(k[:rng.IntN(len(k)+1)]))
	}
	var r is.KeyRange
	if rng.IntN(4) > 0 {
		r.Start = randomModelKey(rng)
	}
	if rng.IntN(4) > 0 {
		r.End = randomModelKey(rng)
	}
	return r
}

// The suite's keys carry no bucket prefix; this model check walks bucketed and unbucketed keys mixed,
// over random ranges and page sizes, against a sorted slice: every walk the model's keys in the range,
// in order, each once, no page above count; with inserts and deletes between pages, every key present
// throughout the walk is handed back.
func TestBucketedKeys_WalksMatchTheModel(t *testing.T) {
	eachStore(t, func(t *testing.T, st *redis.Store) {
		ctx := t.Context()
		seed := rand.Uint64()
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 1))
		present := map[string]bool{}
		id := uint64(0)
		write := func(k string) {
			id++
			if err := st.Append(ctx, ns, k, id, []byte(k)); err != nil {
				t.Fatalf("Append(%q): %v", k, err)
			}
			present[k] = true
		}
		remove := func(k string) {
			var err error
			if rng.IntN(2) == 0 {
				err = st.Delete(ctx, ns, k)
			} else {
				_, err = st.DropPrefix(ctx, ns, k, id)
			}
			if err != nil {
				t.Fatalf("remove %q: %v", k, err)
			}
			delete(present, k)
		}
		for range 150 {
			write(randomModelKey(rng))
		}
		// Another namespace of the same Store, with the same keys: never in this one's walks.
		for k := range present {
			if err := st.Append(ctx, "test/other", k, 1, nil); err != nil {
				t.Fatal(err)
			}
		}
		rounds := 200
		if !testenv.Long() {
			rounds = 20 // the quick mode's tenth, as the conformance suite's random checks
		}
		for round := range rounds {
			r := randomModelRange(rng)
			count := 1 + rng.IntN(9)
			churn := round%2 == 1
			var throughout []string // present at the start and never removed during the walk
			for k := range present {
				if r.Contains(k) {
					throughout = append(throughout, k)
				}
			}
			slices.Sort(throughout)
			removed := map[string]bool{}
			var got []string
			var from is.Resume
			for pages := 0; ; pages++ {
				if pages > 1000 {
					t.Fatalf("walk of %v did not finish", r)
				}
				page, err := st.ScanStable(ctx, ns, r, from, count)
				if err != nil {
					t.Fatalf("ScanStable(%v, %v, %d): %v", r, from, count, err)
				}
				if len(page.Keys) > count {
					t.Fatalf("page of %d keys for count %d", len(page.Keys), count)
				}
				for _, k := range page.Keys {
					if !r.Contains(k) {
						t.Fatalf("walk of %v handed back %q", r, k)
					}
					if len(got) > 0 && k <= got[len(got)-1] {
						t.Fatalf("walk of %v handed back %q after %q", r, k, got[len(got)-1])
					}
					got = append(got, k)
				}
				if page.Done {
					break
				}
				from = page.Next
				if churn {
					write(randomModelKey(rng))
					if rng.IntN(3) == 0 {
						for k := range present { // a random one: map order
							remove(k)
							removed[k] = true
							break
						}
					}
				}
			}
			if !churn {
				if !slices.Equal(got, throughout) {
					t.Fatalf("round %d: walk of %v, pages of %d: %q, want %q", round, r, count, got, throughout)
				}
				continue
			}
			for _, k := range throughout {
				if !removed[k] && !slices.Contains(got, k) {
					t.Fatalf("round %d: walk of %v, pages of %d, with churn: %q, present throughout, missed", round, r, count, k)
				}
			}
			for _, k := range got {
				if !present[k] && !removed[k] {
					t.Fatalf("round %d: walk handed back %q, never written", round, k)
				}
			}
		}
		// The index sets list exactly the indexes that exist.
		for k := range present {
			if n, err := st.Client().ZScore(ctx, st.IndexSetKey(ns, k), k).Result(); err != nil || n != 0 {
				t.Fatalf("%q exists but its index set says %v %v", k, n, err)
			}
		}
	})
}

// counter counts what a client sends: round trips (a command or a pipeline) and commands.
type counter struct {
	trips, cmds atomic.Int64
}

func (c *counter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (c *counter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// A walk's cost is its own keys and buckets: the same round trips and commands whatever else the
// database holds (other prefixes, other namespaces). Measured, with 500 agents spread over all
// buckets: a whole-namespace walk (all 16,384 buckets probed) and a 1/16 shard's walk.
func TestScanStable_CostIsIndependentOfOtherKeys(t *testing.T) {
	eachStore(t, func(t *testing.T, st *redis.Store) {
		ctx := t.Context()
		rng := rand.New(rand.NewPCG(7, 7))
		var keys []string
		for i := range 500 {
			k := fmt.Sprintf("%s c:agent-%d", is.BucketPrefix(rng.IntN(is.Buckets)), i)
			if err := st.Append(ctx, ns, k, 1, nil); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		slices.Sort(keys)
		c := &counter{}
		st.Client().AddHook(c)
		measure := func(r is.KeyRange) (trips, cmds int64, n int) {
			c.trips.Store(0)
			c.cmds.Store(0)
			var from is.Resume
			for {
				page, err := st.ScanStable(ctx, ns, r, from, 100)
				if err != nil {
					t.Fatal(err)
				}
				n += len(page.Keys)
				if page.Done {
					return c.trips.Load(), c.cmds.Load(), n
				}
				from = page.Next
			}
		}
		shard := is.BucketsRange(3*is.Buckets/16, 4*is.Buckets/16)
		inShard := 0
		for _, k := range keys {
			if shard.Contains(k) {
				inShard++
			}
		}
		measure(is.AllKeys) // the pool dials its connections (HELLO, SELECT) once
		allTrips, allCmds, allN := measure(is.AllKeys)
		shardTrips, shardCmds, shardN := measure(shard)
		if allN != len(keys) || shardN != inShard {
			t.Fatalf("walks saw %d and %d keys, want %d and %d", allN, shardN, len(keys), inShard)
		}
		t.Logf("500 keys: whole walk %d round trips, %d commands; 1/16 shard (%d keys) %d round trips, %d commands",
			allTrips, allCmds, inShard, shardTrips, shardCmds)

		// 20,000 other keys: another namespace of this Store, in the same buckets, and another prefix.
		pipe := st.Client().Pipeline()
		for i := range 10_000 {
			b := is.BucketPrefix(rng.IntN(is.Buckets))
			pipe.Set(ctx, fmt.Sprintf("%sunrelated:%d", st.KeyPrefix(), i), "x", 0)
			if i%1000 == 999 {
				if _, err := pipe.Exec(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.Append(ctx, "test/elsewhere", b+fmt.Sprint(i), 1, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		allTrips2, allCmds2, allN2 := measure(is.AllKeys)
		shardTrips2, shardCmds2, shardN2 := measure(shard)
		if allN2 != allN || shardN2 != shardN {
			t.Fatalf("with other keys the walks saw %d and %d keys, want %d and %d", allN2, shardN2, allN, shardN)
		}
		if allTrips2 != allTrips || allCmds2 != allCmds || shardTrips2 != shardTrips || shardCmds2 != shardCmds {
			t.Fatalf("beside 20,000 other keys the walks cost %d/%d and %d/%d round trips/commands, alone %d/%d and %d/%d",
				allTrips2, allCmds2, shardTrips2, shardCmds2, allTrips, allCmds, shardTrips, shardCmds)
		}
	})
}

// A page's last ids are each key's LastID, on one node read by the probe script with the index sets,
// so that a page of bucketed keys is one round trip; unbucketed keys in the page get theirs from one
// more pipeline. A bucketed key its set lists without an index (a foreign writer's leftover) is left
// out of the page; one whose index is of another type leaves its page without ids, every key kept.
func TestScanStable_PageCarriesLastIDs(t *testing.T) {
	eachStore(t, func(t *testing.T, st *redis.Store) {
		ctx := t.Context()
		const pageSize = 16
		want := map[string]uint64{}
		for i := range 40 {
			k := fmt.Sprintf("%sagent-%02d", is.BucketPrefix(i%5*3), i) // buckets a first probe reaches
			for id := uint64(1); id <= uint64(i%3+1); id++ {
				if err := st.Append(ctx, ns, k, id*1000+uint64(i), nil); err != nil {
					t.Fatal(err)
				}
				want[k] = id*1000 + uint64(i)
			}
		}
		// trips is the first page's round trips (a full page from the first buckets; the last page
		// goes on probing the empty buckets after them).
		walk := func() (pages []is.Page, trips int64) {
			c := &counter{}
			st.Client().AddHook(c)
			var from is.Resume
			for {
				before := c.trips.Load()
				page, err := st.ScanStable(ctx, ns, is.AllKeys, from, pageSize)
				if err != nil {
					t.Fatal(err)
				}
				if len(pages) == 0 {
					trips = c.trips.Load() - before
				}
				pages = append(pages, page)
				if page.Done {
					return pages, trips
				}
				from = page.Next
			}
		}
		check := func(pages []is.Page) (seen int) {
			for _, p := range pages {
				if len(p.LastIDs) != len(p.Keys) {
					t.Fatalf("a page of %d keys with %d last ids", len(p.Keys), len(p.LastIDs))
				}
				for i, k := range p.Keys {
					if p.LastIDs[i] != want[k] {
						t.Fatalf("page says %q's last id is %d, it is %d", k, p.LastIDs[i], want[k])
					}
					seen++
				}
			}
			return seen
		}
		walk() // the pool dials its connections once
		pages, trips := walk()
		if n := check(pages); n != len(want) {
			t.Fatalf("walk saw %d keys, want %d", n, len(want))
		}
		if strings.HasSuffix(t.Name(), "/node") && trips != 1 {
			t.Fatalf("a full page of bucketed keys on one node took %d round trips, want 1", trips)
		}

		// Unbucketed keys interleave with bucketed ones; theirs come from a pipeline of their own.
		for i, k := range []string{"!loose", "1000loose", "zzz"} {
			if err := st.Append(ctx, ns, k, uint64(7+i), nil); err != nil {
				t.Fatal(err)
			}
			want[k] = uint64(7 + i)
		}
		pages, _ = walk()
		if n := check(pages); n != len(want) {
			t.Fatalf("walk saw %d keys, want %d", n, len(want))
		}

		// A listed key without an index is left out; its neighbours keep their ids.
		listedOnly := is.BucketPrefix(3) + "agent-00x"
		if err := st.Client().ZAdd(ctx, st.IndexSetKey(ns, listedOnly), goredis.Z{Member: listedOnly}).Err(); err != nil {
			t.Fatal(err)
		}
		pages, _ = walk()
		if n := check(pages); n != len(want) {
			t.Fatalf("walk with a listed key without an index saw %d keys, want %d", n, len(want))
		}

		// An index of another type: its page keeps every key and carries no ids.
		wrong := is.BucketPrefix(3) + "agent-01"
		if err := st.Client().Set(ctx, st.RedisKey(ns, wrong), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		pages, _ = walk()
		found := false
		for _, p := range pages {
			if !slices.Contains(p.Keys, wrong) {
				continue
			}
			found = true
			if p.LastIDs != nil {
				t.Fatalf("the page holding an index of another type carries ids %v", p.LastIDs)
			}
		}
		if !found {
			t.Fatalf("no page holds %q", wrong)
		}
	})
}
