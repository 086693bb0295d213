package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends"
	"github.com/stratalog/strata/config"
	"github.com/stratalog/strata/internal/redact"
	"github.com/stratalog/strata/internal/sidecar"
	"github.com/stratalog/strata/oplog"
)

// The configuration keys of the stores, each of which a command that opens the store can set with a
// flag named after it (storage.url: --storage-url).
const (
	keyStorage  = "storage.url"
	keyBlob     = "blob.url"
	keySchedule = "schedule.url"
)

var storeFlagDoc = map[string]string{
	keyStorage:  "the indexed storage",
	keyBlob:     "the blob store",
	keySchedule: "the schedule store",
}

// storeFlags are the flags of a command that reads the configuration: --config, and a URL flag for
// each store the command opens.
type storeFlags struct {
	config string
	urls   []*urlFlag
}

type urlFlag struct {
	key, name, value string
}

// addStoreFlags gives cmd --config and a URL flag for each of keys.
func addStoreFlags(cmd *cobra.Command, keys ...string) *storeFlags {
	f := &storeFlags{}
	cmd.Flags().StringVar(&f.config, "config", "", "TOML configuration `FILE` (default: the built-in defaults and the STRATA_* variables)")
	_ = cmd.MarkFlagFilename("config", "toml")
	for _, key := range keys {
		u := &urlFlag{key: key, name: strings.ReplaceAll(key, ".", "-")}
		cmd.Flags().StringVar(&u.value, u.name, "", fmt.Sprintf("`URL` of %s (%s), over the file's and $%s",
			storeFlagDoc[key], key, config.EnvName(key)))
		f.urls = append(f.urls, u)
	}
	return f
}

// overrides are the URL flags given on the command line, each checked as the configuration checks its
// key: a bad one is a usage error, before any file is read or store opened.
func (f *storeFlags) overrides(cmd *cobra.Command) ([]config.Override, error) {
	var out []config.Override
	for _, u := range f.urls {
		if !cmd.Flags().Changed(u.name) {
			continue
		}
		o := config.Override{Key: u.key, Flag: "--" + u.name, Value: u.value}
		if err := config.CheckOverride(o); err != nil {
			return nil, &usageError{err.Error()}
		}
		out = append(out, o)
	}
	return out, nil
}

// load is the configuration in effect: the defaults, the file, the variables and the flags. When it is
// bad but asks for JSON logs, the error is written as a JSON line too.
func (f *storeFlags) load(cmd *cobra.Command, stderr io.Writer, out *errorSink) (config.Config, error) {
	overrides, err := f.overrides(cmd)
	if err != nil {
		return config.Config{}, err
	}
	cfg, err := config.LoadWith(f.config, environ(), overrides)
	if err != nil && out != nil && config.LogFormatHint(f.config, environ()) == "json" {
		out.use(newLogger(stderr, slog.LevelInfo, "json"), "json")
	}
	return cfg, err
}

// openQuiet opens the stores for a one-shot command, logging warnings only.
func (f *storeFlags) openQuiet(cmd *cobra.Command, a *app, opts ...sidecar.Option) (*sidecar.Sidecar, config.Config, error) {
	cfg, err := f.load(cmd, a.stderr, a.out)
	if err != nil {
		return nil, cfg, err
	}
	log := newLogger(a.stderr, slog.LevelWarn, cfg.Log.Format)
	a.out.use(log, cfg.Log.Format)
	sc, err := sidecar.Open(cmd.Context(), cfg, log, opts...)
	return sc, cfg, err
}

// readOnly is the layer stack a read-only command (scan, inspect) reads, opened so that nothing is
// created: no database, file, directory, schema or table.
type readOnly struct {
	stack *oplog.Stack
	close func()
}

// openReadOnly opens the storage and the blob store the configuration names, both of which must
// exist, and the stack over them; the schedule store is not opened.
func (f *storeFlags) openReadOnly(cmd *cobra.Command, a *app) (*readOnly, error) {
	ctx := cmd.Context()
	cfg, err := f.load(cmd, a.stderr, a.out)
	if err != nil {
		return nil, err
	}
	a.out.use(newLogger(a.stderr, slog.LevelWarn, cfg.Log.Format), cfg.Log.Format)
	return openReadOnly(ctx, cfg, cmd.Name())
}

// openReadOnly opens the stores cfg names, which must exist; command names the command in the error
// that says one does not, and that it created nothing.
func openReadOnly(ctx context.Context, cfg config.Config, command string) (*readOnly, error) {
	st, err := backends.OpenExisting(ctx, cfg.Storage.URL)
	if err != nil {
		return nil, fmt.Errorf("storage.url %s: %w (strata %s creates nothing; strata run or strata migrate up creates it)",
			redact.URL(cfg.Storage.URL), err, command)
	}
	blobs, err := backends.OpenBlobExisting(ctx, cfg.Blob.URL)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("blob.url %s: %w (strata %s creates nothing; strata run creates it)", redact.URL(cfg.Blob.URL), err, command)
	}
	stack, err := archive.DefaultStack(st, blobs, &archive.StackOptions{CompressedLevels: cfg.Stack.CompressedLevels,
		BlobLayout: cfg.Blob.Layout, SegmentGrace: cfg.Blob.GCGrace})
	if err != nil {
		st.Close()
		blobs.Close()
		return nil, err
	}
	return &readOnly{stack: stack, close: func() { st.Close(); blobs.Close() }}, nil
}
