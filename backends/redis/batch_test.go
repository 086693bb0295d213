package redis_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/backends/redis"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
)

// batchFixture writes the same indexes into each namespace given: keys in many buckets (both ends of
// the range, neighbours, random ones) and unbucketed keys, of one to a few entries, one holding an
// entry at MaxID; it returns the keys written and some that are not.
func batchFixture(t *testing.T, st *redis.Store, nss ...string) (present, missing []string) {
	t.Helper()
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(22, 22))
	buckets := append([]int{0, 1, 2, 0x0a5b, 0x0a5c, 0x3ffe, 0x3fff}, rng.Perm(is.Buckets)[:40]...)
	for i, b := range buckets {
		present = append(present, fmt.Sprintf("%sc:agent-%d", is.BucketPrefix(b), i))
		missing = append(missing, fmt.Sprintf("%sc:gone-%d", is.BucketPrefix(b), i))
	}
	// Several keys of one bucket, so that a script visits more than one index of a tag.
	for i := range 5 {
		present = append(present, fmt.Sprintf("%sc:same-%d", is.BucketPrefix(0x0a5b), i))
	}
	present = append(present, "agent:loose", "z{x}", "0a5b", "é")
	missing = append(missing, "loose:gone")
	for _, n := range nss {
		for i, k := range present {
			var entries []is.Entry
			switch i % 4 {
			case 0:
				entries = []is.Entry{{ID: 5, Value: []byte("five")}}
			case 1:
				entries = []is.Entry{{ID: 1, Value: nil}, {ID: 2, Value: []byte{0, 1, 2}}, {ID: 9, Value: []byte("nine")}}
			case 2:
				entries = []is.Entry{{ID: 3, Value: []byte("x")}, {ID: is.MaxID, Value: []byte("max")}}
			case 3:
				entries = []is.Entry{{ID: 7, Value: []byte("a")}, {ID: 8, Value: []byte("b")}}
			}
			if err := st.AppendMany(ctx, n, k, entries); err != nil {
				t.Fatal(err)
			}
		}
	}
	return present, missing
}

// batchIDs are the ids every key is asked for: below, at and between its entries, at and above MaxID.
var batchIDs = []uint64{0, 1, 2, 3, 5, 6, 8, 9, 10, is.MaxID - 1, is.MaxID, is.MaxID + 1, math.MaxUint64}

// batchReqs asks each key for each id in turn, several batches, each key once a batch.
func batchReqs(keys []string) [][]is.KeyID {
	var batches [][]is.KeyID
	for j := range batchIDs {
		var reqs []is.KeyID
		for i, k := range keys {
			reqs = append(reqs, is.KeyID{Key: k, ID: batchIDs[(i+j)%len(batchIDs)]})
		}
		batches = append(batches, reqs)
	}
	return batches
}

