package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stratalog/strata/backends"
	"github.com/stratalog/strata/config"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/cmd/strata/internal/demo"
	"github.com/stratalog/strata/internal/redact"
	"github.com/stratalog/strata/internal/sidecar"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
)

// flags is a command's flag set, with the flags every command that opens storage shares.
func flags(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := withHelp(flag.NewFlagSet(name, flag.ContinueOnError), name)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "TOML configuration `file` (default: built-in defaults and STRATA_* variables)")
	return fs, path
}

// parseFlags parses args into fs. A bad flag is a usage error (exit 2), as a bad value is; the flag
// package has already printed the usage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return &usageError{err.Error()}
}

func loadConfig(path string) (config.Config, error) {
	return config.Load(path, environ())
}

// loadLogged is loadConfig for a command that logs: when the configuration is bad but asks for JSON
// logs, the error is written as a JSON line too.
func loadLogged(path string, stderr io.Writer, out *errorSink) (config.Config, error) {
	cfg, err := loadConfig(path)
	if err != nil && config.LogFormatHint(path, environ()) == "json" {
		out.use(newLogger(stderr, slog.LevelInfo, "json"), "json")
	}
	return cfg, err
}

func cmdRun(ctx context.Context, args []string, stderr io.Writer, out *errorSink) error {
	fs, path := flags("run", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return &usageError{fmt.Sprintf("run takes no arguments (got %q)", fs.Arg(0))}
	}
	cfg, err := loadLogged(*path, stderr, out)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.Log.SlogLevel(), cfg.Log.Format)
	out.use(log, cfg.Log.Format)
	routeLibraryLogs(log)
	sc, err := sidecar.Open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer sc.Close()
	return sc.Run(ctx)
}

// openQuiet opens the stores for a one-shot command, logging warnings only.
func openQuiet(ctx context.Context, path string, stderr io.Writer, out *errorSink, opts ...sidecar.Option) (*sidecar.Sidecar, config.Config, error) {
	cfg, err := loadLogged(path, stderr, out)
	if err != nil {
		return nil, cfg, err
	}
	log := newLogger(stderr, slog.LevelWarn, cfg.Log.Format)
	out.use(log, cfg.Log.Format)
	sc, err := sidecar.Open(ctx, cfg, log, opts...)
	return sc, cfg, err
}

// redactingWriter redacts each write: a storage error a report or a row shows may echo a URL. Every
// write of these commands is a whole line or more.
type redactingWriter struct{ w io.Writer }

func (r redactingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, redact.String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// readOnly is the layer stack a read-only command (scan, inspect) reads, opened so that nothing is
// created: no database, file, directory, schema or table.
type readOnly struct {
	stack *oplog.Stack
	close func()
}

// openReadOnly opens the storage and the blob store the config names, both of which must exist, and
// the stack over them; the schedule store is not opened.
func openReadOnly(ctx context.Context, path string, stderr io.Writer, out *errorSink) (*readOnly, error) {
	cfg, err := loadLogged(path, stderr, out)
	if err != nil {
		return nil, err
	}
	out.use(newLogger(stderr, slog.LevelWarn, cfg.Log.Format), cfg.Log.Format)
	st, err := backends.OpenExisting(ctx, cfg.Storage.URL)
	if err != nil {
		return nil, fmt.Errorf("storage.url %s: %w (scan and inspect create nothing; strata run creates it)", redact.URL(cfg.Storage.URL), err)
	}
	blobs, err := backends.OpenBlobExisting(ctx, cfg.Blob.URL)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("blob.url %s: %w (scan and inspect create nothing; strata run creates it)", redact.URL(cfg.Blob.URL), err)
	}
	stack, err := sidecar.BuildStack(st, blobs, cfg.Stack.CompressedLevels)
	if err != nil {
		st.Close()
		blobs.Close()
		return nil, err
	}
	return &readOnly{stack: stack, close: func() { st.Close(); blobs.Close() }}, nil
}

