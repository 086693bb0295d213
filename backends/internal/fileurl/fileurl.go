// Package fileurl reads the URLs that name a file or a directory of the local filesystem
// (sqlite:///abs/file.db, sqlite:rel/file.db, multisqlite:…, fs:…, file:…), for backends.Open and for
// the Open of each backend package that keeps its data in files.
package fileurl

import (
	"errors"
	"fmt"
	"net/url"
	"slices"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/redact"
)

// Parse returns the path rawURL names, refusing a URL whose scheme is not one of schemes: what the Open
// of a file backend takes.
func Parse(rawURL string, schemes ...string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// A *url.Error repeats the whole URL, password included: keep its reason only.
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		return "", fmt.Errorf("storage URL %q: %w: %v", redact.URL(rawURL), is.ErrInvalidArgument, err)
	}
	if !slices.Contains(schemes, u.Scheme) {
		return "", fmt.Errorf("storage URL %q: %w: want a %s: URL", redact.URL(rawURL), is.ErrInvalidArgument, schemes[0])
	}
	return Path(u)
}

// Path reads the path of a parsed URL: scheme:///abs/path, scheme://localhost/abs/path or
// scheme:relative/path. A host other than localhost, a query, or no path is an error saying what to
// write instead.
func Path(u *url.URL) (string, error) {
	usage := fmt.Sprintf("use %[1]s:///absolute/path or %[1]s:relative/path", u.Scheme)
	switch {
	case u.RawQuery != "":
		return "", fmt.Errorf("storage URL %q: %s takes no parameters", redact.URL(u.String()), u.Scheme)
	case u.Opaque != "":
		return u.Opaque, nil
	case u.Host != "" && u.Host != "localhost":
		return "", fmt.Errorf("storage URL %q names host %q: %s", redact.URL(u.String()), u.Host, usage)
	case u.Path == "" || u.Path == "/":
		return "", errors.New("storage URL " + redact.URL(u.String()) + " has no path: " + usage)
	}
	return u.Path, nil
}
