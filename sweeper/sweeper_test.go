package sweeper_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
)

func TestSweep_ArchivesOnlyAfterTheIndexSurvivesAnEarlierPass(t *testing.T) {
	e := newEnv(t, config())
	a := agent("stranded")
	e.strand(a, 1, 10)

	rep := e.tick()
	if rep.Outcomes[sweeper.OutcomeWaiting] != 1 || !rep.Routes[0].PassCompleted {
		t.Fatalf("first tick: %+v", rep.Routes)
	}
	e.requireStranded(a, 10)

	rep = e.tick()
	if rep.Outcomes[sweeper.OutcomeArchived] != 1 || !slices.Equal(rep.Archived(), []oplog.AgentID{a}) {
		t.Fatalf("second tick: %+v", rep.Routes)
	}
	e.requireArchived(a, 10)
	if rep.Routes[0].Moved != 10 {
		t.Fatalf("moved %d entries, want 10", rep.Routes[0].Moved)
	}
}

func TestSweep_AnAgentWhoseIndexChangesBetweenPassesWaits(t *testing.T) {
	e := newEnv(t, config())
	a := agent("busy")
	e.strand(a, 1, 5)
	e.tick()
	e.strand(a, 6, 5) // still being written between the two passes
	if rep := e.tick(); rep.Outcomes[sweeper.OutcomeWaiting] != 1 || rep.Outcomes[sweeper.OutcomeArchived] != 0 {
		t.Fatalf("moved-on agent: %+v", rep.Outcomes)
	}
	e.requireStranded(a, 10)
	e.tick()
	e.requireArchived(a, 10)
}

func TestSweep_AKeyRepeatedWithinOnePassNeverQualifies(t *testing.T) {
	e := newEnv(t, config())
	e.st.set(func(p *probe) { p.duplicate = true })
	a := agent("twice")
	e.strand(a, 1, 3)
	rep := e.tick()
	if rep.Outcomes[sweeper.OutcomeArchived] != 0 || rep.Outcomes[sweeper.OutcomeWaiting] != 2 {
		t.Fatalf("a key seen twice in one pass: %+v", rep.Outcomes)
	}
	e.requireStranded(a, 3)

	// A pass that spans ticks: with one key a tick, the duplicate lands in the next tick, same pass.
	cfg := config()
	cfg.PageSize, cfg.MaxScannedPerTick = 1, 1
	e = newEnv(t, cfg)
	e.st.set(func(p *probe) { p.duplicate = true })
	b, c := agent("b"), agent("c")
	e.strand(b, 1, 2)
	e.strand(c, 1, 2)
	for range 2 {
		if rep := e.tick(); rep.Outcomes[sweeper.OutcomeArchived] != 0 {
			t.Fatalf("archived within the first pass: %+v", rep.Routes)
		}
	}
	e.requireStranded(b, 2)
}

// countingLocker records how many agents it holds at once.
type countingLocker struct {
	mu      sync.Mutex
	held    int
	maxHeld int
	busy    map[oplog.AgentID]bool
	during  func()
	err     error // every TryLock fails with it, when set
}

func (l *countingLocker) TryLock(_ context.Context, a oplog.AgentID, _ oplog.Mode) (func(), bool, error) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return nil, false, l.err
	}
	if l.busy[a] {
		l.mu.Unlock()
		return nil, false, nil
	}
	l.held++
	l.maxHeld = max(l.maxHeld, l.held)
	during := l.during
	l.mu.Unlock()
	if during != nil {
		during()
	}
	return func() { l.mu.Lock(); l.held--; l.mu.Unlock() }, true, nil
}

func TestSweep_ResidentAndOtherShardAgentsAreLeftAloneWithoutReads(t *testing.T) {
	e := newEnv(t, config())
	mine, resident := agent("mine"), agent("resident")
	var foreign oplog.AgentID
	for i := 0; ; i++ {
		foreign = agent(fmt.Sprint("foreign-", i))
		if foreign.Shard(2) != mine.Shard(2) {
			break
		}
	}
	e.setAssignment(sweeper.Assignment{ShardCount: 2, Shards: []int{mine.Shard(2)}}, true)
	if resident.Shard(2) != mine.Shard(2) {
		resident = foreign // keep the resident agent on our shard
		for i := 0; ; i++ {
			resident = agent(fmt.Sprint("resident-", i))
			if resident.Shard(2) == mine.Shard(2) {
				break
			}
		}
	}
	for _, a := range []oplog.AgentID{mine, resident, foreign} {
		e.strand(a, 1, 4)
	}
	e.setResident(resident, true)
	before := map[oplog.AgentID]int{resident: e.st.lastsOf(resident), foreign: e.st.lastsOf(foreign)}
	var rep sweeper.Report
	for range 3 {
		rep = e.tick()
	}
	// The other shard's agent is not even walked: its buckets are outside the assignment's ranges.
	if rep.Outcomes[sweeper.OutcomeResident] != 1 || rep.Outcomes[sweeper.OutcomeNotOwned] != 0 {
		t.Fatalf("outcomes %+v", rep.Outcomes)
	}
	e.requireArchived(mine, 4)
	e.requireStranded(resident, 4)
	e.requireStranded(foreign, 4)
	for a, n := range before {
		if got := e.st.lastsOf(a); got != n {
			t.Fatalf("%s cost %d storage reads; deciding it must cost none", a, got-n)
		}
	}
	// Once no longer resident, it is swept like any other.
	e.setResident(resident, false)
	e.tick()
	e.tick()
	e.requireArchived(resident, 4)
}

