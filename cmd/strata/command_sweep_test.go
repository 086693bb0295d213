package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stratalog/strata/sweeper"
)

// The flags are checked before any storage is opened, so none of these needs a configuration.
func TestSweepFlags_BadValuesAreUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--shards", "5", "--shard-count", "2"}, "--shards 5 --shard-count 2: invalid shard assignment: shard 5 is outside 0..1"},
		{[]string{"--shards", "1,1", "--shard-count", "2"}, "shard 1 is listed twice"},
		{[]string{"--shards", "-1"}, "shard -1 is outside 0..0"},
		{[]string{"--shards", "x"}, `--shards: "x" is not a shard number`},
		{[]string{"--shard-count", "20000"}, "shard count 20000, want 0 to 16384"},
		{[]string{"--gap", "-1s"}, "--gap -1s: want a duration from 0 to 24h"},
		{[]string{"--gap", "25h"}, "--gap 25h0m0s: want a duration from 0 to 24h"},
		{[]string{"--gap", "soon"}, `invalid argument "soon" for "--gap" flag`},
		{[]string{"--max-ticks", "0"}, "--max-ticks 0: want 1 to 1000000"},
		{[]string{"--no-such-flag"}, "unknown flag: --no-such-flag"},
	} {
		var out, errOut strings.Builder
		code := run(append([]string{"sweep", "--once"}, c.args...), &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), c.says) {
			t.Errorf("sweep --once %s: exit %d, %q; want exit 2 saying %q", strings.Join(c.args, " "), code, errOut.String(), c.says)
		}
	}
	var out, errOut strings.Builder
	if code := run([]string{"scan", "--limit", "-1"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "--limit -1") {
		t.Errorf("scan --limit -1: exit %d, %q; want a usage error", code, errOut.String())
	}
}

func TestBinary_SweepOnceArchivesWhatStayedQuietAcrossItsTwoPasses(t *testing.T) {
	d := newDeployment(t, "", "")
	stack := d.stack(t)
	agents := strandAgents(t, stack, 4, 30)
	code, out, errOut := runBinary(t, nil, "sweep", "--once", "--gap", "100ms", "--config", d.config)
	if code != 0 || !strings.Contains(out, "archived 4 agents") {
		t.Fatalf("sweep --once: exit %d\n%s%s", code, out, errOut)
	}
	if got := requireWhole(t, stack, agents, 30); got != 4 {
		t.Fatalf("%d of 4 agents in the blob layer", got)
	}
	code, out, _ = runBinary(t, nil, "sweep", "--once", "--json", "--gap", "100ms", "--config", d.config)
	var line map[string]any
	if code != 0 || json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &line) != nil || line["routes"] == nil {
		t.Fatalf("sweep --once --json: exit %d\n%s", code, out)
	}
	if code, _, errOut := runBinary(t, nil, "sweep", "--config", d.config); code != 2 || !strings.Contains(errOut, "--once") {
		t.Fatalf("sweep without --once: exit %d %s", code, errOut)
	}
}

// tick fabricates a report of one route.
func tick(route string, scanned int, pass bool, errs int, outcomes map[sweeper.Outcome]int, unreadable ...sweeper.UnreadableKey) sweeper.Report {
	if outcomes == nil {
		outcomes = map[sweeper.Outcome]int{}
	}
	return sweeper.Report{Outcomes: outcomes, Routes: []sweeper.RouteReport{{Route: route, Outcomes: outcomes, Scanned: scanned,
		PassCompleted: pass, Errors: errs, Unreadable: unreadable}}}
}

// observeAll feeds the reports until the run stops, and returns how many it took.
func observeAll(t *testing.T, o *onceSweep, reps ...sweeper.Report) int {
	t.Helper()
	for i, rep := range reps {
		if o.observe(rep) {
			return i + 1
		}
	}
	return len(reps)
}

