package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stratalog/strata/sweeper"
)

// onceStop is why `strata sweep --once` stopped.
type onceStop int

const (
	keepGoing     onceStop = iota
	stopDone               // every route completed two passes, and the archives they found are done
	stopIdle               // the sweep did nothing and will not: disabled, unassigned or stood down from the start
	stopStoodDown          // the sweep ran, then stood down (or went unassigned or disabled) before it completed
	stopStuck              // a tick made no progress at all while routes reported errors: storage is down
	stopMaxTicks           // --max-ticks ticks without completing
)

// onceSweep is the verdict of `strata sweep --once`, from what it has seen so far. Whether to go on
// after a tick, and whether the run failed, are decided from the tick reports alone (no I/O), so both
// are tested with fabricated reports.
type onceSweep struct {
	maxTicks  int
	ticks     int
	archived  int
	completed map[string]int // passes each route completed

	archiveFailed, integrityFailed, unreadable, storageErrors int
	// unreadableKeys are the distinct unreadable keys the reports listed (by route and where), the
	// first sweeper.MaxUnreadableListed of them; moreUnreadable counts the other distinct ones.
	unreadableKeys []sweeper.UnreadableKey
	moreUnreadable int
	seen           map[[2]string]bool

	// ran: a tick ran (did not stand down). A stand-down after one is a failure, never idleness: the
	// sweep had started and what it found stays where it is.
	ran bool
	// unarchived is what the last tick that ran reported its routes found and left in the layer;
	// untracked counts the sightings the tracking table had no room for, over the run.
	unarchived, untracked int
	standDown             string // what the stand-down said, for stopStoodDown

	stopped   onceStop
	stuckTick int // the tick that made no progress, for stopStuck
}

func newOnceSweep(maxTicks int) *onceSweep {
	return &onceSweep{maxTicks: maxTicks, completed: map[string]int{}, seen: map[[2]string]bool{}}
}

// observe takes one tick's report and reports whether to stop.
func (o *onceSweep) observe(rep sweeper.Report) (stop bool) {
	o.ticks++
	o.archived += rep.Outcomes[sweeper.OutcomeArchived]
	o.archiveFailed += rep.Outcomes[sweeper.OutcomeArchiveFailed]
	o.integrityFailed += rep.Outcomes[sweeper.OutcomeIntegrityFailed]
	o.unreadable += rep.Outcomes[sweeper.OutcomeUnreadable]
	o.untracked += rep.Outcomes[sweeper.OutcomeUntracked]
	if idle := rep.Disabled || rep.Unassigned || rep.StoodDown != ""; idle {
		if o.stopped = stopIdle; o.ran {
			o.stopped, o.standDown = stopStoodDown, summarize(rep)
		}
		return true
	}
	o.ran = true
	o.unarchived = 0
	progress, failures, budgetBound := false, 0, false
	for _, rr := range rep.Routes {
		o.unarchived += rr.Unarchived
		// Agents the archive budget or the byte budget held back wait for the next tick.
		budgetBound = budgetBound || rr.Truncated == sweeper.ReasonArchiveBudget || rr.ByteBudgetDeferred > 0
		p, f := o.route(rr)
		progress, failures = progress || p, failures+f
	}
	o.stopped = o.verdict(rep, progress, failures, budgetBound)
	if o.stopped == stopStuck {
		o.stuckTick = o.ticks
	}
	return o.stopped != keepGoing
}

// route takes one route's report of a tick that ran: whether the route made progress, and how many
// failures it had.
func (o *onceSweep) route(rr sweeper.RouteReport) (progress bool, failures int) {
	o.storageErrors += rr.Errors
	failures = rr.Errors + rr.Outcomes[sweeper.OutcomeUnreadable] + rr.Outcomes[sweeper.OutcomeArchiveFailed]
	progress = rr.Scanned > 0 || rr.PassCompleted || rr.Outcomes[sweeper.OutcomeArchived] > 0 || rr.Outcomes[sweeper.OutcomeDeclined] > 0
	if rr.PassCompleted {
		o.completed[rr.Route]++
	}
	for _, u := range rr.Unreadable {
		o.noteUnreadable(u)
	}
	return progress, failures
}

// noteUnreadable lists u once, among the first sweeper.MaxUnreadableListed distinct keys, or counts it
// past them.
func (o *onceSweep) noteUnreadable(u sweeper.UnreadableKey) {
	id := [2]string{u.Route, u.Where}
	switch {
	case o.seen[id]:
	case len(o.unreadableKeys) < sweeper.MaxUnreadableListed:
		o.seen[id] = true
		o.unreadableKeys = append(o.unreadableKeys, u)
	default:
		o.seen[id] = true
		o.moreUnreadable++
	}
}

// verdict decides, after a tick that ran, whether the run stops and why.
func (o *onceSweep) verdict(rep sweeper.Report, progress bool, failures int, budgetBound bool) onceStop {
	// A route cut by its archive budget, or whose agents the byte budget deferred, has agents through
	// the gate waiting for the next tick, even after its second pass: go on until no tick is.
	done := !budgetBound
	for _, rr := range rep.Routes {
		done = done && o.completed[rr.Route] >= 2
	}
	switch {
	case done:
		return stopDone
	case !progress && failures > 0:
		return stopStuck
	case o.ticks >= o.maxTicks:
		return stopMaxTicks
	}
	return keepGoing
}

