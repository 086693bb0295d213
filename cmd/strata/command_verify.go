package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends"
	"github.com/stratalog/strata/config"
	"github.com/stratalog/strata/internal/redact"
	"github.com/stratalog/strata/internal/sidecar"
)

const verifyLong = `Reads every archived chunk of the blob layer back and checks it, for every mode: in the packed layout
through the blob index (each row's chunk read from its segment, following compaction's moves, its CRC,
span and place checked; each agent's rows checked to meet; each segment's footer decoded), in the chunk
layout through the listing. Prints each finding by agent:

  missing   a row's segment (or chunk) is not in the blob store
  corrupt   an object's bytes do not check out (CRC, decoding, a truncated object)
  orphaned  an object nothing points to (a segment older than blob.gc_grace no row points into)
  dangling  an index row that leads to no chunk of its own (past its segment's end, undecodable)
  gap       an agent's archived indices skip some

then a line per mode: agents, chunks, objects and bytes read, and the findings by kind; with --json,
one JSON object per mode (JSON Lines) holding the findings. --sample P verifies a share P (0 < P ≤ 1) of
the agents, chosen at random (orphans are looked for only in a full run). The chunk layout has no
index: a chunk object lost at the end of an agent's chunks, or all of them, cannot be told from one
never written; the packed layout reports them.

Read-only: it creates nothing and fails on a store that does not exist. Exit 0 when it found nothing,
1 when it found anything or a store could not be read.`

// verifyCommand is `strata verify`.
func (a *app) verifyCommand() *cobra.Command {
	var (
		f      *storeFlags
		asJSON bool
		sample string
	)
	cmd := &cobra.Command{
		Use:   "verify [flags]",
		Short: "Read every archived chunk back and report missing, corrupt, orphaned, dangling and gap findings (exit 1 on any)",
		Long:  verifyLong,
		Args:  noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			p, err := strconv.ParseFloat(sample, 64)
			if err != nil || !(p > 0 && p <= 1) {
				return &usageError{fmt.Sprintf("--sample %q: want a share of the agents above 0 and at most 1", sample)}
			}
			cfg, err := f.load(cmd, a.stderr, a.out)
			if err != nil {
				return err
			}
			a.out.use(newLogger(a.stderr, slog.LevelWarn, cfg.Log.Format), cfg.Log.Format)
			opts := archive.VerifyOptions{Layout: cfg.Blob.Layout, Sample: p, Grace: cfg.Blob.GCGrace}
			return verify(cmd.Context(), redactingWriter{cmd.OutOrStdout()}, cfg, opts, asJSON)
		}),
	}
	f = addStoreFlags(cmd, keyStorage, keyBlob)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per mode, with its findings (JSON Lines)")
	cmd.Flags().StringVar(&sample, "sample", "1", "the `SHARE` of agents to verify, above 0 and at most 1")
	return cmd
}

// verify opens the stores read-only and verifies every mode's blob levels, printing the findings.
func verify(ctx context.Context, stdout redactingWriter, cfg config.Config, opts archive.VerifyOptions, asJSON bool) error {
	st, err := backends.OpenExisting(ctx, cfg.Storage.URL)
	if err != nil {
		return fmt.Errorf("storage.url %s: %w (verify creates nothing)", redact.URL(cfg.Storage.URL), err)
	}
	defer st.Close()
	blobs, err := backends.OpenBlobExisting(ctx, cfg.Blob.URL)
	if err != nil {
		return fmt.Errorf("blob.url %s: %w (verify creates nothing)", redact.URL(cfg.Blob.URL), err)
	}
	defer blobs.Close()
	reports, err := sidecar.VerifyAll(ctx, st, blobs, opts)
	printVerifyReports(stdout, reports, asJSON)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	found := 0
	for _, r := range reports {
		found += len(r.Findings)
	}
	if found > 0 {
		return fmt.Errorf("verify: %d findings", found)
	}
	return nil
}

func printVerifyReports(stdout redactingWriter, reports []archive.VerifyReport, asJSON bool) {
	if asJSON {
		for _, r := range reports {
			raw, _ := json.Marshal(r)
			fmt.Fprintln(stdout, string(raw))
		}
		return
	}
	for _, r := range reports {
		for _, f := range r.Findings {
			agent := f.Agent
			if agent == "" {
				agent = "-"
			}
			fmt.Fprintf(stdout, "%s\t%s\t%s\t%s: %s\n", r.Mode, f.Kind, agent, f.Where, f.Detail)
		}
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	header := "MODE\tLEVEL\tAGENTS\tCHUNKS\tOBJECTS\tBYTES"
	for _, k := range archive.FindingKinds {
		header += "\t" + k
	}
	fmt.Fprintln(tw, header)
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d", r.Mode, r.Level, r.Agents, r.Chunks, r.Objects, r.Bytes)
		for _, k := range archive.FindingKinds {
			fmt.Fprintf(tw, "\t%d", r.Count(k))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}
