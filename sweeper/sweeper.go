// Package sweeper finds stranded ephemeral oplogs by walking the oplog layers themselves and archives
// them, in place of a scheduled row per invocation. A tick walks each route's namespace with ScanStable
// (the scan phase), decides every key cheapest first, and only then archives the agents that passed the
// quiet gate (the archive phase), under budgets, a deadline and a backoff that make it stand down when
// storage is slow.
package sweeper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/backoff"
	"github.com/stratalog/strata/internal/grace"
	"github.com/stratalog/strata/oplog"
)

// Locker lets an embedding executor hold an agent while the sweep archives it. The sidecar has none:
// it relies on residency, the quiet gate and the archive step's bounded drop.
type Locker interface {
	// TryLock holds the agent, or reports ok false when it is busy (the archive is declined and asked
	// again on a later pass). unlock releases it.
	TryLock(ctx context.Context, agent oplog.AgentID, mode oplog.Mode) (unlock func(), ok bool, err error)
}

// Options wire the sweep to its executor. Every field is optional.
type Options struct {
	// Residency reports whether the executor runs the agent now. It must answer from memory, and asking
	// must not extend anything's lifetime: "is it resident" never keeps it resident. nil: none is.
	Residency func(oplog.AgentID) bool
	// Shards returns the executor's current assignment, read once per tick; false when there is none.
	// nil: never assigned, and the sweep archives nothing.
	Shards func() (Assignment, bool)
	// StandDown, if set, is asked at the start of every tick: a non-empty reason makes the tick do
	// nothing and report why. reason is a short fixed label (the metric's reason label: keep the set
	// small), detail says why in words. The sidecar stands down while its residency feed is stale
	// (residency_stale), since it could no longer tell a resident agent from a stranded one.
	StandDown func() (reason, detail string)
	// StandDownReasons lists the reasons StandDown may give, so that the metric shows each at 0 from
	// start-up rather than from the first time it happens.
	StandDownReasons []string
	// Locker, if set, holds each agent during its archive.
	Locker Locker
	// OnDrained is called once for each agent whose whole stack drained to the bottom layer.
	OnDrained func(oplog.AgentID, oplog.Mode)
	// DurableRoute turns on the durable route (DESIGN §12), for an executor that embeds strata: durable
	// agents are swept too, from the primary (route durable-l0) and each archive layer that can
	// enumerate its agents (durable-l1, …), each drained to the bottom under the Locker, once
	// LastActive says the agent has been inactive for Config.DurableMinIdle and the whole stack's last
	// index is unchanged across two passes. The executor's schedule.Registrar then skips durable rows
	// (DurableSweepEnabled, wired to the same switch), and turning the route off brings them back. New
	// refuses it without Locker (the executor's own size-triggered archiving and live workers take the
	// same lock), LastActive and OnDrained.
	DurableRoute bool
	// LastActive reports when the executor last ran or wrote the agent, from memory (asking must not
	// extend anything's lifetime); false when it does not know, as for an agent it has not seen since
	// it started: the durable route counts such an agent active when the sweep was built.
	LastActive func(oplog.AgentID) (time.Time, bool)
	// MeterProvider receives the sweep's metrics; nil records none.
	MeterProvider metric.MeterProvider
	// Logger; nil: slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Sleep waits d, or until ctx ends (its error then): how the archive phase waits for the byte
	// budget (Config.MaxBytesPerSecond). nil: a timer. A test that moves Now gives one that moves it.
	Sleep func(ctx context.Context, d time.Duration) error
	// FirstTickJitter gives the fraction of Config.Interval that Run waits before its first tick, from
	// [0, 1) (firstWait), so that sidecars started together, as a rollout starts them, spread their ticks
	// over an interval instead of ticking in step (River staggers its first run the same way). nil: a
	// uniform random fraction (math/rand/v2). A func returning 0 ticks at once, as a lone in-process
	// sweep or a test may want.
	FirstTickJitter func() float64
}

// Route is one hop the sweep drives: agents found in Source (a layer that can enumerate them) are
// archived towards Target, the layer under it.
type Route struct {
	Name   string // "{mode}-l{level}", e.g. "ephemeral-l1"
	Mode   oplog.Mode
	Level  int // the source's position in the stack: 0 the primary (durable-l0 only), 1 the first archive layer
	Source string
	Target string
}

type route struct {
	// Set by New and only read after it.
	Route
	id     int // its index in Sweeper.routes and its table's in the tracker
	source oplog.Layer
	// primaryBelow: a durable route whose source is an archive layer, whose agents' newest entries may
	// be in the primary, above it: the gate reads the primary's last index too.
	primaryBelow bool
	// scansOutside: the source can walk the parts of its namespace outside every bucket
	// (oplog.RangeScanner), so the owner of bucket 0 counts and names the keys there.
	scansOutside bool

	// The walk state, below: Sweeper.mu guards it (only a tick reads or writes it).

	// parts are the key ranges a pass walks, from the assignment (walkParts); the pass is in parts[at],
	// continuing from resume. A changed assignment restarts the walk on its own parts.
	parts  []part
	at     int
	resume is.Resume // where the walk of parts[at] continues; lives in memory only
	pass   uint64    // the pass under way, from 1
	// scanned is the pass this tick's scan of the route ran in (pass, or pass-1 once the scan completed
	// it): what the archive phase stamps a declined agent with.
	scanned uint64
	pending []candidate // passed the gate, not yet afforded by an archive budget
	starved bool        // a tick could not afford it: it goes first next tick
	// movedEntries and movedBytes are what the route has moved since New (updated at the end of each
	// tick): the bytes an entry, by which lag estimates its backlog's bytes and reserveBytes a batch's.
	movedEntries, movedBytes int64
	// movedAgents is how many agents the route has archived since New: with movedEntries, the entries
	// an agent, by which lag estimates the entries of agents sighted by a stamp alone.
	movedAgents int64
}

