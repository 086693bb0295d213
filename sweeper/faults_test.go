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

	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
)

// The breaks of issue 10 at the sweep's level, on memory storage with faults injected under the stack.
// test/sweeps runs the poison keys on the real engines.

var errPoison = errors.New("poisoned key")

// failing makes the reads of some keys fail: f returns the error for a key, or nil. Its pages carry no
// last ids, so that the sweep reads each key.
func failing(st is.Storage, f func(key string) error) is.Storage {
	return &failingLast{Storage: st, fail: f}
}

func (f *failingLast) ScanStable(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	page, err := f.Storage.ScanStable(ctx, ns, r, from, count)
	page.LastIDs = nil
	return page, err
}

type failingLast struct {
	is.Storage
	fail func(key string) error
}

func (f *failingLast) Last(ctx context.Context, ns, key string) (is.Entry, bool, error) {
	if err := f.fail(key); err != nil {
		return is.Entry{}, false, err
	}
	return f.Storage.Last(ctx, ns, key)
}

func (f *failingLast) LastID(ctx context.Context, ns, key string) (uint64, bool, error) {
	if err := f.fail(key); err != nil {
		return 0, false, err
	}
	return f.Storage.LastID(ctx, ns, key)
}

func TestSweep_AnUnreadableKeyIsSkippedAndTheWalkMovesOn(t *testing.T) {
	cfg := config()
	cfg.PageSize = 3
	bad := agent("agent-004")
	e := newEnvOn(t, failing(memory.New(), func(key string) error {
		if key == bad.StoredKey() {
			return errPoison
		}
		return nil
	}), cfg)
	agents := strandMany(e, 9) // agent-000 … agent-008; the bad one sits in the middle of a page
	for i, want := range []int{1, 1, 1} {
		rep := e.tick()
		rr := rep.Routes[0]
		if rr.Outcomes[sweeper.OutcomeUnreadable] != want || !rr.PassCompleted || rr.Errors != want {
			t.Fatalf("tick %d: outcomes %+v, pass completed %v, errors %d", i, rr.Outcomes, rr.PassCompleted, rr.Errors)
		}
		if len(rr.Unreadable) != 1 || rr.Unreadable[0].Key != bad.StoredKey() || !strings.Contains(rr.Unreadable[0].Err, "poisoned") {
			t.Fatalf("tick %d: unreadable listed %+v", i, rr.Unreadable)
		}
	}
	for _, a := range agents {
		if a == bad {
			e.requireStranded(a, 2)
		} else {
			e.requireArchived(a, 2)
		}
	}
	st := e.sw.Status()
	if len(st.Unreadable) == 0 || st.Unreadable[len(st.Unreadable)-1].Where != bad.StoredKey() {
		t.Fatalf("status lists %+v", st.Unreadable)
	}
	if !strings.Contains(e.logs.String(), bad.StoredKey()) {
		t.Fatalf("the log never names the bad key:\n%s", e.logs.String())
	}
}

// withPages rewrites every page the storage returns.
type withPages struct {
	is.Storage
	rewrite func(is.Page) is.Page
}

func (w withPages) ScanStable(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	page, err := w.Storage.ScanStable(ctx, ns, r, from, count)
	if err == nil {
		page = w.rewrite(page)
	}
	return page, err
}

func TestSweep_AnIndexTheBackendCannotReadIsCountedAndPassedOver(t *testing.T) {
	cfg := config()
	cfg.PageSize = 2
	var pages atomic.Int32
	e := newEnvOn(t, withPages{Storage: memory.New(), rewrite: func(p is.Page) is.Page {
		if pages.Add(1) == 2 { // as multi-file SQLite reports a file that is not a database
			p.Unreadable = append(p.Unreadable, is.Unreadable{Where: "ns-x/0f.db", Err: errors.New("file is not a database")})
		}
		return p
	}}, cfg)
	agents := strandMany(e, 6)
	rep := e.tick()
	rr := rep.Routes[0]
	if rr.Outcomes[sweeper.OutcomeUnreadable] != 1 || !rr.PassCompleted || len(rr.Unreadable) != 1 || rr.Unreadable[0].Where != "ns-x/0f.db" {
		t.Fatalf("outcomes %+v, completed %v, unreadable %+v", rr.Outcomes, rr.PassCompleted, rr.Unreadable)
	}
	sweepUntilDrained(e, agents, 1)
}

