package config

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/internal/bounds"
	"github.com/stratalog/strata/oplog/schedule"
	"github.com/stratalog/strata/sweeper"
)

// sections is the one table of configuration keys. Each key's name, meaning, unit, allowed values,
// clamps and tuning status live here and nowhere else: DefaultsTOML, Markdown, the environment
// variable names and the validation messages are all generated from it. The defaults themselves come
// from Default (which takes the sweep's from the sweeper's constants), and each key reaches its field
// in Config through the field's toml tag; init checks that the table and Config agree exactly.
var sections = []section{
	{name: "storage", doc: "The indexed storage holding the oplog's primary layer and its compressed archive levels.",
		keys: []spec{
			{name: "url", doc: "URL of the indexed storage.", rule: storageURL},
		}},
	{name: "blob", doc: "The blob store: the bottom layer, where a drained oplog ends up.",
		keys: []spec{
			{name: "url", doc: "URL of the blob store: a local directory, or object storage through gocloud.dev/blob " +
				"(the URL's path is a key prefix, the query parameters are gocloud's, credentials come from the " +
				"environment as each cloud's SDK reads it; for an S3-protocol server other than AWS add " +
				"endpoint=http://host:port&use_path_style=true).", rule: blobURL},
			{name: "layout", doc: "How the blob layer stores archived chunks: packed writes the chunks of a whole archive " +
				"batch as one segment and finds each through an index in the indexed storage (one object per batch, " +
				"reads without LIST); chunks writes one blob per chunk under the agent's own path, the layout before " +
				"segments, kept for stores that hold it.", rule: oneOf(archive.LayoutPacked, archive.LayoutChunks)},
			{name: "gc_interval", doc: "How often the sidecar runs the segment collector (as strata gc does once): it removes " +
				"packed segments older than gc_grace into which no index row points, the orphans of archive steps cut " +
				"between their segment and its rows.", rule: offOrDurationWithin(gcInterval), untuned: true,
				note: "0 turns the collector off."},
			{name: "gc_grace", doc: "How old a segment must be before the collector may remove it for want of index rows, " +
				"and so how long an archive step may take between its segment and its rows. It must be longer than " +
				"sweep.max_agent_duration as it applies (the timeout of the step that writes both); a step that passes " +
				"half of it before its rows writes its segment again. Left at its default, it is raised to twice " +
				"sweep.max_agent_duration as it applies when that is longer; set explicitly, a value not longer is refused.",
				rule: durationWithin(gcGrace), untuned: true},
			{name: "retention", doc: "How long archived oplogs are kept in the blob layer: the collector's runs (every " +
				"gc_interval) remove each oplog whose newest chunk was archived longer ago than this, whole (a reader " +
				"sees all of it or none), its index rows first and then the segments no row points into any more. An " +
				"oplog a layer above still holds entries of is kept; the compressed levels are never subject to it. " +
				"It needs the packed layout and a gc_interval.", rule: offOrDurationWithin(retention), untuned: true,
				note: "0 (the default) keeps archived oplogs forever."},
		}},
	{name: "scrub", doc: "The background scrub: the sidecar reads the archived chunks back, as strata verify does, and " +
		"counts what it finds (strata_scrub_findings by kind), so that an object store that loses data is noticed.",
		keys: []spec{
			{name: "interval", doc: "How often a scrub runs. Each run verifies every mode's blob level within its budgets " +
				"and sets the findings gauge; a run cut by a budget verifies what it read.",
				rule: offOrDurationWithin(scrubInterval), untuned: true, note: "0 (the default) runs no scrub."},
			{name: "max_bytes", doc: "The most one scrub reads from the blob store.", unit: "bytes",
				rule: intWithin(scrubMaxBytes), untuned: true},
			{name: "max_duration", doc: "The longest one scrub reads.", rule: durationWithin(scrubMaxDuration), untuned: true},
		}},
	{name: "schedule", doc: "The scheduled_actions store and the scheduler that runs its rows: the archives of " +
		"durable agents, and of ephemeral agents while the sweep is disabled.",
		keys: []spec{
			{name: "url", doc: "URL of the scheduled_actions store; it may name the storage's own SQLite file.", rule: scheduleURL},
			{name: "archive_interval", doc: "How long after an agent goes idle (or fails, or exits) its scheduled archive row becomes due.",
				rule: durationWithin(schedule.ArchiveIntervalRange)},
			{name: "lease", doc: "How long a claimed row stays claimed; renewed every lease/3 while the row runs, " +
				"so a row is taken over only from a process that stopped.", rule: durationWithin(schedule.LeaseRange)},
			{name: "concurrency", doc: "Rows the scheduler runs at once.", unit: "rows", rule: intWithin(schedule.ConcurrencyRange)},
			{name: "max_attempts", doc: "Attempts a row gets before it is marked failed.", unit: "attempts",
				rule: intWithin(schedule.MaxAttemptsRange)},
			{name: "poll_interval", doc: "How often the scheduler looks for due rows while it has free slots.",
				rule: durationWithin(schedule.PollIntervalRange)},
			{name: "metrics_interval", doc: "How often the scheduler counts the table's rows for its gauges " +
				"(oplog_schedule_pending_rows, _due_rows, _oldest_due_wait_seconds), in the background: /metrics " +
				"serves the last count and never waits on the store. Each count is cut after this or 5s, whichever " +
				"is shorter, and oplog_schedule_row_counts_failed and _age_seconds say when counts fail. The " +
				"default, 15s, is Prometheus' usual scrape interval: one count of the table per sidecar per " +
				"scrape, as when each scrape counted.", rule: durationWithin(schedule.MetricsIntervalRange)},
		}},
	{name: "stack", doc: "The shape of the layer stack.",
		keys: []spec{
			{name: "compressed_levels", doc: "Compressed archive levels between the primary and the blob layer.",
				unit: "levels", rule: intBetween(1, 8)},
		}},
	{name: "sweep", doc: "The sweep, which archives the ephemeral oplogs executors left behind. Its budgets are per " +
		"tick, shared by the tick's routes, and untuned: starting points, not measured optima.",
		keys: []spec{
			{name: "enabled", doc: "Turns the sweep on. It is one switch with the ephemeral registration guard: " +
				"off, ephemeral agents register scheduled archive rows again."},
			{name: "interval", doc: "Wait between ticks; the first tick waits a random fraction of one interval.", rule: durationWithin(sweeper.IntervalRange), untuned: true,
				note: fmt.Sprintf("Below %s reads as %[1]s.", formatDuration(sweeper.MinInterval))},
			{name: "page_size", doc: "Keys one ScanStable call asks for.", unit: "keys", rule: intWithin(sweeper.PageSizeRange), untuned: true},
			{name: "max_concurrency", doc: "Archive batches a tick runs at once, sharing the storage's connections with the invocation path.",
				unit: "batches", rule: intWithin(sweeper.MaxConcurrencyRange), untuned: true},
			{name: "archive_batch", doc: "Agents one archive batch holds: their chunks are read in one storage call a round, " +
				"written below together and dropped in one call a round.", unit: "agents", rule: intWithin(sweeper.ArchiveBatchRange),
				untuned: true, note: "0 means page_size."},
			{name: "max_archives_per_tick", doc: "Archive attempts a tick may make; declined and failed attempts count.",
				unit: "archives", rule: intWithin(sweeper.MaxArchivesPerTickRange), untuned: true},
			{name: "max_bytes_per_second", doc: "The payload bytes the archive moves a second, over a window: a token bucket " +
				"of one second's worth. A batch starts only while the bucket holds some and pays for what it moved when it " +
				"ends; the agents it holds back wait for the next tick (ByteBudgetDeferred in the tick report).",
				unit: "bytes", rule: offOrIntWithin(sweeper.MaxBytesPerSecondRange), untuned: true, note: "0 (the default) is no bound."},
			{name: "max_scanned_per_tick", doc: "Keys a tick may examine; soft by one page, since a page is never trimmed.",
				unit: "keys", rule: intWithin(sweeper.MaxScannedPerTickRange), untuned: true},
			{name: "max_tracked_agents", doc: "Backstop on the tracking table: when it is full, new agents go untracked " +
				"and tracked ones keep updating.", unit: "agents", rule: intWithin(sweeper.MaxTrackedAgentsRange), untuned: true},
			{name: "max_tick_duration", doc: "Wall clock a tick may hold storage before it stops at its next boundary.",
				rule: durationWithin(sweeper.MaxTickDurationRange), untuned: true,
				note: fmt.Sprintf("Below %s reads as %[1]s.", formatDuration(sweeper.MinTickDuration))},
			{name: "max_backoff_intervals", doc: "Cap on the wait after ticks that hit their deadline: the wait doubles " +
				"per such tick up to this many intervals, and resets on the first tick inside its deadline.",
				unit: "intervals", rule: intWithin(sweeper.MaxBackoffIntervalsRange), untuned: true, note: "0 reads as 1."},
			{name: "max_agent_duration", doc: "Timeout of one archive batch, so a store that stops answering cannot hold " +
				"a tick longer than max_tick_duration plus this. A cut archive step is safe: the next one converges " +
				"from where it stopped.", rule: durationWithin(sweeper.MaxAgentDurationRange), untuned: true,
				note: fmt.Sprintf("0 means max_tick_duration; below %s reads as %[1]s.", formatDuration(sweeper.MinTickDuration))},
			{name: "shutdown_grace", doc: "How long shutdown waits for the agents the sweep is archiving, and for the " +
				"scheduled rows running, before it cancels them: one grace for the process. Nothing is lost either way: " +
				"a cut archive step converges, a cut row runs again when its lease expires.",
				rule: durationWithin(sweeper.ShutdownGraceRange), untuned: true, note: "0 cancels them at once."},
			{name: "durable_min_idle", doc: "The durable route's idle age: a durable agent is archived only after it has " +
				"been inactive this long by the executor's own signal. The durable route is an embedding executor's option " +
				"(sweeper.Options.DurableRoute, which needs a Locker and that signal); the sidecar never runs it and keeps " +
				"scheduled rows for durable agents.", rule: durationWithin(sweeper.DurableMinIdleRange), untuned: true,
				note: "0 reads as the default."},
			{name: "durable_max_archives_per_tick", doc: "The durable routes' archive budget a tick, apart from " +
				"max_archives_per_tick: a durable backlog never takes the ephemeral routes' share. Embedding executors only.",
				unit: "archives", rule: intWithin(sweeper.DurableArchivesRange), untuned: true, note: "0 reads as the default."},
			{name: "durable_max_scanned_per_tick", doc: "The durable routes' scan budget a tick, apart from " +
				"max_scanned_per_tick. Embedding executors only.",
				unit: "keys", rule: intWithin(sweeper.DurableScannedRange), untuned: true, note: "0 reads as the default."},
		}},
	{name: "http", doc: "The sidecar's HTTP server: /metrics, /healthz, /readyz and the /v1 endpoints.",
		keys: []spec{
			{name: "listen", doc: "Address the server listens on.", rule: listenAddress},
			{name: "token", doc: "Bearer token the write endpoints (PUT /v1/assignment, PUT /v1/residency, POST /v1/sweep) " +
				"and GET /v1/status require; the probes and /metrics never do. Empty means none; it must be set when " +
				"http.listen is not a loopback address.",
				rule: bearerToken, secret: true},
			{name: "max_body_bytes", doc: "Largest request body accepted.", unit: "bytes", rule: intWithin(maxBodyBytes)},
			{name: "body_timeout", doc: "How long a request's body may take to arrive, from the moment its handler starts " +
				"reading it: a client that stalls or trickles past it gets 408 and its connection is closed, so it " +
				"costs nothing but itself. A PUT /v1/residency arriving while another is read waits its turn for up " +
				"to twice this (then 409: retry), so this also bounds how long a slow client can hold the residency " +
				"feed: keep it well under residency.ttl. The default, 10s, takes a full 1 MiB body (max_body_bytes) " +
				"at under 1 Mbit/s, and a PUT waiting behind a stalled one (20s at most) stays far inside " +
				"residency.ttl's default of 2m.", rule: durationWithin(bodyTimeout)},
			{name: "idle_timeout", doc: "How long a kept-alive connection may wait for its next request before the " +
				"server closes it. The default, 2m, outlasts the 90s after which Go's HTTP client drops its own idle " +
				"connections (so a Go executor's client closes first, never while sending) and keeps a scraper's " +
				"connection from one scrape to the next at the usual 15s to 1m intervals; idle connections of " +
				"clients that vanished are gone two minutes later.", rule: durationWithin(idleTimeout)},
		}},
	{name: "residency", doc: "The residency feed (PUT /v1/residency): the executor's full resident set, which the sweep " +
		"trusts to skip agents that are in memory.",
		keys: []spec{
			{name: "ttl", doc: "Age at which the feed is stale: a feed older than this makes the sweep stand down.",
				rule: durationWithin(residencyTTL)},
		}},
	{name: "log", doc: "The process log, on stderr.",
		keys: []spec{
			{name: "level", doc: "Least severe level logged.", rule: oneOf("debug", "info", "warn", "error")},
			{name: "format", doc: "Log line format.", rule: oneOf("text", "json")},
		}},
}