type candidate struct {
	key   string
	agent oplog.AgentID
	index oplog.Index // the last index the gate passed on; 0: passed by stamps alone, not read
}

// Sweeper is the sweep over one stack. SweepOnce and Run may be called from one goroutine at a time
// each; Status from any.
type Sweeper struct {
	// Set by New and only read after it: no lock.
	cfg    Config
	stack  *oplog.Stack
	opts   Options
	log    *slog.Logger
	routes []*route
	m      *instruments

	born time.Time // when New built it: the durable route's "active" for an agent LastActive does not know
	// bytes is sweep.max_bytes_per_second's bucket (nil: no bound); safe for concurrent use.
	bytes *byteBucket

	// mu is held by a tick from start to end (one tick at a time); it guards the fields below it and
	// the routes' walk state (route's fields after Route).
	mu        sync.Mutex
	tracked   *tracker // the routes' tracking tables and their count
	hits      int      // consecutive ticks that hit their deadline
	standDown string   // the last tick's stand-down reason, "" when it ran: logged on change
	// trimmedTo is the assignment the tracking tables were last trimmed to (trimmed: there was one),
	// so that a tick whose shards did not change costs nothing per tracked agent.
	trimmedTo Assignment
	trimmed   bool

	// statusMu guards what Status reads from any goroutine while a tick runs: the fields below it.
	statusMu sync.Mutex
	status   Status
	reasons  []string // every stand-down reason seen, for the metric's label values
}

