package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/stratalog/strata/internal/sidecar"
	"github.com/stratalog/strata/oplog"
)

const eraseLong = `Removes AGENT's oplog (of --mode) from every layer, top to bottom, and prints what each layer held:
a table, or with --json one JSON object, {"agent":…,"mode":…,"entries":N,"layers":[{"layer":…,
"held":true,"first":N,"last":N},…]}.

It first writes a tombstone in the storage ({mode}/erased, docs/storage-format.md), then deletes, then
records that the erasure finished. An archive step running meanwhile (a sidecar's sweep, an executor's
teardown drain) that wrote the agent below finds the tombstone and removes what it wrote, so the agent
does not come back. Erase an agent that is not running: entries its executor writes during the erasure
may stay. An erasure cut short leaves its tombstone "started", which every archive step honours; run
erase again to finish it. Erasing an agent no layer holds is no error. In packed segments the erased
chunks are unreachable at once; their bytes go when strata compact rewrites the segment or it expires.

The stores must exist: erase creates nothing. Exit 0 when every layer was deleted; 1 when a store
could not be opened or a storage call failed (run it again).

Arguments:
  AGENT  the agent, component:name`

// eraseCommand is `strata erase AGENT`.
func (a *app) eraseCommand() *cobra.Command {
	var (
		f      *storeFlags
		mode   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "erase AGENT [flags]",
		Short: "Remove an agent's oplog from every layer, so that no archive step brings it back",
		Long:  eraseLong,
		Args:  exactArgs(1, "one AGENT (component:name)"),
		RunE: a.runE(func(cmd *cobra.Command, args []string) error {
			agent, m, err := agentAndMode(args[0], mode)
			if err != nil {
				return err
			}
			// The stores must exist: opened read-only first, which creates nothing and says what is
			// missing, then for writing as a one-shot sweep opens them.
			ro, err := f.openReadOnly(cmd, a)
			if err != nil {
				return err
			}
			ro.close()
			sc, _, err := f.openQuiet(cmd, a, sidecar.WithoutExecutor())
			if err != nil {
				return err
			}
			defer sc.Close()
			return erase(cmd.Context(), redactingWriter{cmd.OutOrStdout()}, sc.Stack(), agent, m, asJSON)
		}),
	}
	addModeFlag(cmd, &mode)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object: the agent, the mode, the entries erased and each layer's part")
	f = addStoreFlags(cmd, keyStorage, keyBlob)
	return cmd
}

// erase runs the erasure and prints what it removed, also when it failed part way (the layers done).
func erase(ctx context.Context, stdout redactingWriter, stack *oplog.Stack, agent oplog.AgentID, m oplog.Mode, asJSON bool) error {
	erased, err := stack.Erase(ctx, agent, m)
	if asJSON {
		raw, _ := json.Marshal(erased)
		fmt.Fprintln(stdout, string(raw))
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "LAYER\tFIRST\tLAST\tENTRIES")
		for _, l := range erased.Layers {
			if !l.Held {
				fmt.Fprintf(tw, "%s\t-\t-\t0\n", l.Layer)
				continue
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", l.Layer, l.First, l.Last, l.Last-l.First+1)
		}
		tw.Flush()
		if err == nil {
			fmt.Fprintf(stdout, "erased %s (%s): %d entries\n", agent, m, erased.Entries())
		}
	}
	if err != nil {
		return fmt.Errorf("erase: %w (run it again to finish)", err)
	}
	return nil
}
