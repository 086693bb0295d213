package sweeper

// unarchived counts the route's tracking entries sighted in its last completed pass or in the pass
// under way: agents it found whose entries are still in the source layer as far as it knows. An entry
// only the pass before the last completed one saw is left out: its key was gone from the walk that
// followed (drained by its executor, or deleted), and it is kept for one pass of grace only.
//
// It costs one look at each tracking entry of the route, as completing a pass does.
func (r *route) unarchived(t *tracker) int {
	return t.count(r.id, func(seen sighting) bool { return seen.pass+1 >= r.pass })
}
