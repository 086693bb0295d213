package sweeper

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/bounds"
	"github.com/stratalog/strata/oplog"
)

// SweptModes are the agent modes the sweep archives by default. It is not configuration: the guard in
// schedule.Registrar took the ephemeral per-invocation row off the commit path, so the sweep is the only
// thing that moves an ephemeral oplog a crashed executor stranded. Durable agents keep their scheduled
// rows, unless an embedding executor turns on the durable route (Options.DurableRoute), a separate
// option with requirements of its own.
var SweptModes = []oplog.Mode{oplog.Ephemeral}

// Config is the sweep's configuration. Every budget is per tick, shared by the tick's routes. The
// numbers are untuned starting points, not measured optima.
//
// Zero fields take the defaults below (as schedule.Config's do), so Config{} is a valid configuration:
// the defaults with the sweep off. Any other value must be within its range (Validate), which New
// enforces: a negative count or duration is refused, save ShutdownGrace's, which means none.
type Config struct {
	// Enabled turns the sweep on. It is one switch with the ephemeral registration guard: off, the
	// sweep does not run and ephemeral agents register scheduled rows again. It is the one field whose
	// zero is not DefaultConfig's: turning the sweep on takes ephemeral rows off the commit path, which
	// an embedder must ask for.
	Enabled bool
	// Interval is the wait between ticks (0: the default, 60 s; at least 100 ms).
	Interval time.Duration
	// PageSize is how many keys one ScanStable call asks for (0: the default, 128).
	PageSize int
	// MaxConcurrency is how many archive batches a tick runs at once, sharing the storage's connection
	// budget with the invocation path (0: the default, 4).
	MaxConcurrency int
	// ArchiveBatch is the most agents one archive batch holds: read in one storage call a round,
	// written below together, dropped in one call a round (0: PageSize; at most
	// indexedstorage.MaxBatch).
	ArchiveBatch int
	// MaxArchivesPerTick bounds the archive attempts of a tick; declined and failed attempts count
	// (0: the default, 256).
	MaxArchivesPerTick int
	// MaxBytesPerSecond bounds the payload bytes the archive moves, over a window (a token bucket of
	// one second's worth; 0: no bound): a batch starts only while the bucket holds some, reserving what
	// it is likely to move and settling at what it moved when it ends, so the rate over a window exceeds
	// the bound by at most one second's worth and what the batches under way move beyond their
	// reservations. The archive phase waits for the bucket through the tick (Options.Sleep); what it
	// cannot wait for within three quarters of MaxTickDuration waits for the next tick, counted in the
	// report (RouteReport.ByteBudgetDeferred).
	MaxBytesPerSecond int
	// MaxScannedPerTick bounds the keys a tick examines, so a tick cannot walk a namespace far larger
	// than the work in it (0: the default, 4096). Soft by one page: a page is never trimmed.
	MaxScannedPerTick int
	// MaxTrackedAgents is the backstop on the tracking table; passes are what keep it small
	// (0: the default, 100,000).
	MaxTrackedAgents int
	// MaxTickDuration is the wall clock a tick may hold storage before it stops at its next boundary
	// (0: the default, 30 s, half the default interval; at least 1 s).
	MaxTickDuration time.Duration
	// MaxBackoffIntervals caps the wait after ticks that hit their deadline, in intervals (0: the
	// default, 8; 1: no backoff).
	MaxBackoffIntervals int
	// MaxAgentDuration bounds one archive batch (an agent's archive is part of one): its steps run under
	// this timeout, so a black-holed store cannot hold a tick past MaxTickDuration + MaxAgentDuration. A
	// cut step is safe: the archive step converges from wherever it stopped, agent by agent. 0 (the
	// default) means MaxTickDuration; at least 1 s. The name stays from when the unit was an agent.
	MaxAgentDuration time.Duration
	// ShutdownGrace is how long shutdown waits for the agents under way before cancelling them
	// (0: the default, 30 s; negative: none, they are cancelled at once). Nothing is lost either way.
	ShutdownGrace time.Duration

	// The durable route's own settings, read only when Options.DurableRoute is on.

	// DurableMinIdle is how long a durable agent must have been inactive (Options.LastActive) before
	// the durable route archives it (0: the default, 24 h, the scheduled row's archive_interval).
	DurableMinIdle time.Duration
	// DurableMaxArchivesPerTick and DurableMaxScannedPerTick are the durable routes' budgets, shared
	// by them and apart from the ephemeral routes' (0: the defaults, 256 and 4096): a durable backlog
	// never takes what the ephemeral routes need, nor they what it needs.
	DurableMaxArchivesPerTick int
	DurableMaxScannedPerTick  int
}