// The ranges of the sidecar's own settings; the sweep's and the scheduler's come from their packages.
var (
	// gcInterval: under a second the collector would list the blob store back to back; a day between
	// passes leaves a crash's orphans for a day at most.
	gcInterval = sweeper.Range[time.Duration]{Min: time.Second, Max: 24 * time.Hour}
	// gcGrace: it must exceed max_agent_duration (at least a second, validated apart); past 30 days
	// orphans would outlive any reason to keep them.
	gcGrace = sweeper.Range[time.Duration]{Min: time.Second, Max: 30 * 24 * time.Hour}
	// scrub: a run a minute at most (each reads the blob layer); a month between runs at most.
	scrubInterval    = sweeper.Range[time.Duration]{Min: time.Minute, Max: 30 * 24 * time.Hour}
	scrubMaxBytes    = sweeper.Range[int]{Min: 1 << 20, Max: 1 << 50}
	scrubMaxDuration = sweeper.Range[time.Duration]{Min: time.Second, Max: 24 * time.Hour}
	// retention: under a minute an oplog could expire while the sweep that archived it still reports
	// it; a hundred years is "forever" written as a number.
	retention = sweeper.Range[time.Duration]{Min: time.Minute, Max: 100 * 365 * 24 * time.Hour}
	// maxBodyBytes: under 256 bytes even a small assignment with a lease is refused, so every PUT would
	// fail; over 1 GiB one request could make the sidecar hold more than the residency feed of any
	// fleet needs.
	maxBodyBytes = sweeper.Range[int]{Min: 256, Max: 1 << 30}
	// residencyTTL: under a second the executor would have to send its whole resident set faster than
	// the sweep ticks, or the sweep stands down; a feed a day old says nothing about what runs now.
	residencyTTL = sweeper.Range[time.Duration]{Min: time.Second, Max: 24 * time.Hour}
	// bodyTimeout: under a second, a full body could miss it on a busy node (a GC pause, a CPU-starved
	// container); over 10 minutes one slow client would hold the residency feed past any useful
	// residency.ttl.
	bodyTimeout = sweeper.Range[time.Duration]{Min: time.Second, Max: 10 * time.Minute}
	// idleTimeout: under a second keep-alive is lost between a client's requests (every scrape and PUT
	// would reconnect); over an hour the connections of clients that vanished pile up.
	idleTimeout = sweeper.Range[time.Duration]{Min: time.Second, Max: time.Hour}
)