func TestSweep_ACompletedPassForgetsAgentsThatLeftTheLayer(t *testing.T) {
	e := newEnv(t, config())
	gone, stays := agent("gone"), agent("stays")
	e.strand(gone, 1, 3)
	e.strand(stays, 1, 3)
	e.setResident(stays, false)
	if rep := e.tick(); rep.Tracked != 2 {
		t.Fatalf("tracked %d after the first pass", rep.Tracked)
	}
	// Its own teardown drains it between passes; the other becomes resident so it stays in the layer.
	if _, err := e.stack.Drain(t.Context(), gone, oplog.Ephemeral); err != nil {
		t.Fatal(err)
	}
	e.setResident(stays, true)
	rep := e.tick() // pass 2 completes without seeing either: one pass of grace
	if rep.Tracked != 2 {
		t.Fatalf("tracked %d after one pass without a sighting, want 2 (grace)", rep.Tracked)
	}
	rep = e.tick() // pass 3: neither seen in pass 2 or 3
	if rep.Tracked != 0 {
		t.Fatalf("tracked %d after two passes without a sighting, want 0", rep.Tracked)
	}
}

func TestSweep_MaxTrackedAgentsIsABackstopThatWipesNothing(t *testing.T) {
	cfg := config()
	cfg.MaxTrackedAgents = 3
	e := newEnv(t, cfg)
	var agents []oplog.AgentID
	for i := range 5 {
		a := agent(fmt.Sprint("agent-", i))
		agents = append(agents, a)
		e.strand(a, 1, 2)
	}
	rep := e.tick()
	if rep.Tracked != 3 || rep.Outcomes[sweeper.OutcomeUntracked] != 2 || rep.Outcomes[sweeper.OutcomeWaiting] != 3 {
		t.Fatalf("first tick: tracked %d, outcomes %+v", rep.Tracked, rep.Outcomes)
	}
	rep = e.tick()
	if rep.Outcomes[sweeper.OutcomeArchived] != 3 {
		t.Fatalf("second tick archived %d of the 3 tracked agents", rep.Outcomes[sweeper.OutcomeArchived])
	}
	for range 2 {
		e.tick()
	}
	for _, a := range agents {
		e.requireArchived(a, 2)
	}
}

// strandMany strands n agents of two entries each.
func strandMany(e *env, n int) []oplog.AgentID {
	var agents []oplog.AgentID
	for i := range n {
		a := agent(fmt.Sprintf("agent-%03d", i))
		agents = append(agents, a)
		e.strand(a, 1, 2)
	}
	return agents
}

// sweepUntilDrained ticks until every agent is archived, failing after limit ticks.
func sweepUntilDrained(e *env, agents []oplog.AgentID, limit int) (ticks int, reports []sweeper.Report) {
	e.t.Helper()
	for ticks = 1; ticks <= limit; ticks++ {
		reports = append(reports, e.tick())
		if !slices.ContainsFunc(agents, e.inLayer) {
			for _, a := range agents {
				e.requireArchived(a, 2)
			}
			return ticks, reports
		}
	}
	e.t.Fatalf("agents still stranded after %d ticks", limit)
	return
}

