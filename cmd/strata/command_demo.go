package main

import (
	"github.com/spf13/cobra"

	"github.com/stratalog/strata/cmd/strata/internal/demo"
)

// demoCommand is `strata demo`.
func (a *app) demoCommand() *cobra.Command {
	d := demo.Defaults()
	cmd := &cobra.Command{
		Use:   "demo [flags]",
		Short: "An executor losing teardown drains, the sweep, a verification, on embedded SQLite",
		Long: "An executor runs ephemeral invocations on the embedded SQLite default and loses a share of their " +
			"teardown drains at random; the sweep runs beside it and archives every oplog left stranded; then every " +
			"invocation's entries are read back and checked to be there exactly once. It prints its progress and a " +
			"summary, exits 1 if the check fails, and can run again on the same directory. The blobs go under --dir, " +
			"or to --blob-url (default $STRATA_BLOB_URL).",
		Args: noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			if d.LoseRate < 0 || d.LoseRate > 1 || d.Invocations < 1 {
				return usageErrorf("--lose must be within 0..1 and --invocations at least 1")
			}
			if !cmd.Flags().Changed("blob-url") && !cmd.Flags().Changed("blob") {
				d.BlobURL = demo.Defaults().BlobURL // $STRATA_BLOB_URL, never shown as a flag default: it may hold a secret
			}
			d.Out = cmd.OutOrStdout()
			_, err := demo.Run(cmd.Context(), d)
			return err
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&d.Dir, "dir", d.Dir, "`DIR` for the embedded SQLite file and the blob store (created; a second run reuses it)")
	fl.IntVar(&d.Invocations, "invocations", d.Invocations, "ephemeral invocations the executor runs")
	fl.Float64Var(&d.LoseRate, "lose", d.LoseRate, "share of teardown drains lost, 0..1")
	fl.Uint64Var(&d.Seed, "seed", 0, "random seed (0: random)")
	fl.StringVar(&d.BlobURL, "blob-url", "", "blob store `URL` (as blob.url: s3://bucket/prefix?…; default $STRATA_BLOB_URL, else fs: under --dir)")
	fl.StringVar(&d.BlobURL, "blob", "", "the former name of --blob-url")
	_ = fl.MarkDeprecated("blob", "use --blob-url")
	_ = cmd.MarkFlagDirname("dir")
	return cmd
}
