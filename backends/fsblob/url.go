package fsblob

import (
	"context"

	"github.com/stratalog/strata/backends/internal/fileurl"
)

// Schemes are the schemes of the URLs Open takes.
var Schemes = []string{"fs", "file"}

// Open opens the Store an fs: or file: URL names, New with default Options: fs:///abs/dir, or
// fs:relative/dir for a directory relative to the working directory (file:///abs/dir the same). The
// URL takes no parameters.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	dir, err := fileurl.Parse(rawURL, Schemes...)
	if err != nil {
		return nil, err
	}
	return New(ctx, dir, nil)
}
