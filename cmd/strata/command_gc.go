package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends"
	"github.com/stratalog/strata/config"
	"github.com/stratalog/strata/internal/redact"
	"github.com/stratalog/strata/internal/sidecar"
)

const keyGCGrace = "blob.gc_grace"

const gcLong = `Removes the orphan packed segments of the blob layer, once, for every mode: the segments older than
the grace (--grace, default blob.gc_grace) into which no row of the blob index points. An archive step
writes its segment, then its rows; a step cut between the two leaves such an orphan. Segments younger
than the grace, corrupt ones (their footer does not decode: listed, kept) and ones whose rows could not
be looked up (listed, kept) are never removed. The sidecar runs the same every blob.gc_interval.

Prints a line per mode and blob level: segments examined, young, referenced, removed and their bytes,
corrupt, failed and foreign (names under the segments prefix that are not segments, never touched);
with --json, one JSON object per mode and level (JSON Lines). --dry-run removes nothing and reports what
it would remove.

Exit 0 when it ran, whatever it found; 1 when a store could not be opened or a storage call failed (what
was done until then is printed). It creates nothing: the stores must exist.`

// gcCommand is `strata gc`.
func (a *app) gcCommand() *cobra.Command {
	var (
		f      *storeFlags
		asJSON bool
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "gc [flags]",
		Short: "Remove the orphan packed segments of the blob layer, older than the grace, that no index row points into",
		Long:  gcLong,
		Args:  noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.load(cmd, a.stderr, a.out)
			if err != nil {
				return err
			}
			a.out.use(newLogger(a.stderr, slog.LevelWarn, cfg.Log.Format), cfg.Log.Format)
			opts := archive.CollectOptions{Grace: cfg.Blob.GCGrace, DryRun: dryRun}
			return collectGarbage(cmd.Context(), redactingWriter{cmd.OutOrStdout()}, cfg, opts, asJSON)
		}),
	}
	fl := cmd.Flags()
	f = addStoreFlags(cmd, keyStorage, keyBlob)
	addGraceFlag(cmd, f, "removed")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object per mode and blob level (JSON Lines)")
	fl.BoolVar(&dryRun, "dry-run", false, "remove nothing; report what would be removed")
	return cmd
}

// addGraceFlag adds --grace, blob.gc_grace set from the command line: checked, and held longer than
// sweep.max_agent_duration, exactly as the configuration's key. done says what happens to a segment
// older than it.
func addGraceFlag(cmd *cobra.Command, f *storeFlags, done string) {
	graceFlag := &urlFlag{key: keyGCGrace, name: "grace"}
	f.urls = append(f.urls, graceFlag)
	cmd.Flags().StringVar(&graceFlag.value, "grace", "", fmt.Sprintf("`DURATION` a segment must be older than to be %s (%s, $%s), "+
		"longer than sweep.max_agent_duration", done, keyGCGrace, config.EnvName(keyGCGrace)))
}

// collectGarbage opens the stores cfg names, which must exist, and runs the collector over every mode
// and blob level, printing each report.
func collectGarbage(ctx context.Context, stdout redactingWriter, cfg config.Config, opts archive.CollectOptions, asJSON bool) error {
	// The collector only reads the index: the storage is opened as read-only commands open it.
	st, err := backends.OpenExisting(ctx, cfg.Storage.URL)
	if err != nil {
		return fmt.Errorf("storage.url %s: %w (gc creates nothing)", redact.URL(cfg.Storage.URL), err)
	}
	defer st.Close()
	blobs, err := backends.OpenBlobExisting(ctx, cfg.Blob.URL)
	if err != nil {
		return fmt.Errorf("blob.url %s: %w (gc creates nothing)", redact.URL(cfg.Blob.URL), err)
	}
	defer blobs.Close()
	reports, err := sidecar.CollectAll(ctx, st, blobs, opts)
	printCollectReports(stdout, reports, asJSON)
	if err != nil {
		return fmt.Errorf("gc: %w", err)
	}
	return nil
}

func printCollectReports(stdout redactingWriter, reports []archive.CollectReport, asJSON bool) {
	if asJSON {
		for _, r := range reports {
			raw, _ := json.Marshal(r)
			fmt.Fprintln(stdout, string(raw))
		}
		return
	}
	removed := "REMOVED"
	if len(reports) > 0 && reports[0].DryRun {
		removed = "WOULD_REMOVE"
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "MODE\tLEVEL\tEXAMINED\tYOUNG\tREFERENCED\t%s\tBYTES\tCORRUPT\tFAILED\tFOREIGN\n", removed)
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", r.Mode, r.Level, r.Examined, r.Young, r.Referenced,
			r.Removed, r.RemovedBytes, len(r.Corrupt), len(r.Failed), r.Foreign)
	}
	tw.Flush()
	for _, r := range reports {
		for _, p := range r.RemovedPaths {
			if r.DryRun {
				fmt.Fprintf(stdout, "would remove: %s\n", p)
			} else {
				fmt.Fprintf(stdout, "removed: %s\n", p)
			}
		}
		for _, p := range r.Corrupt {
			fmt.Fprintf(stdout, "corrupt, kept: %s\n", p)
		}
		for _, f := range r.Failed {
			fmt.Fprintf(stdout, "lookup failed, kept: %s: %s\n", f.Segment, f.Err)
		}
	}
}
