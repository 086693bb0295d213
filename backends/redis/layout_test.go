package redis_test

import (
	"errors"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/backends/redis"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
)

// layoutCases runs fn with a raw URL and a fresh prefix on it, on a node and on the cluster.
func layoutCases(t *testing.T, fn func(t *testing.T, raw, prefix string, client goredis.UniversalClient)) {
	t.Run("node", func(t *testing.T) {
		raw := testenv.RedisURL(t)
		opts, err := goredis.ParseURL(raw)
		if err != nil {
			t.Fatal(err)
		}
		c := goredis.NewClient(opts)
		t.Cleanup(func() { c.Close() })
		fn(t, raw, testenv.RedisPrefix(t, raw), c)
	})
	t.Run("cluster", func(t *testing.T) {
		raw := testenv.RedisClusterURL(t)
		fn(t, raw, testenv.RedisClusterPrefix(t, raw), testenv.RedisClusterClient(t, raw))
	})
}

// A prefix that holds an index of the previous layout (P + ns + ":" + key, no index sets) is refused
// at Open, naming the key, and nothing is written; a prefix of this layout gets its marker once, and
// later Opens read only the marker.
func TestOpen_PreviousLayoutIsRefused(t *testing.T) {
	layoutCases(t, func(t *testing.T, raw, prefix string, c goredis.UniversalClient) {
		ctx := t.Context()
		old := prefix + ns + ":" + is.BucketPrefix(5) + "c:a"
		if err := c.ZAdd(ctx, old, goredis.Z{Member: "\x00\x00\x00\x00\x00\x00\x00\x01v"}).Err(); err != nil {
			t.Fatal(err)
		}
		url := testenv.WithQuery(t, raw, redis.PrefixParam, prefix)
		st, err := redis.Open(ctx, url)
		if !errors.Is(err, redis.ErrOldLayout) || !errors.Is(err, is.ErrInvalidArgument) || !strings.Contains(err.Error(), old) {
			t.Fatalf("Open over a key of the previous layout: %v, want ErrOldLayout naming %q", err, old)
		}
		if st != nil {
			t.Fatal("Open returned a Store with its error")
		}
		if err := c.Get(ctx, prefix+"{strata}layout").Err(); !errors.Is(err, goredis.Nil) {
			t.Fatalf("the refused Open wrote the marker: %v", err)
		}
		// Drained (the old key gone), the prefix opens and is marked.
		if err := c.Del(ctx, old).Err(); err != nil {
			t.Fatal(err)
		}
		// Keys that merely look alike are no index of the previous layout: a string, and an index of
		// another Store whose prefix starts with this one.
		if err := c.Set(ctx, prefix+"other:thing", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		longer := storeOn(t, c, prefix+"sub:")
		if err := longer.Append(ctx, ns, "k", 1, nil); err != nil {
			t.Fatal(err)
		}
		st, err = redis.Open(ctx, url)
		if err != nil {
			t.Fatalf("Open of a drained prefix: %v", err)
		}
		defer st.Close()
		if v, err := c.Get(ctx, prefix+"{strata}layout").Result(); err != nil || v != "2" {
			t.Fatalf("marker %q %v, want \"2\"", v, err)
		}
		// Marked, the check is one GET.
		counted := storeOn(t, c, prefix)
		cnt := &counter{}
		c.AddHook(cnt)
		if err := counted.CheckLayout(ctx); err != nil {
			t.Fatal(err)
		}
		if n := cnt.cmds.Load(); n != 1 {
			t.Fatalf("CheckLayout of a marked prefix sent %d commands, want 1 (GET)", n)
		}
		// A marker this version does not know is refused.
		if err := c.Set(ctx, prefix+"{strata}layout", "3", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := redis.Open(ctx, url); !errors.Is(err, is.ErrInvalidArgument) || !strings.Contains(err.Error(), `"3"`) {
			t.Fatalf("Open of layout 3: %v", err)
		}
	})
}
