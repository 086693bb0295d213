package sweeper

import "time"

// lag fills the report's view of the route's backlog from its tracking entries sighted in its last
// completed pass or in the pass under way: agents it found whose entries are still in the source layer
// as far as it knows. An entry only the pass before the last completed one saw is left out: its key was
// gone from the walk that followed (drained by its executor, or deleted), and it is kept for one pass of
// grace only. It costs one look at each tracking entry of the route, as completing a pass does.
//
// The view: how many, since when the oldest of them was first sighted, the entries they hold as far as the gate knows
// (their last indices), and those entries' bytes estimated at the bytes an entry the route has moved
// so far (0 until it has moved one). An agent sighted by its page's stamp alone (is.Page.Stamps: its
// index not read) counts at the entries an agent the route has archived so far, or while it has
// archived none, at the mean of the agents whose index it read (0 when there are none either).
func (r *route) lag(t *tracker, rr *RouteReport) {
	rr.Unarchived, rr.UnarchivedEntries, rr.OldestUnarchived = 0, 0, time.Time{}
	var read, unread, readEntries uint64
	for _, seen := range t.tables[r.id] {
		if seen.pass+1 < r.pass {
			continue
		}
		rr.Unarchived++
		if seen.unread {
			unread++
		} else {
			read++
			readEntries += uint64(seen.index)
		}
		if !seen.first.IsZero() && (rr.OldestUnarchived.IsZero() || seen.first.Before(rr.OldestUnarchived)) {
			rr.OldestUnarchived = seen.first
		}
	}
	r.movedEntries += int64(rr.Moved)
	r.movedBytes += rr.Bytes
	r.movedAgents += int64(len(rr.Archived))
	rr.UnarchivedEntries = readEntries
	if entries, ok := r.unreadEntries(unread); ok {
		rr.UnarchivedEntries += entries
	} else if read > 0 {
		rr.UnarchivedEntries += unread * readEntries / read
	}
	rr.UnarchivedBytes = r.bytesOf(rr.UnarchivedEntries)
}

// unreadEntries estimates the entries of n agents whose index the gate did not read (sighted by stamp)
// at the entries an agent the route has archived so far; false while it has archived none.
func (r *route) unreadEntries(n uint64) (uint64, bool) {
	if r.movedAgents <= 0 {
		return 0, false
	}
	return uint64(float64(n) * float64(r.movedEntries) / float64(r.movedAgents)), true
}

// bytesOf estimates the bytes of entries at the bytes an entry the route has moved so far (0 until it
// has moved one).
func (r *route) bytesOf(entries uint64) int64 {
	if r.movedEntries <= 0 {
		return 0
	}
	return int64(float64(entries) * float64(r.movedBytes) / float64(r.movedEntries))
}