func TestOnceSweep_StopsWhenEveryRouteCompletedTwoPassesAndSucceedsWhenNothingFailed(t *testing.T) {
	o := newOnceSweep(defaultMaxTicks)
	two := func(l1, l2 bool) sweeper.Report {
		return sweeper.Report{Routes: []sweeper.RouteReport{{Route: "ephemeral-l1", Scanned: 1, PassCompleted: l1}, {Route: "ephemeral-l2", PassCompleted: l2}}}
	}
	if n := observeAll(t, o, two(true, false), two(true, true), two(false, false), two(false, true), two(true, true)); n != 4 {
		t.Fatalf("stopped after %d ticks; want 4, when the second route completed its second pass", n)
	}
	if o.stopped != stopDone || o.err() != nil {
		t.Fatalf("stopped %v, %v; want done without an error", o.stopped, o.err())
	}
}

// The wait before the next tick: --gap after a completed pass until every route has made two (the
// quiet gate's sightings are then gap apart), none while a walk goes on or, after the two passes, the
// archive budget's leftovers are worked off, and the sweep's backoff (at most gap) after a deadline.
func TestOnceSweep_WaitsTheGapOnlyBetweenPasses(t *testing.T) {
	const gap = 10 * time.Second
	o := newOnceSweep(defaultMaxTicks)
	mid := tick("r", 4096, false, 0, nil)
	pass := tick("r", 100, true, 0, nil)
	budget := tick("r", 100, true, 0, map[sweeper.Outcome]int{sweeper.OutcomeArchived: 256})
	budget.Routes[0].Truncated = sweeper.ReasonArchiveBudget
	slow := tick("r", 10, false, 0, nil)
	slow.DeadlineHit, slow.NextWait = true, 4*time.Minute
	for i, c := range []struct {
		rep  sweeper.Report
		want time.Duration
	}{
		{mid, 0},    // the first pass goes on
		{pass, gap}, // it completed: the second comes gap later
		{slow, gap}, // a deadline: the backoff, capped at gap
		{mid, 0},    // the second pass goes on
		{budget, 0}, // it completed, and the budget left agents: worked off at once
		{budget, 0}, // and again
	} {
		o.observe(c.rep)
		if got := o.wait(c.rep, gap); got != c.want {
			t.Fatalf("tick %d: wait %v, want %v", i+1, got, c.want)
		}
	}
}

// The second pass can find more agents than a tick may archive; the run goes on until they are done.
func TestOnceSweep_AfterTwoPassesGoesOnWhileTheArchiveBudgetRunsOut(t *testing.T) {
	o := newOnceSweep(defaultMaxTicks)
	// The second pass completes with 300 agents through the gate and the budget affords 256: the
	// sweeper reports the route cut by archive_budget.
	full := tick("r", 300, true, 6, map[sweeper.Outcome]int{sweeper.OutcomeArchived: 250, sweeper.OutcomeArchiveFailed: 6})
	full.Routes[0].Truncated = sweeper.ReasonArchiveBudget
	cut := tick("r", 300, false, 0, map[sweeper.Outcome]int{sweeper.OutcomeArchived: 10})
	cut.Routes[0].Truncated = sweeper.ReasonArchiveBudget
	rest := map[sweeper.Outcome]int{sweeper.OutcomeArchived: 44}
	if n := observeAll(t, o, tick("r", 300, true, 0, nil), full, cut, tick("r", 0, false, 0, rest), tick("r", 0, false, 0, nil)); n != 4 {
		t.Fatalf("stopped after %d ticks; want 4, the first tick after the second pass not cut by the archive budget", n)
	}
	if o.stopped != stopDone || o.archived != 304 {
		t.Fatalf("stopped %v with %d archived; want done with 304", o.stopped, o.archived)
	}
}

// The byte budget defers agents to the next tick without truncating the route: the run goes on until
// no tick defers any, rather than stopping after the second pass with them in the layer.
func TestOnceSweep_AfterTwoPassesGoesOnWhileTheByteBudgetDefers(t *testing.T) {
	o := newOnceSweep(defaultMaxTicks)
	deferred := tick("r", 10, true, 0, map[sweeper.Outcome]int{sweeper.OutcomeArchived: 4})
	deferred.Routes[0].ByteBudgetDeferred, deferred.Routes[0].Unarchived = 6, 6
	deferred.Routes[0].ByteBudgetWait = 3 * time.Second
	rest := tick("r", 0, false, 0, map[sweeper.Outcome]int{sweeper.OutcomeArchived: 6})
	if n := observeAll(t, o, tick("r", 10, true, 0, nil), deferred, rest, tick("r", 0, false, 0, nil)); n != 3 {
		t.Fatalf("stopped after %d ticks; want 3, the first after the second pass that deferred nothing", n)
	}
	// The next tick waits until the bucket holds bytes again, not at once (it would defer them again).
	if got := o.wait(deferred, 100*time.Millisecond); got != 3*time.Second {
		t.Fatalf("wait after a tick the byte budget deferred: %v, want the bucket's 3s", got)
	}
	if o.stopped != stopDone || o.archived != 10 || o.err() != nil {
		t.Fatalf("stopped %v with %d archived, %v; want done with 10 and no error", o.stopped, o.archived, o.err())
	}
}