// The ranges of sweep --once's flags, checked before any storage is opened. --gap is bounded as
// sweep.interval is; --max-ticks' default covers two passes over about two million keys (or 256,000
// stranded agents) at the default budgets, and a run that needs more is better split.
var (
	gapRange      = sweeper.Range[time.Duration]{Min: 0, Max: 24 * time.Hour}
	maxTicksRange = sweeper.Range[int]{Min: 1, Max: 1_000_000}
)

const defaultMaxTicks = 1000

func cmdSweep(ctx context.Context, args []string, stdout, stderr io.Writer, out *errorSink) error {
	stdout = redactingWriter{stdout}
	fs, path := flags("sweep", stderr)
	once := fs.Bool("once", false, "run one full sweep and exit (required: `strata run` sweeps continuously)")
	asJSON := fs.Bool("json", false, "print each tick's report as a JSON line")
	gap := fs.Duration("gap", 10*time.Second, fmt.Sprintf("wait between the sweep's two passes, %s to %s: an agent whose "+
		"oplog did not change for this long is archived", config.FormatBound(gapRange.Min), config.FormatBound(gapRange.Max)))
	maxTicks := fs.Int("max-ticks", defaultMaxTicks, fmt.Sprintf("give up after this many ticks, %d to %d, and fail",
		maxTicksRange.Min, maxTicksRange.Max))
	shards := fs.String("shards", "0", "comma-separated `shards` this process owns")
	shardCount := fs.Int("shard-count", 1, fmt.Sprintf("how many shards the cluster has, 0 to %d", sweeper.MaxShardCount))
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return &usageError{fmt.Sprintf("sweep takes no arguments (got %q)", fs.Arg(0))}
	}
	if !*once {
		return &usageError{"only --once is supported here; `strata run` sweeps continuously"}
	}
	if !gapRange.Contains(*gap) {
		return &usageError{fmt.Sprintf("--gap %s: want a duration from %s to %s", *gap, config.FormatBound(gapRange.Min), config.FormatBound(gapRange.Max))}
	}
	if !maxTicksRange.Contains(*maxTicks) {
		return &usageError{fmt.Sprintf("--max-ticks %d: want %d to %d", *maxTicks, maxTicksRange.Min, maxTicksRange.Max)}
	}
	owned, err := parseShards(*shards)
	if err != nil {
		return &usageError{err.Error()}
	}
	// The same validation as PUT /v1/assignment; no lease, as the assignment lives as long as the command.
	assignment, err := sweeper.NewAssignment(*shardCount, owned, 0, time.Now())
	if err != nil {
		return &usageError{fmt.Sprintf("--shards %s --shard-count %d: %v", *shards, *shardCount, err)}
	}
	// No executor runs beside the command: nothing is resident, and the sweep never stands down for
	// residency however long the run takes. The quiet gate (no change for --gap) and the archive
	// step's bounded drop are what keep a live agent's entries safe.
	sc, _, err := openQuiet(ctx, *path, stderr, out, sidecar.WithoutExecutor())
	if err != nil {
		return err
	}
	defer sc.Close()
	sc.SetAssignment(assignment)

	run := newOnceSweep(*maxTicks)
	for {
		rep := sc.Sweeper().SweepOnce(ctx)
		stop := run.observe(rep)
		if *asJSON {
			raw, _ := json.Marshal(onceReportJSON(rep))
			fmt.Fprintln(stdout, string(raw))
		} else {
			fmt.Fprintf(stdout, "tick %d: %s\n", run.ticks, summarize(rep))
			for _, u := range unreadableOf(rep) {
				fmt.Fprintf(stdout, "  unreadable: %s: %s\n", u.Where, u.Err)
			}
			if n := rep.Outcomes[sweeper.OutcomeUnreadable] - len(unreadableOf(rep)); n > 0 {
				fmt.Fprintf(stdout, "  unreadable: %d more not listed\n", n)
			}
		}
		if stop || ctx.Err() != nil {
			break
		}
		// The second pass must come at least --gap after the first; until a pass completes, the next
		// tick continues the walk, after the sweep's own wait (its backoff) but never longer than --gap.
		wait := rep.NextWait
		if anyCompleted(rep) {
			wait = *gap
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(wait, *gap)):
		}
	}
	if !*asJSON {
		fmt.Fprintln(stdout, run.summary())
	}
	if run.stopped == keepGoing && ctx.Err() != nil {
		return fmt.Errorf("interrupted after %d ticks, before the sweep completed", run.ticks)
	}
	return run.err()
}

