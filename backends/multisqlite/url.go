package multisqlite

import (
	"context"

	"github.com/stratalog/strata/backends/internal/fileurl"
)

// Scheme is the scheme of the URLs Open takes.
const Scheme = "multisqlite"

// Open opens the store a multisqlite: URL names, New with default Options: multisqlite:///abs/dir, or
// multisqlite:relative/dir for a directory relative to the working directory. The URL takes no
// parameters.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	dir, err := fileurl.Parse(rawURL, Scheme)
	if err != nil {
		return nil, err
	}
	return New(ctx, dir, nil)
}
