package sweeper

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// requireCount fails when the tracker's count is not the number of entries its tables hold.
func requireCount(t *testing.T, tr *tracker, step string) {
	t.Helper()
	held := 0
	for _, table := range tr.tables {
		held += len(table)
	}
	if tr.len() != held {
		t.Fatalf("after %s: len() = %d, the tables hold %d", step, tr.len(), held)
	}
}

func TestTracker_CountFollowsEveryWrite(t *testing.T) {
	tr := newTracker(2, 3)
	steps := []struct {
		name string
		do   func()
		want int
	}{
		{"track a new key", func() { tr.track(0, "a", sighting{pass: 1}) }, 1},
		{"track the same key again", func() { tr.track(0, "a", sighting{index: 2, pass: 1}) }, 1},
		{"track the same key on another route", func() { tr.track(1, "a", sighting{pass: 1}) }, 2},
		{"update a key it does not hold", func() { tr.update(0, "b", sighting{pass: 1}) }, 2},
		{"update a key it holds", func() { tr.update(0, "a", sighting{index: 3, pass: 2}) }, 2},
		{"track a third key", func() { tr.track(1, "c", sighting{pass: 1}) }, 3},
		{"track a fourth key past the limit", func() {
			if tr.track(0, "d", sighting{pass: 1}) {
				t.Fatal("track added a key past the limit")
			}
		}, 3},
		{"track a held key at the limit", func() {
			if !tr.track(0, "a", sighting{index: 4, pass: 2}) {
				t.Fatal("track refused to update a held key at the limit")
			}
		}, 3},
		{"forget a key it does not hold", func() { tr.forget(0, "zz") }, 3},
		{"forget a held key", func() { tr.forget(1, "a") }, 2},
		{"forget it again", func() { tr.forget(1, "a") }, 2},
		{"forgetIf on a route", func() { tr.forgetIf(1, func(string, sighting) bool { return true }) }, 1},
		{"forgetIf matching nothing", func() { tr.forgetIf(0, func(string, sighting) bool { return false }) }, 1},
	}
	for _, s := range steps {
		s.do()
		requireCount(t, tr, s.name)
		if tr.len() != s.want {
			t.Fatalf("after %s: len() = %d, want %d", s.name, tr.len(), s.want)
		}
	}
	if got, ok := tr.lookup(0, "a"); !ok || got != (sighting{index: 4, pass: 2}) {
		t.Fatalf("lookup: %+v %v", got, ok)
	}
}

// Random writes against a model: the count stays the tables' size and never passes the limit.
func TestTracker_RandomWritesKeepTheCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const routes, limit = 3, 20
	tr := newTracker(routes, limit)
	model := make([]map[string]sighting, routes)
	for i := range model {
		model[i] = map[string]sighting{}
	}
	size := func() int {
		n := 0
		for _, m := range model {
			n += len(m)
		}
		return n
	}
	for step := range 5000 {
		route, key := rng.IntN(routes), fmt.Sprint(rng.IntN(15))
		s := sighting{index: 1, pass: uint64(rng.IntN(5))}
		switch op := rng.IntN(5); op {
		case 0, 1:
			_, held := model[route][key]
			added := tr.track(route, key, s)
			if want := held || size() < limit; added != want {
				t.Fatalf("step %d: track = %v, want %v", step, added, want)
			}
			if added {
				model[route][key] = s
			}
		case 2:
			tr.update(route, key, s)
			if _, held := model[route][key]; held {
				model[route][key] = s
			}
		case 3:
			tr.forget(route, key)
			delete(model[route], key)
		case 4:
			drop := func(_ string, seen sighting) bool { return seen.pass == s.pass }
			tr.forgetIf(route, drop)
			for k, v := range model[route] {
				if drop(k, v) {
					delete(model[route], k)
				}
			}
		}
		requireCount(t, tr, fmt.Sprintf("step %d", step))
		if tr.len() != size() || tr.len() > limit {
			t.Fatalf("step %d: len() = %d, the model holds %d (limit %d)", step, tr.len(), size(), limit)
		}
	}
}