func TestSweep_ATransientKeyFailureEndsTheRouteAfterItsPageAndTheNextTickGoesOn(t *testing.T) {
	cfg := config()
	cfg.PageSize = 2
	var down atomic.Bool
	down.Store(true)
	e := newEnvOn(t, failing(memory.New(), func(string) error {
		if down.Load() {
			return is.Classify(is.ErrTransient, errors.New("connection reset"))
		}
		return nil
	}), cfg)
	strandMany(e, 6)
	rep := e.tick()
	rr := rep.Routes[0]
	// Three pages: the two (empty) parts of the namespace outside every bucket, which the owner of
	// bucket 0 walks first, and one page of failures.
	if rr.Pages != 3 || rr.Outcomes[sweeper.OutcomeUnreadable] != 2 || rr.PassCompleted {
		t.Fatalf("failing store: pages %d, outcomes %+v, completed %v; want one page of failures after the two outside the buckets",
			rr.Pages, rr.Outcomes, rr.PassCompleted)
	}
	down.Store(false)
	// The token moved past the failed page: this tick reads the rest and completes the pass.
	rep = e.tick()
	if rr := rep.Routes[0]; rr.Scanned != 4 || !rr.PassCompleted {
		t.Fatalf("after the store came back: scanned %d, completed %v", rr.Scanned, rr.PassCompleted)
	}
}

// clock is a settable time for Options.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestSweep_ATickThatEndsAfterItsDeadlineIsAHitWhateverItsCheckpointsSaw(t *testing.T) {
	cfg := config()
	cfg.MaxTickDuration, cfg.MaxBackoffIntervals = 5*time.Second, 8
	clk := &clock{now: time.Unix(1_000_000, 0)}
	slow := false
	locker := &countingLocker{busy: map[oplog.AgentID]bool{}, during: func() {
		if slow {
			clk.advance(2 * cfg.MaxTickDuration) // the archive phase runs long after the last checkpoint
		}
	}}
	e := newEnv(t, cfg, withOptions(func(o *sweeper.Options) { o.Now, o.Locker = clk.Now, locker }))
	strandMany(e, 1)
	e.tick()
	slow = true
	rep := e.tick()
	if rep.Outcomes[sweeper.OutcomeArchived] != 1 || !rep.DeadlineHit || rep.DeadlineHits != 1 || rep.NextWait != 2*cfg.Interval {
		t.Fatalf("overrunning tick: archived %d, deadline hit %v, hits %d, next wait %v", rep.Outcomes[sweeper.OutcomeArchived],
			rep.DeadlineHit, rep.DeadlineHits, rep.NextWait)
	}
	slow = false
	if rep := e.tick(); rep.DeadlineHit || rep.DeadlineHits != 0 || rep.NextWait != cfg.Interval {
		t.Fatalf("a tick inside its deadline: hit %v, hits %d, next wait %v", rep.DeadlineHit, rep.DeadlineHits, rep.NextWait)
	}
}

// blackHole makes every storage call, while on, wait until its context ends: a store behind a network
// that accepts and never answers.
type blackHole struct {
	on      atomic.Bool
	waiting atomic.Int32
}

func (b *blackHole) wrap(st is.Storage) is.Storage {
	return is.Intercept(st, func(ctx context.Context, _ is.Operation, do func(context.Context) error) error {
		if !b.on.Load() {
			return do(ctx)
		}
		b.waiting.Add(1)
		defer b.waiting.Add(-1)
		<-ctx.Done()
		return is.Classify(is.ErrTransient, ctx.Err())
	})
}

