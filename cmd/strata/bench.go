package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/stratalog/strata/cmd/strata/internal/chaos"
)

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if wantsHelp(args) {
		printCommandHelp(stderr, "bench", nil)
		return flag.ErrHelp
	}
	if len(args) == 0 || args[0] != "chaos" {
		return &usageError{"usage: strata bench chaos [--quick] [--postgres URL] [--plot FILE] [--latency D] [--seed N] [--scenarios A|B|AB]"}
	}
	fs := withHelp(flag.NewFlagSet("bench chaos", flag.ContinueOnError), "bench")
	fs.SetOutput(stderr)
	opts := chaos.Options{Out: stdout}
	fs.BoolVar(&opts.Quick, "quick", false, "the CI smoke size (under two minutes); the full run is what BENCHMARKS.md quotes")
	defaultPG := os.Getenv("STRATA_TEST_POSTGRES_URL")
	if defaultPG == "" {
		defaultPG = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	fs.StringVar(&opts.PostgresURL, "postgres", defaultPG, "a loopback PostgreSQL `URL`; the benchmark makes and drops its own schemas")
	fs.StringVar(&opts.PlotPath, "plot", "chaos.png", "where to write the PNG plot of invocation p50 over time (\"\" for none)")
	fs.DurationVar(&opts.Latency, "latency", 0, "one-way latency injected during the fault (default 500ms)")
	fs.Uint64Var(&opts.Seed, "seed", 0, "random seed (0: random)")
	fs.StringVar(&opts.Scenarios, "scenarios", "AB", "which scenarios to run: A, B or AB")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if s := opts.Scenarios; s != "A" && s != "B" && s != "AB" {
		return &usageError{fmt.Sprintf("chaos --scenarios %q: want A, B or AB", s)}
	}
	_, err := chaos.Run(ctx, opts)
	return err
}