// Defaults, untuned.
const (
	DefaultInterval            = 60 * time.Second
	DefaultPageSize            = 128
	DefaultMaxConcurrency      = 4
	DefaultArchiveBatch        = 0 // PageSize
	DefaultMaxArchivesPerTick  = 256
	DefaultMaxScannedPerTick   = 4096
	DefaultMaxTrackedAgents    = 100_000
	DefaultMaxTickDuration     = 30 * time.Second
	DefaultMaxBackoffIntervals = 8
	DefaultMaxAgentDuration    = 0 // MaxTickDuration
	DefaultShutdownGrace       = 30 * time.Second

	DefaultDurableMinIdle            = 24 * time.Hour
	DefaultDurableMaxArchivesPerTick = DefaultMaxArchivesPerTick
	DefaultDurableMaxScannedPerTick  = DefaultMaxScannedPerTick

	// MinInterval and MinTickDuration are the clamps: a zero tick duration would be a sweep that runs
	// and archives nothing, a zero interval a loop that spins.
	MinInterval     = 100 * time.Millisecond
	MinTickDuration = time.Second
)

// DefaultConfig returns the defaults, with the sweep enabled.
func DefaultConfig() Config {
	return Config{
		Enabled:             true,
		Interval:            DefaultInterval,
		PageSize:            DefaultPageSize,
		MaxConcurrency:      DefaultMaxConcurrency,
		ArchiveBatch:        DefaultArchiveBatch,
		MaxArchivesPerTick:  DefaultMaxArchivesPerTick,
		MaxScannedPerTick:   DefaultMaxScannedPerTick,
		MaxTrackedAgents:    DefaultMaxTrackedAgents,
		MaxTickDuration:     DefaultMaxTickDuration,
		MaxBackoffIntervals: DefaultMaxBackoffIntervals,
		MaxAgentDuration:    DefaultMaxAgentDuration,
		ShutdownGrace:       DefaultShutdownGrace,

		DurableMinIdle:            DefaultDurableMinIdle,
		DurableMaxArchivesPerTick: DefaultDurableMaxArchivesPerTick,
		DurableMaxScannedPerTick:  DefaultDurableMaxScannedPerTick,
	}
}

// Range is the values a count or duration of Config may take, bounds included (one type with the
// scheduler's and the configuration's).
type Range[T int | time.Duration] = bounds.Range[T]

// The ranges of Config's fields, shared with the config package's key table. A zero field is valid
// whatever its range: it takes the default.
var (
	IntervalRange            = Range[time.Duration]{Min: 0, Max: 24 * time.Hour}
	PageSizeRange            = Range[int]{Min: 1, Max: 10_000}
	MaxConcurrencyRange      = Range[int]{Min: 1, Max: 1024}
	ArchiveBatchRange        = Range[int]{Min: 0, Max: is.MaxBatch}
	MaxArchivesPerTickRange  = Range[int]{Min: 1, Max: 1_000_000}
	MaxBytesPerSecondRange   = Range[int]{Min: 1024, Max: 1 << 40}
	MaxScannedPerTickRange   = Range[int]{Min: 1, Max: 100_000_000}
	MaxTrackedAgentsRange    = Range[int]{Min: 1, Max: 100_000_000}
	MaxTickDurationRange     = Range[time.Duration]{Min: 0, Max: 24 * time.Hour}
	MaxBackoffIntervalsRange = Range[int]{Min: 0, Max: 1024}
	MaxAgentDurationRange    = Range[time.Duration]{Min: 0, Max: 24 * time.Hour}
	ShutdownGraceRange       = bounds.ShutdownGrace // one grace for the process, the scheduler's too
	DurableMinIdleRange      = Range[time.Duration]{Min: 0, Max: MaxLease}
	DurableArchivesRange     = Range[int]{Min: 0, Max: MaxArchivesPerTickRange.Max}
	DurableScannedRange      = Range[int]{Min: 0, Max: MaxScannedPerTickRange.Max}
)

