package main

import (
	"github.com/spf13/cobra"

	"github.com/stratalog/strata/internal/sidecar"
)

// runCommand is `strata run`: the sidecar.
func (a *app) runCommand() *cobra.Command {
	var f *storeFlags
	cmd := &cobra.Command{
		Use:   "run [flags]",
		Short: "Serve the HTTP API and run the sweep and the scheduler beside an executor",
		Long: "Serve the HTTP API (probes, /metrics, the executor's feed, /v1/status) and run the sweep and the " +
			"scheduler beside an executor, until SIGINT or SIGTERM; then drain and exit 0. The stores are opened, and " +
			"created and migrated if needed, at start-up: a store that cannot be opened, or a bad configuration, " +
			"exits 1.",
		Args: noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.load(cmd, a.stderr, a.out)
			if err != nil {
				return err
			}
			log := newLogger(a.stderr, cfg.Log.SlogLevel(), cfg.Log.Format)
			a.out.use(log, cfg.Log.Format)
			routeLibraryLogs(log)
			sc, err := sidecar.Open(cmd.Context(), cfg, log)
			if err != nil {
				return err
			}
			defer sc.Close()
			return sc.Run(cmd.Context())
		}),
	}
	f = addStoreFlags(cmd, keyStorage, keyBlob, keySchedule)
	return cmd
}