// onceReportJSON is a tick's report as sweep --once --json prints it: the API's, with each route's
// count of agents it found and left unarchived.
func onceReportJSON(rep sweeper.Report) map[string]any {
	out := sidecar.ReportJSON(rep)
	if routes, ok := out["routes"].([]map[string]any); ok && len(routes) == len(rep.Routes) {
		for i, rr := range rep.Routes {
			routes[i]["unarchived"] = rr.Unarchived
		}
	}
	return out
}

func anyCompleted(rep sweeper.Report) bool {
	for _, rr := range rep.Routes {
		if rr.PassCompleted {
			return true
		}
	}
	return false
}

// unreadableOf lists the unreadable keys the tick's routes listed.
func unreadableOf(rep sweeper.Report) []sweeper.UnreadableKey {
	out := []sweeper.UnreadableKey{}
	for _, rr := range rep.Routes {
		out = append(out, rr.Unreadable...)
	}
	return out
}

// onceStop is why `strata sweep --once` stopped.
type onceStop int

const (
	keepGoing     onceStop = iota
	stopDone               // every route completed two passes, and the archives they found are done
	stopIdle               // the sweep did nothing and will not: disabled, unassigned or stood down from the start
	stopStoodDown          // the sweep ran, then stood down (or went unassigned or disabled) before it completed
	stopStuck              // a tick made no progress at all while routes reported errors: storage is down
	stopMaxTicks           // --max-ticks ticks without completing
)

// onceSweep is what `strata sweep --once` has seen so far. Whether to go on, and whether the run
// failed, are decided from the reports alone, so both are tested with fabricated reports.
type onceSweep struct {
	maxTicks  int
	ticks     int
	archived  int
	completed map[string]int // passes each route completed

	archiveFailed, unreadable, storageErrors int
	// unreadableKeys are the distinct unreadable keys the reports listed (by route and where), the
	// first sweeper.MaxUnreadableListed of them; moreUnreadable counts the other distinct ones.
	unreadableKeys []sweeper.UnreadableKey
	moreUnreadable int
	seen           map[[2]string]bool

	// ran: a tick ran (did not stand down). A stand-down after one is a failure, never idleness: the
	// sweep had started and what it found stays where it is.
	ran bool
	// unarchived is what the last tick that ran reported its routes found and left in the layer;
	// untracked counts the sightings the tracking table had no room for, over the run.
	unarchived, untracked int
	standDown             string // what the stand-down said, for stopStoodDown

	stopped   onceStop
	stuckTick int // the tick that made no progress, for stopStuck
}

func newOnceSweep(maxTicks int) *onceSweep {
	return &onceSweep{maxTicks: maxTicks, completed: map[string]int{}, seen: map[[2]string]bool{}}
}