func TestSweep_ABlackHoledStoreCannotHoldATick(t *testing.T) {
	cfg := config()
	cfg.MaxTickDuration, cfg.MaxAgentDuration = time.Second, time.Second
	var hole blackHole
	var once sync.Once
	e := newEnvOn(t, hole.wrap(memory.New()), cfg, withOptions(func(o *sweeper.Options) {
		// The store goes dark as the archive phase begins.
		o.Locker = lockerFunc(func() { once.Do(func() { hole.on.Store(true) }) })
	}))
	agents := strandMany(e, 3)
	e.tick()
	done := make(chan sweeper.Report)
	go func() { done <- e.sw.SweepOnce(t.Context()) }()
	var seen *sweeper.Progress
	for seen == nil {
		select {
		case rep := <-done:
			t.Fatalf("the tick ended before the store went dark: %+v", rep.Outcomes)
		default:
		}
		if hole.waiting.Load() > 0 {
			seen = e.sw.Status().Current
		}
		time.Sleep(time.Millisecond)
	}
	if seen.Phase != sweeper.PhaseArchive || seen.Started == 0 {
		t.Fatalf("the tick under way shows %+v, want its archive phase with agents started", seen)
	}
	rep := <-done // without a per-agent timeout this never returns
	if rep.Outcomes[sweeper.OutcomeArchiveFailed] != 3 || rep.Routes[0].Errors != 3 {
		t.Fatalf("outcomes %+v, errors %d", rep.Outcomes, rep.Routes[0].Errors)
	}
	if e.sw.Status().Current != nil {
		t.Fatal("the status still shows a tick under way after it ended")
	}
	hole.on.Store(false)
	sweepUntilDrained(e, agents, 2)
}

func TestRun_ShutdownCutsAnAgentUnderWayAfterTheGrace(t *testing.T) {
	cfg := config()
	cfg.Interval, cfg.ShutdownGrace = sweeper.MinInterval, 50*time.Millisecond
	cfg.MaxTickDuration, cfg.MaxAgentDuration = time.Hour, time.Hour
	var hole blackHole
	var once sync.Once
	ctx, cancel := context.WithCancel(t.Context())
	e := newEnvOn(t, hole.wrap(memory.New()), cfg, withOptions(func(o *sweeper.Options) {
		// SIGTERM while the archive begins, and the store goes dark.
		o.Locker = lockerFunc(func() { once.Do(func() { hole.on.Store(true); cancel() }) })
	}))
	agents := strandMany(e, 2)
	e.tick()
	if err := e.sw.Run(ctx); err != nil { // without the grace this waits for the store forever
		t.Fatal(err)
	}
	// Nothing was lost by the cut: a later sweep archives every agent.
	hole.on.Store(false)
	sweepUntilDrained(e, agents, 2)
}

func TestRun_ShutdownLetsAnAgentUnderWayFinishWithinTheGrace(t *testing.T) {
	cfg := config()
	cfg.Interval, cfg.ShutdownGrace, cfg.MaxConcurrency, cfg.ArchiveBatch = sweeper.MinInterval, time.Hour, 1, 1
	ctx, cancel := context.WithCancel(t.Context())
	release := make(chan struct{})
	var armed atomic.Bool
	var stalled sync.Once
	st := is.Intercept(memory.New(), func(c context.Context, op is.Operation, do func(context.Context) error) error {
		if (op == is.OpDropPrefix || op == is.OpDropPrefixMany) && armed.Load() {
			stalled.Do(func() {
				cancel()  // SIGTERM once the first agent's entries are below, before its drop
				<-release // the store answers only after shutdown began
			})
		}
		return do(c)
	})
	e := newEnvOn(t, st, cfg)
	agents := strandMany(e, 3)
	e.tick()
	armed.Store(true)
	go func() {
		<-ctx.Done()
		close(release)
	}()
	if err := e.sw.Run(ctx); err != nil {
		t.Fatal(err)
	}
	archived := 0
	for _, a := range agents {
		if !e.inLayer(a) {
			e.requireArchived(a, 2)
			archived++
		}
	}
	if archived != 1 {
		t.Fatalf("%d agents archived; want the one under way when shutdown began, finished within the grace", archived)
	}
}

type lockerFunc func()

func (f lockerFunc) TryLock(context.Context, oplog.AgentID, oplog.Mode) (func(), bool, error) {
	f()
	return func() {}, true, nil
}

