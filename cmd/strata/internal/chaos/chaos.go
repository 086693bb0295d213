// Package chaos is `strata bench chaos`: a simulated executor over real PostgreSQL, with latency
// injected by a TCP proxy, measuring what the seed measured on a cluster.
//
// Scenario A puts the latency on the scheduler store: with the sweep off, every ephemeral invocation
// registers an archive row on its commit path and queues for the scheduler's connection pool; with the
// sweep on, the registration returns early and the invocation never touches that store.
//
// Scenario B puts the latency on the indexed store, whose concurrency the executor and the sweep share
// through one limiter: the sweep without its deadline and backoff, with them, and off.
//
// After every run the benchmark checks correctness: every invocation's entries read back exactly once,
// every oplog stranded by a lost teardown drain is archived once the fault ends, and no scheduled row
// fired twice.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/fsblob"
	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/backends/postgres"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/faultproxy"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
	"github.com/stratalog/strata/sweeper"
)

// Options of a chaos run.
type Options struct {
	PostgresURL string    // a loopback server the benchmark makes its own schemas in
	Quick       bool      // the CI smoke size: under two minutes
	Out         io.Writer // progress and the final tables
	PlotPath    string    // where the PNG goes; "" for none
	Seed        uint64    // 0: random
	Latency     time.Duration
	Scenarios   string // "AB" (default), "A" or "B"
}

// timings size a run.
type timings struct {
	baseline, fault, recovery time.Duration
	bFault                    time.Duration // scenario B's fault: long enough for the default interval
	think                     time.Duration
	entries                   int
	loseRate                  float64
	timeout                   time.Duration
	aEphemeral, aDurable      int // workers
	bWorkers                  int
	bBacklog                  int // stranded agents before scenario B starts
	// bLoseRate is high in scenario B so that the executor alone (bWorkers closed-loop workers, one
	// storage call at a time each, and few detached drains) stays within the bSlots it shares with
	// the sweep: what the sweep then takes from the limiter shows in the invocations' latency.
	bLoseRate              float64
	bSlots                 int // max_concurrent_ops shared by the executor and the sweep
	interval, tickDuration time.Duration
}

func sizes(quick bool) timings {
	if quick {
		return timings{baseline: 3 * time.Second, fault: 6 * time.Second, bFault: 6 * time.Second, recovery: 2 * time.Second,
			think: 40 * time.Millisecond, entries: 5, loseRate: 0.2, timeout: 3 * time.Second,
			aEphemeral: 16, aDurable: 2, bWorkers: 4, bSlots: 4, bBacklog: 300, bLoseRate: 0.9,
			interval: 2 * time.Second, tickDuration: time.Second}
	}
	// The full run gives scenario B the sweep's defaults (60 s interval, 30 s deadline) and a fault
	// long enough for them to matter.
	return timings{baseline: 20 * time.Second, fault: 40 * time.Second, bFault: 150 * time.Second, recovery: 20 * time.Second,
		think: 50 * time.Millisecond, entries: 5, loseRate: 0.2, timeout: 3 * time.Second,
		aEphemeral: 32, aDurable: 4, bWorkers: 4, bSlots: 4, bBacklog: 3000, bLoseRate: 0.9,
		interval: 6 * time.Second, tickDuration: 3 * time.Second}
}

// Phases are the windows of one run.
type Phases struct {
	Baseline, Fault, Recovery PhaseStats
}

// RunA is one run of scenario A.
type RunA struct {
	SweepOn bool
	// DurableRoute: the sweep runs the durable route too (DESIGN §12), and durable agents register no
	// row either.
	DurableRoute bool
	Ephemeral    Phases
	Durable      Phases
	Checks       Checks
	series       []point // ephemeral p50 over time
	durable      []point // durable p50 over time
	faultFrom    float64
	faultTo      float64
}

// RunB is one run of scenario B.
type RunB struct {
	Mode      string // "off", "deadline", "no-deadline"
	Ephemeral Phases
	Duty      float64 // share of the fault window the sweep held at least one limiter slot
	Checks    Checks
	series    []point
	faultFrom float64
	faultTo   float64
}