// New builds the sweep over stack: its routes are derived from the stack, one for each swept mode and
// each archive layer that can enumerate its agents and has a layer under it, in stack order.
func New(cfg Config, stack *oplog.Stack, opts Options) (*Sweeper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(stack.Layers()) == 0 {
		return nil, fmt.Errorf("sweeper needs a stack: %w", oplog.ErrStackNotBuilt)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Sleep == nil {
		opts.Sleep = backoff.Wait
	}
	if opts.DurableRoute {
		var missing []string
		if opts.Locker == nil {
			missing = append(missing, "a Locker")
		}
		if opts.LastActive == nil {
			missing = append(missing, "LastActive")
		}
		if opts.OnDrained == nil {
			missing = append(missing, "OnDrained")
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("%w: it needs %s", ErrDurableRouteRefused, strings.Join(missing, ", "))
		}
	}
	s := &Sweeper{cfg: cfg.clamped(), stack: stack, opts: opts, log: opts.Logger,
		reasons: slices.Clone(opts.StandDownReasons), born: opts.Now()}
	if cfg.MaxBytesPerSecond > 0 {
		s.bytes = newByteBucket(cfg.MaxBytesPerSecond, opts.Now())
	}
	// Layers are told apart by their position in the stack, never by ==: a Layer's dynamic type need
	// not be comparable.
	layers := stack.Layers()
	modes := SweptModes
	if opts.DurableRoute {
		modes = append(slices.Clone(SweptModes), oplog.Durable)
	}
	for _, mode := range modes {
		for level, layer := range layers[:len(layers)-1] {
			if _, scans := layer.ScanNamespace(mode); !scans {
				continue
			}
			s.routes = append(s.routes, &route{
				Route: Route{Name: fmt.Sprintf("%s-l%d", mode, level), Mode: mode, Level: level,
					Source: layer.Name(), Target: layers[level+1].Name()},
				id:     len(s.routes),
				source: layer, primaryBelow: mode == oplog.Durable && level > 0,
				pass:         1,
				scansOutside: isRangeScanner(layer),
			})
		}
	}
	s.tracked = newTracker(len(s.routes), s.cfg.MaxTrackedAgents)
	var err error
	if s.m, err = newInstruments(opts.MeterProvider, s); err != nil {
		return nil, err
	}
	s.status.NextWait = s.cfg.Interval
	return s, nil
}

func isRangeScanner(l oplog.Layer) bool {
	_, ok := l.(oplog.RangeScanner)
	return ok
}

// ErrDurableRouteRefused is New's error for Options.DurableRoute without what the route needs.
var ErrDurableRouteRefused = errors.New("the durable route is refused")

// DurableRouteOn reports whether the durable route runs: the value for the executor's
// schedule.Registrar.DurableSweepEnabled, so that durable rows come back when it does not.
func (s *Sweeper) DurableRouteOn() bool { return s.cfg.Enabled && s.opts.DurableRoute }

// Routes returns the routes in stack order.
func (s *Sweeper) Routes() []Route {
	out := make([]Route, len(s.routes))
	for i, r := range s.routes {
		out[i] = r.Route
	}
	return out
}

// Config returns the configuration in force, clamps applied.
func (s *Sweeper) Config() Config { return s.cfg }

// Run ticks every Interval (longer while ticks keep hitting their deadline) until ctx is cancelled, and
// returns nil then; its first tick comes after a random fraction of an interval (Options.
// FirstTickJitter). The agents being archived when ctx is cancelled get ShutdownGrace to finish, and
// are cut after it (a cut step converges on a later pass), so Run returns within the grace plus the
// time the storage driver takes to give a cancelled call back. A disabled sweep returns at once.
func (s *Sweeper) Run(ctx context.Context) error {
	if !s.cfg.Enabled {
		s.log.Info("sweep disabled: ephemeral agents register scheduled rows instead")
		return nil
	}
	jitter := s.opts.FirstTickJitter
	if jitter == nil {
		jitter = rand.Float64
	}
	for wait := firstWait(s.cfg.Interval, jitter()); ; {
		if !sleep(ctx, wait) {
			return nil
		}
		rep := s.SweepOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait = rep.NextWait
	}
}

// sleep waits d, and reports false if ctx is cancelled first. A wait of 0 does not look at ctx: the
// tick it leads to sees the cancellation itself.
func sleep(ctx context.Context, d time.Duration) bool {
	return d <= 0 || backoff.Wait(ctx, d) == nil
}

// stopReason says why a tick must stop at a boundary: shutdown (the caller's context) or its deadline.
func stopReason(shutdown, tick context.Context) Reason {
	switch {
	case shutdown.Err() != nil:
		return ReasonShutdown
	case tick.Err() != nil:
		return ReasonDeadline
	}
	return ""
}

// SweepOnce runs one tick and reports it. It never panics and never returns an error: storage
// failures are logged, counted and left for a later tick, since the work list is the layer itself.
//
// Every storage call it makes is bounded: the scan phase runs under the tick's deadline
// (MaxTickDuration), each agent's archive under MaxAgentDuration, and after ctx is cancelled the agents
// under way get ShutdownGrace before they are cut too. A cut archive step converges on a later pass.
func (s *Sweeper) SweepOnce(ctx context.Context) (rep Report) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := s.opts.Now()
	rep = Report{Start: start, Outcomes: tally{}}
	s.progress(func(p *Progress) { *p = Progress{Start: start, Phase: PhaseScan} })
	defer func() {
		rep.Duration = s.opts.Now().Sub(start)
		s.finish(&rep)
	}()
	if !s.cfg.Enabled {
		rep.Disabled = true
		return rep
	}
	if s.opts.StandDown != nil {
		if reason, why := s.opts.StandDown(); reason != "" {
			rep.StandDownReason, rep.StoodDown = reason, why
			return rep
		}
	}
	var assign Assignment
	known := false
	if s.opts.Shards != nil {
		assign, known = s.opts.Shards()
	}
	if ok, reason, why := usable(assign, known, start); !ok {
		rep.StandDownReason, rep.Unassigned, rep.UnassignedReason = reason, true, why
		return rep
	}
	s.dropUnowned(assign)

	tickCtx, cancel := context.WithTimeout(ctx, s.cfg.MaxTickDuration)
	defer cancel()
	// Agents under way run under stepBase, which outlives shutdown by the grace: shutdown lets them
	// finish but cannot be held by them for longer than that.
	stepBase, release := grace.After(ctx, s.cfg.ShutdownGrace, errShutdownGrace)
	defer release()
	t := &tick{shutdown: ctx, ctx: tickCtx, stepBase: stepBase, assign: assign, budgets: planBudgets(s.cfg, s.Routes()),
		budgetUntil: start.Add(s.cfg.MaxTickDuration * 3 / 4)}

	starved := make([]bool, len(s.routes))
	for i, r := range s.routes {
		starved[i] = r.starved
	}
	sequence := order(starved)
	reports := make([]RouteReport, len(s.routes))
	work := make([][]candidate, len(s.routes))

	// Scan phase: walk and decide. Nothing is archived until every walk has stopped, because an archive
	// step deletes keys under a cursor.
	for _, i := range sequence {
		reports[i] = RouteReport{Route: s.routes[i].Name, Outcomes: tally{}}
		work[i] = s.scanRoute(t, s.routes[i], &reports[i])
	}

	// Archive phase.
	s.progress(func(p *Progress) { p.Phase, p.Route = PhaseArchive, "" })
	for _, i := range sequence {
		if len(work[i]) > 0 {
			s.archiveAll(t, s.routes[i], work[i], &reports[i])
		}
	}
	for _, i := range sequence {
		s.routes[i].lag(s.tracked, &reports[i])
		rep.Routes = append(rep.Routes, reports[i])
	}
	return rep
}

// tick is a SweepOnce under way: its contexts, the assignment it read once, and what is left of its
// budgets.
type tick struct {
	shutdown context.Context // the caller's: cancelled at shutdown
	ctx      context.Context // under shutdown, cancelled at the tick's deadline (MaxTickDuration)
	stepBase context.Context // what an agent's archive runs under: shutdown, outlived by the grace
	assign   Assignment
	budgets  map[oplog.Mode]*budget // each mode's routes share budgets of their own
	// budgetUntil is the last instant (on Options.Now) the archive phase waits for the byte budget
	// until: three quarters of the way to the deadline.
	budgetUntil time.Time
}

// stopReason says why the tick must stop at a boundary: shutdown or its deadline; "" to go on.
func (t *tick) stopReason() Reason { return stopReason(t.shutdown, t.ctx) }

