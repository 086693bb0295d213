package backends

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/stratalog/strata/backends/postgres"
	"github.com/stratalog/strata/backends/redis"
	"github.com/stratalog/strata/backends/sqlite"
	"github.com/stratalog/strata/internal/redact"
)

// MigrationStatus is one store's schema as `strata migrate status` shows it: what the store holds, the
// latest version this build knows, and what migrating it (`strata migrate up`, or opening it, which
// every strata command that writes does) would apply. Reading it changes nothing.
type MigrationStatus struct {
	Store   string `json:"store"`   // "storage" or "schedule"
	Backend string `json:"backend"` // postgres, sqlite, multisqlite, redis or memory
	URL     string `json:"url"`     // the store's URL, its secrets redacted
	// Exists is false when nothing is there yet (no file, schema or directory): migrating creates it.
	Exists  bool        `json:"exists"`
	Version int         `json:"version"` // the schema version found; 0 for none
	Latest  int         `json:"latest"`  // the latest version this build knows; 0 when the backend has no schema
	Pending []Migration `json:"pending"` // what migrating applies, in order
	// Note says what else there is to know: a store migrated file by file, tables made by hand that
	// migrating adopts, a schema newer than this build, a layout migrating refuses.
	Note string `json:"note,omitempty"`
}

// Migration is one step of a store's schema.
type Migration struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	// SQL is what the step runs, written for this store; a step that is not SQL alone says so in a
	// comment.
	SQL string `json:"sql"`
}

// Stores the status names.
const (
	StoreStorage  = "storage"
	StoreSchedule = "schedule"
)

// StorageMigrationStatus reads the schema of the indexed storage rawURL names, creating nothing.
func StorageMigrationStatus(ctx context.Context, rawURL string) (st MigrationStatus, err error) {
	defer func() { err = redact.Error(err) }()
	u, err := parse("storage", rawURL)
	if err != nil {
		return MigrationStatus{}, err
	}
	st = MigrationStatus{Store: StoreStorage, Backend: backendName(u.Scheme), URL: redact.URL(rawURL), Pending: []Migration{}}
	switch u.Scheme {
	case "memory":
		st.Note = "memory:// keeps nothing outside the process that made it: nothing to migrate"
		return st, nil
	case "sqlite":
		path, err := filePath(u)
		if err != nil {
			return st, err
		}
		s, err := sqlite.StorageSchemaState(ctx, path)
		return fromSQLite(st, s), err
	case "multisqlite":
		dir, err := filePath(u)
		if err != nil {
			return st, err
		}
		fi, err := os.Stat(dir)
		switch {
		case err == nil && !fi.IsDir():
			return st, fmt.Errorf("multisqlite directory %s is not a directory", dir)
		case err != nil && !os.IsNotExist(err):
			return st, err
		}
		// The store as a whole has no schema version: each file has its own (Latest stays 0).
		st.Exists = err == nil
		st.Note = fmt.Sprintf("one SQLite file per index, each brought to schema version %d when strata opens it: "+
			"nothing to migrate for the store as a whole", sqlite.SchemaVersion)
		if !st.Exists {
			st.Note += "; the directory does not exist yet (migrate up, or strata run, creates it)"
		}
		return st, nil
	case "postgres", "postgresql":
		s, err := postgres.StorageMigrationState(ctx, rawURL)
		return fromPostgres(st, s), err
	case "redis", "redis+cluster":
		l, err := redis.ReadLayout(ctx, rawURL)
		if err != nil {
			return st, err
		}
		st.Exists, st.Version, st.Latest = true, l.Version(), redis.LayoutVersion
		switch {
		case l.OldKey != "":
			st.Note = fmt.Sprintf("the prefix holds keys of the previous layout (%q): migrating refuses it; drain the prefix with "+
				"the version that wrote it, or give this one a new prefix (docs/redis.md)", l.OldKey)
		case st.Version == 0:
			st.Pending = append(st.Pending, Migration{Version: redis.LayoutVersion, Name: "layout_marker",
				SQL: fmt.Sprintf("-- Redis, not SQL: SET NX the layout marker {strata}layout = %d under the prefix", redis.LayoutVersion)})
			st.Note = "no layout marker: no strata has opened this prefix yet"
		case st.Version != st.Latest:
			st.Note = fmt.Sprintf("layout marker %q: this build knows layout %d only", l.Marker, redis.LayoutVersion)
		}
		return st, nil
	}
	return st, unknownScheme("storage", rawURL, u.Scheme, Schemes)
}

