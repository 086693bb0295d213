package sweeper

import (
	"slices"
	"time"

	"github.com/stratalog/strata/oplog"
)

// The decisions of a tick, as free functions with no I/O: everything here is tested without storage.

// Outcome is what a tick decided about one scanned key.
type Outcome string

const (
	OutcomeUnparseable   Outcome = "unparseable"    // the key is not component:name
	OutcomeNotOwned      Outcome = "not_owned"      // the agent's shard belongs to another executor
	OutcomeResident      Outcome = "resident"       // the executor runs it: skipped with no storage read
	OutcomeEmpty         Outcome = "empty"          // the layer holds nothing for it any more: forgotten
	OutcomeWaiting       Outcome = "waiting"        // sighted; not yet quiet across two passes
	OutcomeUntracked     Outcome = "untracked"      // the tracking table was full: not remembered
	OutcomeDeclined      Outcome = "declined"       // at the archive step: gone, moved on or locked
	OutcomeArchiveFailed Outcome = "archive_failed" // the archive step failed or hit the step cap
	OutcomeArchived      Outcome = "archived"       // drained to the bottom layer
)

// Outcomes lists every Outcome, in the order of a key's journey.
var Outcomes = []Outcome{OutcomeUnparseable, OutcomeNotOwned, OutcomeResident, OutcomeEmpty, OutcomeWaiting,
	OutcomeUntracked, OutcomeDeclined, OutcomeArchiveFailed, OutcomeArchived}

// Reason is why a tick stopped before its work was done.
type Reason string

const (
	ReasonScanBudget    Reason = "scan_budget"
	ReasonArchiveBudget Reason = "archive_budget"
	ReasonDeadline      Reason = "deadline"
	ReasonShutdown      Reason = "shutdown"
)

// Assignment is the executor's current shard assignment.
type Assignment struct {
	ShardCount int       // how many shards the cluster has
	Shards     []int     // the ones this executor owns
	LeaseUntil time.Time // the assignment may have moved after this; zero: no lease
}

// usable reports whether an assignment lets the sweep archive anything now: it exists, has shards,
// and its lease has not lapsed (after a lapse the shards may have moved, and residency cannot see the
// new owner's agents).
func usable(a Assignment, known bool, now time.Time) (bool, string) {
	switch {
	case !known:
		return false, "no shard assignment"
	case a.ShardCount < 1 || len(a.Shards) == 0:
		return false, "assignment has no shards"
	case !a.LeaseUntil.IsZero() && !now.Before(a.LeaseUntil):
		return false, "assignment lease lapsed"
	}
	return true, ""
}

// parseAgent turns a scanned key into an agent.
func parseAgent(key string) (oplog.AgentID, bool) {
	a, err := oplog.ParseAgentKey(key)
	return a, err == nil
}

// owns reports whether the assignment owns the agent's shard.
func owns(a Assignment, agent oplog.AgentID) bool {
	return slices.Contains(a.Shards, agent.Shard(a.ShardCount))
}

// triage decides a key cheapest first, in memory only: parse, shard, residency. candidate means the key
// survived and is worth one storage read.
func triage(key string, a Assignment, resident func(oplog.AgentID) bool) (agent oplog.AgentID, outcome Outcome, candidate bool) {
	agent, ok := parseAgent(key)
	switch {
	case !ok:
		return agent, OutcomeUnparseable, false
	case !owns(a, agent):
		return agent, OutcomeNotOwned, false
	case resident != nil && resident(agent):
		return agent, OutcomeResident, false
	}
	return agent, "", true
}

// sighting is what the tracking table remembers of an agent: its last index and the pass that saw it.
type sighting struct {
	index oplog.Index
	pass  uint64
}

// assess is the quiet gate: an agent moves only when its last index is unchanged since a sighting from
// an earlier pass. A sighting from this same pass never qualifies, which is what keeps a key a walk
// returns twice (Redis) from passing the gate within one pass.
func assess(seen sighting, known bool, current oplog.Index, pass uint64) (move bool) {
	return known && seen.index == current && seen.pass < pass
}

// keep reports whether a tracking entry survives the completion of pass: it was seen in that pass or
// the one before (one pass of grace, as a teardown drain racing the walk can hide a key for a pass).
func keep(seen sighting, completedPass uint64) bool {
	return seen.pass+1 >= completedPass
}

// share is a route's even share of what remains of a budget, rounded up so that a small budget still
// reaches the first routes.
func share(remaining, routesLeft int) int {
	if remaining <= 0 || routesLeft <= 0 {
		return 0
	}
	return (remaining + routesLeft - 1) / routesLeft
}

// pageBudget is how many scan calls a scan budget affords: ceil(scan / pageSize). It stops a tick whose
// pages come back short or empty.
func pageBudget(scan, pageSize int) int {
	if scan <= 0 || pageSize <= 0 {
		return 0
	}
	return (scan + pageSize - 1) / pageSize
}

// order puts the routes a tick could not afford first, the rest after, each group in stack order.
func order(starved []bool) []int {
	var first, rest []int
	for i, s := range starved {
		if s {
			first = append(first, i)
		} else {
			rest = append(rest, i)
		}
	}
	return append(first, rest...)
}

// nextWait is the wait before the next tick: interval, doubled for each consecutive tick that hit its
// deadline, capped at maxBackoffIntervals intervals (0 reads as 1, so the wait never shrinks to
// nothing and spins the loop).
func nextWait(interval time.Duration, deadlineHits, maxBackoffIntervals int) time.Duration {
	limit := max(maxBackoffIntervals, 1)
	mult := 1
	for range deadlineHits {
		if mult*2 > limit {
			mult = limit
			break
		}
		mult *= 2
	}
	return interval * time.Duration(mult)
}

// tally counts outcomes.
type tally map[Outcome]int

// merge adds other's counts into t.
func (t tally) merge(other tally) {
	for o, n := range other {
		t[o] += n
	}
}
