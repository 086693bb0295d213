package sqlite

import (
	"context"

	"github.com/stratalog/strata/backends/internal/fileurl"
)

// Scheme is the scheme of the URLs Open and OpenSchedule take.
const Scheme = "sqlite"

// Open opens the store a sqlite: URL names, New with default Options: sqlite:///abs/path/file.db, or
// sqlite:relative/file.db for a path relative to the working directory. The URL takes no parameters.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	path, err := fileurl.Parse(rawURL, Scheme)
	if err != nil {
		return nil, err
	}
	return New(ctx, path, nil)
}

// OpenSchedule opens the schedule store a sqlite: URL names, as Open reads it: NewScheduleStore with
// default Options.
func OpenSchedule(ctx context.Context, rawURL string) (*ScheduleStore, error) {
	path, err := fileurl.Parse(rawURL, Scheme)
	if err != nil {
		return nil, err
	}
	return NewScheduleStore(ctx, path, nil)
}
