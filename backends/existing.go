package backends

import (
	"context"
	"fmt"
	"io/fs"
	"os"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/multisqlite"
	"github.com/stratalog/strata/backends/postgres"
	"github.com/stratalog/strata/backends/redis"
	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/redact"
)

// OpenExisting is Open for a read-only command (strata scan, strata inspect): it writes nothing and
// creates no file, directory, schema, table or key, and runs no migration. A SQLite file is opened
// read-only (sqlite.Options.ReadOnly: its bytes, its journal mode and its -wal and -shm stay as they
// were), a multisqlite directory must exist and its files are opened the same way, a PostgreSQL schema
// and its table must exist, and Redis's layout marker is read, never written (redis.OpenExisting). A
// missing store is an error matching fs.ErrNotExist that says what is missing. The stores returned
// refuse writes (ErrInvalidArgument).
func OpenExisting(ctx context.Context, rawURL string) (st is.Storage, err error) {
	defer func() {
		if err != nil {
			st, err = nil, redact.Error(err) // nil, not an interface holding a nil *Store
		}
	}()
	u, err := parse("storage", rawURL)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "memory":
		return nil, fmt.Errorf("storage URL memory:// holds nothing outside the process that made it: %w", fs.ErrNotExist)
	case "sqlite":
		path, err := filePath(u)
		if err != nil {
			return nil, err
		}
		return sqlite.New(ctx, path, &sqlite.Options{ReadOnly: true})
	case "multisqlite":
		dir, err := filePath(u)
		if err != nil {
			return nil, err
		}
		return multisqlite.New(ctx, dir, &multisqlite.Options{ReadOnly: true})
	case "postgres", "postgresql":
		return postgres.OpenExisting(ctx, rawURL)
	case "redis", "redis+cluster":
		return redis.OpenExisting(ctx, rawURL)
	}
	return nil, unknownScheme("storage", rawURL, u.Scheme, Schemes)
}

// OpenBlobExisting is OpenBlob for a read-only command: an fs:// directory must exist (OpenBlob
// creates it). Other stores are opened as OpenBlob opens them, which creates nothing.
func OpenBlobExisting(ctx context.Context, rawURL string) (bs archive.BlobStore, err error) {
	defer func() {
		if err != nil {
			bs, err = nil, redact.Error(err)
		}
	}()
	u, err := parse("blob store", rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "fs" {
		dir, err := filePath(u)
		if err != nil {
			return nil, err
		}
		if fi, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("blob store %s: %w", dir, err)
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("blob store %s is not a directory: %w", dir, is.ErrInvalidArgument)
		}
	}
	return OpenBlob(ctx, rawURL)
}
