package redis_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/backends/redis"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
)

// OpenExisting reads the layout marker and never writes it: a prefix of this layout without the
// marker opens and reads as it is, and stays without it; a prefix of the previous layout or of a newer
// one is refused as Open refuses it. Its Store refuses writes.
func TestOpenExisting_ReadsTheLayoutNeverWritesIt(t *testing.T) {
	layoutCases(t, func(t *testing.T, raw, prefix string, c goredis.UniversalClient) {
		ctx := t.Context()
		url := testenv.WithQuery(t, raw, redis.PrefixParam, prefix)
		key := is.BucketPrefix(5) + "c:a"
		// Written without Open, as a foreign writer following docs/redis.md does: no marker.
		if err := storeOn(t, c, prefix).Append(ctx, ns, key, 1, []byte("v")); err != nil {
			t.Fatal(err)
		}
		before := testenv.RedisKeys(t, c, prefix)
		st, err := redis.OpenExisting(ctx, url)
		if err != nil {
			t.Fatalf("OpenExisting of an unmarked prefix: %v", err)
		}
		defer st.Close()
		if last, ok, err := st.LastID(ctx, ns, key); err != nil || !ok || last != 1 {
			t.Fatalf("LastID through OpenExisting: %d %v %v", last, ok, err)
		}
		if err := st.CheckLayout(ctx); err != nil {
			t.Fatalf("CheckLayout of a read-only Store: %v", err)
		}
		if err := st.Append(ctx, ns, key, 2, nil); !errors.Is(err, is.ErrInvalidArgument) {
			t.Fatalf("Append through OpenExisting: %v, want ErrInvalidArgument", err)
		}
		if _, err := st.DropPrefix(ctx, ns, key, 1); !errors.Is(err, is.ErrInvalidArgument) {
			t.Fatalf("DropPrefix through OpenExisting: %v, want ErrInvalidArgument", err)
		}
		if err := st.Delete(ctx, ns, key); !errors.Is(err, is.ErrInvalidArgument) {
			t.Fatalf("Delete through OpenExisting: %v, want ErrInvalidArgument", err)
		}
		if _, err := st.DropPrefixMany(ctx, ns, []is.KeyID{{Key: key, ID: 1}}); !errors.Is(err, is.ErrInvalidArgument) {
			t.Fatalf("DropPrefixMany through OpenExisting: %v, want ErrInvalidArgument", err)
		}
		if _, err := st.AppendKeys(ctx, ns, []is.KeyEntries{{Key: key, Entries: []is.Entry{{ID: 2}}}}); !errors.Is(err, is.ErrInvalidArgument) {
			t.Fatalf("AppendKeys through OpenExisting: %v, want ErrInvalidArgument", err)
		}
		if r, err := st.ClosestLastMany(ctx, ns, []is.KeyID{{Key: key, ID: 1}}); err != nil || len(r) != 1 || r[0].Last != 1 {
			t.Fatalf("ClosestLastMany through OpenExisting: %+v %v", r, err)
		}
		if after := testenv.RedisKeys(t, c, prefix); !slices.Equal(before, after) {
			t.Fatalf("keys after OpenExisting: %q, want %q", after, before)
		}

		// A key of the previous layout: refused, naming it, and still nothing written.
		old := prefix + ns + ":" + is.BucketPrefix(5) + "c:old"
		if err := c.ZAdd(ctx, old, goredis.Z{Member: "\x00\x00\x00\x00\x00\x00\x00\x01v"}).Err(); err != nil {
			t.Fatal(err)
		}
		before = testenv.RedisKeys(t, c, prefix)
		if _, err := redis.OpenExisting(ctx, url); !errors.Is(err, redis.ErrOldLayout) || !strings.Contains(err.Error(), old) {
			t.Fatalf("OpenExisting over a key of the previous layout: %v, want ErrOldLayout naming %q", err, old)
		}
		if after := testenv.RedisKeys(t, c, prefix); !slices.Equal(before, after) {
			t.Fatalf("keys after a refused OpenExisting: %q, want %q", after, before)
		}
		// A marker of a newer layout: refused.
		if err := c.Del(ctx, old).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, prefix+"{strata}layout", "3", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := redis.OpenExisting(ctx, url); !errors.Is(err, is.ErrInvalidArgument) || !strings.Contains(err.Error(), `"3"`) {
			t.Fatalf("OpenExisting of layout 3: %v", err)
		}
	})
}