func TestSweep_ADeclinedCandidateIsStampedWithThePassUnderWay(t *testing.T) {
	cfg := config()
	cfg.PageSize, cfg.MaxArchivesPerTick = 2, 1
	e := newEnv(t, cfg)
	a1, a2 := agent("a1"), agent("a2")
	e.strand(a1, 1, 2)
	e.strand(a2, 1, 2)
	e.tick() // pass 1: both sighted
	// Pass 2: both pass the gate in one page that ends the pass; the budget affords one, and a2 is
	// carried into pass 3.
	if rep := e.tick(); rep.Outcomes[sweeper.OutcomeArchived] != 1 || !rep.Routes[0].PassCompleted {
		t.Fatalf("pass 2: %+v", rep.Outcomes)
	}
	e.strand(a2, 3, 1) // the executor wrote again: a2 moved on since its gate
	// Pass 3 is under way: the carried a2 is declined (moved on) before any key of pass 3 is read.
	if rep := e.tick(); rep.Outcomes[sweeper.OutcomeDeclined] != 1 {
		t.Fatalf("pass 3, first tick: %+v", rep.Outcomes)
	}
	// Still pass 3: a sighting in the pass that declined it must not open the gate.
	if rep := e.tick(); rep.Outcomes[sweeper.OutcomeArchived] != 0 || rep.Outcomes[sweeper.OutcomeWaiting] != 1 {
		t.Fatalf("pass 3, second tick: %+v; the gate opened within one pass", rep.Outcomes)
	}
	e.requireStranded(a2, 3)
	e.tick() // pass 4
	e.requireArchived(a2, 3)
}

func TestSweep_ADrainThatFindsNothingIsDeclinedNotArchived(t *testing.T) {
	var once sync.Once
	e := newEnv(t, config())
	a := agent("torn-down")
	e.strand(a, 1, 2)
	e.tick()
	// The executor's own teardown drain wins the race just as the sweep's archive begins: after the
	// sweep checked the layer, before its drain.
	e.st.set(func(p *probe) {
		p.afterLast = func(key string, n int) {
			if key == a.StoredKey() && n == 1 { // the archive's check: the gate's came with the pages
				once.Do(func() {
					if _, err := e.stack.Drain(context.Background(), a, oplog.Ephemeral); err != nil {
						t.Error(err)
					}
				})
			}
		}
	})
	rep := e.tick()
	if rep.Outcomes[sweeper.OutcomeArchived] != 0 || rep.Outcomes[sweeper.OutcomeDeclined] != 1 {
		t.Fatalf("outcomes %+v; the teardown drain moved everything", rep.Outcomes)
	}
	if e.drainedCount(a) != 0 {
		t.Fatal("OnDrained fired for a drain that moved nothing")
	}
	e.requireArchived(a, 2)
}

// The executor's teardown drain runs to its end right after the sweep's drain read the agent's chunk,
// before the sweep put it below or dropped it: the sweep finds it below already, compares it, and its
// drop finds nothing left. The teardown drain moved the agent, so the sweep counts it declined, calls
// no OnDrained, and every entry reads back once.
func TestSweep_ATeardownDrainThatWinsAfterTheSweepReadTheChunkIsDeclined(t *testing.T) {
	var fired atomic.Bool
	e := newEnv(t, config())
	a := agent("torn-down-late")
	e.strand(a, 1, 2)
	e.tick()
	e.st.set(func(p *probe) {
		p.afterRead = func(key string) {
			// Once, and not from the teardown drain's own reads.
			if key == a.StoredKey() && fired.CompareAndSwap(false, true) {
				if _, err := e.stack.Drain(context.Background(), a, oplog.Ephemeral); err != nil {
					t.Error(err)
				}
			}
		}
	})
	rep := e.tick()
	if rep.Outcomes[sweeper.OutcomeArchived] != 0 || rep.Outcomes[sweeper.OutcomeDeclined] != 1 {
		t.Fatalf("outcomes %+v; the teardown drain moved everything", rep.Outcomes)
	}
	if e.drainedCount(a) != 0 {
		t.Fatal("OnDrained fired for an agent the teardown drain moved")
	}
	e.requireArchived(a, 2)
	if e.inLayer(a) {
		t.Fatal("the agent is back in compressed level 1")
	}
}