// observe takes one tick's report and reports whether to stop.
func (o *onceSweep) observe(rep sweeper.Report) (stop bool) {
	o.ticks++
	o.archived += rep.Outcomes[sweeper.OutcomeArchived]
	o.archiveFailed += rep.Outcomes[sweeper.OutcomeArchiveFailed]
	o.unreadable += rep.Outcomes[sweeper.OutcomeUnreadable]
	o.untracked += rep.Outcomes[sweeper.OutcomeUntracked]
	if idle := rep.Disabled || rep.Unassigned || rep.StoodDown != ""; idle {
		if o.stopped = stopIdle; o.ran {
			o.stopped, o.standDown = stopStoodDown, summarize(rep)
		}
		return true
	}
	o.ran = true
	o.unarchived = 0
	for _, rr := range rep.Routes {
		o.unarchived += rr.Unarchived
	}
	progress, failures, budgetBound := false, 0, false
	for _, rr := range rep.Routes {
		budgetBound = budgetBound || rr.Truncated == sweeper.ReasonArchiveBudget
		o.storageErrors += rr.Errors
		failures += rr.Errors + rr.Outcomes[sweeper.OutcomeUnreadable] + rr.Outcomes[sweeper.OutcomeArchiveFailed]
		if rr.Scanned > 0 || rr.PassCompleted || rr.Outcomes[sweeper.OutcomeArchived] > 0 || rr.Outcomes[sweeper.OutcomeDeclined] > 0 {
			progress = true
		}
		if rr.PassCompleted {
			o.completed[rr.Route]++
		}
		for _, u := range rr.Unreadable {
			id := [2]string{u.Route, u.Where}
			switch {
			case o.seen[id]:
			case len(o.unreadableKeys) < sweeper.MaxUnreadableListed:
				o.seen[id] = true
				o.unreadableKeys = append(o.unreadableKeys, u)
			default:
				o.seen[id] = true
				o.moreUnreadable++
			}
		}
	}
	// A route cut by its archive budget has agents through the gate waiting for the next tick, even
	// after its second pass: go on until no tick is.
	done := !budgetBound
	for _, rr := range rep.Routes {
		done = done && o.completed[rr.Route] >= 2
	}
	switch {
	case done:
		o.stopped = stopDone
	case !progress && failures > 0:
		o.stopped, o.stuckTick = stopStuck, o.ticks
	case o.ticks >= o.maxTicks:
		o.stopped = stopMaxTicks
	}
	return o.stopped != keepGoing
}

// summary is the last line of the text output: what was archived, what was left, and every
// unreadable key.
func (o *onceSweep) summary() string {
	line := fmt.Sprintf("archived %d agents in %d ticks", o.archived, o.ticks)
	if o.unarchived > 0 {
		line += fmt.Sprintf("; %d found and left unarchived", o.unarchived)
	}
	if len(o.unreadableKeys) > 0 {
		var keys []string
		for _, u := range o.unreadableKeys {
			keys = append(keys, fmt.Sprintf("%s (%s)", u.Where, u.Err))
		}
		line += "; unreadable: " + strings.Join(keys, ", ")
		if o.moreUnreadable > 0 {
			line += fmt.Sprintf(" and %d more", o.moreUnreadable)
		}
	}
	return line
}

// err is the run's verdict: nil only when it completed, or had nothing to do, and nothing failed.
func (o *onceSweep) err() error {
	var parts []string
	switch o.stopped {
	case stopStuck:
		parts = append(parts, fmt.Sprintf("storage down: tick %d made no progress and its routes reported errors", o.stuckTick))
	case stopMaxTicks:
		parts = append(parts, fmt.Sprintf("no complete sweep in --max-ticks %d ticks: some route did not complete two passes", o.maxTicks))
	case stopStoodDown:
		parts = append(parts, fmt.Sprintf("the sweep stopped at tick %d before it completed (%s)", o.ticks, o.standDown))
	}
	if o.unarchived > 0 {
		parts = append(parts, fmt.Sprintf("%d agents it found are still in the layer, unarchived (waiting for a second "+
			"sighting with no change, or through the gate and not yet archived): run it again, with a longer --gap "+
			"if they are still being written", o.unarchived))
	}
	if o.untracked > 0 {
		parts = append(parts, fmt.Sprintf("%d sightings went untracked, the tracking table full (sweep.max_tracked_agents)", o.untracked))
	}
	if o.archiveFailed > 0 {
		parts = append(parts, fmt.Sprintf("%d archive attempts failed", o.archiveFailed))
	}
	if o.unreadable > 0 {
		var wheres []string
		for _, u := range o.unreadableKeys {
			wheres = append(wheres, u.Where)
		}
		if o.moreUnreadable > 0 {
			wheres = append(wheres, fmt.Sprintf("and %d more", o.moreUnreadable))
		}
		parts = append(parts, fmt.Sprintf("unreadable: %s (%d failed reads)", strings.Join(wheres, ", "), o.unreadable))
	}
	if o.storageErrors > 0 {
		parts = append(parts, fmt.Sprintf("%d storage calls failed (see the log)", o.storageErrors))
	}
	if len(parts) == 0 {
		return nil
	}
	return errors.New("sweep failed: " + strings.Join(parts, "; "))
}