func TestSweep_EachBudgetTruncatesAndTheNextTickFinishes(t *testing.T) {
	for _, c := range []struct {
		name   string
		set    func(*sweeper.Config)
		reason sweeper.Reason
		check  func(t *testing.T, rep sweeper.Report)
	}{
		{"page_size", func(c *sweeper.Config) { c.PageSize = 3 }, "", func(t *testing.T, rep sweeper.Report) {
			if rep.Routes[0].Pages < 4 {
				t.Fatalf("pages of 3 over 10 keys took %d calls", rep.Routes[0].Pages)
			}
		}},
		{"max_scanned_per_tick", func(c *sweeper.Config) { c.PageSize, c.MaxScannedPerTick = 2, 4 }, sweeper.ReasonScanBudget,
			func(t *testing.T, rep sweeper.Report) {
				if rep.Routes[0].Scanned > 4 {
					t.Fatalf("scanned %d keys with a budget of 4", rep.Routes[0].Scanned)
				}
			}},
		{"max_archives_per_tick", func(c *sweeper.Config) { c.MaxArchivesPerTick = 3 }, sweeper.ReasonArchiveBudget,
			func(t *testing.T, rep sweeper.Report) {
				if n := rep.Outcomes[sweeper.OutcomeArchived]; n > 3 {
					t.Fatalf("archived %d with a budget of 3", n)
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config()
			c.set(&cfg)
			e := newEnv(t, cfg)
			agents := strandMany(e, 10)
			_, reports := sweepUntilDrained(e, agents, 40)
			truncated := false
			for _, rep := range reports {
				c.check(t, rep)
				truncated = truncated || slices.Contains(rep.Truncated, c.reason)
			}
			if c.reason != "" && !truncated {
				t.Fatalf("no tick was truncated by %s", c.reason)
			}
		})
	}
	t.Run("max_concurrency", func(t *testing.T) {
		cfg := config()
		cfg.MaxConcurrency, cfg.ArchiveBatch = 2, 1
		locker := &countingLocker{busy: map[oplog.AgentID]bool{}}
		locker.during = func() { time.Sleep(time.Millisecond) } // widen the window in which agents overlap
		e := newEnv(t, cfg, withOptions(func(o *sweeper.Options) { o.Locker = locker }))
		agents := strandMany(e, 10)
		sweepUntilDrained(e, agents, 5)
		if locker.maxHeld > 2 {
			t.Fatalf("%d agents archived at once with max_concurrency 2", locker.maxHeld)
		}
	})
	t.Run("archive_batch", func(t *testing.T) {
		// One batch at a time, of 3: a batch's agents are locked together, until its drain ends.
		cfg := config()
		cfg.MaxConcurrency, cfg.ArchiveBatch = 1, 3
		locker := &countingLocker{busy: map[oplog.AgentID]bool{}}
		e := newEnv(t, cfg, withOptions(func(o *sweeper.Options) { o.Locker = locker }))
		agents := strandMany(e, 10)
		sweepUntilDrained(e, agents, 5)
		if locker.maxHeld != 3 {
			t.Fatalf("%d agents archived at once with archive_batch 3 and max_concurrency 1, want 3", locker.maxHeld)
		}
	})
}

func TestSweep_BudgetsArePerTickAcrossRoutes(t *testing.T) {
	cfg := config()
	cfg.PageSize, cfg.MaxScannedPerTick, cfg.MaxArchivesPerTick = 2, 4, 4
	e := newEnv(t, cfg, withCompressedLevels(2))
	if routes := e.sw.Routes(); len(routes) != 2 || routes[0].Name != "ephemeral-l1" || routes[1].Name != "ephemeral-l2" {
		t.Fatalf("routes %+v", routes)
	}
	agents := strandMany(e, 8)
	// Strand a second group at level 2, as a drain interrupted after its first hop leaves them.
	var deep []oplog.AgentID
	for i := range 8 {
		a := agent(fmt.Sprint("deep-", i))
		deep = append(deep, a)
		e.strand(a, 1, 2)
		if _, err := e.stack.ArchiveStep(t.Context(), a, oplog.Ephemeral); err != nil {
			t.Fatal(err)
		}
	}
	for tick := 0; tick < 30 && (slices.ContainsFunc(agents, e.inLayer) || slices.ContainsFunc(deep, func(a oplog.AgentID) bool {
		ok, _ := e.st.Storage.Exists(t.Context(), oplog.CompressedNamespace(oplog.Ephemeral, 2), a.StoredKey())
		return ok
	})); tick++ {
		rep := e.tick()
		scanned, attempts := 0, 0
		for _, rr := range rep.Routes {
			scanned += rr.Scanned
			for _, o := range []sweeper.Outcome{sweeper.OutcomeArchived, sweeper.OutcomeDeclined, sweeper.OutcomeArchiveFailed} {
				attempts += rr.Outcomes[o]
			}
		}
		// The scan budget is soft by one page; the archive budget is hard. Two routes must not double them.
		if scanned > cfg.MaxScannedPerTick+cfg.PageSize-1 || attempts > cfg.MaxArchivesPerTick {
			t.Fatalf("tick %d: %d keys scanned and %d archives over two routes, budgets %d and %d",
				tick, scanned, attempts, cfg.MaxScannedPerTick, cfg.MaxArchivesPerTick)
		}
	}
	for _, a := range append(agents, deep...) {
		e.requireArchived(a, 2)
	}
}

func TestSweep_NoUsableAssignmentArchivesNothing(t *testing.T) {
	for name, set := range map[string]func(e *env){
		"none":        func(e *env) { e.setAssignment(sweeper.Assignment{}, false) },
		"zero shards": func(e *env) { e.setAssignment(sweeper.Assignment{ShardCount: 0, Shards: []int{0}}, true) },
		"no shards":   func(e *env) { e.setAssignment(sweeper.Assignment{ShardCount: 4}, true) },
		"lapsed lease": func(e *env) {
			e.setAssignment(sweeper.Assignment{ShardCount: 1, Shards: []int{0}, LeaseUntil: time.Now().Add(-time.Second)}, true)
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, config())
			a := agent("x")
			e.strand(a, 1, 2)
			e.tick() // sighted while assigned
			set(e)
			pagesBefore := e.st.pages
			for range 3 {
				if rep := e.tick(); !rep.Unassigned || rep.UnassignedReason == "" || len(rep.Archived()) != 0 {
					t.Fatalf("report %+v", rep)
				}
			}
			if e.st.pages != pagesBefore {
				t.Fatal("an unassigned sweep read pages")
			}
			e.requireStranded(a, 2)
		})
	}
}

func TestSweep_NoRouteNamesADurableMode(t *testing.T) {
	for levels := 1; levels <= 3; levels++ {
		e := newEnv(t, config(), withCompressedLevels(levels))
		routes := e.sw.Routes()
		if len(routes) != levels {
			t.Fatalf("%d compressed levels gave %d routes", levels, len(routes))
		}
		for i, r := range routes {
			if r.Mode != oplog.Ephemeral || !strings.HasPrefix(r.Name, "ephemeral-") || r.Level != i+1 {
				t.Fatalf("route %+v", r)
			}
		}
	}
	if !slices.Equal(sweeper.SweptModes, []oplog.Mode{oplog.Ephemeral}) {
		t.Fatalf("swept modes %v", sweeper.SweptModes)
	}
}