// The defaults of http.body_timeout and http.idle_timeout; the key table says why these.
const (
	DefaultBodyTimeout = 10 * time.Second
	DefaultIdleTimeout = 2 * time.Minute
)

// section is one [table] of the file.
type section struct {
	name string // the table's name, lower case without underscores: STRATA_<SECTION>_<KEY> splits at the first _
	doc  string // one sentence on what the section configures
	keys []spec
}

// spec describes one key.
type spec struct {
	name    string // the key within its section, as in the file
	doc     string // what it means, one sentence or two
	unit    string // the unit of an integer, "" when it has none (a duration's unit is in its value)
	rule    rule   // what values are allowed; the zero rule allows every value of the type
	note    string // clamps and special values
	untuned bool   // a starting point, not a measured optimum
	secret  bool   // never echoed in an error

	// Filled in by init.
	key   string   // "section.name"
	env   string   // STRATA_SECTION_NAME
	kind  kind     // the field's type
	field []int    // the field's index path in Config
	sec   *section // its section
}

// rule is a constraint on a key's value beyond its type.
type rule struct {
	want string           // what is allowed, as an object phrase: "an integer ≥ 1"
	ok   func(v any) bool // v is a string, int, bool or time.Duration, by the key's kind
}

func intBetween(lo, hi int) rule {
	return rule{want: fmt.Sprintf("an integer from %d to %d", lo, hi),
		ok: func(v any) bool { return v.(int) >= lo && v.(int) <= hi }}
}