// End to end: sweep --once under a byte budget that cannot move the backlog in one tick archives all
// of it, over as many ticks as the budget takes, and succeeds.
func TestBinary_SweepOnceUnderAByteBudgetArchivesEverything(t *testing.T) {
	d := newDeployment(t, "", "")
	stack := d.stack(t)
	agents := strandAgents(t, stack, 6, 60) // about 700 bytes each: 1 KiB/s moves one or two a tick
	env := []string{"STRATA_SWEEP_MAX_BYTES_PER_SECOND=1024", "STRATA_SWEEP_ARCHIVE_BATCH=1", "STRATA_SWEEP_MAX_TICK_DURATION=1s"}
	code, out, errOut := runBinary(t, env, "sweep", "--once", "--json", "--gap", "100ms", "--config", d.config)
	if code != 0 {
		t.Fatalf("sweep --once under a byte budget: exit %d\n%s%s", code, out, errOut)
	}
	deferred := 0
	for line := range strings.Lines(out) {
		var rep struct {
			Routes []struct {
				Deferred int `json:"byte_budget_deferred"`
			} `json:"routes"`
		}
		if json.Unmarshal([]byte(line), &rep) == nil {
			for _, rr := range rep.Routes {
				deferred += rr.Deferred
			}
		}
	}
	if deferred == 0 {
		t.Fatalf("no tick deferred an agent: the budget did not bind, the test proves nothing\n%s", out)
	}
	if got := requireWhole(t, stack, agents, 60); got != 6 {
		t.Fatalf("%d of 6 agents in the blob layer", got)
	}
}

func TestOnceSweep_ArchiveFailuresFailTheRunAfterItsWork(t *testing.T) {
	o := newOnceSweep(defaultMaxTicks)
	failed := map[sweeper.Outcome]int{sweeper.OutcomeArchiveFailed: 2, sweeper.OutcomeArchived: 5}
	n := observeAll(t, o, tick("r", 10, true, 2, nil), tick("r", 10, true, 2, failed))
	if n != 2 || o.stopped != stopDone {
		t.Fatalf("stopped after %d ticks (%v); want the two passes done", n, o.stopped)
	}
	err := o.err()
	if err == nil || !strings.Contains(err.Error(), "2 archive attempts failed") || !strings.Contains(err.Error(), "4 storage calls failed") {
		t.Fatalf("err %v; want the failed archives and storage calls", err)
	}
	if o.archived != 5 {
		t.Fatalf("archived %d; want 5", o.archived)
	}
}

// An integrity failure fails the run with words of its own, apart from the archive attempts a retry may
// get through.
func TestOnceSweep_IntegrityFailuresFailTheRunApart(t *testing.T) {
	o := newOnceSweep(defaultMaxTicks)
	failed := map[sweeper.Outcome]int{sweeper.OutcomeIntegrityFailed: 1, sweeper.OutcomeArchived: 5}
	observeAll(t, o, tick("r", 10, true, 0, nil), tick("r", 10, true, 1, failed))
	err := o.err()
	if err == nil || !strings.Contains(err.Error(), "1 archive attempts met data that fails an integrity check") ||
		strings.Contains(err.Error(), "archive attempts failed") {
		t.Fatalf("err %v; want the integrity failure named apart from failed archives", err)
	}
}

