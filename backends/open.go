// Package backends picks a storage backend from a URL, so that configuration names storage with one
// string. Each engine lives in its own package below this one.
package backends

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/backends/multisqlite"
	"github.com/stratalog/strata/backends/postgres"
	"github.com/stratalog/strata/backends/redis"
	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
)

// Schemes lists the URL schemes Open understands, for error messages and documentation.
var Schemes = []string{"memory", "sqlite", "multisqlite", "postgres", "postgresql", "redis"}

// Open returns the indexed storage rawURL names:
//
//	memory://                          in-process, nothing kept
//	sqlite:///abs/path/file.db         one SQLite file (sqlite:relative/file.db for a relative path)
//	multisqlite:///abs/dir             one SQLite file per index under dir (multisqlite:relative/dir)
//	postgres://user@host:5432/db?…     any libpq URL, plus schema= and max_concurrent_ops=
//	redis://host:6379/0?prefix=…       one Redis node, keys under prefix
//
// An unknown scheme or a malformed URL is an error that says what was expected.
func Open(ctx context.Context, rawURL string) (is.Storage, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// A *url.Error repeats the whole URL, password included: keep its reason only.
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		return nil, fmt.Errorf("storage URL %q: %w", redact(rawURL), err)
	}
	switch u.Scheme {
	case "memory":
		if u.Host != "" || (u.Path != "" && u.Path != "/") || u.Opaque != "" || u.RawQuery != "" {
			return nil, fmt.Errorf("storage URL %q: memory takes no host, path or parameters: use memory://", rawURL)
		}
		return memory.New(), nil
	case "sqlite":
		path, err := filePath(u)
		if err != nil {
			return nil, err
		}
		return sqlite.Open(ctx, path, sqlite.Options{})
	case "multisqlite":
		dir, err := filePath(u)
		if err != nil {
			return nil, err
		}
		return multisqlite.Open(ctx, dir, multisqlite.Options{})
	case "postgres", "postgresql":
		return postgres.Open(ctx, rawURL)
	case "redis":
		return redis.Open(ctx, rawURL)
	case "":
		return nil, fmt.Errorf("storage URL %q has no scheme; want one of %s", redact(rawURL), strings.Join(Schemes, ", "))
	}
	return nil, fmt.Errorf("storage URL %q: unknown scheme %q; want one of %s", redact(rawURL), u.Scheme, strings.Join(Schemes, ", "))
}

// filePath reads the path of a sqlite: or multisqlite: URL: sqlite:///abs/file.db or sqlite:rel/file.db.
func filePath(u *url.URL) (string, error) {
	usage := fmt.Sprintf("use %[1]s:///absolute/path or %[1]s:relative/path", u.Scheme)
	switch {
	case u.RawQuery != "":
		return "", fmt.Errorf("storage URL %q: %s takes no parameters", u.Redacted(), u.Scheme)
	case u.Opaque != "":
		return u.Opaque, nil
	case u.Host != "" && u.Host != "localhost":
		return "", fmt.Errorf("storage URL %q names host %q: %s", u.Redacted(), u.Host, usage)
	case u.Path == "" || u.Path == "/":
		return "", errors.New("storage URL " + u.Redacted() + " has no path: " + usage)
	}
	return u.Path, nil
}

// redact hides a password in a URL that may be echoed in an error.
func redact(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		return u.Redacted()
	}
	if i := strings.Index(rawURL, "@"); i >= 0 {
		return "…" + rawURL[i:]
	}
	return rawURL
}