// Checks are the correctness findings of a run; all zero is a pass.
type Checks struct {
	Invocations   int
	Lost          int // teardown drains lost: oplogs stranded
	Mismatched    int // invocations whose entries did not read back exactly once
	StillStranded int // stranded oplogs not archived once the fault ended
	FiredTwice    int // scheduled rows whose action ran to completion more than once
	ExecutorErrs  int
}

func (c Checks) failures(run string) []string {
	var out []string
	if c.Mismatched > 0 {
		out = append(out, fmt.Sprintf("%s: %d invocations did not read back exactly once", run, c.Mismatched))
	}
	if c.StillStranded > 0 {
		out = append(out, fmt.Sprintf("%s: %d stranded oplogs not archived after the fault", run, c.StillStranded))
	}
	if c.FiredTwice > 0 {
		out = append(out, fmt.Sprintf("%s: %d scheduled rows fired twice", run, c.FiredTwice))
	}
	if c.ExecutorErrs > 0 {
		out = append(out, fmt.Sprintf("%s: %d executor errors", run, c.ExecutorErrs))
	}
	return out
}

// Result is the whole benchmark.
type Result struct {
	A        []RunA
	B        []RunB
	Failures []string
	Markdown string
}

// ErrFailed is returned when a correctness check failed.
var ErrFailed = errors.New("chaos: correctness check failed")

type bench struct {
	opts Options
	t    timings
	rng  *rand.Rand
	out  io.Writer
	pg   *url.URL
	log  *slog.Logger
}

// Run runs both scenarios and returns their figures; an error wraps ErrFailed when a correctness check
// failed, whatever the performance figures.
func Run(ctx context.Context, opts Options) (Result, error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Latency <= 0 {
		opts.Latency = 500 * time.Millisecond
	}
	seed := opts.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	u, err := url.Parse(opts.PostgresURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return Result{}, fmt.Errorf("chaos needs a postgres:// URL, got %q", opts.PostgresURL)
	}
	b := &bench{opts: opts, t: sizes(opts.Quick), rng: rand.New(rand.NewPCG(seed, 7)), out: opts.Out, pg: u,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	fmt.Fprintf(b.out, "strata bench chaos (%s, seed %d): %s of latency injected, phases %s baseline / %s fault / %s recovery\n",
		map[bool]string{true: "quick", false: "full"}[opts.Quick], seed, opts.Latency, b.t.baseline, b.t.fault, b.t.recovery)

	var res Result
	if opts.Scenarios == "" {
		opts.Scenarios = "AB"
	}
	for _, v := range []struct{ sweep, durable bool }{{false, false}, {true, false}, {true, true}} {
		if !strings.Contains(opts.Scenarios, "A") {
			break
		}
		r, err := b.scenarioA(ctx, v.sweep, v.durable)
		if err != nil {
			return res, err
		}
		res.A = append(res.A, r)
		res.Failures = append(res.Failures, r.Checks.failures("A "+r.label())...)
	}
	for _, mode := range []string{"off", "no-deadline", "deadline"} {
		if !strings.Contains(opts.Scenarios, "B") {
			break
		}
		r, err := b.scenarioB(ctx, mode)
		if err != nil {
			return res, err
		}
		res.B = append(res.B, r)
		res.Failures = append(res.Failures, r.Checks.failures("B sweep "+mode)...)
	}
	res.Markdown = markdown(res, b.t, opts.Latency, b.bInterval(), b.bTick())
	fmt.Fprintln(b.out)
	fmt.Fprint(b.out, res.Markdown)
	if opts.PlotPath != "" {
		if err := writePlot(opts.PlotPath, res); err != nil {
			return res, err
		}
		fmt.Fprintf(b.out, "\nplot: %s\n", opts.PlotPath)
	}
	if len(res.Failures) > 0 {
		for _, f := range res.Failures {
			fmt.Fprintln(b.out, "FAILED:", f)
		}
		return res, fmt.Errorf("%w: %s", ErrFailed, strings.Join(res.Failures, "; "))
	}
	fmt.Fprintln(b.out, "\ncorrectness: every invocation read back exactly once, every stranded oplog archived, no scheduled row fired twice")
	return res, nil
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// sweepLabel names a scenario A run's sweep: off, on (ephemeral only), or on with the durable route.
func sweepLabel(sweepOn, durableRoute bool) string {
	if durableRoute {
		return "on + durable route"
	}
	return onOff(sweepOn)
}

func (r RunA) label() string { return "sweep " + sweepLabel(r.SweepOn, r.DurableRoute) }

// schema makes a schema of the run's own and returns a URL naming it (through the proxy when via is
// set) and a function that drops it.
func (b *bench) schema(ctx context.Context, via string, params map[string]string) (string, func(), error) {
	name := fmt.Sprintf("strata_chaos_%x", b.rng.Uint64())
	conn, err := pgx.Connect(ctx, b.pg.String())
	if err != nil {
		return "", nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, err
	}
	u := *b.pg
	if via != "" {
		u.Host = via
	}
	q := u.Query()
	q.Set("schema", name)
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, b.pg.String()); err == nil {
			c.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
			c.Close(ctx)
		}
	}
	return u.String(), drop, nil
}