// wait is how long to wait after the tick rep (observed last) before the next one. The quiet gate needs
// --gap between an agent's two sightings, so a pass starts at least gap after the one before it ended:
// after a tick that completed a pass, the wait is gap. A tick that only went on with a walk, or, once
// every route has made its two passes, only worked off what the archive budget left over, is followed
// at once: waiting there would only stretch the run (ten seconds a tick, an hour for 100,000 stranded
// agents at the default budgets). A tick that hit its deadline waits the sweep's own backoff, at most
// gap, as `strata run` would.
func (o *onceSweep) wait(rep sweeper.Report, gap time.Duration) time.Duration {
	passesDone, completed := true, false
	for _, rr := range rep.Routes {
		completed = completed || rr.PassCompleted
		passesDone = passesDone && o.completed[rr.Route] >= 2
	}
	// Agents the byte budget deferred: a tick before its bucket holds bytes again would defer them again
	// at once, so the wait is at least that.
	var byteWait time.Duration
	for _, rr := range rep.Routes {
		byteWait = max(byteWait, rr.ByteBudgetWait)
	}
	switch {
	case rep.DeadlineHit:
		return max(min(rep.NextWait, gap), byteWait)
	case completed && !passesDone:
		return max(gap, byteWait)
	}
	return byteWait
}

// summary is the last line of the text output: what was archived, what was left, and every
// unreadable key.
func (o *onceSweep) summary() string {
	line := fmt.Sprintf("archived %d agents in %d ticks", o.archived, o.ticks)
	if o.unarchived > 0 {
		line += fmt.Sprintf("; %d found and left unarchived", o.unarchived)
	}
	if len(o.unreadableKeys) > 0 {
		var keys []string
		for _, u := range o.unreadableKeys {
			keys = append(keys, fmt.Sprintf("%s (%s)", u.Where, u.Err))
		}
		line += "; unreadable: " + strings.Join(keys, ", ")
		if o.moreUnreadable > 0 {
			line += fmt.Sprintf(" and %d more", o.moreUnreadable)
		}
	}
	return line
}

// err is the run's verdict: nil only when it completed, or had nothing to do, and nothing failed.
func (o *onceSweep) err() error {
	var parts []string
	switch o.stopped {
	case stopStuck:
		parts = append(parts, fmt.Sprintf("storage down: tick %d made no progress and its routes reported errors", o.stuckTick))
	case stopMaxTicks:
		parts = append(parts, fmt.Sprintf("no complete sweep in --max-ticks %d ticks: some route did not complete two passes", o.maxTicks))
	case stopStoodDown:
		parts = append(parts, fmt.Sprintf("the sweep stopped at tick %d before it completed (%s)", o.ticks, o.standDown))
	}
	if o.unarchived > 0 {
		parts = append(parts, fmt.Sprintf("%d agents it found are still in the layer, unarchived (waiting for a second "+
			"sighting with no change, or through the gate and not yet archived): run it again, with a longer --gap "+
			"if they are still being written", o.unarchived))
	}
	if o.untracked > 0 {
		parts = append(parts, fmt.Sprintf("%d sightings went untracked, the tracking table full (sweep.max_tracked_agents)", o.untracked))
	}
	if o.archiveFailed > 0 {
		parts = append(parts, fmt.Sprintf("%d archive attempts failed", o.archiveFailed))
	}
	if o.integrityFailed > 0 {
		parts = append(parts, fmt.Sprintf("%d archive attempts met data that fails an integrity check (a corrupt chunk, "+
			"a reused index; the log names the agents): no retry fixes it", o.integrityFailed))
	}
	if o.unreadable > 0 {
		var wheres []string
		for _, u := range o.unreadableKeys {
			wheres = append(wheres, u.Where)
		}
		if o.moreUnreadable > 0 {
			wheres = append(wheres, fmt.Sprintf("and %d more", o.moreUnreadable))
		}
		parts = append(parts, fmt.Sprintf("unreadable: %s (%d failed reads)", strings.Join(wheres, ", "), o.unreadable))
	}
	if o.storageErrors > 0 {
		parts = append(parts, fmt.Sprintf("%d storage calls failed (see the log)", o.storageErrors))
	}
	if len(parts) == 0 {
		return nil
	}
	return errors.New("sweep failed: " + strings.Join(parts, "; "))
}

func summarize(rep sweeper.Report) string {
	switch {
	case rep.Disabled:
		return "sweep disabled (sweep.enabled = false)"
	case rep.StoodDown != "":
		return "stood down: " + rep.StoodDown
	case rep.Unassigned:
		return "unassigned: " + rep.UnassignedReason
	}
	var parts []string
	for _, o := range sweeper.Outcomes {
		if n := rep.Outcomes[o]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", o, n))
		}
	}
	errs := 0
	for _, rr := range rep.Routes {
		errs += rr.Errors
	}
	if errs > 0 {
		parts = append(parts, fmt.Sprintf("%d failed storage calls", errs))
	}
	if len(rep.Truncated) > 0 {
		parts = append(parts, fmt.Sprintf("truncated by %v", rep.Truncated))
	}
	if len(parts) == 0 {
		return "nothing in the layer"
	}
	return strings.Join(parts, ", ")
}