func durationBetween(lo, hi time.Duration) rule {
	return rule{want: "a duration from " + FormatBound(lo) + " to " + FormatBound(hi),
		ok: func(v any) bool { return v.(time.Duration) >= lo && v.(time.Duration) <= hi }}
}

// intWithin and durationWithin are the rules of a range the package that uses the value defines
// (sweeper.Range and schedule.Range are bounds.Range), so the key table and that package share it.
func intWithin(r bounds.Range[int]) rule { return intBetween(r.Min, r.Max) }

func durationWithin(r bounds.Range[time.Duration]) rule { return durationBetween(r.Min, r.Max) }

// offOrIntWithin allows 0 (off) and the integers of r.
func offOrIntWithin(r bounds.Range[int]) rule {
	return rule{want: fmt.Sprintf("0 (off) or an integer from %d to %d", r.Min, r.Max),
		ok: func(v any) bool { return v.(int) == 0 || v.(int) >= r.Min && v.(int) <= r.Max }}
}

// offOrDurationWithin allows 0 (off) and the durations of r.
func offOrDurationWithin(r bounds.Range[time.Duration]) rule {
	return rule{want: "0 (off) or a duration from " + FormatBound(r.Min) + " to " + FormatBound(r.Max),
		ok: func(v any) bool {
			return v.(time.Duration) == 0 || v.(time.Duration) >= r.Min && v.(time.Duration) <= r.Max
		}}
}