// tempBlobs opens a blob store in a fresh temporary directory and returns a function that removes it.
func tempBlobs() (*fsblob.Store, func(), error) {
	dir, err := os.MkdirTemp("", "strata-chaos-")
	if err != nil {
		return nil, nil, err
	}
	blobs, err := fsblob.New(context.Background(), dir, nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return blobs, func() { os.RemoveAll(dir) }, nil
}

func (b *bench) proxy() (*faultproxy.Proxy, error) {
	host := b.pg.Host
	if b.pg.Port() == "" {
		host += ":5432"
	}
	return faultproxy.Start("127.0.0.1:0", host, faultproxy.WithLogger(b.log))
}

// timeline runs the three phases, injecting the latency during the fault, and reports progress.
func (b *bench) timeline(ctx context.Context, label string, rec *recorder, faultFor time.Duration, inject, heal func()) (start time.Time, base, fault, recov window) {
	start = time.Now()
	phase := func(name string, d time.Duration) window {
		w := window{from: time.Now()}
		deadline := w.from.Add(d)
		for now := time.Now(); now.Before(deadline) && ctx.Err() == nil; now = time.Now() {
			time.Sleep(min(2*time.Second, deadline.Sub(now)))
			samples := rec.all()
			recent := window{from: maxTime(w.from, time.Now().Add(-2*time.Second)), to: time.Now()}
			st := phaseStats(samples, recent, false, time.Hour)
			fmt.Fprintf(b.out, "  %-22s %-8s t=%5.1fs  invocations %6d  last 2s: p50 %8s  %6.1f/s\n",
				label, name, time.Since(start).Seconds(), len(samples), st.P50.Round(time.Millisecond), st.Throughput)
		}
		w.to = time.Now()
		return w
	}
	base = phase("baseline", b.t.baseline)
	inject()
	fault = phase("fault", faultFor)
	heal()
	recov = phase("recovery", b.t.recovery)
	return start, base, fault, recov
}

// countingHandler runs the archive handler and counts, per row, the runs that completed.
type countingHandler struct {
	h    *schedule.ArchiveHandler
	mu   sync.Mutex
	done map[int64]int
}

func (c *countingHandler) run(ctx context.Context, row schedule.Row) error {
	err := c.h.Run(ctx, row)
	if err == nil {
		c.mu.Lock()
		c.done[row.ID]++
		c.mu.Unlock()
	}
	return err
}

func (c *countingHandler) firedTwice() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, runs := range c.done {
		if runs > 1 {
			n++
		}
	}
	return n
}

