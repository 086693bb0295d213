package storagetest

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
)

// raceRounds is how many rounds a racing check runs: the harness's RaceRounds, or base.
func (h Harness) raceRounds(base int) int {
	if h.RaceRounds > 0 {
		return quick(h.RaceRounds)
	}
	return quick(base)
}

// quick is n in the long run, else a tenth of it (at least 1): the quick mode, `go test`'s default,
// runs every check with fewer random cases. The long run is STRATA_TEST_LONG=1 without -short.
func quick(n int) int {
	if !Long() {
		return max(1, n/10)
	}
	return n
}

// LongEnv is the variable that turns on the suite's long run: STRATA_TEST_LONG=1 runs every random
// check (model cases, linearizability histories, race rounds) ten times as often as the default. A
// backend's CI should set it; a developer's `go test` stays quick.
const LongEnv = "STRATA_TEST_LONG"

// Long reports whether the suite runs long: LongEnv is 1 or true, and go test was not given -short.
func Long() bool {
	v := os.Getenv(LongEnv)
	return !testing.Short() && (v == "1" || v == "true")
}

// testIsolation holds the checks of DESIGN §10 that concern what one caller can see of another's
// mutation: a drop is never seen half done, racing drops count each entry once, values handed out are
// the caller's own, and keys are compared byte for byte.
func testIsolation(t *testing.T, h Harness) {
	// A drop larger than any batch a backend might split it into (PostgreSQL deletes 5000 rows a
	// statement) while readers look at the index: each look sees all of it or what the drop left,
	// never a state in between.
	t.Run("DropPrefixIsNeverSeenHalfDone", func(t *testing.T) {
		f := newFixture(t, h)
		const total, upTo = 12_000, 10_000
		for from := uint64(1); from <= total; from += 1000 {
			f.appendMany(ns, "big", span(from, from+999)...)
		}
		stop := make(chan struct{})
		var wg, looking sync.WaitGroup
		errs := make(chan error, 2)
		var looks [2]int
		for r := range 2 {
			looking.Add(1)
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					looks[r]++
					err := f.lookAtDrop(r, total, upTo)
					if looks[r] == 1 {
						looking.Done()
					}
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		// The drop starts once both readers are looking, so that even an in-process backend's drop
		// has readers running beside it.
		looking.Wait()
		dropped, err := f.st.DropPrefix(f.ctx, ns, "big", upTo)
		close(stop)
		wg.Wait()
		close(errs)
		if err != nil {
			t.Fatalf("DropPrefix: %v", err)
		}
		for err := range errs {
			t.Fatal(err)
		}
		if dropped != upTo {
			t.Fatalf("DropPrefix dropped %d, want %d", dropped, upTo)
		}
		requireIDs(t, f.ids(ns, "big"), span(upTo+1, total), "after the drop")
		t.Logf("readers looked %d times", looks[0]+looks[1])
	})

	// Droppers race over one index with different bounds: together they report each entry dropped
	// exactly once, and what is left is exactly what lies above the highest bound.
	t.Run("RacingDropsCountEachEntryOnce", func(t *testing.T) {
		f := newFixture(t, h)
		const droppers, size = 4, 40
		for round := range h.raceRounds(30) {
			key := fmt.Sprintf("drops-%d", round)
			f.appendMany(ns, key, span(1, size)...)
			bounds := make([]uint64, droppers)
			for d := range bounds {
				bounds[d] = uint64(10*d+round%10) + 5 // overlapping bounds, one of them above size sometimes
			}
			counts := make([]uint64, droppers)
			errs := make([]error, droppers)
			var wg sync.WaitGroup
			for d := range droppers {
				wg.Go(func() { counts[d], errs[d] = f.st.DropPrefix(f.ctx, ns, key, bounds[d]) })
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatalf("round %d: racing DropPrefix: %v", round, err)
				}
			}
			var sum uint64
			for _, c := range counts {
				sum += c
			}
			highest := min(slices.Max(bounds), size)
			left := f.ids(ns, key)
			requireIDs(t, left, span(highest+1, size), fmt.Sprintf("round %d: left after drops up to %v", round, bounds))
			if sum != highest {
				t.Fatalf("round %d: drops up to %v reported %v dropped, %d in all; %d entries were dropped",
					round, bounds, counts, sum, highest)
			}
		}
	})

	t.Run("ValuesHandedOutAreTheCallersOwn", func(t *testing.T) {
		f := newFixture(t, h)
		written := []byte("original")
		if err := f.st.Append(f.ctx, ns, "k", 1, written); err != nil {
			t.Fatal(err)
		}
		batch := entries("k", 2, 3)
		if err := f.st.AppendMany(f.ctx, ns, "k", batch); err != nil {
			t.Fatal(err)
		}
		// The caller reuses its buffers after the calls return.
		copy(written, "XXXXXXXX")
		for _, e := range batch {
			clear(e.Value)
		}
		want := map[uint64]string{1: "original", 2: string(value("k", 2)), 3: string(value("k", 3))}
		check := func(what string) {
			t.Helper()
			got, err := f.st.Read(f.ctx, ns, "k", 0, ^uint64(0))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%s: read %d entries, want %d", what, len(got), len(want))
			}
			for _, e := range got {
				if string(e.Value) != want[e.ID] {
					t.Fatalf("%s: id %d reads %q, want %q", what, e.ID, e.Value, want[e.ID])
				}
			}
		}
		check("after the caller reused the buffers it appended")
		// The caller edits what it was handed.
		read, err := f.st.Read(f.ctx, ns, "k", 0, ^uint64(0))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range read {
			clear(e.Value)
		}
		for _, get := range []func() (is.Entry, bool, error){
			func() (is.Entry, bool, error) { return f.st.First(f.ctx, ns, "k") },
			func() (is.Entry, bool, error) { return f.st.Last(f.ctx, ns, "k") },
			func() (is.Entry, bool, error) { return f.st.Closest(f.ctx, ns, "k", 2) },
			func() (is.Entry, bool, error) {
				e, ok, _, _, err := is.ClosestLast(f.ctx, f.st, ns, "k", 2)
				return e, ok, err
			},
		} {
			e, ok, err := get()
			if err != nil || !ok {
				t.Fatalf("First/Last/Closest/ClosestLast: %v, %v", ok, err)
			}
			clear(e.Value)
		}
		check("after the caller edited the values it read")
	})

	t.Run("KeysAreComparedByteForByte", func(t *testing.T) {
		f := newFixture(t, h)
		for i, k := range lookalikeKeys {
			f.append(ns, k, uint64(i+1))
		}
		f.append(lookalikeNS, "agent", 100)
		for i, k := range lookalikeKeys {
			requireIDs(t, f.ids(ns, k), []uint64{uint64(i + 1)}, fmt.Sprintf("key %q", k))
		}
		requireIDs(t, f.ids(lookalikeNS, "agent"), []uint64{100}, fmt.Sprintf("key %q of namespace %q", "agent", lookalikeNS))
		if got, want := keySet(f.walk(ns, "", 4, nil)), keySet(lookalikeKeys); !slices.Equal(got, want) {
			t.Fatalf("walk of keys that differ in case, spaces or normalisation:\n got %q\nwant %q", got, want)
		}
		// Removing one removes only that one.
		for i, k := range lookalikeKeys {
			if i%2 == 0 {
				f.delete(ns, k)
			} else {
				f.dropPrefix(ns, k, uint64(i+1))
			}
			f.requireGone(ns, k)
			for _, other := range lookalikeKeys[i+1:] {
				if !f.exists(ns, other) {
					t.Fatalf("removing %q removed %q too", k, other)
				}
			}
		}
		requireIDs(t, f.ids(lookalikeNS, "agent"), []uint64{100}, "the other namespace's key")
	})
}