func summarize(rep sweeper.Report) string {
	switch {
	case rep.Disabled:
		return "sweep disabled (sweep.enabled = false)"
	case rep.StoodDown != "":
		return "stood down: " + rep.StoodDown
	case rep.Unassigned:
		return "unassigned: " + rep.UnassignedReason
	}
	var parts []string
	for _, o := range sweeper.Outcomes {
		if n := rep.Outcomes[o]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", o, n))
		}
	}
	errs := 0
	for _, rr := range rep.Routes {
		errs += rr.Errors
	}
	if errs > 0 {
		parts = append(parts, fmt.Sprintf("%d failed storage calls", errs))
	}
	if len(rep.Truncated) > 0 {
		parts = append(parts, fmt.Sprintf("truncated by %v", rep.Truncated))
	}
	if len(parts) == 0 {
		return "nothing in the layer"
	}
	return strings.Join(parts, ", ")
}

func parseShards(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("--shards: %q is not a shard number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// layerNamed finds a layer of the stack by name.
func layerNamed(stack *oplog.Stack, name string) (oplog.Layer, []string) {
	var names []string
	for _, l := range stack.Layers() {
		names = append(names, l.Name())
		if l.Name() == name {
			return l, nil
		}
	}
	return nil, names
}

func cmdScan(ctx context.Context, args []string, stdout, stderr io.Writer, out *errorSink) error {
	stdout = redactingWriter{stdout}
	fs, path := flags("scan", stderr)
	asJSON := fs.Bool("json", false, "print each agent as a JSON line: {\"agent\":…,\"last_index\":N} or {\"agent\":…,\"unreadable\":…}")
	mode := fs.String("mode", "ephemeral", "agent `mode`: ephemeral or durable")
	layerName := fs.String("layer", "compressed-1", "the `layer` to walk (one that can enumerate its agents)")
	limit := fs.Int("limit", 0, "stop after this many agents (0: all)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	m, err := oplog.ParseMode(*mode)
	if err != nil {
		return &usageError{err.Error()}
	}
	if *limit < 0 {
		return &usageError{fmt.Sprintf("--limit %d: want 0 (all) or more", *limit)}
	}
	if fs.NArg() != 0 {
		return &usageError{"scan takes no arguments"}
	}
	ro, err := openReadOnly(ctx, *path, stderr, out)
	if err != nil {
		return err
	}
	defer ro.close()
	layer, names := layerNamed(ro.stack, *layerName)
	if layer == nil {
		return &usageError{fmt.Sprintf("no layer %q; the stack has %s", *layerName, strings.Join(names, ", "))}
	}
	var rows scanRows = &tableRows{tw: tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)}
	if *asJSON {
		rows = jsonRows{enc: json.NewEncoder(stdout)}
	}
	unreadable, err := scanLayer(ctx, layer, m, *limit, rows)
	switch {
	case err != nil:
		return err
	case unreadable > 0:
		return fmt.Errorf("%d agents or files could not be read (the rows marked unreadable)", unreadable)
	}
	return nil
}

// scanLayer writes the agents the layer holds in mode, with their last index, up to limit agents (0:
// all). What it cannot read, a file the page passed over or an agent whose last index read failed, is a
// row marked unreadable with the error, and the walk goes on; it returns how many there were. Only a
// failed page read, which leaves no place to resume from, stops it.
func scanLayer(ctx context.Context, layer oplog.Layer, m oplog.Mode, limit int, w scanRows) (unreadable int, err error) {
	defer func() {
		if ferr := w.flush(); err == nil {
			err = ferr
		}
	}()
	w.header()
	n := 0
	for from := (is.Resume{}); ; {
		page, err := layer.ScanAgents(ctx, m, oplog.BucketRange{Lo: 0, Hi: oplog.Buckets}, from, 256)
		if err != nil {
			return unreadable, err
		}
		for _, u := range page.Unreadable {
			where := u.Where
			if where == "" {
				where = u.Key
			}
			w.unreadable(where, fmt.Sprint(u.Err))
			unreadable++
		}
		for _, key := range page.Keys {
			// An agent is listed by its own key; a stored key that is no agent's, as it is stored.
			a, err := oplog.ParseStoredKey(key)
			if err != nil {
				w.agent(key, nil)
			} else if idx, ok, err := layer.LastIndex(ctx, a, m); err != nil {
				w.unreadable(a.Key(), err.Error())
				unreadable++
			} else if ok {
				w.agent(a.Key(), &idx)
			} else {
				w.agent(a.Key(), nil)
			}
			if n++; limit > 0 && n >= limit {
				return unreadable, nil
			}
		}
		if page.Done {
			return unreadable, nil
		}
		from = page.Next
	}
}

// scanRows is how scan writes its rows: a table, or JSON lines.
type scanRows interface {
	header()
	agent(key string, last *oplog.Index) // last is nil when the agent holds no entry (or the key is not an agent's)
	unreadable(where, err string)
	flush() error
}

type tableRows struct{ tw *tabwriter.Writer }

func (t *tableRows) header() { fmt.Fprintln(t.tw, "AGENT\tLAST INDEX") }
func (t *tableRows) agent(key string, last *oplog.Index) {
	shown := "?"
	if last != nil {
		shown = strconv.FormatUint(uint64(*last), 10)
	}
	fmt.Fprintf(t.tw, "%s\t%s\n", key, shown)
}
func (t *tableRows) unreadable(where, err string) {
	fmt.Fprintf(t.tw, "%s\tunreadable: %s\n", where, err)
}
func (t *tableRows) flush() error { return t.tw.Flush() }

type jsonRows struct{ enc *json.Encoder }

func (j jsonRows) header() {}
func (j jsonRows) agent(key string, last *oplog.Index) {
	_ = j.enc.Encode(map[string]any{"agent": key, "last_index": last})
}
func (j jsonRows) unreadable(where, err string) {
	_ = j.enc.Encode(map[string]any{"agent": where, "unreadable": redact.String(err)})
}
func (j jsonRows) flush() error { return nil }

func cmdInspect(ctx context.Context, args []string, stdout, stderr io.Writer, out *errorSink) error {
	stdout = redactingWriter{stdout}
	fs, path := flags("inspect", stderr)
	mode := fs.String("mode", "ephemeral", "agent `mode`: ephemeral or durable")
	asJSON := fs.Bool("json", false, "print a JSON object: the agent, the mode and each layer's first, last and entries")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &usageError{"want one AGENT (component:name)"}
	}
	agent, err := oplog.ParseAgentKey(fs.Arg(0))
	if err != nil {
		return &usageError{err.Error()}
	}
	m, err := oplog.ParseMode(*mode)
	if err != nil {
		return &usageError{err.Error()}
	}
	ro, err := openReadOnly(ctx, *path, stderr, out)
	if err != nil {
		return err
	}
	defer ro.close()
	stack := ro.stack
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	layers := []map[string]any{}
	if !*asJSON {
		fmt.Fprintf(tw, "LAYER\tFIRST\tLAST\tENTRIES\n")
	}
	for _, l := range stack.Layers() {
		first, ok, err := l.FirstIndex(ctx, agent, m)
		if err != nil {
			return err
		}
		if !ok {
			layers = append(layers, map[string]any{"layer": l.Name(), "first": nil, "last": nil, "entries": 0})
			if !*asJSON {
				fmt.Fprintf(tw, "%s\t-\t-\t0\n", l.Name())
			}
			continue
		}
		last, _, err := l.LastIndex(ctx, agent, m)
		if err != nil {
			return err
		}
		count, err := countEntries(ctx, l, agent, m, first, last)
		if err != nil {
			return err
		}
		layers = append(layers, map[string]any{"layer": l.Name(), "first": first, "last": last, "entries": count})
		if !*asJSON {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", l.Name(), first, last, count)
		}
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{"agent": agent.Key(), "mode": m, "layers": layers})
	}
	return tw.Flush()
}

