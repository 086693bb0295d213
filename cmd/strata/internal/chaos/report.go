package chaos

import (
	"fmt"
	"strings"
	"time"

	"github.com/stratalog/strata/sweeper"
)

func ms(d time.Duration) string {
	switch {
	case d == 0:
		return "–"
	case d < 10*time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func ratio(a, b time.Duration) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2fx", float64(a)/float64(b))
}

// markdown renders the figures as the tables BENCHMARKS.md quotes.
func markdown(res Result, t timings, latency, bInterval, bTick time.Duration) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "### Scenario A: %s of one-way latency on the scheduler store\n\n", latency)
	fmt.Fprintf(&sb, "%d ephemeral and %d durable closed-loop workers; baseline %s, fault %s, recovery %s. Latency is an invocation's commit path: think %s, write %d entries, registration hook.\n\n",
		t.aEphemeral, t.aDurable, t.baseline, t.fault, t.recovery, t.think, t.entries)
	sb.WriteString("| stream | sweep | baseline p50 | baseline p90 | baseline inv/s | fault p50 | fault p90 | fault inv/s | fault p50 / baseline p50 |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, stream := range []string{"ephemeral", "durable"} {
		for _, r := range res.A {
			p := r.Ephemeral
			if stream == "durable" {
				p = r.Durable
			}
			fmt.Fprintf(&sb, "| %s | %s | %s | %s | %.0f | %s | %s | %.0f | **%s** |\n", stream, sweepLabel(r.SweepOn, r.DurableRoute),
				ms(p.Baseline.P50), ms(p.Baseline.P90), p.Baseline.Throughput, ms(p.Fault.P50), ms(p.Fault.P90), p.Fault.Throughput,
				ratio(p.Fault.P50, p.Baseline.P50))
		}
	}
	for _, r := range res.A {
		switch {
		case r.DurableRoute:
			fmt.Fprintf(&sb, "\nSweep on with the durable route: ephemeral fault p50 is %s of baseline, durable %s (targets ≤ 1.05x each).",
				ratio(r.Ephemeral.Fault.P50, r.Ephemeral.Baseline.P50), ratio(r.Durable.Fault.P50, r.Durable.Baseline.P50))
		case r.SweepOn:
			fmt.Fprintf(&sb, "\nSweep on: ephemeral fault p50 is %s of baseline (target ≤ 1.05x).", ratio(r.Ephemeral.Fault.P50, r.Ephemeral.Baseline.P50))
		default:
			fmt.Fprintf(&sb, "\nSweep off: ephemeral fault p50 is %s of baseline (the collapse; target ≥ 20x).", ratio(r.Ephemeral.Fault.P50, r.Ephemeral.Baseline.P50))
		}
	}
	sb.WriteString("\n\n")

	fmt.Fprintf(&sb, "### Scenario B: %s of one-way latency on the indexed store, shared through one limiter\n\n", latency)
	fmt.Fprintf(&sb, "%d ephemeral workers (%.0f %% of teardown drains lost) and the sweep share `max_concurrent_ops` = %d on PostgreSQL; a backlog of %d stranded oplogs before the run; baseline %s, fault %s, recovery %s; sweep interval %s; with deadline: `max_tick_duration` %s and backoff up to %d intervals; without: no deadline, no backoff. Timeout for the count: %s.\n\n",
		t.bWorkers, t.bLoseRate*100, t.bSlots, t.bBacklog, t.baseline, t.bFault, t.recovery, bInterval, bTick, sweeper.DefaultMaxBackoffIntervals, t.timeout)
	var off time.Duration
	for _, r := range res.B {
		if r.Mode == "off" {
			off = r.Ephemeral.Fault.P50
		}
	}
	sb.WriteString("| sweep | baseline p50 | fault p50 | fault p50 / sweep-off fault p50 | sweep duty cycle on the limiter (fault) | invocations over the timeout (fault) | fault inv/s |\n|---|---|---|---|---|---|---|\n")
	for _, r := range res.B {
		duty := fmt.Sprintf("%.0f %%", r.Duty*100)
		if r.Mode == "off" {
			duty = "–"
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | **%s** | %s | %d | %.1f |\n", r.Mode, ms(r.Ephemeral.Baseline.P50), ms(r.Ephemeral.Fault.P50),
			ratio(r.Ephemeral.Fault.P50, off), duty, r.Ephemeral.Fault.OverLimit, r.Ephemeral.Fault.Throughput)
	}
	sb.WriteString("\nTargets: with deadline and backoff, fault p50 ≤ 1.2x of sweep off and duty cycle < 50 %.\n\n")

	sb.WriteString("### Correctness\n\n| run | invocations | teardown drains lost | not read back exactly once | stranded oplogs left after the fault | scheduled rows fired twice |\n|---|---|---|---|---|---|\n")
	for _, r := range res.A {
		c := r.Checks
		fmt.Fprintf(&sb, "| A %s | %d | %d | %d | %d | %d |\n", r.label(), c.Invocations, c.Lost, c.Mismatched, c.StillStranded, c.FiredTwice)
	}
	for _, r := range res.B {
		c := r.Checks
		fmt.Fprintf(&sb, "| B sweep %s | %d | %d | %d | %d | %d |\n", r.Mode, c.Invocations, c.Lost, c.Mismatched, c.StillStranded, c.FiredTwice)
	}
	return sb.String()
}
