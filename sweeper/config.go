package sweeper

import (
	"fmt"
	"time"

	"github.com/stratalog/strata/oplog"
)

// SweptModes are the agent modes the sweep archives. It is not configuration: the guard in
// schedule.Registrar took the ephemeral per-invocation row off the commit path, so the sweep is the only
// thing that moves an ephemeral oplog a crashed executor stranded. Durable agents keep their scheduled
// rows; sweeping them would need the primary to be a route source and an indexed append that tolerates
// a repeated prefix, both code changes, which is the point of keeping the list out of Config.
var SweptModes = []oplog.Mode{oplog.Ephemeral}

// Config is the sweep's configuration. Every budget is per tick, shared by the tick's routes. The
// numbers are untuned starting points, not measured optima.
type Config struct {
	// Enabled turns the sweep on. It is one switch with the ephemeral registration guard: off, the
	// sweep does not run and ephemeral agents register scheduled rows again.
	Enabled bool
	// Interval is the wait between ticks (default 60 s; at least 100 ms).
	Interval time.Duration
	// PageSize is how many keys one ScanStable call asks for (default 128).
	PageSize int
	// MaxConcurrency is how many agents a tick archives at once, sharing the storage's connection
	// budget with the invocation path (default 4).
	MaxConcurrency int
	// MaxArchivesPerTick bounds the archive attempts of a tick; declined and failed attempts count
	// (default 256).
	MaxArchivesPerTick int
	// MaxScannedPerTick bounds the keys a tick examines, so a tick cannot walk a namespace far larger
	// than the work in it (default 4096). Soft by one page: a page is never trimmed.
	MaxScannedPerTick int
	// MaxTrackedAgents is the backstop on the tracking table; passes are what keep it small
	// (default 100,000).
	MaxTrackedAgents int
	// MaxTickDuration is the wall clock a tick may hold storage before it stops at its next boundary
	// (default 30 s, half the default interval; at least 1 s).
	MaxTickDuration time.Duration
	// MaxBackoffIntervals caps the wait after ticks that hit their deadline, in intervals (default 8;
	// 0 reads as 1).
	MaxBackoffIntervals int
}

// Defaults, untuned.
const (
	DefaultInterval            = 60 * time.Second
	DefaultPageSize            = 128
	DefaultMaxConcurrency      = 4
	DefaultMaxArchivesPerTick  = 256
	DefaultMaxScannedPerTick   = 4096
	DefaultMaxTrackedAgents    = 100_000
	DefaultMaxTickDuration     = 30 * time.Second
	DefaultMaxBackoffIntervals = 8

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
		MaxArchivesPerTick:  DefaultMaxArchivesPerTick,
		MaxScannedPerTick:   DefaultMaxScannedPerTick,
		MaxTrackedAgents:    DefaultMaxTrackedAgents,
		MaxTickDuration:     DefaultMaxTickDuration,
		MaxBackoffIntervals: DefaultMaxBackoffIntervals,
	}
}

// Validate rejects values no clamp can make sense of: negative counts and durations.
func (c Config) Validate() error {
	for name, v := range map[string]int{
		"page_size": c.PageSize, "max_concurrency": c.MaxConcurrency, "max_archives_per_tick": c.MaxArchivesPerTick,
		"max_scanned_per_tick": c.MaxScannedPerTick, "max_tracked_agents": c.MaxTrackedAgents,
	} {
		if v < 1 {
			return fmt.Errorf("sweep %s must be at least 1, got %d", name, v)
		}
	}
	if c.MaxBackoffIntervals < 0 {
		return fmt.Errorf("sweep max_backoff_intervals must be at least 0, got %d", c.MaxBackoffIntervals)
	}
	if c.Interval < 0 || c.MaxTickDuration < 0 {
		return fmt.Errorf("sweep interval and max_tick_duration must not be negative")
	}
	return nil
}

// clamped applies the clamps of the design: interval ≥ 100 ms, max_tick_duration ≥ 1 s.
func (c Config) clamped() Config {
	c.Interval = max(c.Interval, MinInterval)
	c.MaxTickDuration = max(c.MaxTickDuration, MinTickDuration)
	return c
}