// ScheduleMigrationStatus reads the schema of the schedule store rawURL names, creating nothing.
func ScheduleMigrationStatus(ctx context.Context, rawURL string) (st MigrationStatus, err error) {
	defer func() { err = redact.Error(err) }()
	u, err := parse("schedule store", rawURL)
	if err != nil {
		return MigrationStatus{}, err
	}
	st = MigrationStatus{Store: StoreSchedule, Backend: backendName(u.Scheme), URL: redact.URL(rawURL), Pending: []Migration{}}
	switch u.Scheme {
	case "memory":
		st.Note = "memory:// keeps nothing outside the process that made it: nothing to migrate"
		return st, nil
	case "sqlite":
		path, err := filePath(u)
		if err != nil {
			return st, err
		}
		s, err := sqlite.ScheduleSchemaState(ctx, path)
		return fromSQLite(st, s), err
	case "postgres", "postgresql":
		s, err := postgres.ScheduleMigrationState(ctx, rawURL)
		return fromPostgres(st, s), err
	}
	return st, unknownScheme("schedule store", rawURL, u.Scheme, ScheduleSchemes)
}

// MigrateStorage applies what StorageMigrationStatus lists, creating the store if it is missing: it
// opens the store, which migrates it, and closes it.
func MigrateStorage(ctx context.Context, rawURL string) error {
	st, err := Open(ctx, rawURL, nil)
	if err != nil {
		return err
	}
	return st.Close()
}

// MigrateSchedule is MigrateStorage for the schedule store.
func MigrateSchedule(ctx context.Context, rawURL string) error {
	st, err := OpenSchedule(ctx, rawURL)
	if err != nil {
		return err
	}
	return st.Close()
}

func backendName(scheme string) string {
	switch scheme {
	case "postgresql":
		return "postgres"
	case "redis+cluster":
		return "redis"
	}
	return scheme
}

func fromSQLite(st MigrationStatus, s sqlite.SchemaState) MigrationStatus {
	st.Exists, st.Version, st.Latest = s.Exists, s.Version, s.Latest
	for _, m := range s.Pending {
		st.Pending = append(st.Pending, Migration(m))
	}
	switch {
	case !s.Exists:
		st.Note = "the file does not exist yet (migrate up, or strata run, creates it)"
	case s.Version > s.Latest:
		st.Note = fmt.Sprintf("schema version %d is newer than this build knows (%d): use a newer strata", s.Version, s.Latest)
	}
	return st
}

func fromPostgres(st MigrationStatus, s postgres.MigrationState) MigrationStatus {
	st.Exists, st.Latest = s.SchemaExists, s.Latest
	if len(s.Applied) > 0 {
		st.Version = slices.Max(s.Applied)
	}
	for _, m := range s.Pending {
		st.Pending = append(st.Pending, Migration(m))
	}
	switch {
	case !s.SchemaExists:
		st.Note = fmt.Sprintf("schema %q does not exist yet (migrate up, or strata run, creates it)", s.Schema)
	case s.Unrecorded:
		st.Note = fmt.Sprintf("schema %q holds the store's table with no record of a migration (made by hand?): "+
			"migrating adopts it when it matches the documented DDL, and refuses it otherwise", s.Schema)
	case st.Version > st.Latest:
		st.Note = fmt.Sprintf("schema version %d is newer than this build knows (%d): use a newer strata", st.Version, st.Latest)
	}
	return st
}