// scanRoute runs the scan phase of one route on its share of its mode's budgets and returns the
// candidates the tick can afford to archive; the rest wait in r.pending.
func (s *Sweeper) scanRoute(t *tick, r *route, rr *RouteReport) []candidate {
	b := t.budgets[r.Mode]
	sh, short := b.take()
	if reason := cmp.Or(t.stopReason(), short); reason != "" {
		rr.Truncated, r.starved = reason, true
		return nil
	}
	r.starved = false
	s.progress(func(p *Progress) { p.Route = r.Name })
	cands := s.scan(t, r, sh, rr)
	if more := rr.Outcomes[OutcomeUnparseable] - len(rr.Unparseable); more > 0 {
		s.log.Warn("sweep met more keys that are no agent's stored key than it names", "route", r.Name,
			"named", len(rr.Unparseable), "more", more)
	}
	afforded := min(len(cands), sh.archives)
	work := cands[:afforded]
	r.pending = carried(cands[afforded:])
	if len(cands) > afforded && rr.Truncated == "" {
		// The walk finished (its pass completed) with more agents through the gate than the tick
		// can archive: the rest wait for the next tick, which the report must say.
		rr.Truncated = ReasonArchiveBudget
	}
	b.spend(rr.Scanned, rr.Pages, afforded)
	return work
}

// carried is the candidates of cands that wait for a later tick: all but those the gate passed by
// stamps alone (index 0, nothing for the archive to re-check), which are archived in the tick that
// sighted them or not at all, so that no write can slip unchecked between a sighting and an archive
// ticks later. Their tracking entries stay: the next pass compares their stamps again.
func carried(cands []candidate) []candidate {
	return slices.DeleteFunc(slices.Clone(cands), func(c candidate) bool { return c.index == 0 })
}

// errShutdownGrace is the cause of an agent's context cut because the shutdown grace elapsed.
var errShutdownGrace = errors.New("sweep shutdown grace elapsed")

// scan walks the route from its resume token until a budget, the deadline or shutdown stops it, or its
// pass completes, and returns the agents that passed the gate, those carried over first.
//
// The walk always moves on: a key whose read fails is unreadable (counted, logged, listed, retried on
// the next pass), never a reason to read the same page again. Only the tick's own end keeps the token
// where it was. A page with a transient failure ends the route's tick after that page, so a store that
// fails every call costs one page of failed reads a tick, not the whole scan budget.
func (s *Sweeper) scan(t *tick, r *route, sh shares, rr *RouteReport) []candidate {
	if want := walkParts(t.assign, r.scansOutside); !slices.Equal(want, r.parts) {
		r.parts, r.at, r.resume = want, 0, is.Resume{}
	}
	r.scanned = r.pass
	cands := slices.Clone(r.pending)
	queued := map[string]bool{}
	for _, c := range cands {
		queued[c.key] = true
	}
	for {
		if reason := cmp.Or(scanStop(len(cands), rr.Scanned, rr.Pages, sh), t.stopReason()); reason != "" {
			rr.Truncated = reason
			return cands
		}
		page, err := r.scanPart(t.ctx, r.parts[r.at], r.resume, s.cfg.PageSize)
		rr.Pages++
		if err != nil {
			s.storageError(t, rr, "scan", err)
			return cands
		}
		// Decide the whole page; if the tick is cut inside it, keep the old token so the keys not
		// decided are read again rather than skipped (a page is never trimmed).
		var cut Reason
		transient := false
		cands, cut, transient = s.decidePage(t, r, page, rr, queued, cands)
		if cut != "" {
			rr.Truncated = cut
			return cands
		}
		switch {
		case page.Done && r.at+1 == len(r.parts):
			s.completePass(r)
			rr.PassCompleted = true
			return cands
		case page.Done:
			r.at, r.resume = r.at+1, is.Resume{}
		default:
			r.resume = page.Next
		}
		if transient {
			return cands
		}
	}
}

// decidePage decides every key of a page and appends those that passed the gate, and are not queued
// yet, to cands. cut is why the tick ended inside the page ("" when it did not); transient reports a
// read that failed transiently.
func (s *Sweeper) decidePage(t *tick, r *route, page is.Page, rr *RouteReport, queued map[string]bool, cands []candidate) (_ []candidate, cut Reason, transient bool) {
	sights := s.sight(t, r, page)
	for i, key := range page.Keys {
		c, outcome, err := s.decide(r, key, sights[i])
		if err != nil {
			if reason := t.stopReason(); reason != "" {
				return cands, reason, transient
			}
			s.unreadable(r, rr, key, key, err)
			transient = transient || errors.Is(err, is.ErrTransient)
			continue
		}
		rr.Scanned++
		if outcome != "" {
			rr.Outcomes[outcome]++
			if outcome == OutcomeUnparseable {
				s.unparseable(r, rr, key)
			}
			continue
		}
		if !queued[key] {
			queued[key] = true
			cands = append(cands, c)
		}
	}
	for _, u := range page.Unreadable {
		s.unreadable(r, rr, u.Key, u.Where, u.Err)
		transient = transient || errors.Is(u.Err, is.ErrTransient)
	}
	return cands, "", transient
}

// scanPart reads one page of a part of the route's walk.
func (r *route) scanPart(ctx context.Context, p part, from is.Resume, count int) (is.Page, error) {
	if p.isOutside {
		// walkParts gives outside parts only to a source that is a RangeScanner.
		return r.source.(oplog.RangeScanner).ScanRange(ctx, r.Mode, p.outside, from, count)
	}
	return r.source.ScanAgents(ctx, r.Mode, p.buckets, from, count)
}

