// Package config is the configuration of the strata sidecar: a TOML file, overridden key by key by
// environment variables STRATA_<SECTION>_<KEY>, validated with errors that name the key, the bad value
// and what is allowed.
//
// One table of keys (keys.go) is the single source of every key's name, meaning, unit and allowed
// values; the defaults are Default's, and the sweep's come from package sweeper's constants. The
// default file (DefaultsTOML, printed by `strata config defaults`), the reference (Markdown, checked
// in as docs/config.md) and the environment variable names are generated from them, and a test fails
// when the checked-in reference drifts.
package config

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/oplog/schedule"
	"github.com/stratalog/strata/sweeper"
)

// Config is the whole configuration. Each field's meaning, unit and allowed values are in
// docs/config.md, generated from the key table.
type Config struct {
	Storage   Storage   `toml:"storage"`
	Blob      Blob      `toml:"blob"`
	Scrub     Scrub     `toml:"scrub"`
	Schedule  Schedule  `toml:"schedule"`
	Stack     Stack     `toml:"stack"`
	Sweep     Sweep     `toml:"sweep"`
	HTTP      HTTP      `toml:"http"`
	Residency Residency `toml:"residency"`
	Log       Log       `toml:"log"`
}

// Storage is [storage]: the indexed storage of the primary layer and the compressed levels.
type Storage struct {
	URL string `toml:"url"` // for backends.Open
}

// Blob is [blob]: the bottom layer.
type Blob struct {
	URL        string        `toml:"url"`         // for backends.OpenBlob: fs:relative/dir, fs:///abs/dir, file:///abs/dir, memory://, s3://, gs://, azblob://, mem://
	Layout     string        `toml:"layout"`      // archive.LayoutPacked or archive.LayoutChunks (StackOptions.BlobLayout)
	GCInterval time.Duration `toml:"gc_interval"` // how often the sidecar runs the segment collector; 0: never
	GCGrace    time.Duration `toml:"gc_grace"`    // archive.CollectOptions.Grace and StackOptions.SegmentGrace
	Retention  time.Duration `toml:"retention"`   // archive.ExpireOptions.Retention; 0: keep archived oplogs forever
}

// Scrub is [scrub]: the sidecar's background verification of the blob layer (archive.Verify).
type Scrub struct {
	Interval    time.Duration `toml:"interval"`     // how often a scrub runs; 0: never (the default)
	MaxBytes    int           `toml:"max_bytes"`    // archive.VerifyOptions.MaxBytes: what one run reads at most
	MaxDuration time.Duration `toml:"max_duration"` // archive.VerifyOptions.MaxDuration: how long one run reads at most
}

// Schedule is [schedule]: the scheduled_actions store and its scheduler.
type Schedule struct {
	URL             string        `toml:"url"`              // for backends.OpenSchedule
	ArchiveInterval time.Duration `toml:"archive_interval"` // schedule.Registrar.ArchiveInterval
	Lease           time.Duration `toml:"lease"`
	Concurrency     int           `toml:"concurrency"`
	MaxAttempts     int           `toml:"max_attempts"`
	PollInterval    time.Duration `toml:"poll_interval"`
	MetricsInterval time.Duration `toml:"metrics_interval"` // schedule.Config.MetricsInterval
}

// Stack is [stack]: the shape of the layer stack.
type Stack struct {
	CompressedLevels int `toml:"compressed_levels"` // 1–8
}

// Sweep is [sweep]; SweeperConfig converts it.
type Sweep struct {
	Enabled             bool          `toml:"enabled"`
	Interval            time.Duration `toml:"interval"`
	PageSize            int           `toml:"page_size"`
	MaxConcurrency      int           `toml:"max_concurrency"`
	ArchiveBatch        int           `toml:"archive_batch"`
	MaxArchivesPerTick  int           `toml:"max_archives_per_tick"`
	MaxBytesPerSecond   int           `toml:"max_bytes_per_second"`
	MaxScannedPerTick   int           `toml:"max_scanned_per_tick"`
	MaxTrackedAgents    int           `toml:"max_tracked_agents"`
	MaxTickDuration     time.Duration `toml:"max_tick_duration"`
	MaxBackoffIntervals int           `toml:"max_backoff_intervals"`
	MaxAgentDuration    time.Duration `toml:"max_agent_duration"`
	ShutdownGrace       time.Duration `toml:"shutdown_grace"` // the scheduler's too: one grace for the process
	// The durable route's: an embedding executor's (sweeper.Options.DurableRoute), not the sidecar's.
	DurableMinIdle            time.Duration `toml:"durable_min_idle"`
	DurableMaxArchivesPerTick int           `toml:"durable_max_archives_per_tick"`
	DurableMaxScannedPerTick  int           `toml:"durable_max_scanned_per_tick"`
}