func TestSweep_AFailedArchiveCountsAsARouteError(t *testing.T) {
	locker := &countingLocker{busy: map[oplog.AgentID]bool{}, err: errors.New("lock service down")}
	e := newEnv(t, config(), withOptions(func(o *sweeper.Options) { o.Locker = locker }))
	strandMany(e, 2)
	e.tick()
	rep := e.tick()
	if rr := rep.Routes[0]; rr.Outcomes[sweeper.OutcomeArchiveFailed] != 2 || rr.Errors != 2 {
		t.Fatalf("archive_failed %d, errors %d", rr.Outcomes[sweeper.OutcomeArchiveFailed], rr.Errors)
	}
}

func TestSweep_StandingDownIsLoggedOncePerChangeAndLeavesTheBackoff(t *testing.T) {
	cfg := config()
	cfg.MaxTickDuration = time.Second
	reason := ""
	var hole blackHole
	e := newEnvOn(t, hole.wrap(memory.New()), cfg, withOptions(func(o *sweeper.Options) {
		o.StandDown = func() (string, string) { return reason, "feed is " + reason }
	}))
	strandMany(e, 1)
	hole.on.Store(true)
	if rep := e.tick(); !rep.DeadlineHit || rep.DeadlineHits != 1 {
		t.Fatalf("dark store: hit %v, hits %d", rep.DeadlineHit, rep.DeadlineHits)
	}
	hole.on.Store(false)
	reason = "residency_stale"
	for range 3 {
		if rep := e.tick(); rep.StandDownReason != reason || rep.DeadlineHits != 1 || rep.NextWait != 2*cfg.Interval {
			t.Fatalf("stood down: reason %q, hits %d, next wait %v; the backoff must stay as it was", rep.StandDownReason, rep.DeadlineHits, rep.NextWait)
		}
	}
	e.setAssignment(sweeper.Assignment{}, false)
	reason = ""
	e.tick() // unassigned now: another reason
	e.setAssignment(sweeper.Assignment{ShardCount: 1, Shards: []int{0}}, true)
	e.tick()
	logs := e.logs.String()
	if n := strings.Count(logs, "sweep standing down"); n != 1 {
		t.Fatalf("%d 'standing down' lines for one change:\n%s", n, logs)
	}
	if n := strings.Count(logs, "still standing down"); n != 1 || !strings.Contains(logs, "reason=no_assignment") {
		t.Fatalf("the change of reason logged %d times:\n%s", n, logs)
	}
	if n := strings.Count(logs, "sweep resumed"); n != 1 {
		t.Fatalf("%d 'resumed' lines:\n%s", n, logs)
	}
}

// uncomparable is a Layer whose dynamic type cannot be compared with ==.
type uncomparable struct {
	oplog.Layer
	tags []string
}

func TestNew_ALayerOfAnUncomparableTypeIsFine(t *testing.T) {
	e := newEnv(t, config(), func(_ *env, _ *sweeper.Options, archives *[]oplog.Layer) {
		for i, l := range *archives {
			(*archives)[i] = uncomparable{Layer: l, tags: []string{fmt.Sprint(i)}}
		}
	})
	if routes := e.sw.Routes(); len(routes) != 1 || routes[0].Source != "compressed-1" || routes[0].Target != "blob-0" {
		t.Fatalf("routes %+v", routes)
	}
	a := agent("x")
	e.strand(a, 1, 2)
	e.tick()
	e.tick()
	e.requireArchived(a, 2)
}

