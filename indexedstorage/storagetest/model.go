package storagetest

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
)

// The model check drives a backend and a naive model (a sorted slice filtered by range and marker)
// with the same random operations and compares what ScanStable hands back. Keys come from a small
// alphabet that includes the characters LIKE treats specially, so prefixes collide often.
const modelAlphabet = "ab_%/"

const modelNS = "test/model"

// model is what the test believes the namespace holds: each key's last id (present keys only).
type model struct {
	rng    *rand.Rand
	f      *fixture
	last   map[string]uint64
	count  map[string]int
	nextID uint64
}

func newModel(f *fixture, seed uint64) *model {
	return &model{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), f: f,
		last: map[string]uint64{}, count: map[string]int{}, nextID: 1}
}

func (m *model) randomKey() string {
	b := make([]byte, 1+m.rng.IntN(3))
	for i := range b {
		b[i] = modelAlphabet[m.rng.IntN(len(modelAlphabet))]
	}
	return string(b)
}

// randomRange is a prefix's range half the time, else a range between two random bounds, either of
// which may be open and which may be empty or inverted (a range that holds no key).
func (m *model) randomRange() is.KeyRange {
	if m.rng.IntN(2) == 0 {
		if m.rng.IntN(4) == 0 {
			return is.PrefixRange("")
		}
		k := m.randomKey()
		return is.PrefixRange(k[:min(len(k), 2)])
	}
	var r is.KeyRange
	if m.rng.IntN(4) > 0 {
		r.Start = m.randomKey()
	}
	if m.rng.IntN(4) > 0 {
		r.End = m.randomKey()
	}
	return r
}

// inRange is the model's own reading of a range, independent of KeyRange's methods.
func inRange(r is.KeyRange, k string) bool {
	return k >= r.Start && (r.End == "" || k < r.End)
}

// touched is a key a mutation changed, and whether it is present afterwards.
type touched struct {
	key     string
	present bool
}

// mutate applies one random change to both the backend and the model, and reports the keys it touched
// and whether each is present afterwards. Three changes in ten are a batch (DESIGN §13): a batch drop
// or a batch append, applied to the model as its per-key drops or appends, or a batch read checked
// against the model.
func (m *model) mutate() []touched {
	switch m.rng.IntN(10) {
	case 0:
		return m.batchDrop()
	case 1:
		m.batchRead()
		return nil
	case 2:
		return m.batchAppend()
	}
	f := m.f
	key := m.randomKey()
	if m.count[key] == 0 || m.rng.IntN(2) == 0 {
		n := 1 + m.rng.IntN(2)
		for range n {
			f.append(modelNS, key, m.nextID)
			m.last[key] = m.nextID
			m.nextID++
		}
		m.count[key] += n
		return []touched{{key, true}}
	}
	switch m.rng.IntN(4) {
	case 0:
		f.delete(modelNS, key)
	case 1:
		f.dropPrefix(modelNS, key, math.MaxUint64)
	case 2:
		f.dropPrefix(modelNS, key, m.last[key])
	default:
		// Drop all but the last entry: the key stays.
		if m.count[key] > 1 {
			f.dropPrefix(modelNS, key, m.last[key]-1)
			m.count[key] = 1
		}
		return []touched{{key, true}}
	}
	delete(m.last, key)
	delete(m.count, key)
	return []touched{{key, false}}
}

