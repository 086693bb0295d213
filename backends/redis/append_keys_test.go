package redis_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stratalog/strata/backends/redis"
	is "github.com/stratalog/strata/indexedstorage"
)

func readIDs(t *testing.T, st *redis.Store, key string) []uint64 {
	t.Helper()
	entries, err := st.Read(t.Context(), ns, key, 0, is.MaxID)
	if err != nil {
		t.Fatalf("Read(%q): %v", key, err)
	}
	for _, e := range entries {
		if want := fmt.Sprintf("%s#%d", key, e.ID); string(e.Value) != want {
			t.Fatalf("%q id %d holds %q, want %q", key, e.ID, e.Value, want)
		}
	}
	return ids(entries)
}

func valued(key string, first, last uint64) []is.Entry {
	var out []is.Entry
	for id := first; id <= last; id++ {
		out = append(out, is.Entry{ID: id, Value: fmt.Appendf(nil, "%s#%d", key, id)})
	}
	return out
}

func span(first, last uint64) []uint64 {
	var out []uint64
	for id := first; id <= last; id++ {
		out = append(out, id)
	}
	return out
}

// A key whose first id is not above its last fails alone in the middle of a batch, its index as it
// was, its error naming its last id; the keys of its script before and after it (one bucket, so one
// hash slot) and of other scripts are appended and listed, and the per-key offsets of the script's
// arguments hold around a key of more entries than one ZADD takes.
func TestAppendKeys_ConflictInTheMiddleFailsThatKeyOnly(t *testing.T) {
	eachStore(t, func(t *testing.T, st *redis.Store) {
		ctx := t.Context()
		same := func(i int) string { return fmt.Sprintf("%sc:agent-%d", is.BucketPrefix(0x0321), i) }
		before, conflicting, after, big, elsewhere := same(0), same(1), same(2), same(3), is.BucketPrefix(0x2000)+"c:other"
		for _, k := range []string{before, conflicting, after} {
			if err := st.AppendMany(ctx, ns, k, valued(k, 1, 3)); err != nil {
				t.Fatal(err)
			}
		}
		errs, err := st.AppendKeys(ctx, ns, []is.KeyEntries{
			{Key: before, Entries: valued(before, 4, 5)},
			{Key: conflicting, Entries: valued(conflicting, 3, 4)},
			{Key: big, Entries: valued(big, 1, 2500)}, // 5000 score/member arguments: two ZADDs
			{Key: after, Entries: valued(after, 9, 9)},
			{Key: "agent:loose", Entries: nil},
			{Key: elsewhere, Entries: valued(elsewhere, 7, 8)},
		})
		if err != nil || len(errs) != 6 {
			t.Fatalf("AppendKeys: %v, %v", errs, err)
		}
		var op *is.OpError
		if !errors.Is(errs[1], is.ErrConflict) || !errors.As(errs[1], &op) || op.Op != is.OpAppendKeys || op.Key != conflicting ||
			!strings.Contains(errs[1].Error(), "id 3 is not above the index's last id 3") {
			t.Fatalf("the conflicting part: %v; want ErrConflict as an OpError of append_keys naming it and its ids", errs[1])
		}
		for i, e := range errs {
			if i != 1 && e != nil {
				t.Fatalf("part %d: %v", i, e)
			}
		}
		for key, want := range map[string][]uint64{before: span(1, 5), conflicting: span(1, 3), big: span(1, 2500), after: {1, 2, 3, 9}, elsewhere: {7, 8}} {
			if got := readIDs(t, st, key); !slices.Equal(got, want) {
				t.Errorf("%q after the batch: %d ids %v…, want %d", key, len(got), got[:min(len(got), 5)], len(want))
			}
			requireListed(t, st, ns, key, true)
		}
		if ok, err := st.Exists(ctx, ns, "agent:loose"); err != nil || ok {
			t.Fatalf("a key with nothing to append exists %v (%v)", ok, err)
		}
		requireListed(t, st, ns, "agent:loose", false)
	})
}

