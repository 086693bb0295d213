package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/redact"
	"github.com/stratalog/strata/oplog"
)

const scanLong = `List the agents a layer holds (--layer, by default the first compressed level, where the sweep
finds stranded oplogs), with their last index: a table, or with --json JSON Lines, one JSON object per
agent: {"agent":"shop:cart-42","last_index":30}, or {"agent":…,"unreadable":"…"} for what could not be
read.

Read-only: it creates no database, file, directory, schema or table, runs no migration, and fails
(exit 1) on a store that does not exist. What it cannot read is listed as a row marked unreadable and
the walk goes on; it then exits 1 after the list.`

// scanCommand is `strata scan`.
func (a *app) scanCommand() *cobra.Command {
	var (
		f         *storeFlags
		asJSON    bool
		mode      string
		layerName string
		limit     int
	)
	cmd := &cobra.Command{
		Use:   "scan [flags]",
		Short: "List the agents a layer holds, with their last index (read-only)",
		Long:  scanLong,
		Args:  noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			m, err := oplog.ParseMode(mode)
			if err != nil {
				return &usageError{err.Error()}
			}
			if limit < 0 {
				return usageErrorf("--limit %d: want 0 (all) or more", limit)
			}
			ro, err := f.openReadOnly(cmd, a)
			if err != nil {
				return err
			}
			defer ro.close()
			layer, names := layerNamed(ro.stack, layerName)
			if layer == nil {
				return usageErrorf("no layer %q; the stack has %s", layerName, strings.Join(names, ", "))
			}
			stdout := redactingWriter{cmd.OutOrStdout()}
			var rows scanRows = &tableRows{tw: tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)}
			if asJSON {
				rows = jsonRows{enc: json.NewEncoder(stdout)}
			}
			unreadable, err := scanLayer(cmd.Context(), layer, m, limit, rows)
			switch {
			case err != nil:
				return err
			case unreadable > 0:
				return fmt.Errorf("%d agents or files could not be read (the rows marked unreadable)", unreadable)
			}
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.BoolVar(&asJSON, "json", false, `print JSON Lines, one JSON object per agent: {"agent":…,"last_index":N} or {"agent":…,"unreadable":…}`)
	fl.StringVar(&mode, "mode", "ephemeral", "agent `MODE`: ephemeral or durable")
	fl.StringVar(&layerName, "layer", "compressed-1", "the `LAYER` to walk (one that can enumerate its agents)")
	fl.IntVar(&limit, "limit", 0, "stop after this many agents (0: all)")
	_ = cmd.RegisterFlagCompletionFunc("mode", completeModes)
	f = addStoreFlags(cmd, keyStorage, keyBlob)
	return cmd
}

// completeModes completes --mode.
func completeModes(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var out []cobra.Completion
	for _, m := range oplog.Modes {
		out = append(out, string(m))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// layerNamed finds a layer of the stack by name.
func layerNamed(stack *oplog.Stack, name string) (oplog.Layer, []string) {
	var names []string
	for _, l := range stack.Layers() {
		names = append(names, l.Name())
		if l.Name() == name {
			return l, nil
		}
	}
	return nil, names
}

// scanLayer writes the agents the layer holds in mode, with their last index, up to limit rows (0:
// all), in key order. A key that is no agent's (no bucket prefix, another bucket's prefix, or outside
// every bucket's range, where only a foreign writer puts one) is a row marked unparseable with the
// reason, as the sweep counts it; the ranges outside the buckets are walked where the layer can
// (oplog.RangeScanner). What it cannot read, a file the page passed over or an agent whose last index
// read failed, is a row marked unreadable with the error, and the walk goes on; it returns how many
// there were. Only a failed page read, which leaves no place to resume from, stops it.
func scanLayer(ctx context.Context, layer oplog.Layer, m oplog.Mode, limit int, w scanRows) (unreadable int, err error) {
	defer func() {
		if ferr := w.flush(); err == nil {
			err = ferr
		}
	}()
	w.header()
	type part func(from is.Resume) (is.Page, error)
	parts := []part{func(from is.Resume) (is.Page, error) {
		return layer.ScanAgents(ctx, m, oplog.BucketRange{Lo: 0, Hi: oplog.Buckets}, from, 256)
	}}
	if rs, ok := layer.(oplog.RangeScanner); ok {
		outside := oplog.OutsideBuckets() // below the first bucket, and above the last
		parts = []part{
			func(from is.Resume) (is.Page, error) { return rs.ScanRange(ctx, m, outside[0], from, 256) },
			parts[0],
			func(from is.Resume) (is.Page, error) { return rs.ScanRange(ctx, m, outside[1], from, 256) },
		}
	}
	n := 0
	for _, scan := range parts {
		for from := (is.Resume{}); ; {
			page, err := scan(from)
			if err != nil {
				return unreadable, err
			}
			for _, u := range page.Unreadable {
				where := u.Where
				if where == "" {
					where = u.Key
				}
				w.unreadable(where, fmt.Sprint(u.Err))
				unreadable++
			}
			for _, key := range page.Keys {
				// An agent is listed by its own key; a stored key that is no agent's, as it is stored.
				a, err := oplog.ParseStoredKey(key)
				if err != nil {
					w.unparseable(key, err.Error())
				} else if idx, ok, err := layer.LastIndex(ctx, a, m); err != nil {
					w.unreadable(a.Key(), err.Error())
					unreadable++
				} else if ok {
					w.agent(a.Key(), &idx)
				} else {
					w.agent(a.Key(), nil)
				}
				if n++; limit > 0 && n >= limit {
					return unreadable, nil
				}
			}
			if page.Done {
				break
			}
			from = page.Next
		}
	}
	return unreadable, nil
}

// scanRows is how scan writes its rows: a table, or JSON lines.
type scanRows interface {
	header()
	agent(key string, last *oplog.Index) // last is nil when the agent holds no entry
	unparseable(key, why string)         // a stored key that is no agent's; the sweep never archives it
	unreadable(where, err string)
	flush() error
}

type tableRows struct{ tw *tabwriter.Writer }

func (t *tableRows) header() { fmt.Fprintln(t.tw, "AGENT\tLAST INDEX") }
func (t *tableRows) agent(key string, last *oplog.Index) {
	shown := "?"
	if last != nil {
		shown = strconv.FormatUint(uint64(*last), 10)
	}
	fmt.Fprintf(t.tw, "%s\t%s\n", key, shown)
}
func (t *tableRows) unparseable(key, why string) {
	fmt.Fprintf(t.tw, "%s\tunparseable: %s\n", key, why)
}
func (t *tableRows) unreadable(where, err string) {
	fmt.Fprintf(t.tw, "%s\tunreadable: %s\n", where, err)
}
func (t *tableRows) flush() error { return t.tw.Flush() }

type jsonRows struct{ enc *json.Encoder }

func (j jsonRows) header() {}
func (j jsonRows) agent(key string, last *oplog.Index) {
	_ = j.enc.Encode(map[string]any{"agent": key, "last_index": last})
}
func (j jsonRows) unparseable(key, why string) {
	_ = j.enc.Encode(map[string]any{"agent": key, "last_index": nil, "unparseable": why})
}
func (j jsonRows) unreadable(where, err string) {
	_ = j.enc.Encode(map[string]any{"agent": where, "unreadable": redact.String(err)})
}
func (j jsonRows) flush() error { return nil }