// unparseable names a key the walk met that is no agent's stored key: outside every bucket's range,
// without a bucket prefix, or with another bucket's (a writer that hashed differently). It is already
// counted; it is listed (bounded) and logged with its key, and never archived or deleted: its entries
// stay where its writer put them. Past the listing bound a route's tick logs how many more it met.
func (s *Sweeper) unparseable(r *route, rr *RouteReport, key string) {
	if len(rr.Unparseable) >= MaxUnparseableListed {
		return
	}
	why := "not an agent's stored key"
	if _, err := oplog.ParseStoredKey(key); err != nil {
		why = err.Error()
	}
	rr.Unparseable = append(rr.Unparseable, UnparseableKey{Route: r.Name, Key: key, Why: why, Pass: r.pass, At: s.opts.Now()})
	s.log.Warn("sweep met a key that is no agent's stored key; it is counted unparseable, never archived or deleted",
		"route", r.Name, "key", key, "pass", r.pass, "why", why)
}

// unreadable records a key (or, where the backend cannot tell the key, the thing it could not read)
// whose read failed: it is counted and listed, and left to the next pass. Its tracking entry stays as
// it was.
func (s *Sweeper) unreadable(r *route, rr *RouteReport, key, where string, err error) {
	if where == "" {
		where = key
	}
	rr.Scanned++
	rr.Outcomes[OutcomeUnreadable]++
	s.listUnreadable(r, rr, key, where, err)
}

// listUnreadable counts as an error, lists (bounded) and logs a key whose read failed, counted
// unreadable already: in the walk or the gate (unreadable), or at the archive's first read (record).
func (s *Sweeper) listUnreadable(r *route, rr *RouteReport, key, where string, err error) {
	rr.Errors++
	if len(rr.Unreadable) < MaxUnreadableListed {
		rr.Unreadable = append(rr.Unreadable, UnreadableKey{Route: r.Name, Key: key, Where: where, Err: err.Error(),
			Pass: r.pass, At: s.opts.Now()})
	}
	s.log.Warn("sweep could not read a key; it is skipped for this pass and read again on the next",
		"route", r.Name, "key", where, "pass", r.pass, "err", err)
}

// sighting of a page's key: triage's verdict and, for a key worth it, its last index in the source.
type sight struct {
	agent   oplog.AgentID
	outcome Outcome // triage's, for a key not worth a read
	worth   bool
	last    oplog.Index
	exists  bool
	err     error  // the last index could not be read
	stamp   string // the page's stamp of the key's index, "" when it carried none
	unread  bool   // sighted by the stamp alone: last and exists were not read (the page listed it)
}

// sight triages a page's keys and finds the last index of those that survive: from the page itself
// when the backend read them with it (Page.LastIDs), else by reading each, at most MaxConcurrency at
// once, as the archive phase runs. A key the page stamped (Page.Stamps: multi-file SQLite) is not
// read (sightUnread): the gate decides on the stamps, or on the index an earlier sighting read, which
// the archive re-checks (passUnread), so on multi-file SQLite the gate opens no stamped file. A
// durable route reads every index, since its gate looks at the primary above the source.
func (s *Sweeper) sight(t *tick, r *route, page is.Page) []sight {
	sights := make([]sight, len(page.Keys))
	ids := page.LastIDs
	if len(ids) != len(page.Keys) {
		ids = nil // a page whose ids do not pair with its keys has none to trust
	}
	stamps := page.Stamps
	if len(stamps) != len(page.Keys) || r.primaryBelow {
		stamps = nil
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, s.cfg.MaxConcurrency)
	now := s.opts.Now()
	for i, key := range page.Keys {
		sg := &sights[i]
		sg.agent, sg.outcome, sg.worth = triage(key, t.assign, s.opts.Residency)
		if sg.worth && r.Mode == oplog.Durable && !s.idle(sg.agent, now) {
			sg.outcome, sg.worth = OutcomeActive, false
		}
		var seen sighting
		var known bool
		if stamps != nil {
			sg.stamp = stamps[i]
			seen, known = s.tracked.lookup(r.id, key)
		}
		switch {
		case !sg.worth:
		case ids != nil && !r.primaryBelow:
			sg.last, sg.exists = oplog.Index(ids[i]), true
		case sightUnread(seen, known, sg.stamp, r.pass):
			sg.unread = true
		default:
			var fromPage *oplog.Index
			if ids != nil {
				fromPage = new(oplog.Index(ids[i]))
			}
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				sg.last, sg.exists, sg.err = s.gateIndex(t.ctx, r, sg.agent, fromPage)
			})
		}
	}
	wg.Wait()
	return sights
}

// gateIndex is the last index the quiet gate compares for an agent the route found: the source's
// (fromPage, when the page carried it), or on a durable route from an archive layer the whole
// stack's, whose newest entries a live durable agent writes to the primary above the source.
func (s *Sweeper) gateIndex(ctx context.Context, r *route, agent oplog.AgentID, fromPage *oplog.Index) (oplog.Index, bool, error) {
	if r.primaryBelow {
		last, ok, err := s.stack.Primary().LastIndex(ctx, agent, r.Mode)
		if err != nil || ok {
			return last, ok, err
		}
	}
	if fromPage != nil {
		return *fromPage, true, nil
	}
	return r.source.LastIndex(ctx, agent, r.Mode)
}