// A key of the wrong type (another program's value) fails its part only: the other keys of its
// script, which share its hash slot, are appended as if it were not there, and it keeps its value.
func TestAppendKeys_WrongTypeKeyFailsAlone(t *testing.T) {
	eachStore(t, func(t *testing.T, st *redis.Store) {
		ctx := t.Context()
		var reqs []is.KeyEntries
		for i := range 5 {
			k := fmt.Sprintf("%sc:agent-%d", is.BucketPrefix(0x1234), i)
			reqs = append(reqs, is.KeyEntries{Key: k, Entries: valued(k, 1, 2)})
		}
		poisoned := reqs[2].Key
		if err := st.Client().Set(ctx, st.RedisKey(ns, poisoned), "not a sorted set", 0).Err(); err != nil {
			t.Fatal(err)
		}
		errs, err := st.AppendKeys(ctx, ns, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range reqs {
			if r.Key == poisoned {
				var op *is.OpError
				if !errors.As(errs[i], &op) || op.Key != poisoned || is.IsTransient(errs[i]) || errors.Is(errs[i], is.ErrConflict) {
					t.Fatalf("the poisoned key's part: %v, want a permanent OpError naming %q", errs[i], poisoned)
				}
				continue
			}
			if got := readIDs(t, st, r.Key); errs[i] != nil || !slices.Equal(got, []uint64{1, 2}) {
				t.Fatalf("%q beside a poisoned key: %v, ids %v", r.Key, errs[i], got)
			}
		}
		if v, err := st.Client().Get(ctx, st.RedisKey(ns, poisoned)).Result(); err != nil || v != "not a sorted set" {
			t.Fatalf("the poisoned key holds %q %v", v, err)
		}
	})
}

// A batch append is one round trip: one pipeline, of one script on one node and of one script a hash
// tag on a cluster, not a command a key.
func TestAppendKeys_OnePipeline(t *testing.T) {
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
			keys = append(keys, fmt.Sprintf("%sc:pipe-%d", is.BucketPrefix(b), i))
		}
		batch := func(first uint64) []is.KeyEntries {
			out := make([]is.KeyEntries, len(keys))
			for i, k := range keys {
				out[i] = is.KeyEntries{Key: k, Entries: valued(k, first, first+1)}
			}
			return out
		}
		// Once so that every node has the script cached (a node without it answers NOSCRIPT, and the
		// batch goes again with the script's text: a second round trip, once).
		if _, err := st.AppendKeys(ctx, ns, batch(1)); err != nil {
			t.Fatal(err)
		}
		c := &counter{}
		st.Client().AddHook(c)
		errs, err := st.AppendKeys(ctx, ns, batch(3))
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range errs {
			if e != nil {
				t.Fatalf("%q: %v", keys[i], e)
			}
		}
		wantCmds := int64(1)
		if st.IsCluster() {
			wantCmds = int64(len(tags))
		}
		if trips, cmds := c.trips.Load(), c.cmds.Load(); trips != 1 || cmds != wantCmds {
			t.Fatalf("AppendKeys of %d keys in %d buckets sent %d round trips of %d commands, want 1 of %d", len(keys), len(tags), trips, cmds, wantCmds)
		}
		if got := readIDs(t, st, keys[17]); !slices.Equal(got, span(1, 4)) {
			t.Fatalf("%q after two batches: %v, want 1..4", keys[17], got)
		}
	})
}

// With wait_replicas, a batch append waits for the replicas of every master it wrote to: on the
// cluster (one replica a master) 1 is met; 2 is not, and each key's append, which is done, reports
// ErrTransient.
func TestAppendKeys_WaitsForReplicas(t *testing.T) {
	ctx := t.Context()
	one, two := waitingClusterStores(t)
	var reqs []is.KeyEntries
	for i := range 20 {
		k := fmt.Sprintf("%sc:wait-%d", is.BucketPrefix(i*800), i)
		reqs = append(reqs, is.KeyEntries{Key: k, Entries: valued(k, 1, 2)})
	}
	errs, err := one.AppendKeys(ctx, ns, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("%q waiting for 1 replica: %v", reqs[i].Key, e)
		}
		reqs[i].Entries = valued(reqs[i].Key, 3, 3)
	}
	errs, err = two.AppendKeys(ctx, ns, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if !is.IsTransient(e) {
			t.Fatalf("%q waiting for 2 replicas of 1: %v, want ErrTransient", reqs[i].Key, e)
		}
		if got := readIDs(t, one, reqs[i].Key); !slices.Equal(got, span(1, 3)) {
			t.Fatalf("%q: the append that timed out waiting is done: %v, want 1..3", reqs[i].Key, got)
		}
	}
}
