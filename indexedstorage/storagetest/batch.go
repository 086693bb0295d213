package storagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
)

// batchDeadline bounds a racing batch check's calls: far longer than any batch takes, so a check that
// outlives it has met a deadlock (two batches waiting on each other's locks), not a slow machine.
const batchDeadline = 30 * time.Second

// testBatch checks the batch operations (DESIGN §13) through is.ClosestLastMany and is.DropPrefixMany,
// so that a backend that is no is.BatchReader or is.BatchDropper is checked on the per-key fallback:
// each key's part is what the per-key operation returns on the same data, a batch whose arguments are
// invalid changes nothing, and racing batches neither deadlock nor count an entry twice.
func testBatch(t *testing.T, h Harness) {
	run := func(name string, fn func(f *fixture)) {
		t.Run(name, func(t *testing.T) { fn(newFixture(t, h)) })
	}

	run("ClosestLastMany/IsClosestLastOfEachKey", func(f *fixture) {
		keys, ids := f.batchData(ns)
		choices := make([][]uint64, len(keys))
		for i, k := range keys {
			choices[i] = idChoices(ids[k])
		}
		check := func(reqs []is.KeyID, what string) {
			f.t.Helper()
			for i, r := range f.closestLastMany(ns, reqs) {
				k, id := reqs[i].Key, reqs[i].ID
				e, found, last, exists, err := is.ClosestLast(f.ctx, f.st, ns, k, id)
				if err != nil {
					f.t.Fatalf("ClosestLast(%q, %d): %v", k, id, err)
				}
				if r.Found != found || r.Exists != exists || r.Last != last || (found && r.Entry.ID != e.ID) {
					f.t.Fatalf("%s: key %q (part %d of %d) id %d: entry %d found %v, last %d exists %v; ClosestLast says entry %d found %v, last %d exists %v",
						what, k, i, len(reqs), id, r.Entry.ID, r.Found, r.Last, r.Exists, e.ID, found, last, exists)
				}
				if found && !bytes.Equal(r.Entry.Value, value(k, e.ID)) {
					f.t.Fatalf("%s: key %q id %d: value %q, want %q", what, k, e.ID, r.Entry.Value, value(k, e.ID))
				}
			}
		}
		// Every key in one batch, each with a different kind of id in each round; then in reverse order.
		for round := range slices.Max(lengths(choices)) {
			reqs := make([]is.KeyID, len(keys))
			for i, k := range keys {
				reqs[i] = is.KeyID{Key: k, ID: choices[i][(i+round)%len(choices[i])]}
			}
			check(reqs, fmt.Sprintf("a batch of %d keys, round %d", len(reqs), round))
			slices.Reverse(reqs)
			check(reqs, fmt.Sprintf("a batch of %d keys in reverse, round %d", len(reqs), round))
		}
		// Each key alone, with each kind of id.
		for i, k := range keys {
			for _, id := range choices[i] {
				check([]is.KeyID{{Key: k, ID: id}}, "a batch of one")
			}
		}
		// Reading creates nothing, and what it hands out is the caller's own.
		for _, k := range keys {
			if len(ids[k]) == 0 {
				f.requireGone(ns, k)
			}
		}
		k := keys[0]
		res := f.closestLastMany(ns, []is.KeyID{{Key: k, ID: 0}})
		if !res[0].Found || len(res[0].Entry.Value) == 0 {
			f.t.Fatalf("ClosestLastMany of %q from 0 found nothing", k)
		}
		res[0].Entry.Value[0] ^= 0xff
		if e, ok, err := f.st.Closest(f.ctx, ns, k, 0); err != nil || !ok || !bytes.Equal(e.Value, value(k, e.ID)) {
			f.t.Fatalf("editing the value ClosestLastMany handed out edited the store: Closest reads %q, %v, %v", e.Value, ok, err)
		}
	})

	run("DropPrefixMany/IsDropPrefixOfEachKey", func(f *fixture) {
		// The same indexes in two namespaces: one dropped a batch at a time, the other a key at a time.
		const byBatch, byKey = "test/batch", "test/each"
		keys, ids := f.batchData(byBatch)
		f.batchData(byKey)
		f.append(byBatch, "bystander", 1, 2)
		choices := make([][]uint64, len(keys))
		for i, k := range keys {
			choices[i] = dropChoices(ids[k])
		}
		for round := range 3 {
			reqs := make([]is.KeyID, len(keys))
			for i, k := range keys {
				upTo := choices[i][(i+round)%len(choices[i])]
				if round == 2 {
					upTo = math.MaxUint64 // the last round empties every index
				}
				reqs[i] = is.KeyID{Key: k, ID: upTo}
			}
			if round == 1 {
				slices.Reverse(reqs)
			}
			counts := f.dropPrefixMany(byBatch, reqs)
			for i, r := range reqs {
				n := f.dropPrefix(byKey, r.Key, r.ID)
				var left []uint64
				for _, id := range ids[r.Key] {
					if id > r.ID {
						left = append(left, id)
					}
				}
				if want := uint64(len(ids[r.Key]) - len(left)); counts[i] != n || n != want {
					f.t.Fatalf("round %d: %q (part %d of %d) up to %d: the batch dropped %d, DropPrefix %d, want %d",
						round, r.Key, i, len(reqs), r.ID, counts[i], n, want)
				}
				ids[r.Key] = left
				requireIDs(f.t, f.ids(byBatch, r.Key), left, fmt.Sprintf("round %d: %q after the batch's drop up to %d", round, r.Key, r.ID))
				requireIDs(f.t, f.ids(byKey, r.Key), left, fmt.Sprintf("round %d: %q after DropPrefix(%d)", round, r.Key, r.ID))
				if got := f.exists(byBatch, r.Key); got != (len(left) > 0) {
					f.t.Fatalf("round %d: %q exists %v after the batch's drop up to %d, holding %v", round, r.Key, got, r.ID, left)
				}
			}
			var want []string
			for _, k := range keys {
				if len(ids[k]) > 0 {
					want = append(want, k)
				}
			}
			want = keySet(want)
			if got := keySet(f.walk(byKey, "", 7, nil)); !slices.Equal(got, want) {
				f.t.Fatalf("round %d: dropped key by key, a walk returns %q, want %q", round, got, want)
			}
			want = keySet(append(want, "bystander"))
			if got := keySet(f.walk(byBatch, "", 7, nil)); !slices.Equal(got, want) {
				f.t.Fatalf("round %d: dropped by batches, a walk returns %q, want %q", round, got, want)
			}
			if got := keySet(f.scanAll(byBatch, "", 7)); !slices.Equal(got, want) {
				f.t.Fatalf("round %d: dropped by batches, Scan returns %q, want %q", round, got, want)
			}
		}
		for _, k := range keys {
			f.requireGone(byBatch, k)
		}
		requireIDs(f.t, f.ids(byBatch, "bystander"), []uint64{1, 2}, "a key outside every batch")
	})

	run("AppendKeys/IsAppendManyOfEachKey", func(f *fixture) {
		// The same appends in two namespaces: one a batch at a time, the other a key at a time. Each
		// round gives every key a different kind of part: entries above its last id (a new index
		// too), nothing, or a first id not above the last (a conflict, which fails that key alone).
		const byBatch, byKey = "test/batch", "test/each"
		keys := []string{"a", "b", "c", "d/é", "e"}
		for _, nsx := range []string{byBatch, byKey} {
			f.append(nsx, "a", 1, 2)
			f.append(nsx, "b", 5)
			f.append(nsx, "d/é", 1)
		}
		f.append(byBatch, "bystander", 1, 2)
		next := map[string]uint64{"a": 3, "b": 6, "c": 1, "d/é": 2, "e": 1}
		for round := range 4 {
			reqs := make([]is.KeyEntries, len(keys))
			for i, k := range keys {
				reqs[i].Key = k
				switch (i + round) % 4 {
				case 0, 1:
					n := uint64(1 + (i+round)%3)
					for j := range n {
						id := next[k] + j*2 // gaps are allowed, ascending ids are not
						reqs[i].Entries = append(reqs[i].Entries, is.Entry{ID: id, Value: value(k, id)})
					}
				case 2: // nothing to append
				case 3:
					if next[k] > 1 {
						reqs[i].Entries = []is.Entry{{ID: next[k] - 1, Value: value(k, next[k]-1)}}
					}
				}
			}
			if round%2 == 1 {
				slices.Reverse(reqs)
			}
			errs, err := is.AppendKeys(f.ctx, f.st, byBatch, reqs)
			if err != nil || len(errs) != len(reqs) {
				f.t.Fatalf("round %d: AppendKeys: %d results, %v", round, len(errs), err)
			}
			for i, r := range reqs {
				perKey := f.st.AppendMany(f.ctx, byKey, r.Key, r.Entries)
				if (errs[i] == nil) != (perKey == nil) || (perKey != nil && errors.Is(errs[i], is.ErrConflict) != errors.Is(perKey, is.ErrConflict)) {
					f.t.Fatalf("round %d: %q (part %d of %d): the batch says %v, AppendMany %v", round, r.Key, i, len(reqs), errs[i], perKey)
				}
				if errs[i] == nil && len(r.Entries) > 0 {
					next[r.Key] = r.Entries[len(r.Entries)-1].ID + 1
				}
				got, want := f.ids(byBatch, r.Key), f.ids(byKey, r.Key)
				requireIDs(f.t, got, want, fmt.Sprintf("round %d: %q appended by the batch", round, r.Key))
				if f.exists(byBatch, r.Key) != f.exists(byKey, r.Key) {
					f.t.Fatalf("round %d: %q exists %v after the batch, %v after AppendMany", round, r.Key, f.exists(byBatch, r.Key), f.exists(byKey, r.Key))
				}
				entries, err := f.st.Read(f.ctx, byBatch, r.Key, 0, math.MaxUint64)
				if err != nil {
					f.t.Fatal(err)
				}
				for _, e := range entries {
					if !bytes.Equal(e.Value, value(r.Key, e.ID)) {
						f.t.Fatalf("round %d: %q id %d holds %q, want %q", round, r.Key, e.ID, e.Value, value(r.Key, e.ID))
					}
				}
			}
		}
		requireIDs(f.t, f.ids(byBatch, "bystander"), []uint64{1, 2}, "a key outside every batch")
	})

	run("AppendKeys/InvalidBatchChangesNothing", func(f *fixture) {
		f.append(ns, "k", 1, 2)
		ok := is.KeyEntries{Key: "k", Entries: []is.Entry{{ID: 3, Value: []byte("x")}}}
		fresh := is.KeyEntries{Key: "fresh", Entries: []is.Entry{{ID: 1, Value: []byte("x")}}}
		tooMany := []is.KeyEntries{ok, fresh}
		for _, k := range numberedKeys("many/", is.MaxBatch-1) {
			tooMany = append(tooMany, is.KeyEntries{Key: k, Entries: []is.Entry{{ID: 1}}})
		}
		for what, c := range map[string]struct {
			ns   string
			reqs []is.KeyEntries
			want error // what AppendMany says of the bad part
		}{
			"a key twice":                {ns, []is.KeyEntries{ok, fresh, {Key: "k", Entries: []is.Entry{{ID: 9}}}}, is.ErrInvalidArgument},
			"ids not ascending last":     {ns, []is.KeyEntries{ok, fresh, {Key: "j", Entries: []is.Entry{{ID: 2}, {ID: 2}}}}, is.ErrConflict},
			"id 0 last":                  {ns, []is.KeyEntries{ok, fresh, {Key: "j", Entries: []is.Entry{{ID: 0}}}}, is.ErrInvalidArgument},
			"an id above MaxID last":     {ns, []is.KeyEntries{ok, fresh, {Key: "j", Entries: []is.Entry{{ID: is.MaxID + 1}}}}, is.ErrInvalidArgument},
			"an empty key last":          {ns, []is.KeyEntries{ok, fresh, {Key: "", Entries: []is.Entry{{ID: 1}}}}, is.ErrInvalidArgument},
			"an invalid namespace":       {"bad ns", []is.KeyEntries{ok, fresh}, is.ErrInvalidArgument},
			"one more key than MaxBatch": {ns, tooMany, is.ErrInvalidArgument},
			"a Below above the first id": {ns, []is.KeyEntries{ok, fresh, {Key: "j", Entries: []is.Entry{{ID: 4}}, Below: 5}}, is.ErrInvalidArgument},
		} {
			_, err := is.AppendKeys(f.ctx, f.st, c.ns, c.reqs)
			requireIs(f.t, err, c.want, "AppendKeys with "+what)
			requireIDs(f.t, f.ids(ns, "k"), []uint64{1, 2}, "k after a batch with "+what)
			f.requireGone(ns, "fresh")
		}
	})

	run("AppendKeys/BelowConflictsWhereTheIndexReachesIt", func(f *fixture) {
		// Each key's index ends at 5; every part's ids start above it. A Below at or under the last id
		// conflicts though the ids alone would be taken (the packed layer's overlapping chunk); a
		// Below above it appends, an absent index takes any Below.
		keys := []string{"at", "under", "over", "first", "plain", "fresh/é"}
		for _, k := range keys[:5] {
			f.append(ns, k, 2, 5)
		}
		part := func(k string, below uint64) is.KeyEntries {
			return is.KeyEntries{Key: k, Entries: []is.Entry{{ID: 8, Value: value(k, 8)}, {ID: 9, Value: value(k, 9)}}, Below: below}
		}
		reqs := []is.KeyEntries{part("at", 5), part("under", 3), part("over", 6), part("first", 8), part("plain", 0), part("fresh/é", 1)}
		errs, err := is.AppendKeys(f.ctx, f.st, ns, reqs)
		if err != nil || len(errs) != len(reqs) {
			f.t.Fatalf("AppendKeys: %d results, %v", len(errs), err)
		}
		for i, r := range reqs {
			want := []uint64{2, 5, 8, 9}
			if r.Key == "fresh/é" {
				want = []uint64{8, 9}
			}
			if r.Below > 0 && r.Below <= 5 && r.Key != "fresh/é" {
				want = []uint64{2, 5}
				requireIs(f.t, errs[i], is.ErrConflict, fmt.Sprintf("%q with Below %d over an index ending at 5", r.Key, r.Below))
			} else if errs[i] != nil {
				f.t.Fatalf("%q with Below %d: %v, want it appended", r.Key, r.Below, errs[i])
			}
			requireIDs(f.t, f.ids(ns, r.Key), want, fmt.Sprintf("%q after a part with Below %d", r.Key, r.Below))
		}
	})

	run("EmptyBatchIsFine", func(f *fixture) {
		f.append(ns, "k", 1, 2)
		for _, reqs := range [][]is.KeyID{nil, {}} {
			res, err := is.ClosestLastMany(f.ctx, f.st, ns, reqs)
			if err != nil || len(res) != 0 {
				f.t.Fatalf("ClosestLastMany of no keys: %d results, %v", len(res), err)
			}
			drops, err := is.DropPrefixMany(f.ctx, f.st, ns, reqs)
			if err != nil || len(drops) != 0 {
				f.t.Fatalf("DropPrefixMany of no keys: %d results, %v", len(drops), err)
			}
		}
		requireIDs(f.t, f.ids(ns, "k"), []uint64{1, 2}, "after empty batches")
	})

	run("InvalidBatchIsRejectedAndChangesNothing", func(f *fixture) {
		f.append(ns, "k", 1, 2, 3)
		f.append(ns, "j", 1, 2)
		tooMany := []is.KeyID{{Key: "k", ID: 3}, {Key: "j", ID: 2}}
		for _, k := range numberedKeys("many/", is.MaxBatch-1) {
			tooMany = append(tooMany, is.KeyID{Key: k, ID: 1})
		}
		cases := []struct {
			what string
			ns   string
			reqs []is.KeyID
		}{
			{"a key twice", ns, []is.KeyID{{Key: "k", ID: 3}, {Key: "j", ID: 2}, {Key: "k", ID: 3}}},
			{"a key twice, with other ids", ns, []is.KeyID{{Key: "k", ID: 1}, {Key: "k", ID: 3}}},
			{"an empty key last", ns, []is.KeyID{{Key: "k", ID: 3}, {Key: "j", ID: 2}, {Key: "", ID: 1}}},
			{"a key with NUL last", ns, []is.KeyID{{Key: "k", ID: 3}, {Key: "j", ID: 2}, {Key: "nul\x00inside", ID: 1}}},
			{"a key of invalid UTF-8 last", ns, []is.KeyID{{Key: "k", ID: 3}, {Key: "\xff\xfe", ID: 1}}},
			{"a key too long last", ns, []is.KeyID{{Key: "k", ID: 3}, {Key: strings.Repeat("k", is.MaxKeyLen+1), ID: 1}}},
			{"an invalid namespace", "bad ns", []is.KeyID{{Key: "k", ID: 3}}},
			{fmt.Sprintf("%d keys, one more than MaxBatch", len(tooMany)), ns, tooMany},
		}
		for _, c := range cases {
			_, err := is.ClosestLastMany(f.ctx, f.st, c.ns, c.reqs)
			requireIs(f.t, err, is.ErrInvalidArgument, "ClosestLastMany with "+c.what)
			_, err = is.DropPrefixMany(f.ctx, f.st, c.ns, c.reqs)
			requireIs(f.t, err, is.ErrInvalidArgument, "DropPrefixMany with "+c.what)
			requireIDs(f.t, f.ids(ns, "k"), []uint64{1, 2, 3}, "k after a batch with "+c.what)
			requireIDs(f.t, f.ids(ns, "j"), []uint64{1, 2}, "j after a batch with "+c.what)
		}
		// MaxBatch keys is a batch, not too many.
		full := tooMany[:is.MaxBatch]
		res := f.closestLastMany(ns, full)
		if res[0].Last != 3 || res[1].Last != 2 || res[2].Exists {
			f.t.Fatalf("ClosestLastMany of MaxBatch keys: last ids %d, %d, %d (exists %v), want 3, 2 and none",
				res[0].Last, res[1].Last, res[2].Last, res[2].Exists)
		}
		counts := f.dropPrefixMany(ns, full)
		if counts[0] != 3 || counts[1] != 2 || slices.ContainsFunc(counts[2:], func(n uint64) bool { return n != 0 }) {
			f.t.Fatalf("DropPrefixMany of MaxBatch keys dropped %d and %d from k and j (want 3 and 2), and %d in all",
				counts[0], counts[1], sum(counts))
		}
		f.requireGone(ns, "k")
		f.requireGone(ns, "j")
	})

	run("ClosedIsClosed", func(f *fixture) {
		f.append(ns, "k", 1, 2)
		if err := f.st.Close(); err != nil {
			f.t.Fatalf("Close: %v", err)
		}
		reqs := []is.KeyID{{Key: "k", ID: 1}, {Key: "missing", ID: 1}, {Key: "j", ID: 5}}
		res, err := is.ClosestLastMany(f.ctx, f.st, ns, reqs)
		f.requireClosedBatch("ClosestLastMany", err, len(reqs), len(res), func(i int) error { return res[i].Err })
		drops, err := is.DropPrefixMany(f.ctx, f.st, ns, reqs)
		f.requireClosedBatch("DropPrefixMany", err, len(reqs), len(drops), func(i int) error { return drops[i].Err })
	})

	// Writers append above what two droppers drop, each dropper a batch of every key at a time, one
	// in ascending key order, the other descending: every entry appended is dropped by one of them,
	// counted once, or still there, and nothing is lost.
	run("RacingAppendsAboveBatchDropsLoseNothing", func(f *fixture) {
		const keysN, total = 3, 100
		for round := range max(1, h.raceRounds(20)/10) {
			keys := numberedKeys(fmt.Sprintf("drop-race-%d/", round), keysN)
			var dropped [2][keysN]uint64
			var writing sync.WaitGroup
			done := make(chan struct{})
			var fns []func(ctx context.Context) error
			for _, k := range keys {
				writing.Add(1)
				fns = append(fns, func(ctx context.Context) error {
					defer writing.Done()
					for id := uint64(1); id <= total; id++ {
						if err := f.st.Append(ctx, ns, k, id, value(k, id)); err != nil {
							return fmt.Errorf("Append(%q, %d) racing batch drops: %w", k, id, err)
						}
					}
					return nil
				})
			}
			fns = append(fns, func(context.Context) error { writing.Wait(); close(done); return nil })
			for d := range dropped {
				fns = append(fns, func(ctx context.Context) error {
					for {
						select {
						case <-done:
							return nil
						default:
						}
						order := slices.Clone(keys)
						if d == 1 {
							slices.Reverse(order)
						}
						reqs := make([]is.KeyID, len(order))
						for i, k := range order {
							reqs[i] = is.KeyID{Key: k}
						}
						lasts, err := is.ClosestLastMany(ctx, f.st, ns, reqs)
						if err != nil {
							return fmt.Errorf("ClosestLastMany: %w", err)
						}
						for i, l := range lasts {
							if l.Err != nil {
								return fmt.Errorf("ClosestLastMany, key %q: %w", reqs[i].Key, l.Err)
							}
							reqs[i].ID = l.Last // 0 for an index not yet written or emptied: drops nothing
						}
						res, err := is.DropPrefixMany(ctx, f.st, ns, reqs)
						if err != nil {
							return fmt.Errorf("DropPrefixMany: %w", err)
						}
						for i, r := range res {
							if r.Err != nil {
								return fmt.Errorf("DropPrefixMany, key %q: %w", reqs[i].Key, r.Err)
							}
							dropped[d][slices.Index(keys, reqs[i].Key)] += r.Dropped
						}
					}
				})
			}
			f.raceWithin(fmt.Sprintf("round %d: appends racing batch drops", round), fns...)
			for i, k := range keys {
				left := f.ids(ns, k)
				counted := dropped[0][i] + dropped[1][i]
				if counted+uint64(len(left)) != total {
					f.t.Fatalf("round %d: %q: the two droppers counted %d and %d dropped, %d are left: %d in all, %d were appended",
						round, k, dropped[0][i], dropped[1][i], len(left), counted+uint64(len(left)), total)
				}
				requireIDs(f.t, left, span(total-uint64(len(left))+1, total), fmt.Sprintf("round %d: what survived of %q", round, k))
			}
		}
	})

	// Two batch drops of the same keys, one in ascending key order, the other in descending: a backend
	// that locks each index as it reaches it in the request (not in key order) deadlocks here. Both must
	// complete, and of the two each entry is counted once.
	run("OppositeOrderBatchDropsComplete", func(f *fixture) {
		const keysN, size = 6, 10
		for round := range h.raceRounds(60) {
			keys := numberedKeys(fmt.Sprintf("opposite-%d/", round), keysN)
			for _, k := range keys {
				f.appendMany(ns, k, span(1, size)...)
			}
			bounds := [2]uint64{uint64(3 + round%5), uint64(5 + round%7)}
			var counts [2][]uint64
			drop := func(d int) func(ctx context.Context) error {
				return func(ctx context.Context) error {
					reqs := make([]is.KeyID, len(keys))
					for i, k := range keys {
						reqs[i] = is.KeyID{Key: k, ID: bounds[d]}
					}
					if d == 1 {
						slices.Reverse(reqs)
					}
					res, err := is.DropPrefixMany(ctx, f.st, ns, reqs)
					if err != nil {
						return fmt.Errorf("DropPrefixMany in %s key order: %w", []string{"ascending", "descending"}[d], err)
					}
					counts[d] = make([]uint64, len(keys))
					for i, r := range res {
						if r.Err != nil {
							return fmt.Errorf("DropPrefixMany, key %q: %w", reqs[i].Key, r.Err)
						}
						counts[d][slices.Index(keys, reqs[i].Key)] = r.Dropped
					}
					return nil
				}
			}
			f.raceWithin(fmt.Sprintf("round %d: two batch drops of %d keys in opposite orders", round, keysN), drop(0), drop(1))
			highest := min(max(bounds[0], bounds[1]), size)
			for i, k := range keys {
				requireIDs(f.t, f.ids(ns, k), span(highest+1, size), fmt.Sprintf("round %d: %q after drops up to %v", round, k, bounds))
				if got := counts[0][i] + counts[1][i]; got != highest {
					f.t.Fatalf("round %d: %q: drops up to %d and %d counted %d and %d, %d in all; %d entries were dropped",
						round, k, bounds[0], bounds[1], counts[0][i], counts[1][i], got, highest)
				}
			}
		}
	})
}