// ClosestLastMany gives, key by key and in request order, what ClosestLast gives on the same data.
func TestClosestLastMany_EqualsClosestLastPerKey(t *testing.T) {
	eachStore(t, func(t *testing.T, st *redis.Store) {
		ctx := t.Context()
		present, missing := batchFixture(t, st, ns)
		keys := append(slices.Clone(present), missing...)
		rand.New(rand.NewPCG(1, 2)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		for _, reqs := range batchReqs(keys) {
			got, err := st.ClosestLastMany(ctx, ns, reqs)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(reqs) {
				t.Fatalf("%d results for %d keys", len(got), len(reqs))
			}
			for i, r := range reqs {
				var want is.ClosestLastResult
				want.Entry, want.Found, want.Last, want.Exists, want.Err = st.ClosestLast(ctx, ns, r.Key, r.ID)
				if want.Err != nil {
					t.Fatal(want.Err)
				}
				if !equalClosestLast(got[i], want) {
					t.Fatalf("ClosestLastMany %q id %d: %+v, ClosestLast: %+v", r.Key, r.ID, got[i], want)
				}
			}
		}
	})
}

func equalClosestLast(a, b is.ClosestLastResult) bool {
	return a.Found == b.Found && a.Exists == b.Exists && a.Last == b.Last && a.Entry.ID == b.Entry.ID &&
		string(a.Entry.Value) == string(b.Entry.Value) && (a.Err == nil) == (b.Err == nil)
}

// DropPrefixMany drops, key by key, what DropPrefix drops on the same data, and leaves the same
// indexes and the same index sets: an index it empties no longer exists and leaves its index set.
func TestDropPrefixMany_EqualsDropPrefixPerKey(t *testing.T) {
	eachStore(t, func(t *testing.T, st *redis.Store) {
		ctx := t.Context()
		const batchNS, perKeyNS = "test/batch", "test/perkey"
		present, missing := batchFixture(t, st, batchNS, perKeyNS)
		keys := append(slices.Clone(present), missing...)
		for _, reqs := range batchReqs(keys)[:5] { // 0 … 5: some drops empty an index, some do not
			got, err := st.DropPrefixMany(ctx, batchNS, reqs)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(reqs) {
				t.Fatalf("%d results for %d keys", len(got), len(reqs))
			}
			for i, r := range reqs {
				want, err := st.DropPrefix(ctx, perKeyNS, r.Key, r.ID)
				if err != nil || got[i].Err != nil {
					t.Fatalf("%q: DropPrefix %v, DropPrefixMany %v", r.Key, err, got[i].Err)
				}
				if got[i].Dropped != want {
					t.Fatalf("DropPrefixMany %q up to %d dropped %d, DropPrefix %d", r.Key, r.ID, got[i].Dropped, want)
				}
			}
			requireSameIndexes(t, st, batchNS, perKeyNS, keys)
		}
		// Up to MaxID and beyond: everything goes, and every index leaves its index set.
		var all []is.KeyID
		for i, k := range keys {
			all = append(all, is.KeyID{Key: k, ID: []uint64{is.MaxID, is.MaxID + 1, math.MaxUint64}[i%3]})
		}
		if _, err := st.DropPrefixMany(ctx, batchNS, all); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if ok, err := st.Exists(ctx, batchNS, k); err != nil || ok {
				t.Fatalf("%q after a drop up to MaxID: exists %v %v", k, ok, err)
			}
			requireListed(t, st, batchNS, k, false)
		}
	})
}

// requireSameIndexes fails unless the two namespaces hold the same entries under keys, and list the
// same of them.
func requireSameIndexes(t *testing.T, st *redis.Store, a, b string, keys []string) {
	t.Helper()
	ctx := t.Context()
	for _, k := range keys {
		ea, err := st.Read(ctx, a, k, 1, is.MaxID)
		if err != nil {
			t.Fatal(err)
		}
		eb, err := st.Read(ctx, b, k, 1, is.MaxID)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ea) != fmt.Sprint(eb) {
			t.Fatalf("%q holds %v after the batch drop, %v after the per-key drop", k, ea, eb)
		}
		requireListed(t, st, a, k, len(ea) > 0)
		requireListed(t, st, b, k, len(eb) > 0)
	}
}

// requireListed fails unless key's index set lists it exactly when want.
func requireListed(t *testing.T, st *redis.Store, ns, key string, want bool) {
	t.Helper()
	err := st.Client().ZScore(t.Context(), st.IndexSetKey(ns, key), key).Err()
	switch {
	case want && err != nil:
		t.Fatalf("%q exists but its index set does not list it: %v", key, err)
	case !want && !errors.Is(err, goredis.Nil):
		t.Fatalf("%q does not exist but its index set lists it (%v)", key, err)
	}
}

// An empty batch, and a drop up to 0, is no round trip (the suite checks invalid and closed batches).
func TestBatch_NothingToDoSendsNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, st *redis.Store) {
		ctx := t.Context()
		c := &counter{}
		st.Client().AddHook(c)
		got, err := st.ClosestLastMany(ctx, ns, nil)
		if err != nil || len(got) != 0 {
			t.Fatalf("empty ClosestLastMany: %v %v", got, err)
		}
		dropped, err := st.DropPrefixMany(ctx, ns, []is.KeyID{})
		if err != nil || len(dropped) != 0 {
			t.Fatalf("empty DropPrefixMany: %v %v", dropped, err)
		}
		// upTo 0 drops nothing and touches nothing, as DropPrefix.
		dropped, err = st.DropPrefixMany(ctx, ns, []is.KeyID{{Key: "k", ID: 0}})
		if err != nil || len(dropped) != 1 || dropped[0] != (is.DropResult{}) {
			t.Fatalf("DropPrefixMany up to 0: %v %v", dropped, err)
		}
		if n := c.trips.Load(); n != 0 {
			t.Fatalf("batches with nothing to do sent %d round trips", n)
		}
	})
}