// HTTP is [http]: the sidecar's server.
type HTTP struct {
	Listen       string `toml:"listen"`
	Token        string `toml:"token"`          // a secret: never echoed in an error
	MaxBodyBytes int64  `toml:"max_body_bytes"` // for http.MaxBytesReader
	// BodyTimeout bounds how long a request's body may take to arrive, from when its handler starts
	// reading it; IdleTimeout how long a kept-alive connection may wait for its next request.
	BodyTimeout time.Duration `toml:"body_timeout"`
	IdleTimeout time.Duration `toml:"idle_timeout"`
}

// Residency is [residency]: the residency feed.
type Residency struct {
	TTL time.Duration `toml:"ttl"`
}

// Log is [log]: the process log.
type Log struct {
	Level  string `toml:"level"`  // debug, info, warn or error
	Format string `toml:"format"` // text or json
}

// DefaultGCInterval is blob.gc_interval's default: orphan segments come only from archive steps cut
// between their segment and its rows (a crash, a timeout), so a pass every ten minutes finds few, and
// each pass reads every segment older than the grace once.
const DefaultGCInterval = 10 * time.Minute

// MaxAgentDurationInEffect is sweep.max_agent_duration as the sweeper applies it: 0 reads as
// max_tick_duration, and either below sweeper.MinTickDuration as that.
func (s Sweep) MaxAgentDurationInEffect() time.Duration {
	tick := max(s.MaxTickDuration, sweeper.MinTickDuration)
	return max(cmp.Or(s.MaxAgentDuration, tick), sweeper.MinTickDuration)
}

// Default returns the defaults: every key set, valid, and what DefaultsTOML prints.
func Default() Config {
	sw := sweeper.DefaultConfig()
	return Config{
		Storage: Storage{URL: "sqlite:strata-data/strata.db"},
		Blob: Blob{URL: "fs:strata-data/blobs", Layout: archive.LayoutPacked,
			GCInterval: DefaultGCInterval, GCGrace: archive.DefaultSegmentGrace},
		Scrub: Scrub{MaxBytes: 1 << 30, MaxDuration: 10 * time.Minute},
		Schedule: Schedule{
			URL:             "sqlite:strata-data/strata.db",
			ArchiveInterval: 24 * time.Hour,
			Lease:           schedule.DefaultLease,
			Concurrency:     schedule.DefaultConcurrency,
			MaxAttempts:     schedule.DefaultMaxAttempts,
			PollInterval:    schedule.DefaultPollInterval,
			MetricsInterval: schedule.DefaultMetricsInterval,
		},
		Stack: Stack{CompressedLevels: 1},
		Sweep: Sweep{
			Enabled:             sw.Enabled,
			Interval:            sw.Interval,
			PageSize:            sw.PageSize,
			MaxConcurrency:      sw.MaxConcurrency,
			ArchiveBatch:        sw.ArchiveBatch,
			MaxArchivesPerTick:  sw.MaxArchivesPerTick,
			MaxBytesPerSecond:   sw.MaxBytesPerSecond,
			MaxScannedPerTick:   sw.MaxScannedPerTick,
			MaxTrackedAgents:    sw.MaxTrackedAgents,
			MaxTickDuration:     sw.MaxTickDuration,
			MaxBackoffIntervals: sw.MaxBackoffIntervals,
			MaxAgentDuration:    sw.MaxAgentDuration,
			ShutdownGrace:       sw.ShutdownGrace,

			DurableMinIdle:            sw.DurableMinIdle,
			DurableMaxArchivesPerTick: sw.DurableMaxArchivesPerTick,
			DurableMaxScannedPerTick:  sw.DurableMaxScannedPerTick,
		},
		HTTP: HTTP{Listen: "127.0.0.1:9464", MaxBodyBytes: 1 << 20,
			BodyTimeout: DefaultBodyTimeout, IdleTimeout: DefaultIdleTimeout},
		Residency: Residency{TTL: 2 * time.Minute},
		Log:       Log{Level: "info", Format: "text"},
	}
}