// lookalikeKeys differ only in case, in leading or trailing white space, or in Unicode normalisation
// (NFC against NFD, a compatibility character against its decomposition): a collation, a trim or a
// normalising driver would fold some of them together.
var lookalikeKeys = []string{
	"agent", "Agent", "AGENT", "agent ", "agent  ", " agent", "agent\t",
	"caf\u00e9", "cafe\u0301", "CAF\u00c9",
	"\u00c5", "\u212b", "A\u030a",
	"\ufb01", "fi", "stra\u00dfe", "strasse",
	"\u0130", "i\u0307",
}

// lookalikeNS differs from ns only in case.
const lookalikeNS = "Test/NS"

// lookAtDrop reads "big" once, through Length and First and a Read of the boundary, and returns an
// error if what it saw is neither the index before the drop nor after it.
func (f *fixture) lookAtDrop(reader int, total, upTo uint64) error {
	n, err := f.st.Length(f.ctx, ns, "big")
	if err != nil {
		return err
	}
	first, ok, err := f.st.First(f.ctx, ns, "big")
	if err != nil {
		return err
	}
	boundary, err := f.st.Read(f.ctx, ns, "big", upTo-1, upTo+1)
	if err != nil {
		return err
	}
	before, after := total, total-upTo
	if n != before && n != after {
		return fmt.Errorf("reader %d: Length %d mid-drop: neither %d (before) nor %d (after)", reader, n, before, after)
	}
	if !ok || (first.ID != 1 && first.ID != upTo+1) {
		return fmt.Errorf("reader %d: First is %d (found %v) mid-drop: neither 1 nor %d", reader, first.ID, ok, upTo+1)
	}
	if len(boundary) != 3 && len(boundary) != 1 {
		return fmt.Errorf("reader %d: Read(%d, %d) mid-drop returned %d entries: neither 3 nor 1", reader, upTo-1, upTo+1, len(boundary))
	}
	return nil
}