// idle reports whether a durable agent has been inactive for DurableMinIdle at now, by the executor's
// LastActive.
func (s *Sweeper) idle(agent oplog.AgentID, now time.Time) bool {
	at, known := s.opts.LastActive(agent)
	return idle(at, known, s.born, now, s.cfg.DurableMinIdle)
}

// decide runs one sighted key through the quiet gate. An empty outcome means the agent passed the gate
// and is a candidate; err is a failed read.
func (s *Sweeper) decide(r *route, key string, sg sight) (candidate, Outcome, error) {
	agent, last, exists := sg.agent, sg.last, sg.exists
	switch {
	case !sg.worth:
		return candidate{}, sg.outcome, nil
	case sg.err != nil:
		return candidate{}, "", sg.err
	case sg.unread:
		seen, known := s.tracked.lookup(r.id, key)
		if index, move := passUnread(seen, known, sg.stamp, r.pass); move {
			// Re-stamped before the archive, as below: with the index an earlier sighting read,
			// which the archive re-checks, or none (0), the archive's read taking what it finds.
			s.tracked.update(r.id, key, sighting{index: index, stamp: sg.stamp, unread: index == 0, pass: r.pass})
			return candidate{key: key, agent: agent, index: index}, "", nil
		}
		if !s.tracked.track(r.id, key, sighting{stamp: sg.stamp, unread: true, pass: r.pass, first: s.opts.Now()}) {
			return candidate{}, OutcomeUntracked, nil
		}
		return candidate{}, OutcomeWaiting, nil
	case !exists:
		s.tracked.forget(r.id, key)
		return candidate{}, OutcomeEmpty, nil
	}
	seen, known := s.tracked.lookup(r.id, key)
	if assess(seen, known, last, sg.stamp, r.pass) {
		// Re-stamped before the archive, so a failed archive keeps the gate it passed.
		s.tracked.update(r.id, key, sighting{index: last, stamp: sg.stamp, pass: r.pass})
		return candidate{key: key, agent: agent, index: last}, "", nil
	}
	if !s.tracked.track(r.id, key, sighting{index: last, stamp: sg.stamp, pass: r.pass, first: s.opts.Now()}) {
		return candidate{}, OutcomeUntracked, nil
	}
	return candidate{}, OutcomeWaiting, nil
}

// completePass ends the route's pass: entries neither this pass nor the one before saw are dropped,
// and the next pass starts from the beginning.
func (s *Sweeper) completePass(r *route) {
	s.tracked.forgetIf(r.id, func(_ string, seen sighting) bool { return !keep(seen, r.pass) })
	r.pass++
	r.at, r.resume = 0, is.Resume{}
}

// dropUnowned drops at once the tracking entries of agents on shards the assignment no longer owns.
// It reads the tables only when the shards changed since it last ran: a tracked key was parsed when
// it was first seen, so its prefix is its bucket.
func (s *Sweeper) dropUnowned(a Assignment) {
	if s.trimmed && a.ShardCount == s.trimmedTo.ShardCount && slices.Equal(a.Shards, s.trimmedTo.Shards) {
		return
	}
	s.trimmedTo, s.trimmed = Assignment{ShardCount: a.ShardCount, Shards: slices.Clone(a.Shards)}, true
	for _, r := range s.routes {
		s.tracked.forgetIf(r.id, func(key string, _ sighting) bool {
			bucket, ok := is.KeyBucket(key)
			return !ok || !ownsBucket(a, bucket)
		})
		r.pending = slices.DeleteFunc(r.pending, func(c candidate) bool { return !owns(a, c.agent) })
	}
}

// storageError records a failed page read: a cut by the deadline or shutdown truncates the route, any
// other failure is logged and counted, the work staying in the layer for a later tick.
func (s *Sweeper) storageError(t *tick, rr *RouteReport, what string, err error) {
	if reason := t.stopReason(); reason != "" {
		rr.Truncated = reason
		return
	}
	rr.Errors++
	s.log.Warn("sweep storage call failed; the route resumes next tick", "route", rr.Route, "call", what, "err", err)
}

type archived struct {
	candidate
	outcome Outcome
	drained oplog.Drained
	current oplog.Index // the last index the archive step found, when it declined a moved-on agent
	err     error       // the read that failed, when the outcome is unreadable
}