// Load reads the TOML file at path over the defaults, applies the STRATA_<SECTION>_<KEY> variables of
// environ (os.Environ's form, KEY=value) over the file, and validates the result. An empty path means
// the defaults plus the environment. Every problem found is reported, joined; errors about the file
// start with its path, errors about a variable name it.
func Load(path string, environ []string) (Config, error) {
	if path == "" {
		return parse(nil, "", environ)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return parse(data, path, environ)
}

// Parse is Load with the file's contents in hand.
func Parse(data []byte, environ []string) (Config, error) {
	return parse(data, "", environ)
}

// Validate checks every key against what it allows, and that a listener off loopback has a token. It
// reports every problem found, joined, each naming its key.
func (c Config) Validate() error {
	return c.validate(nil)
}

// SweeperConfig is the [sweep] section as the sweeper takes it. A key's 0 keeps the meaning the key
// table gives it (the clamp, no backoff, no grace), where sweeper.Config's 0 is the default.
func (c Config) SweeperConfig() sweeper.Config {
	s := c.Sweep
	return sweeper.Config{
		Enabled:             s.Enabled,
		Interval:            cmp.Or(s.Interval, sweeper.MinInterval),
		PageSize:            s.PageSize,
		MaxConcurrency:      s.MaxConcurrency,
		ArchiveBatch:        s.ArchiveBatch,
		MaxArchivesPerTick:  s.MaxArchivesPerTick,
		MaxBytesPerSecond:   s.MaxBytesPerSecond,
		MaxScannedPerTick:   s.MaxScannedPerTick,
		MaxTrackedAgents:    s.MaxTrackedAgents,
		MaxTickDuration:     cmp.Or(s.MaxTickDuration, sweeper.MinTickDuration),
		MaxBackoffIntervals: cmp.Or(s.MaxBackoffIntervals, 1),
		MaxAgentDuration:    s.MaxAgentDuration,
		ShutdownGrace:       cmp.Or(s.ShutdownGrace, -1),

		DurableMinIdle:            s.DurableMinIdle,
		DurableMaxArchivesPerTick: s.DurableMaxArchivesPerTick,
		DurableMaxScannedPerTick:  s.DurableMaxScannedPerTick,
	}
}

// ScheduleConfig is the [schedule] section as the scheduler takes it, for the process named owner,
// with sweep.shutdown_grace as its shutdown grace (one grace for the process).
// schedule.archive_interval is not part of it: it goes to schedule.Registrar.ArchiveInterval. The
// retry backoff is not configurable and keeps the scheduler's defaults.
func (c Config) ScheduleConfig(owner string) schedule.Config {
	s := c.Schedule
	grace := c.Sweep.ShutdownGrace
	if grace == 0 {
		grace = -1 // 0 cancels at once here; in schedule.Config it would mean the default
	}
	return schedule.Config{
		Owner:           owner,
		PollInterval:    s.PollInterval,
		Lease:           s.Lease,
		Concurrency:     s.Concurrency,
		MaxAttempts:     s.MaxAttempts,
		ShutdownGrace:   grace,
		MetricsInterval: s.MetricsInterval,
	}
}

// Loopback reports whether Listen is a loopback address (IsLoopback).
func (h HTTP) Loopback() bool {
	return IsLoopback(h.Listen)
}

// IsLoopback reports whether the host:port address addr is on loopback: its host is localhost or a
// loopback IP. An empty host (every interface) and any other host name are not; names are not
// resolved. It is the test behind "a listener off loopback needs http.token", for the configured
// address and for the one a listener actually bound.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// SlogLevel is Level as a slog.Level (info for a value Validate would reject).
func (l Log) SlogLevel() slog.Level {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.Level)); err != nil {
		return slog.LevelInfo
	}
	return level
}