func requireCallError(t *testing.T, err, want error) {
	t.Helper()
	var op *is.OpError
	if !errors.Is(err, want) || !errors.As(err, &op) || op.Key != "" || op.Backend != "redis" {
		t.Fatalf("got %v (%#v), want a call-level OpError of redis, no key, matching %v", err, op, want)
	}
}

// A key of the wrong type (another program's value) fails its part only: the other keys of its
// script, which share its hash slot, are read and dropped as if it were not there.
func TestBatch_WrongTypeKeyFailsAlone(t *testing.T) {
	eachStore(t, func(t *testing.T, st *redis.Store) {
		ctx := t.Context()
		var keys []string
		for i := range 6 {
			k := fmt.Sprintf("%sc:agent-%d", is.BucketPrefix(0x1234), i)
			keys = append(keys, k)
			if err := st.AppendMany(ctx, ns, k, []is.Entry{{ID: 1, Value: []byte("one")}, {ID: 2, Value: []byte("two")}}); err != nil {
				t.Fatal(err)
			}
		}
		poisoned := keys[2]
		if err := st.Client().Set(ctx, st.RedisKey(ns, poisoned), "not a sorted set", 0).Err(); err != nil {
			t.Fatal(err)
		}
		var reqs []is.KeyID
		for _, k := range keys {
			reqs = append(reqs, is.KeyID{Key: k, ID: 2})
		}
		requireKeyError := func(err error) {
			t.Helper()
			var op *is.OpError
			if !errors.As(err, &op) || op.Key != poisoned || is.IsTransient(err) {
				t.Fatalf("the poisoned key's part: %v, want a permanent OpError naming %q", err, poisoned)
			}
		}

		got, err := st.ClosestLastMany(ctx, ns, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range keys {
			if k == poisoned {
				requireKeyError(got[i].Err)
				t.Logf("the poisoned key: %v", got[i].Err)
				if !equalClosestLast(got[i], is.ClosestLastResult{Err: got[i].Err}) {
					t.Fatalf("a failed part carries a result: %+v", got[i])
				}
				continue
			}
			want := is.ClosestLastResult{Entry: is.Entry{ID: 2, Value: []byte("two")}, Found: true, Last: 2, Exists: true}
			if !equalClosestLast(got[i], want) {
				t.Fatalf("%q beside a poisoned key: %+v, want %+v", k, got[i], want)
			}
		}

		dropped, err := st.DropPrefixMany(ctx, ns, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range keys {
			if k == poisoned {
				requireKeyError(dropped[i].Err)
				continue
			}
			if dropped[i] != (is.DropResult{Dropped: 2}) {
				t.Fatalf("%q beside a poisoned key: %+v, want 2 dropped", k, dropped[i])
			}
			if ok, err := st.Exists(ctx, ns, k); err != nil || ok {
				t.Fatalf("%q emptied: exists %v %v", k, ok, err)
			}
			requireListed(t, st, ns, k, false)
		}
		if v, err := st.Client().Get(ctx, st.RedisKey(ns, poisoned)).Result(); err != nil || v != "not a sorted set" {
			t.Fatalf("the poisoned key holds %q %v", v, err)
		}
		requireListed(t, st, ns, poisoned, true)
	})
}

// A batch drop racing appends to its keys loses nothing: each drop asks for ids already written only,
// writers append above them meanwhile, and afterwards every index holds exactly the ids above the
// highest bound asked, the counts add up and each index set lists its index.
func TestDropPrefixMany_RacingAppendsLoseNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, st *redis.Store) {
		ctx := t.Context()
		const nKeys, perKey = 24, 300
		keys := make([]string, nKeys)
		written := make([]atomic.Uint64, nKeys) // the last id acknowledged, per key
		for i := range keys {
			keys[i] = fmt.Sprintf("%sc:race-%d", is.BucketPrefix(i*683%is.Buckets), i)
			if i%3 == 0 {
				keys[i] = fmt.Sprintf("%sc:race-%d", is.BucketPrefix(77), i) // several keys a script
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, nKeys+1)
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := uint64(1); id <= perKey; id++ {
					for i := w; i < nKeys; i += 4 {
						if err := st.Append(ctx, ns, keys[i], id, []byte{byte(id)}); err != nil {
							errs <- fmt.Errorf("append %q %d: %w", keys[i], id, err)
							return
						}
						written[i].Store(id)
					}
				}
			}()
		}
		highest := make([]uint64, nKeys)
		droppedSum := make([]uint64, nKeys)
		done := make(chan struct{})
		go func() {
			defer close(done)
			rng := rand.New(rand.NewPCG(3, 3))
			for round := 0; ; round++ {
				finished := true
				var reqs []is.KeyID
				var idx []int
				for i := range keys {
					w := written[i].Load()
					if w < perKey {
						finished = false
					}
					if w == 0 || rng.IntN(3) == 0 {
						continue
					}
					reqs = append(reqs, is.KeyID{Key: keys[i], ID: 1 + rng.Uint64N(w)})
					idx = append(idx, i)
				}
				res, err := st.DropPrefixMany(ctx, ns, reqs)
				if err != nil {
					errs <- err
					return
				}
				for j, r := range res {
					if r.Err != nil {
						errs <- r.Err
						return
					}
					i := idx[j]
					droppedSum[i] += r.Dropped
					highest[i] = max(highest[i], reqs[j].ID)
				}
				if finished && round > 0 {
					return
				}
			}
		}()
		wg.Wait()
		<-done
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for i, k := range keys {
			entries, err := st.Read(ctx, ns, k, 1, is.MaxID)
			if err != nil {
				t.Fatal(err)
			}
			if droppedSum[i] != highest[i] || uint64(len(entries)) != perKey-highest[i] {
				t.Fatalf("%q: dropped %d in all, highest bound %d, %d entries left; want %d dropped and %d left",
					k, droppedSum[i], highest[i], len(entries), highest[i], perKey-highest[i])
			}
			for j, e := range entries {
				if e.ID != highest[i]+1+uint64(j) {
					t.Fatalf("%q: entry %d has id %d, want %d (an append lost)", k, j, e.ID, highest[i]+1+uint64(j))
				}
			}
			requireListed(t, st, ns, k, len(entries) > 0)
		}
	})
}

