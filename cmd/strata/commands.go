package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stratalog/strata/config"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/demo"
	"github.com/stratalog/strata/internal/sidecar"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
)

// flags is a command's flag set, with the flags every command that opens storage shares.
func flags(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "TOML configuration `file` (default: built-in defaults and STRATA_* variables)")
	return fs, path
}

func loadConfig(path string) (config.Config, error) {
	return config.Load(path, environ())
}

func cmdRun(ctx context.Context, args []string, stderr io.Writer) error {
	fs, path := flags("run", stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.Log.SlogLevel(), cfg.Log.Format)
	sc, err := sidecar.Open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer sc.Close()
	return sc.Run(ctx)
}

// openQuiet opens the stores for a one-shot command, logging warnings only.
func openQuiet(ctx context.Context, path string, stderr io.Writer) (*sidecar.Sidecar, config.Config, error) {
	cfg, err := loadConfig(path)
	if err != nil {
		return nil, cfg, err
	}
	sc, err := sidecar.Open(ctx, cfg, newLogger(stderr, slog.LevelWarn, cfg.Log.Format))
	return sc, cfg, err
}

func cmdSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, path := flags("sweep", stderr)
	once := fs.Bool("once", false, "run one full sweep and exit (required: `strata run` sweeps continuously)")
	asJSON := fs.Bool("json", false, "print each tick's report as a JSON line")
	gap := fs.Duration("gap", 10*time.Second, "wait between the sweep's two passes: an agent whose oplog did not change for this long is archived")
	shards := fs.String("shards", "0", "comma-separated `shards` this process owns")
	shardCount := fs.Int("shard-count", 1, "how many shards the cluster has")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !*once {
		return &usageError{"only --once is supported here; `strata run` sweeps continuously"}
	}
	owned, err := parseShards(*shards)
	if err != nil {
		return &usageError{err.Error()}
	}
	sc, _, err := openQuiet(ctx, *path, stderr)
	if err != nil {
		return err
	}
	defer sc.Close()
	// Nothing is known to be resident from the command line: the quiet gate (no change for --gap) and
	// the archive step's bounded drop are what keep a live agent's entries safe.
	sc.SetResident(nil)
	sc.SetAssignment(sweeper.Assignment{ShardCount: *shardCount, Shards: owned})

	// A sweep archives an agent seen unchanged by two passes: tick until every route has completed two.
	archived, ticks := 0, 0
	completed := map[string]int{}
	for {
		rep := sc.Sweeper().SweepOnce(ctx)
		ticks++
		archived += rep.Outcomes[sweeper.OutcomeArchived]
		if *asJSON {
			line, _ := json.Marshal(sidecar.ReportJSON(rep))
			fmt.Fprintln(stdout, string(line))
		} else {
			fmt.Fprintf(stdout, "tick %d: %s\n", ticks, summarize(rep))
		}
		if rep.Unassigned || rep.StoodDown != "" || rep.Disabled || ctx.Err() != nil {
			break
		}
		done := true
		for _, rr := range rep.Routes {
			if rr.PassCompleted {
				completed[rr.Route]++
			}
			done = done && completed[rr.Route] >= 2
		}
		if done {
			break
		}
		wait := rep.NextWait
		if rep.Routes != nil && anyCompleted(rep) {
			wait = *gap
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(wait, *gap)):
		}
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "archived %d agents in %d ticks\n", archived, ticks)
	}
	return nil
}

func anyCompleted(rep sweeper.Report) bool {
	for _, rr := range rep.Routes {
		if rr.PassCompleted {
			return true
		}
	}
	return false
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
		if err != nil || n < 0 {
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

func cmdScan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, path := flags("scan", stderr)
	mode := fs.String("mode", "ephemeral", "agent `mode`: ephemeral or durable")
	layerName := fs.String("layer", "compressed-1", "the `layer` to walk (one that can enumerate its agents)")
	limit := fs.Int("limit", 0, "stop after this many agents (0: all)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	m, err := oplog.ParseMode(*mode)
	if err != nil {
		return &usageError{err.Error()}
	}
	sc, _, err := openQuiet(ctx, *path, stderr)
	if err != nil {
		return err
	}
	defer sc.Close()
	layer, names := layerNamed(sc.Stack(), *layerName)
	if layer == nil {
		return &usageError{fmt.Sprintf("no layer %q; the stack has %s", *layerName, strings.Join(names, ", "))}
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tLAST INDEX")
	n := 0
	for from := (is.Resume{}); ; {
		page, err := layer.ScanAgents(ctx, m, from, 256)
		if err != nil {
			return err
		}
		for _, key := range page.Keys {
			last := "?"
			if a, err := oplog.ParseAgentKey(key); err == nil {
				if idx, ok, err := layer.LastIndex(ctx, a, m); err == nil && ok {
					last = strconv.FormatUint(uint64(idx), 10)
				}
			}
			fmt.Fprintf(tw, "%s\t%s\n", key, last)
			if n++; *limit > 0 && n >= *limit {
				return tw.Flush()
			}
		}
		if page.Done {
			break
		}
		from = page.Next
	}
	return tw.Flush()
}

func cmdInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, path := flags("inspect", stderr)
	mode := fs.String("mode", "ephemeral", "agent `mode`: ephemeral or durable")
	if err := fs.Parse(args); err != nil {
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
	sc, _, err := openQuiet(ctx, *path, stderr)
	if err != nil {
		return err
	}
	defer sc.Close()
	stack := sc.Stack()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "LAYER\tFIRST\tLAST\tENTRIES\n")
	for _, l := range stack.Layers() {
		first, ok, err := l.FirstIndex(ctx, agent, m)
		if err != nil {
			return err
		}
		if !ok {
			fmt.Fprintf(tw, "%s\t-\t-\t0\n", l.Name())
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
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", l.Name(), first, last, count)
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
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&d.Dir, "dir", d.Dir, "`directory` for the embedded SQLite file and the blob store (created; a second run reuses it)")
	fs.IntVar(&d.Invocations, "invocations", d.Invocations, "ephemeral invocations the executor runs")
	fs.Float64Var(&d.LoseRate, "lose", d.LoseRate, "share of teardown drains lost, 0..1")
	fs.Uint64Var(&d.Seed, "seed", 0, "random seed (0: random)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if d.LoseRate < 0 || d.LoseRate > 1 || d.Invocations < 1 {
		return &usageError{"--lose must be within 0..1 and --invocations at least 1"}
	}
	d.Out = stdout
	_, err := demo.Run(ctx, d)
	return err
}

func cmdConfig(args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 || args[0] != "defaults" {
		return &usageError{"usage: strata config defaults"}
	}
	_, err := io.WriteString(stdout, config.DefaultsTOML())
	return err
}