// FormatBound writes a duration bound as the messages show it: 0 without a unit, "24h" rather than
// "24h0m0s", and whole days of two or more also in days.
func FormatBound(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d == 0:
		return "0"
	case d >= 2*day && d%day == 0:
		return fmt.Sprintf("%s (%d days)", formatDuration(d), d/day)
	}
	return formatDuration(d)
}

func oneOf(values ...string) rule {
	return rule{want: "one of " + strings.Join(values, ", "), ok: func(v any) bool { return slices.Contains(values, v.(string)) }}
}

// The URL schemes each opener in package backends understands (backends.Schemes, BlobSchemes and
// ScheduleSchemes; a test keeps the lists equal). Only the scheme, and that memory:// is bare, is
// checked here; the opener checks the rest of the URL when the process starts.
var (
	storageSchemes  = []string{"memory", "sqlite", "multisqlite", "postgres", "postgresql", "redis", "redis+cluster"}
	blobSchemes     = []string{"fs", "file", "memory", "s3", "gs", "azblob", "mem"}
	scheduleSchemes = []string{"memory", "sqlite", "postgres", "postgresql"}
)

var (
	storageURL = urlRule(storageSchemes, "memory://, sqlite:relative/file.db, sqlite:///abs/file.db, "+
		"multisqlite:relative/dir, multisqlite:///abs/dir, postgres://user@host:5432/db?schema=…, "+
		"postgresql://…, redis://host:6379/0?prefix=…, or redis+cluster://host:7000,host:7001/?prefix=…")
	blobURL = urlRule(blobSchemes, "fs:relative/dir, fs:///abs/dir, file:///abs/dir, memory://, "+
		"s3://bucket/prefix?region=…, gs://bucket/prefix, azblob://container/prefix or mem://")
	scheduleURL = urlRule(scheduleSchemes, "sqlite:relative/file.db, sqlite:///abs/file.db, "+
		"postgres://user@host:5432/db?schema=…, postgresql://… or memory://")
)

func urlRule(schemes []string, forms string) rule {
	return rule{want: "a URL of the form " + forms, ok: func(v any) bool {
		u, err := url.Parse(v.(string))
		if err != nil || !slices.Contains(schemes, u.Scheme) {
			return false
		}
		return u.Scheme != "memory" || (u.Host == "" && (u.Path == "" || u.Path == "/") && u.Opaque == "" && u.RawQuery == "")
	}}
}

var listenAddress = rule{want: "host:port with a numeric port from 0 to 65535 (an empty host listens on every interface)",
	ok: func(v any) bool {
		_, port, err := net.SplitHostPort(v.(string))
		if err != nil {
			return false
		}
		n, err := strconv.ParseUint(port, 10, 16)
		return err == nil && n <= 65535
	}}

var bearerToken = rule{want: "printable ASCII without spaces", ok: func(v any) bool {
	return !strings.ContainsFunc(v.(string), func(r rune) bool { return r <= ' ' || r > '~' })
}}
