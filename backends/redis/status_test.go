package redis_test

import (
	"errors"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/backends/redis"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
)

// ReadLayout says what a prefix holds and writes nothing: no marker on a fresh prefix, nor on one
// holding the previous layout; a prefix Open marked reads as this build's layout.
func TestReadLayout_WritesNothing(t *testing.T) {
	layoutCases(t, func(t *testing.T, raw, prefix string, c goredis.UniversalClient) {
		ctx := t.Context()
		url := testenv.WithQuery(t, raw, redis.PrefixParam, prefix)
		marker := prefix + "{strata}layout"
		st, err := redis.ReadLayout(ctx, url)
		if err != nil || st.Version() != 0 || st.Marker != "" || st.OldKey != "" {
			t.Fatalf("fresh prefix: %+v (version %d), %v", st, st.Version(), err)
		}
		if err := c.Get(ctx, marker).Err(); !errors.Is(err, goredis.Nil) {
			t.Fatalf("ReadLayout wrote the marker: %v", err)
		}
		old := prefix + ns + ":" + is.BucketPrefix(5) + "c:a"
		if err := c.ZAdd(ctx, old, goredis.Z{Member: "\x00\x00\x00\x00\x00\x00\x00\x01v"}).Err(); err != nil {
			t.Fatal(err)
		}
		if st, err = redis.ReadLayout(ctx, url); err != nil || st.Version() != 1 || st.OldKey != old {
			t.Fatalf("previous layout: %+v (version %d), %v", st, st.Version(), err)
		}
		if err := c.Get(ctx, marker).Err(); !errors.Is(err, goredis.Nil) {
			t.Fatalf("ReadLayout wrote the marker: %v", err)
		}
		if err := c.Del(ctx, old).Err(); err != nil {
			t.Fatal(err)
		}
		s, err := redis.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if st, err = redis.ReadLayout(ctx, url); err != nil || st.Version() != redis.LayoutVersion || st.Marker != "2" {
			t.Fatalf("after Open: %+v, %v", st, err)
		}
	})
}