// batchKeys picks one to four distinct random keys, present or not.
func (m *model) batchKeys() []string {
	var keys []string
	for range 1 + m.rng.IntN(4) {
		if k := m.randomKey(); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// batchDrop drops a prefix of a few keys in one DropPrefixMany, each bound one the model can follow (all,
// up to the last id, all but the last entry, nothing), and checks each key's count.
func (m *model) batchDrop() []touched {
	f := m.f
	keys := m.batchKeys()
	reqs := make([]is.KeyID, len(keys))
	want := make([]uint64, len(keys))
	out := make([]touched, len(keys))
	for i, k := range keys {
		reqs[i].Key = k
		count, last := uint64(m.count[k]), m.last[k]
		switch m.rng.IntN(4) {
		case 0:
			reqs[i].ID, want[i] = math.MaxUint64, count
		case 1:
			reqs[i].ID, want[i] = last, count // 0 for a missing key: drops nothing
		case 2:
			if count > 1 {
				reqs[i].ID, want[i] = last-1, count-1
			}
		default:
			reqs[i].ID = 0 // below every id: drops nothing
		}
		if want[i] == count && count > 0 {
			delete(m.last, k)
			delete(m.count, k)
		} else if want[i] > 0 {
			m.count[k] -= int(want[i])
		}
		_, present := m.last[k]
		out[i] = touched{k, present}
	}
	counts := f.dropPrefixMany(modelNS, reqs)
	for i, r := range reqs {
		if counts[i] != want[i] {
			f.t.Fatalf("DropPrefixMany: %q (part %d of %d) up to %d dropped %d, the model says %d", r.Key, i, len(reqs), r.ID, counts[i], want[i])
		}
	}
	return out
}

// batchAppend appends to a few keys in one AppendKeys, each key's part one the model can follow (one or
// two fresh ids, with or without a Below; nothing; or a conflict: a first id at the last id of a
// present key, or fresh ids with a Below at it), and checks each
// key's error: nil where the model appends, ErrConflict where it refuses, the index unchanged then.
func (m *model) batchAppend() []touched {
	f := m.f
	keys := m.batchKeys()
	reqs := make([]is.KeyEntries, len(keys))
	conflict := make([]bool, len(keys))
	var out []touched
	for i, k := range keys {
		reqs[i].Key = k
		last, present := m.last[k]
		switch r := m.rng.IntN(4); {
		case r == 0 && present:
			reqs[i].Entries, conflict[i] = entries(k, last, m.nextID), true
			m.nextID++
		case r == 1:
			// Nothing to append: the key stays as it is, absent included.
		default:
			for range 1 + m.rng.IntN(2) {
				reqs[i].Entries = append(reqs[i].Entries, entries(k, m.nextID)...)
				m.nextID++
			}
			// Now and then a Below: above the last id (appended), or at it, which the ids alone would
			// take (a conflict).
			if r := m.rng.IntN(3); r > 0 && present {
				reqs[i].Below = last + uint64(2-r)
				conflict[i] = r == 2
			} else if r > 0 {
				reqs[i].Below = 1
			}
			if conflict[i] {
				break
			}
			m.last[k] = reqs[i].Entries[len(reqs[i].Entries)-1].ID
			m.count[k] += len(reqs[i].Entries)
			out = append(out, touched{k, true})
		}
	}
	errs, err := is.AppendKeys(f.ctx, f.st, modelNS, reqs)
	if err != nil || len(errs) != len(reqs) {
		f.t.Fatalf("AppendKeys(%d keys): %d results, %v", len(reqs), len(errs), err)
	}
	for i, r := range reqs {
		if conflict[i] != errors.Is(errs[i], is.ErrConflict) || (!conflict[i] && errs[i] != nil) {
			f.t.Fatalf("AppendKeys: %q (part %d of %d) of ids %v: %v; the model says conflict %v",
				r.Key, i, len(reqs), entryIDs(f.t, r.Key, r.Entries), errs[i], conflict[i])
		}
	}
	return out
}

// batchRead reads a few keys in one ClosestLastMany and checks each key's part against the model: its
// last id, and what Closest finds from 0, from the last id and from above it.
func (m *model) batchRead() {
	f := m.f
	keys := m.batchKeys()
	reqs := make([]is.KeyID, len(keys))
	for i, k := range keys {
		reqs[i] = is.KeyID{Key: k, ID: m.last[k] + uint64(m.rng.IntN(2))}
		if m.rng.IntN(3) == 0 {
			reqs[i].ID = 0
		}
	}
	for i, r := range f.closestLastMany(modelNS, reqs) {
		k, id := reqs[i].Key, reqs[i].ID
		last, present := m.last[k]
		wantFound := present && id <= last
		if r.Exists != present || r.Last != last || r.Found != wantFound || (id == last && r.Found && r.Entry.ID != last) {
			f.t.Fatalf("ClosestLastMany: %q (part %d of %d) from %d: entry %d found %v, last %d exists %v; the model says last %d exists %v",
				k, i, len(reqs), id, r.Entry.ID, r.Found, r.Last, r.Exists, last, present)
		}
		if r.Found && !slices.Equal(r.Entry.Value, value(k, r.Entry.ID)) {
			f.t.Fatalf("ClosestLastMany: %q id %d: value %q, want %q", k, r.Entry.ID, r.Entry.Value, value(k, r.Entry.ID))
		}
	}
}

// page is the naive ScanStable: the first count present keys in the range, after the marker.
func (m *model) page(r is.KeyRange, after *string, count int) []string {
	var keys []string
	for k := range m.last {
		if inRange(r, k) && (after == nil || k > *after) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys[:min(count, len(keys))]
}

func modelSeed(t *testing.T) uint64 {
	seed := rand.Uint64()
	if s := os.Getenv("STRATA_MODEL_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("STRATA_MODEL_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (rerun with STRATA_MODEL_SEED=%d)", seed, seed)
	return seed
}

func testModel(t *testing.T, h Harness) {
	t.Run("SinglePages", func(t *testing.T) {
		f := newFixture(t, h)
		m := newModel(f, modelSeed(t))
		cases := h.ModelSinglePages
		if cases == 0 {
			cases = 2000
		}
		cases = quick(cases)
		for i := range cases {
			for range m.rng.IntN(3) {
				m.mutate()
			}
			r, count := m.randomRange(), 1+m.rng.IntN(8)
			var from is.Resume
			var after *string
			if m.rng.IntN(2) == 0 {
				// Resume from a real token, after changing the namespace under it (perhaps deleting
				// the very key the token points past).
				first, err := f.st.ScanStable(f.ctx, modelNS, r, is.Resume{}, 1+m.rng.IntN(4))
				if err != nil {
					t.Fatalf("case %d: %v", i, err)
				}
				if first.Done {
					continue
				}
				from = first.Next
				if len(first.Keys) > 0 {
					after = &first.Keys[len(first.Keys)-1]
				}
				for range m.rng.IntN(3) {
					m.mutate()
				}
			}
			page, err := f.st.ScanStable(f.ctx, modelNS, r, from, count)
			if err != nil {
				t.Fatalf("case %d: ScanStable(%v, %v, %d): %v", i, r, from, count, err)
			}
			m.checkPage(i, r, after, count, page)
		}
	})

	t.Run("WalksWithInterleavedChanges", func(t *testing.T) {
		f := newFixture(t, h)
		m := newModel(f, modelSeed(t))
		walks := h.ModelWalks
		if walks == 0 {
			walks = 500
		}
		walks = quick(walks)
		for w := range walks {
			for range m.rng.IntN(12) {
				m.mutate()
			}
			r, count := m.randomRange(), 1+m.rng.IntN(6)
			atStart := m.page(r, nil, math.MaxInt)
			everPresent := map[string]bool{}
			for _, k := range atStart {
				everPresent[k] = true
			}
			removed := map[string]bool{}
			var returned []string
			var from is.Resume
			var after *string
			for pages := 0; ; pages++ {
				if pages > 10_000 {
					t.Fatalf("walk %d did not finish", w)
				}
				page, err := f.st.ScanStable(f.ctx, modelNS, r, from, count)
				if err != nil {
					t.Fatalf("walk %d: %v", w, err)
				}
				m.checkPage(w, r, after, count, page)
				f.checkPage(r, count, returned, page)
				returned = append(returned, page.Keys...)
				if len(page.Keys) > 0 {
					after = &returned[len(returned)-1]
				}
				if page.Done {
					break
				}
				from = page.Next
				for range m.rng.IntN(4) {
					for _, c := range m.mutate() {
						if !c.present {
							removed[c.key] = true
						} else if inRange(r, c.key) {
							everPresent[c.key] = true
						}
					}
				}
			}
			for _, k := range atStart {
				if !removed[k] && !slices.Contains(returned, k) {
					t.Fatalf("walk %d (%v, pages of %d): %q was present throughout and never returned; returned %q",
						w, r, count, k, returned)
				}
			}
			for _, k := range returned {
				if !everPresent[k] {
					t.Fatalf("walk %d: returned %q, which was not present during the walk", w, k)
				}
			}
		}
	})
}

// checkPage compares a page with the model: exactly the naive page on an ordered backend, a subset of
// the present keys with the prefix otherwise.
func (m *model) checkPage(n int, r is.KeyRange, after *string, count int, page is.Page) {
	t := m.f.t
	t.Helper()
	if page.LastIDs != nil {
		if len(page.LastIDs) != len(page.Keys) {
			t.Fatalf("case %d: %d keys with %d last ids", n, len(page.Keys), len(page.LastIDs))
		}
		for i, k := range page.Keys {
			if want := m.last[k]; page.LastIDs[i] != want {
				t.Fatalf("case %d: page says %q's last id is %d, it is %d", n, k, page.LastIDs[i], want)
			}
		}
	}
	if m.f.caps.OrderedScan {
		want := m.page(r, after, count)
		if !slices.Equal(page.Keys, want) && !(len(page.Keys) == 0 && len(want) == 0) {
			t.Fatalf("case %d (%v, after %v, count %d): got %q, want %q", n, r, deref(after), count, page.Keys, want)
		}
		if page.Done && len(m.page(r, after, math.MaxInt)) > len(want) {
			t.Fatalf("case %d (%v, after %v, count %d): Done with keys left", n, r, deref(after), count)
		}
		return
	}
	for _, k := range page.Keys {
		if !inRange(r, k) {
			t.Fatalf("case %d: %v returned %q", n, r, k)
		}
		if _, present := m.last[k]; !present {
			t.Fatalf("case %d: returned %q, which does not exist", n, k)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "<start>"
	}
	return strconv.Quote(*s)
}
