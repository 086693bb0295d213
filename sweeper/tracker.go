package sweeper

import "maps"

// tracker is the sweep's memory of the agents it has sighted: one table per route, keyed by stored key,
// and the count over all of them, which MaxTrackedAgents bounds. Every write goes through its methods,
// so the count cannot drift from the tables. It is not safe for concurrent use: Sweeper.mu guards it.
type tracker struct {
	tables []map[string]sighting // by route index
	n      int                   // entries over every table
	limit  int                   // the most entries track adds up to
}

func newTracker(routes, limit int) *tracker {
	t := &tracker{tables: make([]map[string]sighting, routes), limit: limit}
	for i := range t.tables {
		t.tables[i] = map[string]sighting{}
	}
	return t
}

// len is the number of entries over every route.
func (t *tracker) len() int { return t.n }

// lookup returns the route's entry for key.
func (t *tracker) lookup(route int, key string) (sighting, bool) {
	s, ok := t.tables[route][key]
	return s, ok
}

// track records a sighting of key on the route: an entry it holds is overwritten, a new one is added
// unless the tracker is full, which track reports as false.
func (t *tracker) track(route int, key string, s sighting) bool {
	table := t.tables[route]
	if old, ok := table[key]; ok {
		s.first = old.first // the lag counts from the first sighting
	} else {
		if t.n >= t.limit {
			return false
		}
		t.n++
	}
	table[key] = s
	return true
}

// update overwrites the route's entry for key, and adds none: an agent forgotten meanwhile stays so.
func (t *tracker) update(route int, key string, s sighting) {
	if old, ok := t.tables[route][key]; ok {
		s.first = old.first
		t.tables[route][key] = s
	}
}

// forget removes the route's entry for key, if it has one.
func (t *tracker) forget(route int, key string) {
	if _, ok := t.tables[route][key]; ok {
		delete(t.tables[route], key)
		t.n--
	}
}

// forgetIf removes the route's entries for which drop reports true.
func (t *tracker) forgetIf(route int, drop func(key string, s sighting) bool) {
	maps.DeleteFunc(t.tables[route], func(key string, s sighting) bool {
		if drop(key, s) {
			t.n--
			return true
		}
		return false
	})
}