// countEntries reads the layer's entries a chunk at a time and counts them.
func countEntries(ctx context.Context, l oplog.Layer, a oplog.AgentID, m oplog.Mode, first, last oplog.Index) (int, error) {
	n := 0
	for from := first; from <= last; {
		batch, err := l.Read(ctx, a, m, from, last, oplog.ChunkLimit)
		if err != nil || len(batch) == 0 {
			return n, err
		}
		n += len(batch)
		from = batch[len(batch)-1].Index + 1
	}
	return n, nil
}

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	d := demo.Defaults()
	fs := withHelp(flag.NewFlagSet("demo", flag.ContinueOnError), "demo")
	fs.SetOutput(stderr)
	fs.StringVar(&d.Dir, "dir", d.Dir, "`directory` for the embedded SQLite file and the blob store (created; a second run reuses it)")
	fs.IntVar(&d.Invocations, "invocations", d.Invocations, "ephemeral invocations the executor runs")
	fs.Float64Var(&d.LoseRate, "lose", d.LoseRate, "share of teardown drains lost, 0..1")
	fs.Uint64Var(&d.Seed, "seed", 0, "random seed (0: random)")
	fs.StringVar(&d.BlobURL, "blob", d.BlobURL, "blob store `URL` (as blob.url: s3://bucket/prefix?…; default $STRATA_BLOB_URL, else fs: under --dir)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return &usageError{fmt.Sprintf("demo takes no arguments (got %q)", fs.Arg(0))}
	}
	if d.LoseRate < 0 || d.LoseRate > 1 || d.Invocations < 1 {
		return &usageError{"--lose must be within 0..1 and --invocations at least 1"}
	}
	d.Out = stdout
	_, err := demo.Run(ctx, d)
	return err
}