// batchData writes the indexes the batch checks read and drop in namespace ns: every special key
// (a backend that builds one statement or script of many keys must quote each right), the first of
// them ending at MaxID, a key of the maximum length holding ids 1 and MaxID, one index emptied by a
// drop, and two never written. It returns the keys and
// the ids each holds.
func (f *fixture) batchData(ns string) ([]string, map[string][]uint64) {
	f.t.Helper()
	ids := map[string][]uint64{}
	keys := slices.Clone(specialKeys)
	for i, k := range keys {
		base := uint64(10 * (i + 1))
		ids[k] = []uint64{base, base + 3, base + 5}
		if i == 0 {
			ids[k] = append(ids[k], is.MaxID)
		}
		f.appendMany(ns, k, ids[k]...)
	}
	longest := strings.Repeat("k", is.MaxKeyLen)
	ids[longest] = []uint64{1, is.MaxID}
	f.appendMany(ns, longest, ids[longest]...)
	f.append(ns, "emptied", 1, 2)
	f.dropPrefix(ns, "emptied", 2)
	keys = append(keys, longest, "emptied", "missing", "never/written")
	return keys, ids
}

// idChoices are the ids a batch read seeks in an index holding ids: each end of the id range, and
// below, at, between and above the index's own.
func idChoices(ids []uint64) []uint64 {
	choices := []uint64{0, 1, is.MaxID, math.MaxUint64}
	if len(ids) > 0 {
		first, last := ids[0], ids[len(ids)-1]
		choices = append(choices, first-1, first, first+1, ids[len(ids)/2], last, last+1)
	}
	return choices
}