func TestOnceSweep_NamesEveryUnreadableKeyOnce(t *testing.T) {
	o := newOnceSweep(defaultMaxTicks)
	bad := sweeper.UnreadableKey{Route: "r", Where: "ns-ephemeral~compressed~1/7f7f.db", Err: "file is not a database"}
	other := sweeper.UnreadableKey{Route: "r", Key: "c:x", Where: "c:x", Err: "wrong type"}
	one := map[sweeper.Outcome]int{sweeper.OutcomeUnreadable: 1}
	observeAll(t, o, tick("r", 5, true, 0, one, bad), tick("r", 5, true, 0, map[sweeper.Outcome]int{sweeper.OutcomeUnreadable: 2}, bad, other))
	err := o.err()
	if err == nil || !strings.Contains(err.Error(), "unreadable: ns-ephemeral~compressed~1/7f7f.db, c:x (3 failed reads)") {
		t.Fatalf("err %v; want the unreadable keys named", err)
	}
	if s := o.summary(); !strings.Contains(s, "unreadable: ns-ephemeral~compressed~1/7f7f.db (file is not a database), c:x (wrong type)") {
		t.Fatalf("summary %q does not list the unreadable keys with their errors", s)
	}
}

// A tick that read nothing while its routes failed is a store that is down: stop, and say so, rather
// than loop forever on "nothing in the layer".
func TestOnceSweep_StopsWhenATickMadeNoProgressAndRoutesFailed(t *testing.T) {
	o := newOnceSweep(defaultMaxTicks)
	if n := observeAll(t, o, tick("r", 3, false, 0, nil), tick("r", 2, false, 1, nil), tick("r", 0, false, 1, nil), tick("r", 9, true, 0, nil)); n != 3 {
		t.Fatalf("stopped after %d ticks; want 3: the tick that progressed despite an error goes on, the one that read nothing stops", n)
	}
	if err := o.err(); o.stopped != stopStuck || err == nil || !strings.Contains(err.Error(), "storage down: tick 3 made no progress") {
		t.Fatalf("stopped %v, %v; want storage down named", o.stopped, err)
	}
}

func TestOnceSweep_GivesUpAfterMaxTicksAndFails(t *testing.T) {
	o := newOnceSweep(3)
	deadline := tick("r", 0, false, 0, nil)
	deadline.Truncated = []sweeper.Reason{sweeper.ReasonDeadline}
	if n := observeAll(t, o, deadline, deadline, deadline, deadline); n != 3 {
		t.Fatalf("stopped after %d ticks; want --max-ticks 3", n)
	}
	if err := o.err(); o.stopped != stopMaxTicks || err == nil || !strings.Contains(err.Error(), "--max-ticks 3") {
		t.Fatalf("stopped %v, %v; want a failure naming --max-ticks", o.stopped, err)
	}
}

func TestOnceSweep_ASweepThatCannotRunStopsAtOnceWithoutFailing(t *testing.T) {
	for _, rep := range []sweeper.Report{{Disabled: true}, {Unassigned: true, UnassignedReason: "assignment has no shards"}, {StoodDown: "x"}} {
		o := newOnceSweep(defaultMaxTicks)
		if !o.observe(rep) || o.stopped != stopIdle || o.err() != nil {
			t.Errorf("%+v: stopped %v, %v; want an idle stop", rep, o.stopped, o.err())
		}
	}
}

// Issue 20, break 1: a stand-down after the sweep ran is a failure, never idleness. (The one-shot no
// longer stands down for residency at all; a sweep switched off or unassigned under it still may.)
func TestOnceSweep_AStandDownAfterATickThatRanFailsTheRun(t *testing.T) {
	for _, down := range []sweeper.Report{{StoodDown: "residency feed is 2m1s old, older than residency.ttl 2m0s"},
		{Unassigned: true, UnassignedReason: "assignment lease lapsed"}, {Disabled: true}} {
		o := newOnceSweep(defaultMaxTicks)
		first := tick("r", 300, true, 0, nil)
		first.Routes[0].Unarchived = 300
		if n := observeAll(t, o, first, down, tick("r", 300, true, 0, nil)); n != 2 {
			t.Fatalf("%+v: stopped after %d ticks; want 2, at the stand-down", down, n)
		}
		err := o.err()
		if o.stopped != stopStoodDown || err == nil || !strings.Contains(err.Error(), "stopped at tick 2 before it completed") ||
			!strings.Contains(err.Error(), "300 agents it found are still in the layer") {
			t.Fatalf("%+v: stopped %v, %v; want a failure naming the stand-down and the 300 agents left", down, o.stopped, err)
		}
	}
}

