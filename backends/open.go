// Package backends picks a storage backend, a blob store or a schedule store from a URL, so that
// configuration names each with one string. Each engine lives in its own package below this one.
package backends

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/cloudblob"
	"github.com/stratalog/strata/backends/fsblob"
	"github.com/stratalog/strata/backends/internal/fileurl"
	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/backends/multisqlite"
	"github.com/stratalog/strata/backends/postgres"
	"github.com/stratalog/strata/backends/redis"
	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/redact"
	"github.com/stratalog/strata/oplog/schedule"
)

// Options configures Open. A nil *Options is the zero Options, and a zero field means its default.
type Options struct {
	// MinConcurrentOps is how many operations the caller needs to run on the storage at once (a
	// sidecar's sweep max_concurrency, whose archives share the storage's slots with the executor). A
	// backend that bounds its own concurrency sizes its default bound for it: postgres, as
	// postgres.Options.MinConcurrentOps says (what the URL sets explicitly stands). The others ignore it.
	MinConcurrentOps int
}

// Schemes lists the URL schemes Open understands, for error messages and documentation.
var Schemes = []string{"memory", "sqlite", "multisqlite", "postgres", "postgresql", "redis", "redis+cluster"}

// Open returns the indexed storage rawURL names:
//
//	memory://                          in-process, nothing kept
//	sqlite:///abs/path/file.db         one SQLite file (sqlite:relative/file.db for a relative path)
//	multisqlite:///abs/dir             one SQLite file per index under dir (multisqlite:relative/dir)
//	postgres://user@host:5432/db?…     any libpq URL, plus schema= and max_concurrent_ops=
//	redis://host:6379/0?prefix=…       one Redis node, keys under prefix
//	redis+cluster://h:7000,h:7001/?prefix=…  a Redis Cluster (seed nodes comma-separated), keys under prefix
//
// An unknown scheme or a malformed URL is an error that says what was expected. No error echoes a
// secret of the URL (a driver's may: it is redacted). A nil opts means the defaults.
func Open(ctx context.Context, rawURL string, opts *Options) (_ is.Storage, err error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	defer func() { err = redact.Error(err) }()
	u, err := parse("storage", rawURL)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "memory":
		if err := bare(u); err != nil {
			return nil, err
		}
		return memory.New(), nil
	case "sqlite":
		return storage(sqlite.Open(ctx, rawURL))
	case "multisqlite":
		return storage(multisqlite.Open(ctx, rawURL))
	case "postgres", "postgresql":
		if !strings.HasPrefix(rawURL, u.Scheme+"://") {
			return storage(postgres.Open(ctx, rawURL)) // its error says which URLs it takes
		}
		return storage(postgres.New(ctx, rawURL, &postgres.Options{MinConcurrentOps: o.MinConcurrentOps}))
	case "redis", "redis+cluster":
		return storage(redis.Open(ctx, rawURL))
	}
	return nil, unknownScheme("storage", rawURL, u.Scheme, Schemes)
}

// BlobSchemes lists the URL schemes OpenBlob understands.
var BlobSchemes = []string{"fs", "file", "memory", "s3", "gs", "azblob", "mem"}

// OpenBlob returns the blob store rawURL names:
//
//	fs:///abs/dir, fs:relative/dir     a directory on the local filesystem (created if missing)
//	file:///abs/dir                    the same (backends/fsblob, not gocloud's fileblob)
//	memory://                          in-process, nothing kept
//	s3://bucket/prefix?region=…        Amazon S3, or any S3-protocol server with endpoint=http://host:port
//	                                   (and use_path_style=true, as most need)
//	gs://bucket/prefix                 Google Cloud Storage
//	azblob://container/prefix          Azure Blob Storage (account from AZURE_STORAGE_ACCOUNT)
//	mem://                             gocloud's in-process bucket, nothing kept
//
// The object stores go through gocloud.dev/blob (backends/cloudblob): the query parameters are
// gocloud's, credentials come from the environment as each cloud's SDK reads it, and the URL's path
// is a key prefix under which every blob is kept.
func OpenBlob(ctx context.Context, rawURL string) (archive.BlobStore, error) {
	u, err := parse("blob store", rawURL)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "fs", "file":
		return blobStore(fsblob.Open(ctx, rawURL))
	case "memory":
		if err := bare(u); err != nil {
			return nil, err
		}
		return memory.NewBlobStore(), nil
	case "s3", "gs", "azblob", "mem":
		return blobStore(cloudblob.Open(ctx, rawURL))
	}
	return nil, unknownScheme("blob store", rawURL, u.Scheme, BlobSchemes)
}

// blobStore turns a constructor's (*T, error) into (archive.BlobStore, error) with a nil interface on
// error, never a non-nil interface holding a nil pointer that a caller's Close would dereference.
func blobStore[T archive.BlobStore](s T, err error) (archive.BlobStore, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

// storage and scheduleStore do for Open and OpenSchedule what blobStore does for OpenBlob.
func storage[T is.Storage](s T, err error) (is.Storage, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

func scheduleStore[T schedule.Store](s T, err error) (schedule.Store, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

// ScheduleSchemes lists the URL schemes OpenSchedule understands.
var ScheduleSchemes = []string{"memory", "sqlite", "postgres", "postgresql"}

// OpenSchedule returns the scheduled_actions store rawURL names:
//
//	memory://                          in-process, nothing kept
//	sqlite:///abs/file.db, sqlite:rel  a table in a SQLite file (it may be the storage's file)
//	postgres://…?schema=…              a table in PostgreSQL
func OpenSchedule(ctx context.Context, rawURL string) (_ schedule.Store, err error) {
	defer func() { err = redact.Error(err) }()
	u, err := parse("schedule store", rawURL)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "memory":
		if err := bare(u); err != nil {
			return nil, err
		}
		return memory.NewScheduleStore(), nil
	case "sqlite":
		return scheduleStore(sqlite.OpenSchedule(ctx, rawURL))
	case "postgres", "postgresql":
		return scheduleStore(postgres.OpenSchedule(ctx, rawURL))
	}
	return nil, unknownScheme("schedule store", rawURL, u.Scheme, ScheduleSchemes)
}

// parse parses a URL without ever echoing a password it holds.
func parse(what, rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// A *url.Error repeats the whole URL, password included: keep its reason only.
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		return nil, fmt.Errorf("%s URL %q: %w", what, redacted(rawURL), err)
	}
	return u, nil
}

func unknownScheme(what, rawURL, scheme string, known []string) error {
	if scheme == "" {
		return fmt.Errorf("%s URL %q has no scheme; want one of %s", what, redacted(rawURL), strings.Join(known, ", "))
	}
	return fmt.Errorf("%s URL %q: unknown scheme %q; want one of %s", what, redacted(rawURL), scheme, strings.Join(known, ", "))
}

// bare checks a memory:// URL carries nothing else.
func bare(u *url.URL) error {
	if u.Host != "" || (u.Path != "" && u.Path != "/") || u.Opaque != "" || u.RawQuery != "" {
		return fmt.Errorf("URL %q: memory takes no host, path or parameters: use memory://", redacted(u.String()))
	}
	return nil
}

// filePath reads the path of a sqlite:, multisqlite:, fs: or file: URL: sqlite:///abs/file.db or
// sqlite:rel/file.db.
func filePath(u *url.URL) (string, error) { return fileurl.Path(u) }

// redacted hides the secrets of a URL that may be echoed in an error.
func redacted(rawURL string) string { return redact.URL(rawURL) }
