package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stratalog/strata/backends"
	"github.com/stratalog/strata/config"
)

const migrateLong = `The schema of strata's stores: the indexed storage (storage.url) and the schedule store
(schedule.url). For each: the backend, the schema version found, the latest this build knows and the
migrations pending.

  postgres     each store's migrations, recorded in index_storage_migrations and
               scheduled_actions_migrations in the URL's schema
  sqlite       the index storage's PRAGMA user_version, the schedule store's
               scheduled_actions_migrations table
  multisqlite  one SQLite file per index, each migrated when strata opens it: nothing store-wide
  redis        the layout marker {strata}layout under the prefix
  memory       nothing to migrate

strata run migrates its stores when it opens them; migrate up does it ahead of time (a deploy step,
say, or a database role that may create tables while strata's own may not).`

// migrateCommand is `strata migrate status|up`.
func (a *app) migrateCommand() *cobra.Command {
	return group(&cobra.Command{
		Use:   "migrate COMMAND",
		Short: "The stores' schema versions and pending migrations (status); apply them (up)",
		Long:  migrateLong,
	}, a.migrateStatusCommand(), a.migrateUpCommand(), a.migrateBlobsCommand())
}

func (a *app) migrateStatusCommand() *cobra.Command {
	var (
		f      *storeFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "status [flags]",
		Short: "Each store's backend, schema version, the latest this build knows, and what is pending (read-only)",
		Long: "Each store's backend, the schema version found, the latest this build knows and the migrations " +
			"pending, one line a store (with --json, JSON Lines: one JSON object a store). Read-only: it creates " +
			"nothing, and a store that does not exist yet is reported as such. Exits 0 when it could read both " +
			"stores, pending migrations or not; 1 when it could not.",
		Args: noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.migrateConfig(cmd, f)
			if err != nil {
				return err
			}
			statuses, err := migrationStatuses(cmd.Context(), cfg)
			w := redactingWriter{cmd.OutOrStdout()}
			for _, st := range statuses {
				if asJSON {
					raw, merr := json.Marshal(st)
					if merr != nil {
						return merr
					}
					fmt.Fprintln(w, string(raw))
				} else {
					fmt.Fprintln(w, statusLine(st))
				}
			}
			return err
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON Lines, one JSON object a store: "+
		`{"store","backend","url","exists","version","latest","pending":[{"version","name","sql"}],"note"}`)
	f = addStoreFlags(cmd, keyStorage, keySchedule)
	return cmd
}

func (a *app) migrateUpCommand() *cobra.Command {
	var (
		f      *storeFlags
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "up [flags]",
		Short: "Apply the pending migrations of both stores, creating them if missing (--dry-run: print them)",
		Long: "Apply the pending migrations of the indexed storage, then of the schedule store, creating a store " +
			"that does not exist (a SQLite file, a PostgreSQL schema, a multisqlite directory), as strata run does " +
			"when it opens them; then print each store's status. --dry-run changes nothing: it prints what it would " +
			"apply, the SQL of each migration. Exits 1 if a migration failed (a PostgreSQL migration runs in one " +
			"transaction, a SQLite one too: a failed one leaves the store as it was).",
		Args: noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.migrateConfig(cmd, f)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			w := redactingWriter{cmd.OutOrStdout()}
			if dryRun {
				statuses, err := migrationStatuses(ctx, cfg)
				for _, st := range statuses {
					fmt.Fprintln(w, statusLine(st))
					for _, m := range st.Pending {
						fmt.Fprintf(w, "-- %s: would apply migration %d %s\n%s\n", st.Store, m.Version, m.Name, strings.TrimSpace(m.SQL))
					}
				}
				return err
			}
			for _, s := range []struct {
				store, key, url string
				migrate         func(context.Context, string) error
			}{
				{backends.StoreStorage, keyStorage, cfg.Storage.URL, backends.MigrateStorage},
				{backends.StoreSchedule, keySchedule, cfg.Schedule.URL, backends.MigrateSchedule},
			} {
				if err := s.migrate(ctx, s.url); err != nil {
					return fmt.Errorf("%s: migrate the %s: %w", s.key, s.store, err)
				}
			}
			statuses, err := migrationStatuses(ctx, cfg)
			for _, st := range statuses {
				fmt.Fprintln(w, statusLine(st))
			}
			return err
		}),
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "change nothing: print what would be applied, each migration's SQL")
	f = addStoreFlags(cmd, keyStorage, keySchedule)
	return cmd
}

// migrateConfig loads the configuration for a migrate command, whose errors follow log.format.
func (a *app) migrateConfig(cmd *cobra.Command, f *storeFlags) (config.Config, error) {
	cfg, err := f.load(cmd, a.stderr, a.out)
	if err != nil {
		return cfg, err
	}
	a.out.use(newLogger(a.stderr, slog.LevelWarn, cfg.Log.Format), cfg.Log.Format)
	return cfg, nil
}

// migrationStatuses reads the storage's and the schedule store's status, each that can be read; the
// error names each that cannot.
func migrationStatuses(ctx context.Context, cfg config.Config) ([]backends.MigrationStatus, error) {
	var out []backends.MigrationStatus
	var errs []error
	st, err := backends.StorageMigrationStatus(ctx, cfg.Storage.URL)
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", keyStorage, err))
	} else {
		out = append(out, st)
	}
	sched, err := backends.ScheduleMigrationStatus(ctx, cfg.Schedule.URL)
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", keySchedule, err))
	} else {
		out = append(out, sched)
	}
	return out, errors.Join(errs...)
}

// statusLine is one store's status as a line: "storage (sqlite, sqlite:///d/strata.db): schema version
// 1 of 2, 1 pending: 2 index_storage_type_checks".
func statusLine(st backends.MigrationStatus) string {
	var parts []string
	switch {
	case st.Latest == 0:
	case !st.Exists:
		parts = append(parts, fmt.Sprintf("does not exist; latest schema version %d", st.Latest))
	default:
		parts = append(parts, fmt.Sprintf("schema version %d of %d", st.Version, st.Latest))
	}
	switch n := len(st.Pending); {
	case n > 0:
		var names []string
		for _, m := range st.Pending {
			names = append(names, fmt.Sprintf("%d %s", m.Version, m.Name))
		}
		parts = append(parts, fmt.Sprintf("%d pending: %s", n, strings.Join(names, ", ")))
	case st.Latest > 0 && st.Version == st.Latest:
		parts = append(parts, "up to date")
	}
	if st.Note != "" {
		parts = append(parts, st.Note)
	}
	return fmt.Sprintf("%s (%s, %s): %s", st.Store, st.Backend, st.URL, strings.Join(parts, "; "))
}