// dropChoices are the bounds a batch drop is given for an index holding ids.
func dropChoices(ids []uint64) []uint64 {
	choices := []uint64{0, is.MaxID, math.MaxUint64}
	if len(ids) > 0 {
		first, last := ids[0], ids[len(ids)-1]
		choices = append(choices, first-1, first, ids[len(ids)/2], last-1, last)
	}
	return choices
}

func lengths(lists [][]uint64) []int {
	out := make([]int, len(lists))
	for i, l := range lists {
		out[i] = len(l)
	}
	return out
}

func sum(ns []uint64) uint64 {
	var s uint64
	for _, n := range ns {
		s += n
	}
	return s
}

// closestLastMany is is.ClosestLastMany, failing the test on the call's error or any key's.
func (f *fixture) closestLastMany(ns string, reqs []is.KeyID) []is.ClosestLastResult {
	f.t.Helper()
	res, err := is.ClosestLastMany(f.ctx, f.st, ns, reqs)
	if err != nil {
		f.t.Fatalf("ClosestLastMany(%q, %d keys): %v", ns, len(reqs), err)
	}
	if len(res) != len(reqs) {
		f.t.Fatalf("ClosestLastMany(%q) of %d keys returned %d results", ns, len(reqs), len(res))
	}
	for i, r := range res {
		if r.Err != nil {
			f.t.Fatalf("ClosestLastMany(%q), key %q: %v", ns, reqs[i].Key, r.Err)
		}
		if r.Exists != (r.Last != 0) || (r.Found && !r.Exists) {
			f.t.Fatalf("ClosestLastMany(%q), key %q: found %v, last %d, exists %v", ns, reqs[i].Key, r.Found, r.Last, r.Exists)
		}
	}
	return res
}

