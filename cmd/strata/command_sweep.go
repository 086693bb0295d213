package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratalog/strata/config"
	"github.com/stratalog/strata/internal/sidecar"
	"github.com/stratalog/strata/sweeper"
)

// The ranges of sweep --once's flags, checked before any storage is opened. --gap is bounded as
// sweep.interval is; --max-ticks' default covers two passes over about two million keys (or 256,000
// stranded agents) at the default budgets, and a run that needs more is better split.
var (
	gapRange      = sweeper.Range[time.Duration]{Min: 0, Max: 24 * time.Hour}
	maxTicksRange = sweeper.Range[int]{Min: 1, Max: 1_000_000}
)

const defaultMaxTicks = 1000

const sweepLong = `One full sweep from the command line, then exit: two passes over every agent of the shards given
(--shards of --shard-count), --gap apart, then the agents the archive budget left over. An agent is
archived when its oplog did not change between the passes.

No executor runs beside it, so no agent counts as resident and the sweep never stands down for
residency, however long the run takes: the quiet gate and the archive step's bounded drop keep a live
agent's entries safe.

It never looks like success when it was not: after its work it exits 1 if an archive failed, a key was
unreadable (each is named, on stdout and in the error), a storage call failed, the sweep stood down
after it had started, or agents it found are still in the layer unarchived (waiting for a second
sighting with no change, or through the gate and not yet archived), naming how many. It stops early,
failing, when a tick made no progress while storage calls failed (the store is down), and gives up,
failing, after --max-ticks ticks.

--json prints each tick's report as JSON Lines (one JSON object per line, the API's report with each
route's "unarchived" count) and no summary.`

// sweepCommand is `strata sweep --once`.
func (a *app) sweepCommand() *cobra.Command {
	var (
		f          *storeFlags
		once       bool
		asJSON     bool
		gap        time.Duration
		maxTicks   int
		shards     string
		shardCount int
	)
	cmd := &cobra.Command{
		Use:   "sweep --once [flags]",
		Short: "One full sweep from the command line; exits non-zero unless it archived everything it found",
		Long:  sweepLong,
		Args:  noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			if !once {
				return usageErrorf("only --once is supported here; `strata run` sweeps continuously")
			}
			if !gapRange.Contains(gap) {
				return usageErrorf("--gap %s: want a duration from %s to %s", gap, config.FormatBound(gapRange.Min), config.FormatBound(gapRange.Max))
			}
			if !maxTicksRange.Contains(maxTicks) {
				return usageErrorf("--max-ticks %d: want %d to %d", maxTicks, maxTicksRange.Min, maxTicksRange.Max)
			}
			owned, err := parseShards(shards)
			if err != nil {
				return &usageError{err.Error()}
			}
			// The same validation as PUT /v1/assignment; no lease, as the assignment lives as long as the command.
			assignment, err := sweeper.NewAssignment(shardCount, owned, 0, time.Now())
			if err != nil {
				return usageErrorf("--shards %s --shard-count %d: %v", shards, shardCount, err)
			}
			// No executor runs beside the command: nothing is resident, and the sweep never stands
			// down for residency however long the run takes.
			sc, _, err := f.openQuiet(cmd, a, sidecar.WithoutExecutor())
			if err != nil {
				return err
			}
			defer sc.Close()
			sc.SetAssignment(assignment)
			return sweepOnce(cmd, sc, asJSON, gap, maxTicks)
		}),
	}
	fl := cmd.Flags()
	fl.BoolVar(&once, "once", false, "run one full sweep and exit (required: strata run sweeps continuously)")
	fl.BoolVar(&asJSON, "json", false, "print each tick's report as JSON Lines, one JSON object per line")
	fl.DurationVar(&gap, "gap", 10*time.Second, fmt.Sprintf("wait between the sweep's two passes, %s to %s: an agent whose "+
		"oplog did not change for this long is archived", config.FormatBound(gapRange.Min), config.FormatBound(gapRange.Max)))
	fl.IntVar(&maxTicks, "max-ticks", defaultMaxTicks, fmt.Sprintf("give up after this many ticks, %d to %d, and fail",
		maxTicksRange.Min, maxTicksRange.Max))
	fl.StringVar(&shards, "shards", "0", "comma-separated `SHARDS` this process owns")
	fl.IntVar(&shardCount, "shard-count", 1, fmt.Sprintf("how many shards the cluster has, 0 to %d", sweeper.MaxShardCount))
	f = addStoreFlags(cmd, keyStorage, keyBlob, keySchedule)
	return cmd
}

// sweepOnce ticks until the verdict says stop, printing each tick, and returns the verdict.
func sweepOnce(cmd *cobra.Command, sc *sidecar.Sidecar, asJSON bool, gap time.Duration, maxTicks int) error {
	ctx := cmd.Context()
	stdout := redactingWriter{cmd.OutOrStdout()}
	run := newOnceSweep(maxTicks)
	for {
		rep := sc.Sweeper().SweepOnce(ctx)
		stop := run.observe(rep)
		if asJSON {
			raw, _ := json.Marshal(sidecar.ReportJSON(rep))
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
		if wait := run.wait(rep, gap); wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}
	if !asJSON {
		fmt.Fprintln(stdout, run.summary())
	}
	if run.stopped == keepGoing && ctx.Err() != nil {
		return fmt.Errorf("interrupted after %d ticks, before the sweep completed", run.ticks)
	}
	return run.err()
}

// unreadableOf lists the unreadable keys the tick's routes listed.
func unreadableOf(rep sweeper.Report) []sweeper.UnreadableKey {
	out := []sweeper.UnreadableKey{}
	for _, rr := range rep.Routes {
		out = append(out, rr.Unreadable...)
	}
	return out
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
