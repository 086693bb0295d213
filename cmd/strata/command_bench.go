package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/stratalog/strata/cmd/strata/internal/chaos"
)

// benchCommand is `strata bench chaos`.
func (a *app) benchCommand() *cobra.Command {
	return group(&cobra.Command{
		Use:   "bench COMMAND",
		Short: "Benchmarks: chaos",
		Long:  "Benchmarks of strata against real stores. BENCHMARKS.md quotes their full runs.",
	}, a.chaosCommand())
}

const defaultChaosPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func (a *app) chaosCommand() *cobra.Command {
	opts := chaos.Options{}
	cmd := &cobra.Command{
		Use:   "chaos [flags]",
		Short: "Latency injected on PostgreSQL through a proxy: the sweep against registration on the commit path",
		Long: "Latency injected on PostgreSQL through a proxy: the sweep against registration on the commit path. " +
			"Exits 1 if any entry was lost or doubled, any stranded oplog was left or any scheduled row fired twice. " +
			"The full run is what BENCHMARKS.md quotes; --quick is the CI smoke size.",
		Args: noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			if s := opts.Scenarios; s != "A" && s != "B" && s != "AB" {
				return usageErrorf("chaos --scenarios %q: want A, B or AB", s)
			}
			if !cmd.Flags().Changed("postgres") {
				// Resolved here, never shown as a flag default: the variable may hold a password.
				opts.PostgresURL = os.Getenv("STRATA_TEST_POSTGRES_URL")
				if opts.PostgresURL == "" {
					opts.PostgresURL = defaultChaosPostgres
				}
			}
			opts.Out = cmd.OutOrStdout()
			_, err := chaos.Run(cmd.Context(), opts)
			return err
		}),
	}
	fl := cmd.Flags()
	fl.BoolVar(&opts.Quick, "quick", false, "the CI smoke size (under two minutes); the full run is what BENCHMARKS.md quotes")
	fl.StringVar(&opts.PostgresURL, "postgres", "", "a loopback PostgreSQL `URL`; the benchmark makes and drops its own schemas "+
		"(default $STRATA_TEST_POSTGRES_URL, else "+defaultChaosPostgres+")")
	fl.StringVar(&opts.PlotPath, "plot", "chaos.png", "where to write the PNG plot of invocation p50 over time (\"\" for none)")
	fl.DurationVar(&opts.Latency, "latency", 0, "one-way latency injected during the fault (default 500ms)")
	fl.Uint64Var(&opts.Seed, "seed", 0, "random seed (0: random)")
	fl.StringVar(&opts.Scenarios, "scenarios", "AB", "which scenarios to run: A, B or AB")
	_ = cmd.RegisterFlagCompletionFunc("scenarios", cobra.FixedCompletions([]cobra.Completion{"A", "B", "AB"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.MarkFlagFilename("plot", "png")
	return cmd
}