// A batch is one round trip: one pipeline, of one script on one node and of one script a hash tag on
// a cluster, not a command a key.
func TestBatch_OnePipeline(t *testing.T) {
	eachStore(t, func(t *testing.T, st *redis.Store) {
		ctx := t.Context()
		var keys []string
		tags := map[int]bool{}
		for i := range 100 {
			b := (i * 997) % is.Buckets
			if i%4 == 0 {
				b = 5 // a quarter of the keys share a bucket
			}
			tags[b] = true
			k := fmt.Sprintf("%sc:pipe-%d", is.BucketPrefix(b), i)
			keys = append(keys, k)
			if err := st.AppendMany(ctx, ns, k, []is.Entry{{ID: 1}, {ID: 2}}); err != nil {
				t.Fatal(err)
			}
		}
		reqs := func(id uint64) []is.KeyID {
			out := make([]is.KeyID, len(keys))
			for i, k := range keys {
				out[i] = is.KeyID{Key: k, ID: id}
			}
			return out
		}
		// Once so that every node has both scripts cached (a node without them answers NOSCRIPT, and the
		// batch goes again with the scripts' text: a second round trip, once).
		if _, err := st.ClosestLastMany(ctx, ns, reqs(1)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.DropPrefixMany(ctx, ns, reqs(0)[:1]); err != nil { // upTo 0: nothing sent
			t.Fatal(err)
		}
		c := &counter{}
		st.Client().AddHook(c)
		wantCmds := int64(1)
		if st.IsCluster() {
			wantCmds = int64(len(tags))
		}
		measure := func(what string, call func() error) {
			t.Helper()
			c.trips.Store(0)
			c.cmds.Store(0)
			if err := call(); err != nil {
				t.Fatal(err)
			}
			trips, cmds := c.trips.Load(), c.cmds.Load()
			t.Logf("%s of %d keys in %d buckets: %d round trips, %d commands", what, len(keys), len(tags), trips, cmds)
			if trips != 1 || cmds != wantCmds {
				t.Fatalf("%s of %d keys sent %d round trips of %d commands, want 1 of %d", what, len(keys), trips, cmds, wantCmds)
			}
		}
		measure("ClosestLastMany", func() error {
			res, err := st.ClosestLastMany(ctx, ns, reqs(1))
			for _, r := range res {
				if err == nil && (r.Err != nil || r.Entry.ID != 1 || r.Last != 2) {
					err = fmt.Errorf("%+v", r)
				}
			}
			return err
		})
		// The drop script's first run on each node may be NOSCRIPT: one more round trip, outside the count.
		if _, err := st.DropPrefixMany(ctx, ns, reqs(1)); err != nil {
			t.Fatal(err)
		}
		measure("DropPrefixMany", func() error {
			res, err := st.DropPrefixMany(ctx, ns, reqs(2))
			for _, r := range res {
				if err == nil && (r.Err != nil || r.Dropped != 1) {
					err = fmt.Errorf("%+v", r)
				}
			}
			return err
		})
	})
}

// A server that lost its scripts (a restart, a failover, SCRIPT FLUSH) answers the batch's EVALSHA
// with NOSCRIPT: the batch goes again with the scripts' text, one more round trip, and its results
// are whole.
func TestBatch_NoScriptFallsBackToEval(t *testing.T) {
	eachStore(t, func(t *testing.T, st *redis.Store) {
		ctx := t.Context()
		var reqs []is.KeyID
		for i := range 10 {
			k := fmt.Sprintf("%sc:noscript-%d", is.BucketPrefix(i*1500), i)
			reqs = append(reqs, is.KeyID{Key: k, ID: 1})
			if err := st.AppendMany(ctx, ns, k, []is.Entry{{ID: 1, Value: []byte("v")}, {ID: 2}}); err != nil {
				t.Fatal(err)
			}
		}
		flush := func() {
			t.Helper()
			var err error
			if cc, ok := st.Client().(*goredis.ClusterClient); ok {
				err = cc.ForEachMaster(ctx, func(ctx context.Context, node *goredis.Client) error {
					return node.ScriptFlush(ctx).Err()
				})
			} else {
				err = st.Client().ScriptFlush(ctx).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		c := &scriptCounter{}
		st.Client().AddHook(c)
		flush()
		got, err := st.ClosestLastMany(ctx, ns, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range got {
			if r.Err != nil || !r.Found || r.Entry.ID != 1 || string(r.Entry.Value) != "v" || r.Last != 2 {
				t.Fatalf("%q after SCRIPT FLUSH: %+v", reqs[i].Key, r)
			}
		}
		// One script on one node, one a tag (all ten differ) on a cluster.
		groups := int64(1)
		if st.IsCluster() {
			groups = int64(len(reqs))
		}
		if trips, sha, eval := c.trips.Load(), c.evalsha.Load(), c.eval.Load(); trips != 2 || sha != groups || eval != groups {
			t.Fatalf("ClosestLastMany after SCRIPT FLUSH: %d round trips, %d EVALSHA, %d EVAL; want 2, %d, %d",
				trips, sha, eval, groups, groups)
		}
		flush()
		dropped, err := st.DropPrefixMany(ctx, ns, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range dropped {
			if r != (is.DropResult{Dropped: 1}) {
				t.Fatalf("%q after SCRIPT FLUSH: %+v", reqs[i].Key, r)
			}
		}
	})
}

// scriptCounter counts the round trips that carry scripts, and the EVALSHA and EVAL commands in them.
type scriptCounter struct {
	trips, evalsha, eval atomic.Int64
}

func (c *scriptCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (c *scriptCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.count([]goredis.Cmder{cmd})
		return next(ctx, cmd)
	}
}
func (c *scriptCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.count(cmds)
		return next(ctx, cmds)
	}
}
func (c *scriptCounter) count(cmds []goredis.Cmder) {
	scripts := false
	for _, cmd := range cmds {
		switch cmd.Name() {
		case "evalsha":
			c.evalsha.Add(1)
		case "eval":
			c.eval.Add(1)
		default:
			continue
		}
		scripts = true
	}
	if scripts {
		c.trips.Add(1)
	}
}

// failPipelines fails every pipeline of the client it hooks while on, without sending it: a node that
// cannot be reached.
type failPipelines struct {
	on  atomic.Bool
	err error
}

func (f *failPipelines) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (f *failPipelines) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return next
}
func (f *failPipelines) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if f.on.Load() {
			for _, c := range cmds {
				c.SetErr(f.err)
			}
			return f.err
		}
		return next(ctx, cmds)
	}
}

var errUnreachable = errors.New("injected: the node cannot be reached")

// On one node a batch whose one round trip fails knows no part: the call fails, naming no key.
func TestBatch_RoundTripFailureIsTheCallsError(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	f := &failPipelines{err: errUnreachable}
	st.Client().AddHook(f)
	reqs := []is.KeyID{{Key: is.BucketPrefix(1) + "a", ID: 1}, {Key: is.BucketPrefix(2) + "b", ID: 1}}
	for _, r := range reqs {
		if err := st.Append(ctx, ns, r.Key, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	f.on.Store(true)
	_, err := st.ClosestLastMany(ctx, ns, reqs)
	requireCallError(t, err, errUnreachable)
	_, err = st.DropPrefixMany(ctx, ns, reqs)
	requireCallError(t, err, errUnreachable)
	f.on.Store(false)
	for _, r := range reqs {
		if n, err := st.Length(ctx, ns, r.Key); err != nil || n != 1 {
			t.Fatalf("%q: %d entries (%v) after a drop that was not sent", r.Key, n, err)
		}
	}
}

// On a cluster a master that cannot be reached fails the keys of its slots only: each of them carries
// the error, and the keys of the other masters are read and dropped.
func TestBatch_UnreachableMasterFailsItsKeysOnly(t *testing.T) {
	raw := testenv.RedisClusterURL(t)
	prefix := testenv.RedisClusterPrefix(t, raw)
	ctx := t.Context()
	plain := storeOn(t, testenv.RedisClusterClient(t, raw), prefix)
	var keys []string
	for i := range 40 {
		k := fmt.Sprintf("%sc:master-%d", is.BucketPrefix(i*409), i)
		keys = append(keys, k)
		if err := plain.AppendMany(ctx, ns, k, []is.Entry{{ID: 1}, {ID: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	cc := plain.Client().(*goredis.ClusterClient)
	master := func(k string) string {
		node, err := cc.MasterForKey(ctx, plain.RedisKey(ns, k))
		if err != nil {
			t.Fatal(err)
		}
		return node.Options().Addr
	}
	down := master(keys[0])
	f := &failPipelines{err: errUnreachable}
	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: testenv.RedisClusterNodes(t, raw)})
	t.Cleanup(func() { client.Close() })
	client.OnNewNode(func(node *goredis.Client) {
		if node.Options().Addr == down {
			node.AddHook(f)
		}
	})
	st := storeOn(t, client, prefix)
	var reqs []is.KeyID
	onDown := 0
	for _, k := range keys {
		reqs = append(reqs, is.KeyID{Key: k, ID: 1})
		if master(k) == down {
			onDown++
		}
	}
	if onDown == 0 || onDown == len(keys) {
		t.Fatalf("%d of %d keys on %s: the test needs keys on it and elsewhere", onDown, len(keys), down)
	}
	if _, err := st.ClosestLastMany(ctx, ns, reqs); err != nil { // every node has the scripts
		t.Fatal(err)
	}
	f.on.Store(true)
	requirePart := func(k string, err error) bool {
		t.Helper()
		if master(k) != down {
			if err != nil {
				t.Fatalf("%q, not on the unreachable master: %v", k, err)
			}
			return true
		}
		var op *is.OpError
		if !errors.Is(err, errUnreachable) || !errors.As(err, &op) || op.Key != k {
			t.Fatalf("%q on the unreachable master: %v, want its own error naming it", k, err)
		}
		return false
	}
	read, err := st.ClosestLastMany(ctx, ns, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range read {
		if requirePart(keys[i], r.Err) && (!r.Found || r.Entry.ID != 1 || r.Last != 2) {
			t.Fatalf("%q: %+v", keys[i], r)
		}
	}
	dropped, err := st.DropPrefixMany(ctx, ns, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range dropped {
		want := uint64(1)
		if !requirePart(keys[i], r.Err) {
			want = 2 // not dropped: the script was never sent
		} else if r.Dropped != 1 {
			t.Fatalf("%q: %+v", keys[i], r)
		}
		if n, err := plain.Length(ctx, ns, keys[i]); err != nil || n != want {
			t.Fatalf("%q holds %d entries (%v), want %d", keys[i], n, err, want)
		}
	}
}

// With wait_replicas, a batch drop waits for the replicas of every master it wrote to: on the cluster
// (one replica a master) 1 is met; 2 is not, and each key's drop, which is done, reports ErrTransient.
func TestDropPrefixMany_WaitsForReplicas(t *testing.T) {
	ctx := t.Context()
	one, two := waitingClusterStores(t)
	var reqs []is.KeyID
	for i := range 20 {
		k := fmt.Sprintf("%sc:wait-%d", is.BucketPrefix(i*800), i)
		reqs = append(reqs, is.KeyID{Key: k, ID: 1})
		if err := one.AppendMany(ctx, ns, k, []is.Entry{{ID: 1}, {ID: 2}, {ID: 3}}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := one.DropPrefixMany(ctx, ns, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r != (is.DropResult{Dropped: 1}) {
			t.Fatalf("%q waiting for 1 replica: %+v", reqs[i].Key, r)
		}
		reqs[i].ID = 2
	}
	res, err = two.DropPrefixMany(ctx, ns, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !is.IsTransient(r.Err) {
			t.Fatalf("%q waiting for 2 replicas of 1: %+v, want ErrTransient", reqs[i].Key, r)
		}
		if first, ok, err := one.First(ctx, ns, reqs[i].Key); err != nil || !ok || first.ID != 3 {
			t.Fatalf("%q: the drop that timed out waiting is done: first %d %v %v", reqs[i].Key, first.ID, ok, err)
		}
	}
}

// The server's own view of a batch on one node: INFO commandstats counts one EVALSHA a batch, and
// MONITOR (filtered to the Store's one connection and to script commands on its keys) shows nothing
// sent but the scripts and, inside them, each key's commands once a key.
func TestBatch_ServerRunsOneScriptABatch(t *testing.T) {
	raw := testenv.RedisURL(t)
	opts, err := goredis.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	opts.PoolSize = 1 // one connection: its address names every command of the Store
	client := goredis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	prefix := testenv.RedisPrefix(t, raw)
	st := storeOn(t, client, prefix)
	ctx := t.Context()
	const n = 50
	reqs := make([]is.KeyID, n)
	for i := range reqs {
		reqs[i] = is.KeyID{Key: fmt.Sprintf("%sc:mon-%d", is.BucketPrefix(i*331), i), ID: 1}
		if err := st.AppendMany(ctx, ns, reqs[i].Key, []is.Entry{{ID: 1}, {ID: 2}, {ID: 3}}); err != nil {
			t.Fatal(err)
		}
	}
	batches := func() {
		t.Helper()
		if _, err := st.ClosestLastMany(ctx, ns, reqs); err != nil {
			t.Fatal(err)
		}
		if _, err := st.DropPrefixMany(ctx, ns, reqs); err != nil {
			t.Fatal(err)
		}
	}
	batches() // both scripts cached: from here on the batches are EVALSHA only

	// commandstats are the server's, and other programs may run scripts meanwhile: they can only add
	// to the count, so the fewest of a few tries is the batches' own.
	fewest := int64(math.MaxInt64)
	for range 5 {
		before := evalshaCalls(t, client)
		batches()
		fewest = min(fewest, evalshaCalls(t, client)-before)
		if fewest == 2 {
			break
		}
	}
	if fewest != 2 {
		t.Fatalf("a read and a drop of %d keys: the server counted %d EVALSHA, want 2 (one a batch)", n, fewest)
	}

	info, err := client.ClientInfo(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	lines := monitor(t, opts)
	for i := range reqs {
		reqs[i].ID = 2
	}
	batches()
	marker := testenv.UniqueName("strata-test-end-")
	if err := client.Echo(ctx, marker).Err(); err != nil {
		t.Fatal(err)
	}
	// MONITOR leaves EVAL and EVALSHA out and shows the commands the scripts run, from "lua".
	ours := fmt.Sprintf(" %s] ", info.Addr)
	sent := map[string]int{}     // commands of the Store's connection
	scripted := map[string]int{} // commands of scripts on the Store's keys
	for {
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("MONITOR: %v", err)
		}
		_, rest, ok := strings.Cut(line, "] \"")
		if !ok {
			continue
		}
		cmd, _, _ := strings.Cut(rest, "\"")
		cmd = strings.ToLower(cmd)
		if strings.Contains(line, ours) {
			if strings.Contains(line, marker) {
				break
			}
			sent[cmd]++
		} else if strings.Contains(line, " lua] ") && strings.Contains(line, prefix) {
			scripted[cmd]++
		}
	}
	t.Logf("a read and a drop of %d keys: the connection sent %v beside its scripts; the scripts ran %v", n, sent, scripted)
	if len(sent) != 0 {
		t.Fatalf("a read and a drop of %d keys sent %v beside their scripts", n, sent)
	}
	if scripted["zrangebylex"] != n || scripted["zremrangebylex"] != n {
		t.Fatalf("the scripts ran %v, want ZRANGEBYLEX and ZREMRANGEBYLEX once a key (%d)", scripted, n)
	}
}

// evalshaCalls reads the server's count of EVALSHA calls (INFO commandstats).
func evalshaCalls(t *testing.T, c *goredis.Client) int64 {
	t.Helper()
	stats, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(stats, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
			calls, _, _ := strings.Cut(rest, ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				t.Fatalf("commandstats %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}

// monitor opens a connection of its own in MONITOR mode and returns its stream once the server has
// said OK: every command the server runs from then on is a line of it.
func monitor(t *testing.T, opts *goredis.Options) *bufio.Reader {
	t.Helper()
	conn, err := net.Dial("tcp", opts.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r := bufio.NewReader(conn)
	send := func(args ...string) {
		t.Helper()
		msg := fmt.Sprintf("*%d\r\n", len(args))
		for _, a := range args {
			msg += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		reply, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(reply, "+OK") {
			t.Fatalf("%s: %q %v", args[0], reply, err)
		}
	}
	if opts.Password != "" {
		if opts.Username != "" {
			send("AUTH", opts.Username, opts.Password)
		} else {
			send("AUTH", opts.Password)
		}
	}
	send("MONITOR")
	return r
}

// A batch of more keys than one script visits (maxScriptKeys, 256) is several scripts, in the one
// round trip, its results still in request order.
func TestBatch_LargeBatchIsSeveralScriptsInOneRoundTrip(t *testing.T) {
	eachStore(t, func(t *testing.T, st *redis.Store) {
		ctx := t.Context()
		const n = 600
		reqs := make([]is.KeyID, n)
		for i := range reqs {
			reqs[i] = is.KeyID{Key: fmt.Sprintf("%sc:large-%03d", is.BucketPrefix(9), i), ID: uint64(i%3 + 1)}
			if err := st.AppendMany(ctx, ns, reqs[i].Key, []is.Entry{{ID: 1}, {ID: 2}, {ID: uint64(10 + i)}}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.ClosestLastMany(ctx, ns, reqs[:1]); err != nil { // warm: the script cached, a connection idle
			t.Fatal(err)
		}
		c := &scriptCounter{}
		st.Client().AddHook(c)
		got, err := st.ClosestLastMany(ctx, ns, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range got {
			want := uint64(i%3 + 1)
			if want == 3 {
				want = uint64(10 + i)
			}
			if r.Err != nil || !r.Found || r.Entry.ID != want || r.Last != uint64(10+i) {
				t.Fatalf("%q: %+v, want closest %d, last %d", reqs[i].Key, r, want, 10+i)
			}
		}
		if trips, sha := c.trips.Load(), c.evalsha.Load(); trips != 1 || sha != 3 {
			t.Fatalf("a batch of %d keys: %d round trips, %d EVALSHA; want 1 and 3", n, trips, sha)
		}
	})
}

// A batch under a cancelled context sends nothing and fails as a call with the context's error, never
// ErrTransient (a caller would retry it).
func TestBatch_CancelledContext(t *testing.T) {
	eachStore(t, func(t *testing.T, st *redis.Store) {
		k := is.BucketPrefix(3) + "c:cancel"
		if err := st.AppendMany(t.Context(), ns, k, []is.Entry{{ID: 1}, {ID: 2}}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		reqs := []is.KeyID{{Key: k, ID: 1}, {Key: is.BucketPrefix(4000) + "c:other", ID: 1}}
		_, err := st.ClosestLastMany(ctx, ns, reqs)
		requireCallError(t, err, context.Canceled)
		_, err = st.DropPrefixMany(ctx, ns, reqs)
		requireCallError(t, err, context.Canceled)
		if is.IsTransient(err) {
			t.Fatalf("a cancelled batch: %v, transient", err)
		}
		if n, err := st.Length(t.Context(), ns, k); err != nil || n != 2 {
			t.Fatalf("after a cancelled drop the index holds %d entries (%v), want 2", n, err)
		}
	})
}