// dropPrefixMany is is.DropPrefixMany, failing the test on the call's error or any key's; it returns
// each key's count.
func (f *fixture) dropPrefixMany(ns string, reqs []is.KeyID) []uint64 {
	f.t.Helper()
	res, err := is.DropPrefixMany(f.ctx, f.st, ns, reqs)
	if err != nil {
		f.t.Fatalf("DropPrefixMany(%q, %d keys): %v", ns, len(reqs), err)
	}
	if len(res) != len(reqs) {
		f.t.Fatalf("DropPrefixMany(%q) of %d keys returned %d results", ns, len(reqs), len(res))
	}
	counts := make([]uint64, len(res))
	for i, r := range res {
		if r.Err != nil {
			f.t.Fatalf("DropPrefixMany(%q), key %q: %v", ns, reqs[i].Key, r.Err)
		}
		counts[i] = r.Dropped
	}
	return counts
}

// requireClosedBatch checks a batch call on a closed Storage failed: the call itself with ErrClosed,
// or (the per-key fallback) each of its n parts.
func (f *fixture) requireClosedBatch(op string, err error, n, results int, partErr func(i int) error) {
	f.t.Helper()
	if err != nil {
		requireIs(f.t, err, is.ErrClosed, op+" after Close")
		return
	}
	if results != n {
		f.t.Fatalf("%s after Close: no error and %d results for %d keys", op, results, n)
	}
	for i := range n {
		requireIs(f.t, partErr(i), is.ErrClosed, fmt.Sprintf("%s after Close, part %d", op, i))
	}
}

// raceWithin runs fns at once, each given a context that ends after batchDeadline, and fails the test
// with what if any returns an error, or if they have not all returned by the deadline: a deadlock,
// since none of them takes a fraction of that.
func (f *fixture) raceWithin(what string, fns ...func(ctx context.Context) error) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, batchDeadline)
	defer cancel()
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, fn := range fns {
		wg.Go(func() {
			<-start
			errs[i] = fn(ctx)
		})
	}
	close(start)
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-ctx.Done():
		if f.ctx.Err() == nil {
			f.t.Fatalf("%s: DEADLOCK: not every call returned within %v (two batches waiting on each other's locks: a batch must lock its indexes in key order, not request order)",
				what, batchDeadline)
		}
		f.t.Fatalf("%s: %v", what, f.ctx.Err())
	}
	if err := errors.Join(errs...); err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			f.t.Fatalf("%s: DEADLOCK: a call gave up at the %v deadline (two batches waiting on each other's locks?): %v", what, batchDeadline, err)
		}
		f.t.Fatalf("%s: %v", what, err)
	}
}