// check accepts zero (the default) or a value within r.
func check[T int | time.Duration](name string, v T, r Range[T]) error {
	if v == 0 || r.Contains(v) {
		return nil
	}
	return fmt.Errorf("sweep %s %v: want 0 (the default) or from %v to %v", name, v, r.Min, r.Max)
}

// Validate reports every field outside its range (see the *Range variables), joined, each naming the
// field, its value and the range: negative counts and durations, and values so large that arithmetic
// on them would overflow. A zero field is valid: it takes the default.
func (c Config) Validate() error {
	grace := error(nil)
	if c.ShutdownGrace > ShutdownGraceRange.Max {
		grace = fmt.Errorf("sweep shutdown_grace %v: want a negative value (none), 0 (the default) or up to %v",
			c.ShutdownGrace, ShutdownGraceRange.Max)
	}
	return errors.Join(
		check("interval", c.Interval, IntervalRange),
		check("page_size", c.PageSize, PageSizeRange),
		check("max_concurrency", c.MaxConcurrency, MaxConcurrencyRange),
		check("archive_batch", c.ArchiveBatch, ArchiveBatchRange),
		check("max_archives_per_tick", c.MaxArchivesPerTick, MaxArchivesPerTickRange),
		check("max_bytes_per_second", c.MaxBytesPerSecond, MaxBytesPerSecondRange),
		check("max_scanned_per_tick", c.MaxScannedPerTick, MaxScannedPerTickRange),
		check("max_tracked_agents", c.MaxTrackedAgents, MaxTrackedAgentsRange),
		check("max_tick_duration", c.MaxTickDuration, MaxTickDurationRange),
		check("max_backoff_intervals", c.MaxBackoffIntervals, MaxBackoffIntervalsRange),
		check("max_agent_duration", c.MaxAgentDuration, MaxAgentDurationRange),
		grace,
		check("durable_min_idle", c.DurableMinIdle, DurableMinIdleRange),
		check("durable_max_archives_per_tick", c.DurableMaxArchivesPerTick, DurableArchivesRange),
		check("durable_max_scanned_per_tick", c.DurableMaxScannedPerTick, DurableScannedRange),
	)
}

// clamped is the configuration in force: every zero field takes its default, then the clamps of the
// design apply: interval ≥ 100 ms, max_tick_duration ≥ 1 s, max_agent_duration ≥ 1 s (0 reading as
// max_tick_duration), and a negative shutdown_grace is none.
func (c Config) clamped() Config {
	c.Interval = max(cmp.Or(c.Interval, DefaultInterval), MinInterval)
	c.PageSize = cmp.Or(c.PageSize, DefaultPageSize)
	c.MaxConcurrency = cmp.Or(c.MaxConcurrency, DefaultMaxConcurrency)
	c.ArchiveBatch = min(cmp.Or(c.ArchiveBatch, c.PageSize), ArchiveBatchRange.Max)
	c.MaxArchivesPerTick = cmp.Or(c.MaxArchivesPerTick, DefaultMaxArchivesPerTick)
	c.MaxScannedPerTick = cmp.Or(c.MaxScannedPerTick, DefaultMaxScannedPerTick)
	c.MaxTrackedAgents = cmp.Or(c.MaxTrackedAgents, DefaultMaxTrackedAgents)
	c.MaxTickDuration = max(cmp.Or(c.MaxTickDuration, DefaultMaxTickDuration), MinTickDuration)
	c.MaxBackoffIntervals = cmp.Or(c.MaxBackoffIntervals, DefaultMaxBackoffIntervals)
	c.MaxAgentDuration = max(cmp.Or(c.MaxAgentDuration, c.MaxTickDuration), MinTickDuration)
	switch {
	case c.ShutdownGrace == 0:
		c.ShutdownGrace = DefaultShutdownGrace
	case c.ShutdownGrace < 0:
		c.ShutdownGrace = 0
	}
	c.DurableMinIdle = cmp.Or(c.DurableMinIdle, DefaultDurableMinIdle)
	c.DurableMaxArchivesPerTick = cmp.Or(c.DurableMaxArchivesPerTick, DefaultDurableMaxArchivesPerTick)
	c.DurableMaxScannedPerTick = cmp.Or(c.DurableMaxScannedPerTick, DefaultDurableMaxScannedPerTick)
	return c
}