func TestSweep_DurableOplogsAreNeverTouched(t *testing.T) {
	e := newEnv(t, config())
	a := agent("durable")
	if err := e.stack.Append(t.Context(), a, oplog.Durable, []oplog.Entry{{Index: 1, Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.ArchiveStep(t.Context(), a, oplog.Durable); err != nil { // now in durable/compressed/1
		t.Fatal(err)
	}
	for range 3 {
		if rep := e.tick(); rep.Routes[0].Scanned != 0 {
			t.Fatalf("the sweep scanned durable keys: %+v", rep.Routes)
		}
	}
	if ok, _ := e.st.Storage.Exists(t.Context(), oplog.CompressedNamespace(oplog.Durable, 1), a.StoredKey()); !ok {
		t.Fatal("the durable oplog moved")
	}
}

func TestSweep_CancellingMidArchiveFinishesTheAgentInHandThenStops(t *testing.T) {
	cfg := config()
	cfg.MaxConcurrency, cfg.ArchiveBatch = 1, 1
	ctx, cancel := context.WithCancel(t.Context())
	var locked atomic.Int32
	locker := &countingLocker{busy: map[oplog.AgentID]bool{}, during: func() {
		if locked.Add(1) == 1 {
			cancel() // shutdown arrives while the first agent is being archived
		}
	}}
	e := newEnv(t, cfg, withCompressedLevels(2), withOptions(func(o *sweeper.Options) { o.Locker = locker }))
	agents := strandMany(e, 5)
	e.tick()
	rep := e.sw.SweepOnce(ctx)
	if got := rep.Outcomes[sweeper.OutcomeArchived]; got != 1 {
		t.Fatalf("archived %d agents after shutdown began during the first, want exactly that one", got)
	}
	if !slices.Contains(rep.Truncated, sweeper.ReasonShutdown) {
		t.Fatalf("report not truncated by shutdown: %+v", rep.Truncated)
	}
	first := rep.Archived()[0]
	e.requireArchived(first, 2) // all its hops, down to the blob layer
	for _, a := range agents {
		if a != first {
			e.requireStranded(a, 2)
		}
	}
	// The agents it did not reach are archived by the next tick.
	e.tick()
	for _, a := range agents {
		e.requireArchived(a, 2)
	}
}

func TestSweep_CancellingBetweenPagesStopsAtOnce(t *testing.T) {
	cfg := config()
	cfg.PageSize = 2
	ctx, cancel := context.WithCancel(t.Context())
	e := newEnv(t, cfg)
	strandMany(e, 10)
	e.st.set(func(p *probe) {
		p.onPage = func(n int) {
			if n == 1 {
				cancel()
			}
		}
	})
	rep := e.sw.SweepOnce(ctx)
	if !slices.Contains(rep.Truncated, sweeper.ReasonShutdown) || rep.Routes[0].Pages != 1 {
		t.Fatalf("pages %d, truncated %v; want one page and shutdown", rep.Routes[0].Pages, rep.Truncated)
	}
	if rep.DeadlineHits != 0 {
		t.Fatal("a tick cut by shutdown counted as a deadline hit")
	}
}

func TestSweep_SlowStorageHitsTheDeadlineAndTheWaitBacksOff(t *testing.T) {
	cfg := config()
	cfg.Interval, cfg.MaxTickDuration, cfg.MaxBackoffIntervals, cfg.PageSize = time.Second, time.Second, 4, 1
	e := newEnv(t, cfg)
	strandMany(e, 50)
	e.st.set(func(p *probe) { p.latency = 300 * time.Millisecond })
	for i, want := range []time.Duration{2 * time.Second, 4 * time.Second, 4 * time.Second} {
		rep := e.tick()
		if !rep.DeadlineHit || !slices.Contains(rep.Truncated, sweeper.ReasonDeadline) || rep.NextWait != want {
			t.Fatalf("slow tick %d: deadline %v, truncated %v, next wait %v (want %v)", i, rep.DeadlineHit, rep.Truncated, rep.NextWait, want)
		}
		if rep.Routes[0].Scanned >= 50 {
			t.Fatalf("a tick past its deadline scanned everything")
		}
	}
	e.st.set(func(p *probe) { p.latency = 0 })
	if rep := e.tick(); rep.DeadlineHit || rep.NextWait != time.Second || rep.DeadlineHits != 0 {
		t.Fatalf("fast tick: deadline %v, next wait %v", rep.DeadlineHit, rep.NextWait)
	}
}

// stuckLayer wraps a layer whose drops, for one agent, report success and remove nothing: it keeps
// holding entries after every hop, which only the step cap stops.
type stuckLayer struct {
	oplog.Layer
	stuck oplog.AgentID
}

func (l stuckLayer) DropPrefix(ctx context.Context, a oplog.AgentID, m oplog.Mode, upTo oplog.Index) (uint64, error) {
	if a == l.stuck {
		return 0, nil
	}
	return l.Layer.DropPrefix(ctx, a, m, upTo)
}

func TestSweep_TheStepCapFailsTheArchiveAndKeepsTheAgentTracked(t *testing.T) {
	stuck := agent("stuck")
	e := newEnv(t, config(), withCompressedLevels(2), func(e *env, _ *sweeper.Options, archives *[]oplog.Layer) {
		(*archives)[1] = stuckLayer{Layer: (*archives)[1], stuck: stuck}
	})
	e.strand(stuck, 1, 2)
	e.tick()
	rep := e.tick()
	if rep.Outcomes[sweeper.OutcomeArchiveFailed] != 1 || rep.Outcomes[sweeper.OutcomeArchived] != 0 {
		t.Fatalf("outcomes %+v", rep.Outcomes)
	}
	if rep.Tracked != 1 {
		t.Fatalf("tracked %d after the step cap, want the agent kept", rep.Tracked)
	}
	if e.drainedCount(stuck) != 0 {
		t.Fatal("OnDrained fired for an agent that hit the step cap")
	}
	if !strings.Contains(e.logs.String(), "step cap") {
		t.Fatalf("no warning logged: %s", e.logs.String())
	}
}

func TestSweep_OnDrainedFiresOncePerDrainedAgent(t *testing.T) {
	e := newEnv(t, config())
	agents := strandMany(e, 6)
	for range 4 {
		e.tick()
	}
	for _, a := range agents {
		if n := e.drainedCount(a); n != 1 {
			t.Fatalf("OnDrained fired %d times for %s", n, a)
		}
	}
}

func TestSweep_DeclinesAnAgentPickedUpSinceTheGate(t *testing.T) {
	locker := &countingLocker{busy: map[oplog.AgentID]bool{}}
	e := newEnv(t, config(), withOptions(func(o *sweeper.Options) { o.Locker = locker }))
	a := agent("locked")
	e.strand(a, 1, 2)
	e.tick()
	locker.mu.Lock()
	locker.busy[a] = true
	locker.mu.Unlock()
	if rep := e.tick(); rep.Outcomes[sweeper.OutcomeDeclined] != 1 {
		t.Fatalf("outcomes %+v", rep.Outcomes)
	}
	e.requireStranded(a, 2)
	locker.mu.Lock()
	locker.busy[a] = false
	locker.mu.Unlock()
	e.tick()
	e.requireArchived(a, 2)
}

func TestSweep_ASecondLifetimeIsSweptLikeAnyOther(t *testing.T) {
	e := newEnv(t, config())
	a := agent("reborn")
	e.strand(a, 1, 3)
	e.tick()
	e.tick()
	e.requireArchived(a, 3)
	e.strand(a, 4, 3) // invoked again under the same id, no Create entry
	e.tick()
	e.tick()
	e.requireArchived(a, 6)
}

func TestSweep_DisabledDoesNothingAndRunReturns(t *testing.T) {
	cfg := config()
	cfg.Enabled = false
	e := newEnv(t, cfg)
	a := agent("x")
	e.strand(a, 1, 2)
	if rep := e.tick(); !rep.Disabled {
		t.Fatalf("report %+v", rep)
	}
	if err := e.sw.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.requireStranded(a, 2)
}

func TestRun_StopsOnCancelAfterArchiving(t *testing.T) {
	cfg := config()
	cfg.Interval = sweeper.MinInterval
	var drained atomic.Int32
	ctx, cancel := context.WithCancel(t.Context())
	e := newEnv(t, cfg, withOptions(func(o *sweeper.Options) {
		o.OnDrained = func(oplog.AgentID, oplog.Mode) {
			if drained.Add(1) == 3 {
				cancel()
			}
		}
	}))
	agents := strandMany(e, 3)
	done := make(chan error)
	go func() { done <- e.sw.Run(ctx) }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		e.requireArchived(a, 2)
	}
}

func TestNew_RejectsInvalidConfigAndAStackWithoutSources(t *testing.T) {
	cfg := config()
	cfg.MaxConcurrency = -1 // 0 is the default
	st := memory.New()
	stack, err := archive.DefaultStack(st, memory.NewBlobStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sweeper.New(cfg, stack, sweeper.Options{}); err == nil {
		t.Fatal("max_concurrency -1 accepted")
	}
	if _, err := sweeper.New(config(), nil, sweeper.Options{}); err == nil {
		t.Fatal("nil stack accepted")
	}
	// The zero Stack has no layers: refused with a clear error, not a panic.
	if _, err := sweeper.New(config(), &oplog.Stack{}, sweeper.Options{}); !errors.Is(err, oplog.ErrStackNotBuilt) {
		t.Fatalf("the zero stack: %v, want ErrStackNotBuilt", err)
	}
	// A stack whose only archive is the blob layer has nothing to sweep: no routes, no error.
	b0, err := archive.NewBlob(memory.NewBlobStore(), 0)
	if err != nil {
		t.Fatal(err)
	}
	blobOnly, err := oplog.NewStack(oplog.NewPrimary(st), b0)
	if err != nil {
		t.Fatal(err)
	}
	sw, err := sweeper.New(config(), blobOnly, sweeper.Options{})
	if err != nil || len(sw.Routes()) != 0 {
		t.Fatalf("blob-only stack: %v routes, %v", sw.Routes(), err)
	}
}

func TestSweep_AnAgentWrittenBetweenGateAndArchiveIsDeclined(t *testing.T) {
	locker := &countingLocker{busy: map[oplog.AgentID]bool{}}
	e := newEnv(t, config(), withOptions(func(o *sweeper.Options) { o.Locker = locker }))
	a := agent("revived")
	e.strand(a, 1, 2)
	e.tick()
	var once sync.Once
	locker.during = func() { once.Do(func() { e.strand(a, 3, 2) }) } // the executor writes as the archive begins
	if rep := e.tick(); rep.Outcomes[sweeper.OutcomeDeclined] != 1 || rep.Outcomes[sweeper.OutcomeArchived] != 0 {
		t.Fatalf("outcomes %+v", rep.Outcomes)
	}
	e.requireStranded(a, 4)
	// Quiet from now on: the next pass archives it.
	if rep := e.tick(); rep.Outcomes[sweeper.OutcomeArchived] != 1 {
		t.Fatalf("next pass: %+v", rep.Outcomes)
	}
	e.requireArchived(a, 4)
}

func TestSweep_TrackingForShardsNoLongerOwnedIsDroppedAtOnce(t *testing.T) {
	e := newEnv(t, config())
	e.setAssignment(sweeper.Assignment{ShardCount: 2, Shards: []int{0, 1}}, true)
	var zero, one oplog.AgentID
	for i := 0; zero.Name == "" || one.Name == ""; i++ {
		a := agent(fmt.Sprint("a", i))
		if a.Shard(2) == 0 && zero.Name == "" {
			zero = a
		} else if a.Shard(2) == 1 && one.Name == "" {
			one = a
		}
	}
	e.strand(zero, 1, 2)
	e.strand(one, 1, 2)
	if rep := e.tick(); rep.Tracked != 2 {
		t.Fatalf("tracked %d", rep.Tracked)
	}
	e.setAssignment(sweeper.Assignment{ShardCount: 2, Shards: []int{0}}, true) // shard 1 moved away
	rep := e.tick()
	// zero is archived and forgotten; one must be dropped at once, not kept for a pass of grace (and
	// is no longer walked).
	if rep.Tracked != 0 || rep.Outcomes[sweeper.OutcomeNotOwned] != 0 || rep.Outcomes[sweeper.OutcomeArchived] != 1 {
		t.Fatalf("after losing shard 1: tracked %d, outcomes %+v", rep.Tracked, rep.Outcomes)
	}
	e.requireArchived(zero, 2)
	e.requireStranded(one, 2)
}

func TestSweep_StandDownDoesNothingAndSaysWhy(t *testing.T) {
	label, reason := "residency_stale", "residency feed is stale"
	e := newEnv(t, config(), withOptions(func(o *sweeper.Options) { o.StandDown = func() (string, string) { return label, reason } }))
	a := agent("x")
	e.strand(a, 1, 2)
	for range 3 {
		if rep := e.tick(); rep.StoodDown != reason || rep.StandDownReason != label || len(rep.Routes) != 0 {
			t.Fatalf("report %+v", rep)
		}
	}
	e.requireStranded(a, 2)
	label, reason = "", ""
	e.tick()
	e.tick()
	e.requireArchived(a, 2)
}

// A page that carries each key's last id is the gate's read: the scan phase makes no other call.
func TestSweep_LastIDsThatComeWithThePageCostNoRead(t *testing.T) {
	e := newEnv(t, config())
	agents := strandMany(e, 20)
	for range 2 {
		e.tick()
	}
	for _, a := range agents {
		// One read per agent in all: the archive's re-check, which the drain reuses.
		if n := e.st.lastsOf(a); n != 1 {
			t.Fatalf("%s: %d last-index reads over two passes, want 1 (the archive's re-check)", a, n)
		}
		e.requireArchived(a, 2)
	}
}

// Without ids in the page, the scan reads the keys' last indexes as the archive phase runs its agents:
// MaxConcurrency at once. The reads wait for one another, so a scan reading one at a time would hold
// the first read until the guard lets it go, and the most in flight would be 1.
func TestSweep_ScanReadsAKeysLastIndexAtMaxConcurrency(t *testing.T) {
	cfg := config()
	cfg.MaxConcurrency = 4
	e := newEnv(t, cfg)
	strandMany(e, 12)
	var mu sync.Mutex
	inFlight, most := 0, 0
	all := make(chan struct{})
	var once sync.Once
	e.st.set(func(p *probe) {
		p.noPageIDs = true
		p.beforeLast = func(string) {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			if inFlight == cfg.MaxConcurrency {
				once.Do(func() { close(all) })
			}
			mu.Unlock()
			select {
			case <-all:
			case <-time.After(10 * time.Second): // a guard against a hang, not a measurement
			}
			mu.Lock()
			inFlight--
			mu.Unlock()
		}
	})
	e.tick()
	mu.Lock()
	defer mu.Unlock()
	if most != cfg.MaxConcurrency {
		t.Fatalf("at most %d reads in flight during the scan, want max_concurrency = %d", most, cfg.MaxConcurrency)
	}
}

// A key in the walked range whose bucket prefix is not its agent's (a writer that hashed differently)
// is unparseable: counted, never read, never archived, its entries left where they are.
func TestSweep_AKeyWithAnotherBucketsPrefixIsUnparseableAndNeverArchived(t *testing.T) {
	e := newEnv(t, config())
	a := agent("misplaced")
	wrong := is.BucketPrefix((a.Bucket()+1)%is.Buckets) + a.Key()
	chunk, err := archive.EncodeChunk([]oplog.Entry{{Index: 1, Payload: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	ns := oplog.CompressedNamespace(oplog.Ephemeral, 1)
	if err := e.st.Storage.Append(t.Context(), ns, wrong, 1, chunk); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if rep := e.tick(); rep.Outcomes[sweeper.OutcomeUnparseable] != 1 || rep.Outcomes[sweeper.OutcomeArchived] != 0 {
			t.Fatalf("outcomes %+v", rep.Outcomes)
		}
	}
	if n := e.st.lasts[wrong]; n != 0 {
		t.Fatalf("the misplaced key was read %d times", n)
	}
	if ok, err := e.st.Storage.Exists(t.Context(), ns, wrong); err != nil || !ok {
		t.Fatalf("the misplaced key's entries are gone: %v %v", ok, err)
	}
}

// Run's first tick waits its jitter's fraction of the interval: cancelled within that wait, it has
// ticked never.
func TestRun_TheFirstTickWaitsItsJitter(t *testing.T) {
	cfg := config()
	cfg.Interval = time.Hour
	asked := make(chan struct{})
	e := newEnv(t, cfg, withOptions(func(o *sweeper.Options) {
		o.FirstTickJitter = func() float64 { close(asked); return 0.5 }
	}))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- e.sw.Run(ctx) }()
	<-asked
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if last := e.sw.Status().Last; !last.Start.IsZero() {
		t.Fatalf("Run ticked before half an hour had passed: %+v", last)
	}
}

// A page that stamps its keys (multi-file SQLite's) spares the gate its reads: the first sighting is
// the stamp, and the second passes the agent on an unchanged stamp without reading its index (the
// archive's first read takes the last index it finds), where without stamps each sighting reads it.
func TestSweep_StampedPagesSpareTheFirstSightingsRead(t *testing.T) {
	for _, stamped := range []bool{false, true} {
		t.Run(fmt.Sprintf("stamped=%v", stamped), func(t *testing.T) {
			e := newEnv(t, config())
			e.st.set(func(p *probe) { p.noPageIDs, p.stamped = true, stamped })
			agents := strandMany(e, 20)
			rep := e.tick()
			want := 1 // the first sighting's read
			if stamped {
				want = 0
			}
			for _, a := range agents {
				if n := e.st.lastsOf(a); n != want {
					t.Fatalf("%s: %d last-index reads after the first pass, want %d", a, n, want)
				}
				e.requireStranded(a, 2)
			}
			if rr := rep.Routes[0]; rr.Outcomes[sweeper.OutcomeWaiting] != len(agents) || rr.Unarchived != len(agents) {
				t.Fatalf("first pass: %d waiting, %d unarchived; want %d", rr.Outcomes[sweeper.OutcomeWaiting], rr.Unarchived, len(agents))
			}
			before := make(map[oplog.AgentID]int)
			for _, a := range agents {
				before[a] = e.st.lastsOf(a)
			}
			e.tick()
			// The archive's first read reads the index (this probe has no batch read: a last-id read
			// beside the chunk's); without stamps the gate's second sighting reads it before.
			want = 2
			if stamped {
				want = 1
			}
			for _, a := range agents {
				e.requireArchived(a, 2)
				if n := e.st.lastsOf(a) - before[a]; n != want {
					t.Fatalf("%s: %d last-index reads in the second pass, want %d", a, n, want)
				}
			}
		})
	}
}

// An agent whose stamp changed between two sightings (its executor wrote meanwhile) is held by the
// gate, as one whose last index moved; the changed sighting is a new first one, and costs no read. One
// whose page can no longer vouch for it (an empty stamp: changed too recently to tell) is read, and held
// too: a sighting by stamp alone compares with stamps only.
func TestSweep_AStampThatChangedHoldsTheGate(t *testing.T) {
	e := newEnv(t, config())
	e.st.set(func(p *probe) { p.noPageIDs, p.stamped = true, true })
	live, recent, quiet := agent("live"), agent("recent"), agent("quiet")
	for _, a := range []oplog.AgentID{live, recent, quiet} {
		e.strand(a, 1, 2)
	}
	e.tick()
	// Written between the two sightings.
	e.strand(live, 3, 1)
	e.strand(recent, 3, 1)
	e.st.set(func(p *probe) { p.unvouched = map[string]bool{recent.StoredKey(): true} })
	e.tick()
	e.requireArchived(quiet, 2)
	e.requireStranded(live, 3)
	e.requireStranded(recent, 3)
	if n := e.st.lastsOf(live); n != 0 {
		t.Fatalf("the live agent's index was read %d times; two first sightings by stamp read none", n)
	}
	if n := e.st.lastsOf(recent); n != 1 {
		t.Fatalf("the unvouched agent's index was read %d times, want once", n)
	}
	e.st.set(func(p *probe) { p.unvouched = nil })
	e.tick()
	e.requireArchived(live, 3)
	e.requireArchived(recent, 3)
}

// A candidate the gate passed by stamps alone carries no index for the archive to re-check, so it is
// archived in the tick that sighted it or not at all: one the tick's archive budget left over is not
// carried to the next tick, where a write since its sighting would be archived unchecked. A write in
// between holds it, as a changed stamp does; quiet again, it is archived two sightings later.
func TestSweep_AStampPassedCandidateIsNotCarriedToTheNextTick(t *testing.T) {
	cfg := config()
	cfg.MaxArchivesPerTick = 2
	e := newEnv(t, cfg)
	e.st.set(func(p *probe) { p.noPageIDs, p.stamped = true, true })
	agents := strandMany(e, 5) // two entries each
	e.tick()
	archived := map[oplog.AgentID]bool{}
	for _, a := range e.tick().Routes[0].Archived {
		archived[a] = true
	}
	if len(archived) != cfg.MaxArchivesPerTick {
		t.Fatalf("the second tick archived %d agents, want its budget's %d", len(archived), cfg.MaxArchivesPerTick)
	}
	var woken oplog.AgentID
	for _, a := range agents {
		if !archived[a] {
			woken = a
			break
		}
	}
	e.strand(woken, 3, 1) // its executor writes again, after the sighting that passed it
	for _, a := range e.tick().Routes[0].Archived {
		if a == woken {
			t.Fatalf("%s was archived by the tick after it was written to, on a sighting from before", a)
		}
	}
	e.requireStranded(woken, 3)
	for range 6 {
		e.tick()
	}
	for _, a := range agents {
		if a == woken {
			e.requireArchived(a, 3)
		} else {
			e.requireArchived(a, 2)
		}
	}
}

// An agent whose first sighting read its index (its file had changed too recently to stamp) is not read
// again once its page stamps it: it passes with the index read then, and the archive's first read
// re-checks that index. Written in between, it is declined there, as the gate would have held it, and
// archived a pass later.
func TestSweep_AStampedSecondSightingPassesOnTheIndexReadBefore(t *testing.T) {
	e := newEnv(t, config())
	e.st.set(func(p *probe) { p.noPageIDs, p.stamped = true, true })
	quiet, late := agent("quiet"), agent("late")
	for _, a := range []oplog.AgentID{quiet, late} {
		e.strand(a, 1, 2)
	}
	e.st.set(func(p *probe) {
		p.unvouched = map[string]bool{quiet.StoredKey(): true, late.StoredKey(): true}
	})
	e.tick()
	if n, m := e.st.lastsOf(quiet), e.st.lastsOf(late); n != 1 || m != 1 {
		t.Fatalf("first sightings of unstamped keys read %d and %d times, want once each", n, m)
	}
	e.strand(late, 3, 1) // written since its first sighting read 2
	e.st.set(func(p *probe) { p.unvouched = nil })
	before := e.st.lastsOf(quiet)
	rr := e.tick().Routes[0]
	if rr.Outcomes[sweeper.OutcomeArchived] != 1 || rr.Outcomes[sweeper.OutcomeDeclined] != 1 {
		t.Fatalf("second sightings: outcomes %v, want one archived and one declined by the archive's re-check", rr.Outcomes)
	}
	// The quiet agent's reads in the second pass are the archive's alone (this probe has no batch
	// read: one last-id read beside its chunk's), none the gate's.
	if n := e.st.lastsOf(quiet) - before; n != 1 {
		t.Fatalf("the quiet agent's index was read %d times in the second pass, want once (the archive's)", n)
	}
	e.requireArchived(quiet, 2)
	e.requireStranded(late, 3)
	e.tick()
	e.requireArchived(late, 3)
}

// A write between the sighting that passed an agent by stamps alone and the archive's first read is
// archived with the rest: that read finds the new last index and the drain moves everything up to it,
// each entry once (the gate has no index to compare it with; the archive never depends on the gate).
func TestSweep_AWriteAfterAStampPassIsArchivedWithTheRest(t *testing.T) {
	woken := agent("woken")
	var e *env
	var asked atomic.Int32
	e = newEnv(t, config(), withOptions(func(o *sweeper.Options) {
		o.Residency = func(a oplog.AgentID) bool {
			// Asked at each sighting, then once more as the archive starts: write there.
			if a == woken && asked.Add(1) == 3 {
				e.strand(woken, 3, 2)
			}
			return false
		}
	}))
	e.st.set(func(p *probe) { p.noPageIDs, p.stamped = true, true })
	e.strand(woken, 1, 2)
	e.tick()
	rr := e.tick().Routes[0]
	if n := asked.Load(); n != 3 || len(rr.Archived) != 1 {
		t.Fatalf("residency asked %d times, %d archived; want 3 (two sightings, the archive) and 1", n, len(rr.Archived))
	}
	if rr.Moved != 4 {
		t.Fatalf("moved %d entries, want the 4 the archive's read found", rr.Moved)
	}
	e.requireArchived(woken, 4)
}

// The lag counts an agent sighted by its stamp alone at the entries an agent the route archived so
// far, since its own last index was not read.
func TestSweep_LagEstimatesTheEntriesOfAgentsSightedByStamp(t *testing.T) {
	e := newEnv(t, config())
	e.st.set(func(p *probe) { p.noPageIDs, p.stamped = true, true })
	first := strandMany(e, 4) // two entries each
	e.tick()
	if rr := e.tick().Routes[0]; len(rr.Archived) != len(first) {
		t.Fatalf("archived %d of %d", len(rr.Archived), len(first))
	}
	for i := range 3 {
		e.strand(agent(fmt.Sprint("later-", i)), 1, 2)
	}
	rr := e.tick().Routes[0]
	if rr.Unarchived != 3 || rr.UnarchivedEntries != 3*2 {
		t.Fatalf("3 agents sighted by stamp: lag says %d agents, %d entries; want 3, 6", rr.Unarchived, rr.UnarchivedEntries)
	}
}
