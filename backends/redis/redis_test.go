package redis_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stratalog/strata/backends/redis"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/indexedstorage/storagetest"
	"github.com/stratalog/strata/internal/testenv"
)

func harness() storagetest.Harness { return harnessOf(newStore) }

func harnessOf(newStore func(tb testing.TB) *redis.Store) storagetest.Harness {
	return storagetest.Harness{
		New:              func(tb testing.TB) is.Storage { return newStore(tb) },
		ModelSinglePages: 10_000,
		ModelWalks:       1000,
		RawWalk:          rawWalk,
		Poison:           poison,
	}
}

// poison replaces the index's sorted set with a string at the same Redis key (RedisKey: P{ns|T}:key,
// as docs/redis.md documents), as another program sharing the database would; the index set still
// lists it.
func poison(tb testing.TB, st is.Storage, ns, key string) {
	tb.Helper()
	s := st.(*redis.Store)
	if err := s.Client().Set(context.Background(), s.RedisKey(ns, key), "not a sorted set", 0).Err(); err != nil {
		tb.Fatalf("poison %s:%q: %v", ns, key, err)
	}
}

func TestConformance(t *testing.T) { storagetest.Run(t, harness()) }

// TestConformanceCluster runs the suite on Redis Cluster (STRATA_TEST_REDIS_CLUSTER_URL).
func TestConformanceCluster(t *testing.T) { storagetest.Run(t, harnessOf(newClusterStore)) }

func BenchmarkStorage(b *testing.B) { storagetest.Bench(b, harness(), 0) }

// newStore opens a Store of the test's own key prefix through Open, the way an application does.
func newStore(tb testing.TB) *redis.Store {
	tb.Helper()
	raw := testenv.RedisURL(tb)
	st, err := redis.Open(tb.Context(), testenv.WithQuery(tb, raw, redis.PrefixParam, testenv.RedisPrefix(tb, raw)))
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// newClusterStore opens a Store of the test's own key prefix on the test cluster through Open.
func newClusterStore(tb testing.TB) *redis.Store {
	tb.Helper()
	raw := testenv.RedisClusterURL(tb)
	st, err := redis.Open(tb.Context(), testenv.WithQuery(tb, raw, redis.PrefixParam, testenv.RedisClusterPrefix(tb, raw)))
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// rawWalk is the loop a Redis user writes without strata to list the namespace's indexes with each
// one's last id, as ScanStable's pages carry them: SCAN with a MATCH pattern of the namespace's index
// keys and COUNT until the cursor comes back 0, each page's last members read in one pipeline
// (ZRANGE key -1 -1), counting keys. The SQL backends' raw loops read max(id) with their keys too.
func rawWalk(ctx context.Context, st is.Storage, ns string, pageSize int) (int, error) {
	s := st.(*redis.Store)
	if s.IsCluster() {
		return 0, errors.New("SCAN reaches one node of a cluster")
	}
	match := escapeGlob(s.KeyPrefix()) + "{" + ns + "|*}:*"
	n, cursor := 0, uint64(0)
	for {
		keys, next, err := s.Client().Scan(ctx, cursor, match, int64(pageSize)).Result()
		if err != nil {
			return n, err
		}
		if len(keys) > 0 {
			pipe := s.Client().Pipeline()
			for _, k := range keys {
				pipe.ZRange(ctx, k, -1, -1)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return n, err
			}
		}
		n += len(keys)
		if next == 0 {
			return n, nil
		}
		cursor = next
	}
}

func escapeGlob(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(out)
}