// archiveAll archives the candidates in batches of ArchiveBatch, at most MaxConcurrency batches at
// once. Shutdown and the deadline stop new batches from starting; a batch under way runs under
// stepBase (which outlives shutdown by the grace) and its own MaxAgentDuration.
func (s *Sweeper) archiveAll(t *tick, r *route, cands []candidate, rr *RouteReport) {
	batches := slices.Collect(slices.Chunk(cands, s.cfg.ArchiveBatch))
	results := make(chan []archived, len(batches))
	slots := make(chan struct{}, s.cfg.MaxConcurrency)
	var wg sync.WaitGroup
	started := 0
dispatch:
	for _, batch := range batches {
		select {
		case slots <- struct{}{}:
		case <-t.ctx.Done():
		}
		if reason := t.stopReason(); reason != "" {
			rr.Truncated = reason
			break dispatch
		}
		if reason, wait := s.awaitBytes(t); reason != "" || wait > 0 {
			if wait > 0 {
				rr.ByteBudgetDeferred += len(cands) - started
				rr.ByteBudgetWait = max(rr.ByteBudgetWait, wait)
			}
			rr.Truncated = cmp.Or(rr.Truncated, reason)
			break dispatch
		}
		started += len(batch)
		s.progress(func(p *Progress) { p.Started += len(batch) })
		reserved := s.reserveBytes(r, batch)
		wg.Go(func() {
			defer func() { <-slots }()
			batchCtx, cancel := context.WithTimeout(t.stepBase, s.cfg.MaxAgentDuration)
			defer cancel()
			done := s.archiveBatch(batchCtx, r, batch)
			if s.bytes != nil {
				var moved int64
				for _, res := range done {
					moved += res.drained.Bytes
				}
				s.bytes.spend(s.opts.Now(), moved-reserved) // settles the reservation at what it moved
			}
			results <- done
			s.progress(func(p *Progress) { p.Done += len(batch) })
		})
	}
	wg.Wait()
	close(results)
	// Whatever the stop left unstarted is carried to the next tick, ahead of new work.
	r.pending = append(carried(cands[started:]), r.pending...)
	for batch := range results {
		for _, res := range batch {
			s.record(r, rr, res)
		}
	}
}

// awaitBytes waits until sweep.max_bytes_per_second's bucket holds some bytes, so the archive moves at
// its rate through the tick. It waits only while the wait ends in the first three quarters of the tick's
// deadline, leaving the last quarter to the batches under way: a tick the budget holds back is not one
// storage was too slow for, and must not count as a deadline hit (which would back the sweep off).
// Past that, the rest are deferred to the next tick: deferred is how long the bucket needs to hold some
// again (0: not deferred). reason is set when shutdown or the deadline cut the wait.
func (s *Sweeper) awaitBytes(t *tick) (reason Reason, deferred time.Duration) {
	if s.bytes == nil {
		return "", 0
	}
	for {
		now := s.opts.Now()
		wait := s.bytes.wait(now)
		switch {
		case wait == 0:
			return "", 0
		case now.Add(wait).After(t.budgetUntil):
			return "", wait
		}
		if err := s.opts.Sleep(t.ctx, wait); err != nil {
			return cmp.Or(t.stopReason(), ReasonDeadline), 0
		}
	}
}

// reserveBytes takes from the byte budget's bucket, as a batch starts, what it is likely to move: its
// agents' entries as the gate read them (their last indices; an agent passed by stamps alone, at the
// entries an agent the route has archived) at the bytes an entry the route has moved so far (nothing
// before it has moved one). The batches that start together while the bucket still holds some would
// otherwise all find it full; the batch settles at what it moved when it ends.
func (s *Sweeper) reserveBytes(r *route, batch []candidate) int64 {
	if s.bytes == nil || r.movedEntries == 0 {
		return 0
	}
	var entries, unread uint64
	for _, c := range batch {
		if c.index > 0 {
			entries += uint64(c.index)
		} else {
			unread++
		}
	}
	more, _ := r.unreadEntries(unread) // none while the route has archived no agent
	reserved := r.bytesOf(entries + more)
	s.bytes.spend(s.opts.Now(), reserved)
	return reserved
}

// record counts one agent's archive in the route's report and tracking table.
func (s *Sweeper) record(r *route, rr *RouteReport, res archived) {
	rr.Outcomes[res.outcome]++
	switch res.outcome {
	case OutcomeArchived:
		rr.Moved += res.drained.Moved
		rr.Bytes += res.drained.Bytes
		rr.Archived = append(rr.Archived, res.agent)
		s.tracked.forget(r.id, res.key)
		if s.opts.OnDrained != nil {
			s.opts.OnDrained(res.agent, r.Mode)
		}
	case OutcomeArchiveFailed, OutcomeIntegrityFailed:
		rr.Errors++
	case OutcomeUnreadable:
		s.listUnreadable(r, rr, res.key, res.key, res.err)
	case OutcomeDeclined:
		if res.current == 0 {
			s.tracked.forget(r.id, res.key)
		} else {
			// Stamped with the pass this tick scanned in, never the (possibly earlier) pass that
			// queued the candidate: the gate then needs a sighting from a later pass, as for any
			// agent seen for the first time.
			s.tracked.update(r.id, res.key, sighting{index: res.current, pass: r.scanned})
		}
	}
}

