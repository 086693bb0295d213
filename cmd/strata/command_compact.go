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
	"github.com/stratalog/strata/oplog"
)

const compactLong = `Rewrites the packed segments of the blob layer that hold chunks no index row points to any more
(erased by strata erase, expired by blob.retention) beside live ones, once, for every mode: the live
chunks are copied as they are into a new segment, a move row ({mode}/blobmoved/{L}) says where each
went, and the old segment is deleted last, so the erased bytes are gone. Readers, the collector and
retention follow the moves. Only segments older than the grace (--grace, default blob.gc_grace) are
rewritten: the archive step that wrote one has ended. A segment with no live chunk is left to the
collector (strata gc); one whose footer or rows do not decode is listed and kept.

A crash at any point loses nothing: after the new segment, it is an orphan the collector removes;
after the move row, both segments are there and the next run deletes the old one.

Prints a line per mode and blob level: segments examined, young, whole, compacted, dead, kept, failed,
and the dead chunks and bytes left out; with --json, one JSON object per mode and level (JSON Lines).
--dry-run writes nothing and reports what it would rewrite.

Exit 0 when every segment examined was rewritten or needed no rewrite; 1 when a store could not be
opened or a storage call failed (run it again), or when a segment was left as it was for a reason of
its own (listed "kept as it is": a footer, row or chunk that does not decode, a lookup the storage
refused), because any erased or expired bytes it holds are still there (strata verify names the agents
whose chunks it holds). It creates nothing: the stores must exist.`

// compactCommand is `strata compact`.
func (a *app) compactCommand() *cobra.Command {
	var (
		f      *storeFlags
		asJSON bool
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "compact [flags]",
		Short: "Rewrite the packed segments holding erased or expired chunks, so that their bytes are gone",
		Long:  compactLong,
		Args:  noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.load(cmd, a.stderr, a.out)
			if err != nil {
				return err
			}
			a.out.use(newLogger(a.stderr, slog.LevelWarn, cfg.Log.Format), cfg.Log.Format)
			opts := archive.CompactOptions{Grace: cfg.Blob.GCGrace, DryRun: dryRun}
			return compact(cmd.Context(), redactingWriter{cmd.OutOrStdout()}, cfg, opts, asJSON)
		}),
	}
	fl := cmd.Flags()
	f = addStoreFlags(cmd, keyStorage, keyBlob)
	addGraceFlag(cmd, f, "rewritten")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object per mode and blob level (JSON Lines)")
	fl.BoolVar(&dryRun, "dry-run", false, "write nothing; report what would be rewritten")
	return cmd
}

// compact checks the stores cfg names exist (opening them read-only, which creates nothing), opens
// them for writing and compacts every mode and blob level, printing each report.
func compact(ctx context.Context, stdout redactingWriter, cfg config.Config, opts archive.CompactOptions, asJSON bool) error {
	ro, err := openReadOnly(ctx, cfg, "compact")
	if err != nil {
		return err
	}
	ro.close()
	st, err := backends.Open(ctx, cfg.Storage.URL, nil)
	if err != nil {
		return fmt.Errorf("storage.url %s: %w", redact.URL(cfg.Storage.URL), err)
	}
	defer st.Close()
	blobs, err := backends.OpenBlob(ctx, cfg.Blob.URL)
	if err != nil {
		return fmt.Errorf("blob.url %s: %w", redact.URL(cfg.Blob.URL), err)
	}
	defer blobs.Close()
	var reports []archive.CompactReport
	var runErr error
	for _, mode := range oplog.Modes {
		for _, level := range sidecar.CollectedLevels {
			r, err := archive.CompactSegments(ctx, st, blobs, mode, level, opts)
			reports = append(reports, r)
			if err != nil {
				runErr = err
				break
			}
		}
		if runErr != nil {
			break
		}
	}
	printCompactReports(stdout, reports, asJSON)
	if runErr != nil {
		return fmt.Errorf("compact: %w (run it again)", runErr)
	}
	// A one-shot does not report success with work left: a segment it could not rewrite may hold the
	// very bytes an erasure or retention counts on compact to remove.
	left := 0
	for _, r := range reports {
		left += len(r.Failed)
	}
	if left > 0 {
		return fmt.Errorf("compact: segments left as they were: %d (\"kept as it is\" above), with whatever erased or expired bytes they hold; strata verify names the agents whose chunks they hold", left)
	}
	return nil
}

func printCompactReports(stdout redactingWriter, reports []archive.CompactReport, asJSON bool) {
	if asJSON {
		for _, r := range reports {
			raw, _ := json.Marshal(r)
			fmt.Fprintln(stdout, string(raw))
		}
		return
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODE\tLEVEL\tEXAMINED\tYOUNG\tWHOLE\tCOMPACTED\tDEAD\tKEPT\tFAILED\tDEAD_CHUNKS\tDEAD_BYTES")
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", r.Mode, r.Level, r.Examined, r.Young, r.Whole,
			r.Compacted, r.Dead, r.Kept, len(r.Failed), r.DeadChunks, r.DeadBytes)
	}
	tw.Flush()
	for _, r := range reports {
		for _, p := range r.Written {
			fmt.Fprintf(stdout, "written: %s\n", p)
		}
		for _, f := range r.Failed {
			fmt.Fprintf(stdout, "kept as it is: %s: %s\n", f.Segment, f.Err)
		}
	}
}
