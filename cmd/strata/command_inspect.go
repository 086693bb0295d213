package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/stratalog/strata/oplog"
)

const inspectLong = `Each layer's first and last index and entry count for AGENT: a table, or with --json one JSON
object, {"agent":…,"mode":…,"layers":[{"layer":…,"first":N,"last":N,"entries":N},…]}.

Read-only, as scan is: it creates nothing and fails (exit 1) on a store that does not exist.

Arguments:
  AGENT  the agent, component:name`

// inspectCommand is `strata inspect AGENT`.
func (a *app) inspectCommand() *cobra.Command {
	var (
		f      *storeFlags
		mode   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "inspect AGENT [flags]",
		Short: "Where an agent's entries live: each layer's first and last index and entry count (read-only)",
		Long:  inspectLong,
		Args:  exactArgs(1, "one AGENT (component:name)"),
		RunE: a.runE(func(cmd *cobra.Command, args []string) error {
			agent, m, err := agentAndMode(args[0], mode)
			if err != nil {
				return err
			}
			ro, err := f.openReadOnly(cmd, a)
			if err != nil {
				return err
			}
			defer ro.close()
			return inspect(cmd.Context(), redactingWriter{cmd.OutOrStdout()}, ro.stack, agent, m, asJSON)
		}),
	}
	addModeFlag(cmd, &mode)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object: the agent, the mode and each layer's first, last and entries")
	f = addStoreFlags(cmd, keyStorage, keyBlob)
	return cmd
}

// agentAndMode parses an AGENT argument and a --mode value; either bad is a usage error.
func agentAndMode(key, mode string) (oplog.AgentID, oplog.Mode, error) {
	agent, err := oplog.ParseAgentKey(key)
	if err != nil {
		return oplog.AgentID{}, "", &usageError{err.Error()}
	}
	m, err := oplog.ParseMode(mode)
	if err != nil {
		return oplog.AgentID{}, "", &usageError{err.Error()}
	}
	return agent, m, nil
}

// addModeFlag adds --mode, the agent's mode, ephemeral by default, with its completion.
func addModeFlag(cmd *cobra.Command, mode *string) {
	cmd.Flags().StringVar(mode, "mode", "ephemeral", "agent `MODE`: ephemeral or durable")
	_ = cmd.RegisterFlagCompletionFunc("mode", completeModes)
}

func inspect(ctx context.Context, stdout redactingWriter, stack *oplog.Stack, agent oplog.AgentID, m oplog.Mode, asJSON bool) error {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	layers := []map[string]any{}
	if !asJSON {
		fmt.Fprintf(tw, "LAYER\tFIRST\tLAST\tENTRIES\n")
	}
	for _, l := range stack.Layers() {
		first, ok, err := l.FirstIndex(ctx, agent, m)
		if err != nil {
			return err
		}
		if !ok {
			layers = append(layers, map[string]any{"layer": l.Name(), "first": nil, "last": nil, "entries": 0})
			if !asJSON {
				fmt.Fprintf(tw, "%s\t-\t-\t0\n", l.Name())
			}
			continue
		}
		last, _, err := l.LastIndex(ctx, agent, m)
		if err != nil {
			return err
		}
		count, err := countEntries(ctx, l, agent, m, first, last)
		if err != nil {
			return err
		}
		layers = append(layers, map[string]any{"layer": l.Name(), "first": first, "last": last, "entries": count})
		if !asJSON {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", l.Name(), first, last, count)
		}
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{"agent": agent.Key(), "mode": m, "layers": layers})
	}
	return tw.Flush()
}

// countEntries reads the layer's entries a chunk at a time and counts them.
func countEntries(ctx context.Context, l oplog.Layer, a oplog.AgentID, m oplog.Mode, first, last oplog.Index) (int, error) {
	n := 0
	for from := first; from <= last; {
		batch, err := l.Read(ctx, a, m, from, last, oplog.ChunkLimit)
		if err != nil || len(batch) == 0 {
			return n, err
		}
		n += len(batch)
		from = batch[len(batch)-1].Index + 1
	}
	return n, nil
}