// scenarioA: latency on the scheduler store, the sweep off (registration on the commit path) or on.
func (b *bench) scenarioA(ctx context.Context, sweepOn, durableRoute bool) (RunA, error) {
	label := "A sweep " + sweepLabel(sweepOn, durableRoute)
	fmt.Fprintf(b.out, "\nscenario A, sweep %s: %s on the scheduler store\n", sweepLabel(sweepOn, durableRoute), b.opts.Latency)
	proxy, err := b.proxy()
	if err != nil {
		return RunA{}, err
	}
	defer proxy.Close()
	idxURL, dropIdx, err := b.schema(ctx, "", nil)
	if err != nil {
		return RunA{}, err
	}
	defer dropIdx()
	// The scheduler store behind the proxy, with the small pool a scheduler database gives an executor:
	// throughput under the fault pins at pool size / latency.
	schedURL, dropSched, err := b.schema(ctx, proxy.Addr(), map[string]string{"pool_max_conns": "4"})
	if err != nil {
		return RunA{}, err
	}
	defer dropSched()

	st, err := postgres.Open(ctx, idxURL)
	if err != nil {
		return RunA{}, err
	}
	defer st.Close()
	sched, err := postgres.OpenSchedule(ctx, schedURL)
	if err != nil {
		return RunA{}, err
	}
	defer sched.Close()
	blobs, removeBlobs, err := tempBlobs()
	if err != nil {
		return RunA{}, err
	}
	defer removeBlobs()
	stack, err := archive.DefaultStack(st, blobs, nil)
	if err != nil {
		return RunA{}, err
	}

	reg := &schedule.Registrar{Store: sched, SweepEnabled: func() bool { return sweepOn },
		DurableSweepEnabled: func() bool { return durableRoute }, ArchiveInterval: time.Second}
	runName := onOff(sweepOn)
	if durableRoute {
		runName = "durable"
	}
	exec := newExecutor(stack, reg, b.t.think, b.t.entries, b.t.loseRate, fmt.Sprintf("a-%s-%x", runName, b.rng.Uint32()))
	handler := &countingHandler{h: &schedule.ArchiveHandler{Stack: stack, Store: sched}, done: map[int64]int{}}
	owned := func() []oplog.BucketRange { return oplog.ShardsBuckets(1, []int{0}) }
	// Rows are due a second after registration here (a day in production), so the scheduler works
	// through them during the run.
	scheduler, err := schedule.NewScheduler(sched, handler.run, owned,
		schedule.Config{Owner: "chaos", PollInterval: 100 * time.Millisecond, Concurrency: 16}, b.log)
	if err != nil {
		return RunA{}, err
	}

	bgCtx, stopBg := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { scheduler.Run(bgCtx) })
	if sweepOn {
		sw, err := b.sweeper(stack, exec, b.t.interval, b.t.tickDuration, sweeper.DefaultMaxBackoffIntervals, durableRoute)
		if err != nil {
			stopBg()
			return RunA{}, err
		}
		bg.Go(func() { sw.Run(bgCtx) })
	}
	workCtx, stopWork := context.WithCancel(ctx)
	var workers sync.WaitGroup
	for i := 0; i < b.t.aEphemeral+b.t.aDurable; i++ {
		mode := oplog.Ephemeral
		if i >= b.t.aEphemeral {
			mode = oplog.Durable
		}
		rng := rand.New(rand.NewPCG(b.rng.Uint64(), uint64(i)))
		workers.Go(func() { exec.work(workCtx, mode, rng) })
	}
	start, base, fault, recov := b.timeline(ctx, label, exec.rec, b.t.fault,
		func() { proxy.SetLatency(b.opts.Latency, faultproxy.Downstream) },
		func() { proxy.SetLatency(0, faultproxy.Downstream) })
	stopWork()
	workers.Wait()
	exec.drains.Wait()

	// Once the fault is over, every stranded oplog must be archived: by the sweep when it is on, by the
	// ephemeral rows the registration wrote when it is off.
	// The sweep's budgets bound how fast it catches up (max_archives_per_tick a tick): wait as long as
	// the backlog needs at that rate, and then some.
	ticks := int(exec.lost.Load())/sweeper.DefaultMaxArchivesPerTick + 3
	modes := []oplog.Mode{oplog.Ephemeral}
	if durableRoute {
		// The durable route must archive every durable agent too, once idle for durable_min_idle.
		modes = append(modes, oplog.Durable)
		ticks += len(exec.written())/sweeper.DefaultDurableMaxArchivesPerTick + int(durableMinIdle/b.t.interval) + 1
	}
	left := b.awaitArchived(ctx, stack, exec, modes, time.Duration(ticks)*b.t.interval+2*time.Minute)
	stopBg()
	bg.Wait()

	samples := exec.rec.all()
	run := RunA{SweepOn: sweepOn, DurableRoute: durableRoute,
		Ephemeral: Phases{phaseStats(samples, base, false, b.t.timeout), phaseStats(samples, fault, false, b.t.timeout), phaseStats(samples, recov, false, b.t.timeout)},
		Durable:   Phases{phaseStats(samples, base, true, b.t.timeout), phaseStats(samples, fault, true, b.t.timeout), phaseStats(samples, recov, true, b.t.timeout)},
		series:    p50Series(samples, start, time.Second, false),
		durable:   p50Series(samples, start, time.Second, true),
		faultFrom: fault.from.Sub(start).Seconds(), faultTo: fault.to.Sub(start).Seconds(),
	}
	run.Checks = b.verify(ctx, stack, exec)
	run.Checks.StillStranded = left
	run.Checks.FiredTwice = handler.firedTwice()
	fmt.Fprintf(b.out, "  %s: ephemeral p50 %s baseline, %s under the fault; %d invocations, %d teardowns lost; checks %+v\n",
		label, run.Ephemeral.Baseline.P50.Round(time.Millisecond), run.Ephemeral.Fault.P50.Round(time.Millisecond),
		run.Checks.Invocations, run.Checks.Lost, run.Checks)
	return run, nil
}

