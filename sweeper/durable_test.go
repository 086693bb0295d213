package sweeper_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
)

// durableClock is the executor's idle signal and the sweep's clock: an agent is idle for two days
// when the test starts, unless touched since.
type durableClock struct {
	mu      sync.Mutex
	now     time.Time
	touched map[oplog.AgentID]time.Time
	unknown map[oplog.AgentID]bool // LastActive does not know them
}

var durableT0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func newDurableClock() *durableClock {
	return &durableClock{now: durableT0, touched: map[oplog.AgentID]time.Time{}, unknown: map[oplog.AgentID]bool{}}
}

func (c *durableClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *durableClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *durableClock) touch(a oplog.AgentID) { c.mu.Lock(); defer c.mu.Unlock(); c.touched[a] = c.now }

func (c *durableClock) LastActive(a oplog.AgentID) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unknown[a] {
		return time.Time{}, false
	}
	if t, ok := c.touched[a]; ok {
		return t, true
	}
	return durableT0.Add(-48 * time.Hour), true // idle for two days when the test starts
}

// withDurableRoute turns the durable route on with the executor's Locker and idle signal.
func withDurableRoute(locks *agentMutexes, clock *durableClock) envOption {
	return withOptions(func(o *sweeper.Options) {
		o.DurableRoute, o.Locker, o.LastActive, o.Now = true, locks, clock.LastActive, clock.Now
	})
}

// writeDurable appends entries from..from+n-1 of a durable agent: to the primary, as the executor's
// commit path does.
func (e *env) writeDurable(a oplog.AgentID, from, n int) {
	e.t.Helper()
	if err := e.stack.Append(e.t.Context(), a, oplog.Durable, durableEntries(a, from, n)); err != nil {
		e.t.Fatal(err)
	}
}

func durableEntries(a oplog.AgentID, from, n int) []oplog.Entry {
	var entries []oplog.Entry
	for i := from; i < from+n; i++ {
		entries = append(entries, oplog.Entry{Index: oplog.Index(i), Payload: []byte(fmt.Sprint(a.Name, "#", i))})
	}
	return entries
}

// requireDurable checks what a reader of the durable oplog gets back, exactly 1..n, and whether all
// of it is in the bottom layer (the primary and compressed-1 emptied).
func (e *env) requireDurable(a oplog.AgentID, n int, archived bool) {
	e.t.Helper()
	ctx := e.t.Context()
	e.requireReadableIn(a, oplog.Durable, n)
	layers := e.stack.Layers()
	above := false
	for _, l := range layers[:len(layers)-1] {
		if _, ok, err := l.LastIndex(ctx, a, oplog.Durable); err != nil {
			e.t.Fatal(err)
		} else if ok {
			above = true
		}
	}
	if above == archived {
		e.t.Fatalf("%s: entries above the bottom layer: %v, want %v", a, above, !archived)
	}
}