func cmdConfig(args []string, stdout, stderr io.Writer, out *errorSink) error {
	switch {
	case len(args) == 0:
		return &usageError{"usage: " + commands["config"].synopsis}
	case wantsHelp(args):
		printCommandHelp(stderr, "config", nil)
		return flag.ErrHelp
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "defaults":
		if len(rest) != 0 {
			return &usageError{"usage: strata config defaults"}
		}
		_, err := io.WriteString(stdout, config.DefaultsTOML())
		return err
	case "check":
		if len(rest) != 1 || strings.HasPrefix(rest[0], "-") {
			return &usageError{"usage: strata config check FILE"}
		}
		if _, err := loadConfig(rest[0]); err != nil {
			return err
		}
		_, err := fmt.Fprintf(stdout, "%s: ok\n", rest[0])
		return err
	case "print":
		fs, path := flags("config", stderr)
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
		if fs.NArg() != 0 {
			return &usageError{"usage: strata config print [--config FILE]"}
		}
		cfg, err := loadConfig(*path)
		if err != nil {
			return err
		}
		_, err = io.WriteString(stdout, cfg.EffectiveTOML())
		return err
	}
	return &usageError{fmt.Sprintf("unknown config command %q; usage: %s", args[0], commands["config"].synopsis)}
}
