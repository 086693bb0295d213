package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"
)

// LayoutVersion is the layout this build writes and reads: what the marker key P{strata}layout holds.
var LayoutVersion, _ = strconv.Atoi(layoutVersion)

// LayoutState is what a prefix holds of strata's Redis layout, read without writing anything.
type LayoutState struct {
	// Marker is the value of the marker key P{strata}layout, "" when it is absent (nothing was opened
	// under the prefix yet, or a version before the marker wrote it).
	Marker string
	// OldKey is a key of the previous layout under the prefix ("" when none), looked for only when the
	// marker is absent: Open refuses such a prefix (ErrOldLayout).
	OldKey string
}

// Version is the layout the state shows: the marker's, 1 for the previous layout, 0 for a prefix
// nothing has marked (Open writes the marker), -1 for a marker this build cannot read.
func (l LayoutState) Version() int {
	switch {
	case l.Marker != "":
		if v, err := strconv.Atoi(l.Marker); err == nil {
			return v
		}
		return -1
	case l.OldKey != "":
		return 1
	}
	return 0
}

// ReadLayout connects to the server a URL names, as Open does, and reads the prefix's layout marker
// and, when it is absent, looks for keys of the previous layout (one SCAN of the prefix's keys, as
// Open's first check makes). Unlike Open it writes nothing: no marker.
func ReadLayout(ctx context.Context, rawURL string) (LayoutState, error) {
	cfg, err := parseURL(rawURL)
	if err != nil {
		return LayoutState{}, err
	}
	client := cfg.client()
	defer client.Close()
	s, err := New(ctx, client, &Options{Prefix: cfg.prefix})
	if err != nil {
		return LayoutState{}, err
	}
	var st LayoutState
	marker := s.prefix + layoutKey
	switch got, err := client.Get(ctx, marker).Result(); {
	case err == nil:
		st.Marker = got
		return st, nil
	case !errors.Is(err, goredis.Nil):
		return st, fmt.Errorf("redis %s: read layout marker %q: %w", redact(rawURL), marker, classify(err))
	}
	if st.OldKey, err = s.findOldLayoutKey(ctx); err != nil {
		return st, fmt.Errorf("redis %s: look for keys of the previous layout under %q: %w", redact(rawURL), s.prefix, classify(err))
	}
	return st, nil
}