// The one-shot exits non-zero while anything it found stays in the layer: agents still waiting after
// the second pass (written between the passes), or through the gate and never archived.
func TestOnceSweep_FailsNamingHowManyAgentsItFoundAndLeftUnarchived(t *testing.T) {
	o := newOnceSweep(defaultMaxTicks)
	first := tick("r", 10, true, 0, map[sweeper.Outcome]int{sweeper.OutcomeWaiting: 10})
	first.Routes[0].Unarchived = 10
	second := tick("r", 10, true, 0, map[sweeper.Outcome]int{sweeper.OutcomeArchived: 7, sweeper.OutcomeWaiting: 3})
	second.Routes[0].Unarchived = 3
	if n := observeAll(t, o, first, second); n != 2 || o.stopped != stopDone {
		t.Fatalf("stopped after %d ticks (%v); want the two passes done", n, o.stopped)
	}
	if err := o.err(); err == nil || !strings.Contains(err.Error(), "3 agents it found are still in the layer") {
		t.Fatalf("err %v; want a failure naming the 3 agents left", err)
	}
	if s := o.summary(); !strings.Contains(s, "archived 7 agents in 2 ticks; 3 found and left unarchived") {
		t.Fatalf("summary %q", s)
	}
}

// What counts is what the last tick left, not what earlier ticks had not yet archived.
func TestOnceSweep_SucceedsWhenTheLastTickLeftNothingFound(t *testing.T) {
	o := newOnceSweep(defaultMaxTicks)
	first := tick("r", 4, true, 0, nil)
	first.Routes[0].Unarchived = 4
	second := tick("r", 4, true, 0, map[sweeper.Outcome]int{sweeper.OutcomeArchived: 4})
	if observeAll(t, o, first, second); o.stopped != stopDone || o.err() != nil {
		t.Fatalf("stopped %v, %v; want done without an error", o.stopped, o.err())
	}
}

func TestOnceSweep_UntrackedSightingsFailTheRun(t *testing.T) {
	o := newOnceSweep(defaultMaxTicks)
	full := map[sweeper.Outcome]int{sweeper.OutcomeUntracked: 5}
	observeAll(t, o, tick("r", 10, true, 0, full), tick("r", 10, true, 0, full))
	if err := o.err(); err == nil || !strings.Contains(err.Error(), "10 sightings went untracked") {
		t.Fatalf("err %v; want the untracked sightings named", err)
	}
}

func TestSummarize_ATickWithErrorsIsNotNothingInTheLayer(t *testing.T) {
	if s := summarize(tick("r", 0, false, 2, nil)); strings.Contains(s, "nothing in the layer") || !strings.Contains(s, "2 failed storage calls") {
		t.Fatalf("summary %q; want the failed calls, not nothing in the layer", s)
	}
	if s := summarize(tick("r", 0, true, 0, nil)); s != "nothing in the layer" {
		t.Fatalf("summary of an empty layer %q", s)
	}
}

// sweep --once sweeps the stores its URL flags name, over the configuration file's.
func TestBinary_SweepOnceSweepsTheStoresTheFlagsName(t *testing.T) {
	configured, other := newDeployment(t, "", ""), newDeployment(t, "", "")
	stack := other.stack(t)
	agents := strandAgents(t, stack, 3, 4)
	db, blobs := filepath.Join(other.dir, "strata.db"), filepath.Join(other.dir, "blobs")
	code, out, errOut := runBinary(t, nil, "sweep", "--once", "--gap", "100ms", "--config", configured.config,
		"--storage-url", "sqlite://"+db, "--schedule-url", "sqlite://"+db, "--blob-url", "fs://"+blobs)
	if code != 0 || !strings.Contains(out, "archived 3 agents") {
		t.Fatalf("sweep --once with URL flags: exit %d\n%s%s", code, out, errOut)
	}
	requireInBottomLayerOnce(t, stack, agents, 4)
}