func TestConfig_ValidateRejectsEveryValueOutsideItsRange(t *testing.T) {
	for name, mutate := range map[string]func(*sweeper.Config){
		"page_size negative":                 func(c *sweeper.Config) { c.PageSize = -1 },
		"max_concurrency negative":           func(c *sweeper.Config) { c.MaxConcurrency = -1 },
		"max_tracked_agents negative":        func(c *sweeper.Config) { c.MaxTrackedAgents = -1 },
		"shutdown_grace past its top":        func(c *sweeper.Config) { c.ShutdownGrace = sweeper.ShutdownGraceRange.Max + 1 },
		"page_size past its top":             func(c *sweeper.Config) { c.PageSize = sweeper.PageSizeRange.Max + 1 },
		"max_scanned_per_tick at 2^63-1":     func(c *sweeper.Config) { c.MaxScannedPerTick = 1<<63 - 1 },
		"max_archives_per_tick at 2^63-1":    func(c *sweeper.Config) { c.MaxArchivesPerTick = 1<<63 - 1 },
		"max_tracked_agents at 2^63-1":       func(c *sweeper.Config) { c.MaxTrackedAgents = 1<<63 - 1 },
		"max_concurrency past its top":       func(c *sweeper.Config) { c.MaxConcurrency = sweeper.MaxConcurrencyRange.Max + 1 },
		"max_backoff_intervals past its top": func(c *sweeper.Config) { c.MaxBackoffIntervals = 1 << 40 },
		"max_backoff_intervals negative":     func(c *sweeper.Config) { c.MaxBackoffIntervals = -1 },
		"interval negative":                  func(c *sweeper.Config) { c.Interval = -time.Second },
		"interval of a century":              func(c *sweeper.Config) { c.Interval = 100 * 365 * 24 * time.Hour },
		"max_tick_duration negative":         func(c *sweeper.Config) { c.MaxTickDuration = -1 },
		"max_agent_duration past its top":    func(c *sweeper.Config) { c.MaxAgentDuration = 1<<63 - 1 },
	} {
		c := sweeper.DefaultConfig()
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
	top := sweeper.DefaultConfig()
	top.PageSize, top.MaxScannedPerTick = sweeper.PageSizeRange.Max, sweeper.MaxScannedPerTickRange.Max
	top.Interval, top.MaxBackoffIntervals = sweeper.IntervalRange.Max, sweeper.MaxBackoffIntervalsRange.Max
	if err := top.Validate(); err != nil {
		t.Fatalf("the top of every range: %v", err)
	}
	// The top of every range runs: budgets neither overflow nor truncate every tick.
	top.Interval = time.Second
	e := newEnv(t, top)
	agents := strandMany(e, 3)
	for range 2 {
		if rep := e.tick(); len(rep.Truncated) != 0 {
			t.Fatalf("truncated %v at the top of the ranges", rep.Truncated)
		}
	}
	for _, a := range agents {
		e.requireArchived(a, 2)
	}
}

func TestNewAssignment_RefusesWhatCannotBeUsed(t *testing.T) {
	now := time.Unix(0, 0)
	for _, c := range []struct {
		count  int
		shards []int
		lease  time.Duration
	}{
		{2, []int{5}, 0}, {2, []int{-1}, 0}, {2, []int{1, 1}, 0}, {-1, nil, 0},
		{sweeper.MaxShardCount + 1, []int{0}, 0}, {2, []int{0}, -time.Second}, {2, []int{0}, sweeper.MaxLease + 1},
	} {
		if _, err := sweeper.NewAssignment(c.count, c.shards, c.lease, now); !errors.Is(err, sweeper.ErrInvalidAssignment) {
			t.Errorf("NewAssignment(%d, %v, %v) = %v", c.count, c.shards, c.lease, err)
		}
	}
	a, err := sweeper.NewAssignment(4, []int{3, 1}, time.Minute, now)
	if err != nil || !slices.Equal(a.Shards, []int{1, 3}) || !a.LeaseUntil.Equal(now.Add(time.Minute)) {
		t.Fatalf("%+v %v", a, err)
	}
}

func TestSweep_APassThatEndsWithMoreThanTheTickCanArchiveSaysSo(t *testing.T) {
	cfg := config()
	cfg.MaxArchivesPerTick = 3
	e := newEnv(t, cfg)
	strandMany(e, 5) // one page: the walk completes its pass and finds all five through the gate
	e.tick()
	rep := e.tick()
	rr := rep.Routes[0]
	if !rr.PassCompleted || rr.Outcomes[sweeper.OutcomeArchived] != 3 || rr.Truncated != sweeper.ReasonArchiveBudget {
		t.Fatalf("completed %v, archived %d, truncated %q; want the two left over reported as archive_budget",
			rr.PassCompleted, rr.Outcomes[sweeper.OutcomeArchived], rr.Truncated)
	}
	if rep := e.tick(); rep.Outcomes[sweeper.OutcomeArchived] != 2 || len(rep.Truncated) != 0 {
		t.Fatalf("next tick: %+v, truncated %v", rep.Outcomes, rep.Truncated)
	}
}

// A stored chunk that fails its checksum is integrity_failed, not archive_failed: no later pass fixes
// it. The agent stays tracked and nothing is moved past it.
func TestSweep_ACorruptChunkIsIntegrityFailed(t *testing.T) {
	e := newEnv(t, config())
	bad := agent("corrupt")
	e.strand(bad, 1, 3)
	// A chunk above the agent's that does not parse, as a flipped byte on the disk leaves one.
	if err := e.st.Storage.Append(t.Context(), oplog.CompressedNamespace(oplog.Ephemeral, 1), bad.StoredKey(), 9, []byte("not a chunk")); err != nil {
		t.Fatal(err)
	}
	e.tick()
	rep := e.tick()
	if rep.Outcomes[sweeper.OutcomeIntegrityFailed] != 1 || rep.Outcomes[sweeper.OutcomeArchiveFailed] != 0 ||
		rep.Outcomes[sweeper.OutcomeArchived] != 0 || rep.Routes[0].Errors != 1 {
		t.Fatalf("outcomes %v, errors %d; want one integrity_failed", rep.Outcomes, rep.Routes[0].Errors)
	}
	if rep.Tracked != 1 || e.drainedCount(bad) != 0 {
		t.Fatalf("tracked %d, drained %d: want the agent kept and not drained", rep.Tracked, e.drainedCount(bad))
	}
	if !strings.Contains(e.logs.String(), "integrity") {
		t.Fatalf("no error logged: %s", e.logs.String())
	}
}

// An agent that wrote indices its earlier life already archived is integrity_failed, and its entries
// stay where they are.
func TestSweep_AReusedIndexIsIntegrityFailed(t *testing.T) {
	e := newEnv(t, config())
	reused := agent("reused")
	e.strand(reused, 1, 3)
	e.tick()
	if rep := e.tick(); rep.Outcomes[sweeper.OutcomeArchived] != 1 {
		t.Fatalf("first life: outcomes %v, want it archived", rep.Outcomes)
	}
	// Its second life starts again from index 1, with other entries.
	var second []oplog.Entry
	for i := 1; i <= 2; i++ {
		second = append(second, oplog.Entry{Index: oplog.Index(i), Payload: []byte(fmt.Sprint("second life ", i))})
	}
	if err := e.stack.Append(t.Context(), reused, oplog.Ephemeral, second); err != nil {
		t.Fatal(err)
	}
	e.tick()
	rep := e.tick()
	if rep.Outcomes[sweeper.OutcomeIntegrityFailed] != 1 || rep.Outcomes[sweeper.OutcomeArchiveFailed] != 0 {
		t.Fatalf("second life: outcomes %v, want one integrity_failed", rep.Outcomes)
	}
	if !e.inLayer(reused) {
		t.Fatal("the second life's entries left compressed level 1")
	}
}

// sweeper.Config{} is a sweep with the defaults, switched off; switched on, it sweeps.
func TestNew_TheZeroConfigIsTheDefaults(t *testing.T) {
	e := newEnv(t, sweeper.Config{})
	want := sweeper.DefaultConfig()
	want.Enabled, want.MaxAgentDuration, want.ArchiveBatch = false, want.MaxTickDuration, want.PageSize
	if got := e.sw.Config(); got != want {
		t.Fatalf("Config() = %+v; want %+v", got, want)
	}
	if rep := e.tick(); !rep.Disabled {
		t.Fatalf("the zero Config swept: %+v", rep)
	}
	e = newEnv(t, sweeper.Config{Enabled: true})
	a := agent("zero")
	e.strand(a, 1, 2)
	e.tick()
	e.tick()
	e.requireArchived(a, 2)
}
