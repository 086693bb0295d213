package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends"
	"github.com/stratalog/strata/internal/redact"
	"github.com/stratalog/strata/oplog"
)

const migrateBlobsLong = `Pack a blob store written in the chunk layout (blob.layout = "chunks": a blob per chunk under each
agent's own path) into the packed layout (segments and the blob index in the indexed storage), blob
level 0 of each mode. Each agent's chunks are read, appended to the packed layout in batches that
share a segment, compared equal, and only then deleted: a crash or a kill at any moment loses
nothing, and running it again goes on where it stopped.

Run it before switching a deployment to blob.layout = "packed" (the default), with the sidecars
stopped or still on "chunks": an agent the packed layout archived first cannot take its older chunks
below its rows, and is reported and left in the chunk layout. An agent whose component or name was
too long for a path segment is stored under a hash and cannot be told from its path: it is listed as
unknown; name it with --agent to migrate it.

Exits 0 when every agent found was migrated; 1 when one failed or is unknown (each named), or on an
error.`

func (a *app) migrateBlobsCommand() *cobra.Command {
	var (
		f      *storeFlags
		agents []string
		batch  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "blobs [flags]",
		Short: "Pack a chunk-layout blob store into segments and the blob index, crash-safely",
		Long:  migrateBlobsLong,
		Args:  noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			opts := archive.MigrateOptions{Batch: batch}
			for _, key := range agents {
				agent, err := oplog.ParseAgentKey(key)
				if err != nil {
					return usageErrorf("--agent %q: %v", key, err)
				}
				opts.Agents = append(opts.Agents, agent)
			}
			cfg, err := a.migrateConfig(cmd, f)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, err := backends.Open(ctx, cfg.Storage.URL, nil)
			if err != nil {
				return fmt.Errorf("%s %s: %w", keyStorage, redact.URL(cfg.Storage.URL), err)
			}
			defer st.Close()
			blobs, err := backends.OpenBlob(ctx, cfg.Blob.URL)
			if err != nil {
				return fmt.Errorf("%s %s: %w", keyBlob, redact.URL(cfg.Blob.URL), err)
			}
			defer blobs.Close()
			w := redactingWriter{cmd.OutOrStdout()}
			incomplete := 0
			for _, mode := range oplog.Modes {
				rep, err := archive.MigrateChunks(ctx, st, blobs, mode, 0, opts)
				incomplete += len(rep.Failed) + len(rep.Unknown)
				if asJSON {
					raw, merr := json.Marshal(struct {
						Mode string `json:"mode"`
						archive.MigrateReport
					}{string(mode), rep})
					if merr != nil {
						return merr
					}
					fmt.Fprintln(w, string(raw))
				} else {
					fmt.Fprintf(w, "%s: %d agents packed (%d entries); %d failed, %d unknown, %d foreign blobs left alone\n",
						mode, rep.Agents, rep.Entries, len(rep.Failed), len(rep.Unknown), rep.Foreign)
					for _, s := range rep.Failed {
						fmt.Fprintf(w, "  failed: %s\n", s)
					}
					for _, s := range rep.Unknown {
						fmt.Fprintf(w, "  unknown (name it with --agent): %s\n", s)
					}
				}
				if err != nil {
					return fmt.Errorf("migrate %s blobs: %w", mode, err)
				}
			}
			if incomplete > 0 {
				return fmt.Errorf("%d agents left in the chunk layout (listed above)", incomplete)
			}
			return nil
		}),
	}
	cmd.Flags().StringArrayVar(&agents, "agent", nil, "an agent `KEY` (component:name) whose chunk path holds a hashed segment; repeatable")
	cmd.Flags().IntVar(&batch, "batch", 128, "agents packed into one segment")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object a mode: "+`{"mode","agents","entries","unknown","failed","foreign"}`)
	f = addStoreFlags(cmd, keyStorage, keyBlob)
	return cmd
}