// durableMinIdle is the durable route's idle age in scenario A: seconds, as the scheduled rows are due a
// second after registration here (a day in production each).
const durableMinIdle = 2 * time.Second

func (b *bench) sweeper(stack *oplog.Stack, exec *executor, interval, tick time.Duration, backoff int, durableRoute bool) (*sweeper.Sweeper, error) {
	cfg := sweeper.DefaultConfig()
	cfg.Interval, cfg.MaxTickDuration, cfg.MaxBackoffIntervals = interval, tick, backoff
	opts := sweeper.Options{
		Residency: exec.isResident,
		Shards:    func() (sweeper.Assignment, bool) { return sweeper.Assignment{ShardCount: 1, Shards: []int{0}}, true },
		Logger:    b.log,
		// The scenarios time the sweep's ticks themselves: no stagger.
		FirstTickJitter: func() float64 { return 0 },
	}
	if durableRoute {
		cfg.DurableMinIdle = durableMinIdle
		opts.DurableRoute, opts.Locker, opts.LastActive = true, exec, exec.lastActive
		opts.OnDrained = func(oplog.AgentID, oplog.Mode) {}
	}
	return sweeper.New(cfg, stack, opts)
}

// awaitArchived waits until no agent of the run of the given modes is left above the bottom layer
// (for an ephemeral one: in compressed level 1) and returns how many still are when the wait gives up.
func (b *bench) awaitArchived(ctx context.Context, stack *oplog.Stack, exec *executor, modes []oplog.Mode, limit time.Duration) int {
	deadline := time.Now().Add(limit)
	layers := stack.Layers()
	for {
		left := 0
		for _, w := range exec.written() {
			if !slices.Contains(modes, w.mode) {
				continue
			}
			for i, l := range layers[:len(layers)-1] {
				if w.mode == oplog.Ephemeral && i == 0 {
					continue // an ephemeral oplog never touches the primary
				}
				if _, ok, err := l.LastIndex(ctx, w.agent, w.mode); err != nil || ok {
					left++
					break
				}
			}
		}
		if left == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return left
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// verify reads every invocation's oplog back.
func (b *bench) verify(ctx context.Context, stack *oplog.Stack, exec *executor) Checks {
	c := Checks{Lost: int(exec.lost.Load()), ExecutorErrs: int(exec.errs.Load())}
	if c.ExecutorErrs > 0 {
		fmt.Fprintf(b.out, "  executor error: %v\n", exec.lastErr.Load())
	}
	for _, w := range exec.written() {
		c.Invocations++
		entries, err := stack.Read(ctx, w.agent, w.mode, 1, w.entries+5)
		ok := err == nil && len(entries) == w.entries
		for i := 0; ok && i < len(entries); i++ {
			ok = entries[i].Index == oplog.Index(i+1) && string(entries[i].Payload) == string(payload(w.agent, i+1))
		}
		if !ok {
			c.Mismatched++
		}
	}
	return c
}

// scenarioB: latency on the indexed store, shared by the executor and the sweep through one limiter.
func (b *bench) scenarioB(ctx context.Context, mode string) (RunB, error) {
	label := "B sweep " + mode
	fmt.Fprintf(b.out, "\nscenario B, sweep %s: %s on the indexed store, shared through one limiter\n", mode, b.opts.Latency)
	proxy, err := b.proxy()
	if err != nil {
		return RunB{}, err
	}
	defer proxy.Close()
	slots := b.t.bSlots
	viaProxy, drop, err := b.schema(ctx, proxy.Addr(), map[string]string{"pool_max_conns": "12"})
	if err != nil {
		return RunB{}, err
	}
	defer drop()
	pg, err := postgres.New(ctx, stripParam(viaProxy, "schema"), &postgres.Options{Schema: paramOf(viaProxy, "schema")})
	if err != nil {
		return RunB{}, err
	}
	defer pg.Close()
	shared, sweepView, busy := shareSlots(pg, slots)
	blobs, removeBlobs, err := tempBlobs()
	if err != nil {
		return RunB{}, err
	}
	defer removeBlobs()
	execStack, err := archive.DefaultStack(shared, blobs, nil)
	if err != nil {
		return RunB{}, err
	}
	sweepStack, err := archive.DefaultStack(sweepView, blobs, nil)
	if err != nil {
		return RunB{}, err
	}
	// Rows go to a store that is not under test; with the sweep off they would be due a day later.
	reg := &schedule.Registrar{Store: memory.NewScheduleStore(), SweepEnabled: func() bool { return mode != "off" },
		ArchiveInterval: 24 * time.Hour}
	exec := newExecutor(execStack, reg, b.t.think, b.t.entries, b.t.bLoseRate, fmt.Sprintf("b-%s-%x", mode, b.rng.Uint32()))

	// A backlog of stranded oplogs, so the sweep has work when the fault starts.
	exec.strand(ctx, b.t.bBacklog)

	bgCtx, stopBg := context.WithCancel(ctx)
	var bg sync.WaitGroup
	var sw *sweeper.Sweeper
	switch mode {
	case "deadline":
		sw, err = b.sweeper(sweepStack, exec, b.bInterval(), b.bTick(), sweeper.DefaultMaxBackoffIntervals, false)
	case "no-deadline":
		// No deadline (a tick runs until its budgets are spent) and no backoff (a cap of 1 interval).
		sw, err = b.sweeper(sweepStack, exec, b.bInterval(), 24*time.Hour, 1, false)
	}
	if err != nil {
		stopBg()
		return RunB{}, err
	}
	if sw != nil {
		// The outage begins in the middle of a tick, as outages do: a first pass sights the backlog
		// now, and the next tick starts just before the fault, so its archive phase, sized in
		// operations, meets operations that have become slow. Without a deadline it runs on for as
		// long as its budgets last; with one it stops at max_tick_duration and backs off.
		sw.SweepOnce(ctx)
		lead := min(2*time.Second, b.t.baseline/2)
		startAt := time.Now().Add(b.t.baseline - lead)
		bg.Go(func() {
			select {
			case <-bgCtx.Done():
				return
			case <-time.After(time.Until(startAt)):
			}
			sw.Run(bgCtx)
		})
	}
	workCtx, stopWork := context.WithCancel(ctx)
	var workers sync.WaitGroup
	for i := range b.t.bWorkers {
		rng := rand.New(rand.NewPCG(b.rng.Uint64(), uint64(i)))
		workers.Go(func() { exec.work(workCtx, oplog.Ephemeral, rng) })
	}
	start, base, fault, recov := b.timeline(ctx, label, exec.rec, b.t.bFault,
		func() { proxy.SetLatency(b.opts.Latency, faultproxy.Downstream) },
		func() { proxy.SetLatency(0, faultproxy.Downstream) })
	duty := busy.duty(fault, time.Now())
	if os.Getenv("STRATA_CHAOS_DEBUG") != "" {
		fmt.Fprintf(b.out, "  limiter after the fault: %+v\n", shared.Stats())
	}
	stopWork()
	workers.Wait()
	exec.drains.Wait()
	stopBg()
	bg.Wait()

	// After the fault, a sweep with the default limits archives whatever is stranded, whichever mode ran.
	cleanup, err := b.sweeper(sweepStack, exec, 200*time.Millisecond, 30*time.Second, 1, false)
	if err != nil {
		return RunB{}, err
	}
	cleanCtx, stopClean := context.WithCancel(ctx)
	cleanDone := make(chan struct{})
	go func() { cleanup.Run(cleanCtx); close(cleanDone) }()
	left := b.awaitArchived(ctx, execStack, exec, []oplog.Mode{oplog.Ephemeral}, 120*time.Second)
	stopClean()
	<-cleanDone

	samples := exec.rec.all()
	run := RunB{Mode: mode, Duty: duty,
		Ephemeral: Phases{phaseStats(samples, base, false, b.t.timeout), phaseStats(samples, fault, false, b.t.timeout), phaseStats(samples, recov, false, b.t.timeout)},
		series:    p50Series(samples, start, time.Second, false),
		faultFrom: fault.from.Sub(start).Seconds(), faultTo: fault.to.Sub(start).Seconds(),
	}
	run.Checks = b.verify(ctx, execStack, exec)
	run.Checks.StillStranded = left
	fmt.Fprintf(b.out, "  %s: p50 %s baseline, %s under the fault; sweep duty %.0f%%; %d over the %s timeout; checks %+v\n",
		label, run.Ephemeral.Baseline.P50.Round(time.Millisecond), run.Ephemeral.Fault.P50.Round(time.Millisecond),
		duty*100, run.Ephemeral.Fault.OverLimit, b.t.timeout, run.Checks)
	return run, nil
}

// shareSlots puts st behind one limiter of n slots (max_concurrent_ops), the executor's and the
// sweep's, and returns the sweep's view of it and a tracker of the time the sweep holds a slot. Time it
// spends queued for one is not counted: its operations are marked on the way into the limiter and
// timed on the way out of it.
func shareSlots(st is.Storage, n int) (shared *is.Limiter, sweepView is.Storage, busy *busyTracker) {
	busy = &busyTracker{}
	held := is.Intercept(st, func(ctx context.Context, _ is.Operation, do func(context.Context) error) error {
		if ctx.Value(sweepCall{}) == nil {
			return do(ctx)
		}
		busy.begin(time.Now())
		defer func() { busy.end(time.Now()) }()
		return do(ctx)
	})
	shared = is.Limit(held, n)
	sweepView = is.Intercept(shared, func(ctx context.Context, _ is.Operation, do func(context.Context) error) error {
		return do(context.WithValue(ctx, sweepCall{}, true))
	})
	return shared, sweepView, busy
}

// sweepCall marks a context as carrying one of the sweep's storage operations.
type sweepCall struct{}

// bInterval and bTick are the sweep's interval and deadline in scenario B: the defaults in a full run,
// scaled down to fit the quick run's short fault.
func (b *bench) bInterval() time.Duration {
	if b.opts.Quick {
		return b.t.interval
	}
	return sweeper.DefaultInterval
}

func (b *bench) bTick() time.Duration {
	if b.opts.Quick {
		return b.t.tickDuration
	}
	return sweeper.DefaultMaxTickDuration
}

func paramOf(raw, key string) string {
	u, _ := url.Parse(raw)
	return u.Query().Get(key)
}

func stripParam(raw, key string) string {
	u, _ := url.Parse(raw)
	q := u.Query()
	q.Del(key)
	u.RawQuery = q.Encode()
	return u.String()
}