// archiveBatch archives one batch of agents under ctx, which bounds every storage call it makes. Per
// agent, first what needs no storage or only the agent's own: residency, the Locker (a busy agent is
// declined, the rest go on), and on the durable route the idle signal and the whole stack's last index.
// Then the agents left are drained together (Stack.DrainSeenMany, or DrainMany under the durable
// route's locks), and each gets its own outcome. A batch cut by ctx is safe: the archive step converges
// from wherever each agent stopped, on a later pass.
func (s *Sweeper) archiveBatch(ctx context.Context, r *route, batch []candidate) []archived {
	out := make([]archived, len(batch))
	var draining []int // positions in batch of the agents the drain takes
	for i, c := range batch {
		out[i].candidate = c
		if s.opts.Residency != nil && s.opts.Residency(c.agent) {
			out[i].outcome = OutcomeResident // picked up by the executor since the scan
			continue
		}
		if s.opts.Locker != nil {
			unlock, ok, err := s.opts.Locker.TryLock(ctx, c.agent, r.Mode)
			switch {
			case err != nil:
				out[i] = s.failed(ctx, r, out[i], "lock", err)
				continue
			case !ok:
				out[i].outcome, out[i].current = OutcomeDeclined, c.index
				continue
			}
			defer unlock()
		}
		if r.Mode == oplog.Durable {
			if declined, ok := s.durableRecheck(ctx, r, c); !ok {
				out[i] = declined
				continue
			}
		}
		draining = append(draining, i)
	}
	if len(draining) == 0 {
		return out
	}
	var drained []oplog.DrainResult
	var err error
	if r.Mode == oplog.Durable {
		// Under the Locker nothing writes these agents until the drain ends: the stack is drained
		// to the bottom.
		agents := make([]oplog.AgentID, len(draining))
		for k, i := range draining {
			agents[k] = batch[i].agent
		}
		drained, err = s.stack.DrainMany(ctx, r.Mode, agents)
	} else {
		// The drain re-checks the gate with its first read: each agent's last index in the layer,
		// read with its first chunk, must still be the one the gate saw.
		seen := make([]oplog.Seen, len(draining))
		for k, i := range draining {
			seen[k] = oplog.Seen{Agent: batch[i].agent, Index: batch[i].index}
		}
		drained, err = s.stack.DrainSeenMany(ctx, r.Mode, r.Level, seen)
	}
	for k, i := range draining {
		if err != nil {
			out[i] = s.failed(ctx, r, out[i], "drain", err)
			continue
		}
		out[i] = s.settle(ctx, r, out[i], drained[k])
	}
	return out
}

// durableRecheck is the durable route's gate, asked again under the agent's lock: the agent must
// still be idle, and the whole stack's last index still the one the gate saw. It returns the outcome
// of an agent that does not pass, and false.
func (s *Sweeper) durableRecheck(ctx context.Context, r *route, c candidate) (archived, bool) {
	res := archived{candidate: c}
	if !s.idle(c.agent, s.opts.Now()) {
		res.outcome, res.current = OutcomeDeclined, c.index // active again since the scan
		return res, false
	}
	last, exists, err := s.stack.LastIndex(ctx, c.agent, r.Mode)
	switch {
	case err != nil:
		return s.failed(ctx, r, res, "read last index", err), false
	case !exists:
		res.outcome = OutcomeDeclined // gone
		return res, false
	case last != c.index:
		res.outcome, res.current = OutcomeDeclined, last // moved on since the gate
		return res, false
	}
	return res, true
}

// failed is the outcome of an agent whose archive failed at a storage call.
func (s *Sweeper) failed(ctx context.Context, r *route, res archived, what string, err error) archived {
	s.log.Warn("sweep archive failed; the agent stays tracked and is tried again on a later pass",
		"route", r.Name, "agent", res.agent.Key(), "call", what, "err", err, "cut", ctx.Err() != nil)
	res.outcome = failure(err)
	return res
}

// settle is the outcome of an agent the batch drained, from what its drain did.
func (s *Sweeper) settle(ctx context.Context, r *route, res archived, d oplog.DrainResult) archived {
	res.drained = d.Drained
	err := d.Err
	var movedOn *oplog.MovedOnError
	var unread *oplog.UnreadableError
	switch {
	case errors.As(err, &movedOn):
		res.outcome, res.current = OutcomeDeclined, movedOn.Last // moved on since the gate
	case errors.As(err, &unread):
		// The agent's key could not be read, as when the gate's read fails (which it skips for an
		// agent passed by stamps): unreadable, listed, tried again next pass. A read cut by the
		// batch's context is no UnreadableError: it stays a failed archive.
		res.outcome, res.err = OutcomeUnreadable, unread.Err
	case errors.Is(err, oplog.ErrErased):
		res.outcome = OutcomeDeclined // erased during the step, which removed what it wrote below
	case errors.Is(err, oplog.ErrStepCap):
		s.log.Warn("sweep archive reached the step cap; the agent stays tracked", "route", r.Name,
			"agent", res.agent.Key(), "hops", s.stack.MaxHops(), "err", err)
		res.outcome = failure(err)
	case errors.Is(err, oplog.ErrIntegrity):
		// No later pass can fix this by itself: the executor wrote indices an earlier lifetime of the
		// agent already archived (ErrIndexReused), or a stored chunk fails its checksum. Nothing was
		// moved or dropped past it; the entries wait for an operator.
		s.log.Error("sweep cannot archive an agent whose stored data fails an integrity check (reused indices, "+
			"a corrupt chunk); its entries stay where they are", "route", r.Name, "agent", res.agent.Key(), "err", err)
		res.outcome = failure(err)
	case err != nil:
		return s.failed(ctx, r, res, "drain", err)
	case !res.drained.Finished(r.Level):
		// Another drain moved the entries the gate saw out of the route's layer first: the executor's
		// own teardown drain since the gate, or another sidecar during a hand-off, whether before this
		// drain read them or after. That drain's agent, not this one's: archived would count it twice,
		// on the metric whose rise means teardown drains are lost. (Exact on a route out of the top
		// layer of its mode; a lower one can count an agent twice in a three-way race, Step.Finished.)
		res.outcome = OutcomeDeclined
	default:
		res.outcome = OutcomeArchived
	}
	return res
}

// progress updates the tick under way, as Status shows it.
func (s *Sweeper) progress(update func(p *Progress)) {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	if s.status.Current == nil {
		s.status.Current = &Progress{}
	}
	update(s.status.Current)
}