func TestDurableRoute_IsRefusedWithoutLockerLastActiveAndOnDrained(t *testing.T) {
	locks, clock := newAgentMutexes(), newDurableClock()
	stack := newEnv(t, config()).stack
	for _, c := range []struct {
		name    string
		edit    func(o *sweeper.Options)
		missing string
	}{
		{"no locker", func(o *sweeper.Options) { o.Locker = nil }, "a Locker"},
		{"no idle signal", func(o *sweeper.Options) { o.LastActive = nil }, "LastActive"},
		{"no OnDrained", func(o *sweeper.Options) { o.OnDrained = nil }, "OnDrained"},
	} {
		o := sweeper.Options{DurableRoute: true, Locker: locks, LastActive: clock.LastActive,
			OnDrained: func(oplog.AgentID, oplog.Mode) {}}
		c.edit(&o)
		_, err := sweeper.New(config(), stack, o)
		if !errors.Is(err, sweeper.ErrDurableRouteRefused) || !strings.Contains(err.Error(), c.missing) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// The opt-in adds a durable route from the primary and from each archive layer above the bottom, after
// the ephemeral ones; the default has none (TestSweep_NoRouteNamesADurableMode).
func TestDurableRoute_RoutesStartAtThePrimary(t *testing.T) {
	e := newEnv(t, config(), withCompressedLevels(2), withDurableRoute(newAgentMutexes(), newDurableClock()))
	var got []string
	for _, r := range e.sw.Routes() {
		got = append(got, fmt.Sprintf("%s %s→%s", r.Name, r.Source, r.Target))
	}
	want := []string{"ephemeral-l1 compressed-1→compressed-2", "ephemeral-l2 compressed-2→blob-0",
		"durable-l0 primary→compressed-1", "durable-l1 compressed-1→compressed-2", "durable-l2 compressed-2→blob-0"}
	if !slices.Equal(got, want) {
		t.Fatalf("routes %q, want %q", got, want)
	}
	if !e.sw.DurableRouteOn() {
		t.Fatal("DurableRouteOn is false with the route on")
	}
	cfg := config()
	cfg.Enabled = false
	if off := newEnv(t, cfg, withDurableRoute(newAgentMutexes(), newDurableClock())); off.sw.DurableRouteOn() {
		t.Fatal("DurableRouteOn with the sweep disabled")
	}
}

func TestDurableRoute_ArchivesAnIdleDurableAgentOnItsSecondPass(t *testing.T) {
	clock := newDurableClock()
	e := newEnv(t, config(), withDurableRoute(newAgentMutexes(), clock))
	a := agent("durable-idle")
	e.writeDurable(a, 1, 5)
	if rep := e.tick(); rep.Outcomes[sweeper.OutcomeWaiting] != 1 || rep.Outcomes[sweeper.OutcomeArchived] != 0 {
		t.Fatalf("first pass: %+v", rep.Outcomes)
	}
	e.requireDurable(a, 5, false)
	rep := e.tick()
	if rep.Outcomes[sweeper.OutcomeArchived] != 1 {
		t.Fatalf("second pass: %+v", rep.Routes)
	}
	e.requireDurable(a, 5, true)
	if n := e.drainedCount(a); n != 1 {
		t.Fatalf("OnDrained called %d times", n)
	}
}

// An agent active within durable_min_idle is skipped in memory, whatever its layers hold; one the
// executor does not know counts as active when the sweep was built.
func TestDurableRoute_NeverArchivesAnAgentActiveWithinTheIdleAge(t *testing.T) {
	clock := newDurableClock()
	e := newEnv(t, config(), withDurableRoute(newAgentMutexes(), clock))
	live, unknown := agent("durable-live"), agent("durable-unknown")
	e.writeDurable(live, 1, 3)
	e.writeDurable(unknown, 1, 3)
	clock.touch(live)
	clock.mu.Lock()
	clock.unknown[unknown] = true
	clock.mu.Unlock()
	before := e.st.lastsOf(live)
	for range 5 {
		clock.advance(time.Hour)
		rep := e.tick()
		if rep.Outcomes[sweeper.OutcomeActive] != 2 || rep.Outcomes[sweeper.OutcomeArchived] != 0 {
			t.Fatalf("outcomes %+v", rep.Outcomes)
		}
	}
	if n := e.st.lastsOf(live) - before; n != 0 {
		t.Fatalf("an active agent cost %d last-index reads", n)
	}
	e.requireDurable(live, 3, false)
	e.requireDurable(unknown, 3, false)
	// A day after its last activity (and after the sweep started, for the unknown one), both go.
	clock.advance(20 * time.Hour)
	e.tick()
	if rep := e.tick(); rep.Outcomes[sweeper.OutcomeArchived] != 2 {
		t.Fatalf("after the idle age: %+v", rep.Outcomes)
	}
	e.requireDurable(live, 3, true)
	e.requireDurable(unknown, 3, true)
}

// The gate compares the whole stack's last index: an agent found in compressed-1 (its own executor
// archived part of it) whose primary moves on between passes is not archived, though the layer the
// route walks did not change; and the idle signal is asked again under the lock.
func TestDurableRoute_GatesOnTheWholeStack(t *testing.T) {
	clock := newDurableClock()
	e := newEnv(t, config(), withDurableRoute(newAgentMutexes(), clock))
	a := agent("durable-split")
	e.writeDurable(a, 1, 4)
	if _, err := e.stack.ArchiveStep(t.Context(), a, oplog.Durable); err != nil { // 1..4 now in compressed-1
		t.Fatal(err)
	}
	e.writeDurable(a, 5, 2)
	e.tick()
	e.writeDurable(a, 7, 1) // a writer whose idle signal lags
	if rep := e.tick(); rep.Outcomes[sweeper.OutcomeArchived] != 0 {
		t.Fatalf("archived an agent whose primary moved on: %+v", rep.Routes)
	}
	e.requireDurable(a, 7, false)
	if rep := e.tick(); rep.Outcomes[sweeper.OutcomeArchived] != 1 {
		t.Fatalf("quiet again: %+v", rep.Routes)
	}
	e.requireDurable(a, 7, true)
}

// failingDrop fails every DropPrefix of one namespace.
type failingDrop struct {
	is.Storage
	ns string
}

func (f *failingDrop) DropPrefix(ctx context.Context, ns, key string, upTo uint64) (uint64, error) {
	if ns == f.ns {
		return 0, errPoison
	}
	return f.Storage.DropPrefix(ctx, ns, key, upTo)
}

// A drain that fails under the lock is archive_failed, logged, and tried again on a later pass;
// nothing is lost meanwhile.
func TestDurableRoute_AFailedDrainIsArchiveFailed(t *testing.T) {
	st := &failingDrop{Storage: memory.New(), ns: oplog.PrimaryNamespace(oplog.Durable)}
	e := newEnvOn(t, st, config(), withDurableRoute(newAgentMutexes(), newDurableClock()))
	a := agent("durable-drop-fails")
	e.writeDurable(a, 1, 3)
	e.tick()
	rep := e.tick()
	if rep.Outcomes[sweeper.OutcomeArchiveFailed] != 1 || rep.Outcomes[sweeper.OutcomeArchived] != 0 || e.drainedCount(a) != 0 {
		t.Fatalf("outcomes %+v, drained %d", rep.Outcomes, e.drainedCount(a))
	}
	if !strings.Contains(e.logs.String(), "poisoned key") {
		t.Fatalf("the failure was not logged:\n%s", e.logs)
	}
	e.requireReadableIn(a, oplog.Durable, 3)
}

// Each mode's routes have budgets of their own: a durable backlog leaves the ephemeral route its
// whole archive budget, tick after tick.
func TestDurableRoute_ADurableBacklogDoesNotStarveTheEphemeralRoute(t *testing.T) {
	cfg := config()
	cfg.MaxArchivesPerTick, cfg.DurableMaxArchivesPerTick = 5, 3
	e := newEnv(t, cfg, withDurableRoute(newAgentMutexes(), newDurableClock()))
	for i := range 20 {
		e.strand(agent(fmt.Sprint("eph-", i)), 1, 2)
		e.writeDurable(agent(fmt.Sprint("dur-", i)), 1, 2)
	}
	e.tick() // the first pass sights both
	archived := map[oplog.Mode]int{}
	for range 3 {
		rep := e.tick()
		for _, r := range rep.Routes {
			mode := oplog.Ephemeral
			if strings.HasPrefix(r.Route, "durable-") {
				mode = oplog.Durable
			}
			archived[mode] += r.Outcomes[sweeper.OutcomeArchived]
		}
	}
	// The durable budget is shared by durable-l0 and durable-l1 (2 and 1 a tick), and only durable-l0
	// has work; the ephemeral route keeps all of its own.
	if archived[oplog.Ephemeral] != 15 || archived[oplog.Durable] != 6 {
		t.Fatalf("archived in 3 ticks: %v, want 15 ephemeral (5 a tick) and 6 durable (durable-l0's 2 of 3 a tick)", archived)
	}
}

// The executor's writers and its own size-triggered archiving race the durable route under the
// executor's Locker, with an idle signal that says every agent is idle (the worst it can say): every
// entry is read back exactly once, in order, and neither side meets an error.
func TestDurableRoute_RacesTheExecutorsWritesAndArchivingUnderTheLocker(t *testing.T) {
	const agents, rounds, perRound = 8, 30, 3
	locks, clock := newAgentMutexes(), newDurableClock()
	cfg := config()
	cfg.MaxConcurrency = 4
	e := newEnv(t, cfg, withCompressedLevels(2), withDurableRoute(locks, clock))
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, agents*rounds)
	for i := range agents {
		a := agent(fmt.Sprint("race-", i))
		wg.Go(func() {
			next := 1
			for round := range rounds {
				m := locks.get(a)
				m.Lock()
				err := e.stack.Append(ctx, a, oplog.Durable, durableEntries(a, next, perRound))
				if err == nil && round%4 == 3 {
					_, err = e.stack.ArchiveStep(ctx, a, oplog.Durable) // size-triggered
				}
				m.Unlock()
				if err != nil {
					errs <- fmt.Errorf("%s round %d: %w", a, round, err)
					return
				}
				next += perRound
			}
		})
	}
	done := make(chan struct{})
	var sweepErrors, failed, archived int
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			default:
			}
			rep := e.sw.SweepOnce(ctx)
			for _, r := range rep.Routes {
				sweepErrors += r.Errors
				failed += r.Outcomes[sweeper.OutcomeArchiveFailed]
				archived += r.Outcomes[sweeper.OutcomeArchived]
			}
			select {
			case <-writersDone(&wg):
				return
			default:
			}
		}
	}()
	wg.Wait()
	<-done
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Once the writers are done, the route drains what is left.
	for range 3 {
		rep := e.tick()
		for _, r := range rep.Routes {
			sweepErrors += r.Errors
			failed += r.Outcomes[sweeper.OutcomeArchiveFailed]
			archived += r.Outcomes[sweeper.OutcomeArchived]
		}
	}
	if sweepErrors+failed > 0 {
		t.Fatalf("the sweep met %d errors, %d failed archives; logs:\n%s", sweepErrors, failed, e.logs)
	}
	for i := range agents {
		e.requireDurable(agent(fmt.Sprint("race-", i)), rounds*perRound, true)
	}
	t.Logf("%d archives by the route during and after the race", archived)
}

// writersDone is closed once wg's writers have all returned.
func writersDone(wg *sync.WaitGroup) <-chan struct{} {
	c := make(chan struct{})
	go func() { wg.Wait(); close(c) }()
	return c
}
