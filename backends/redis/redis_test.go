package redis_test

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/backends/redis"
	"github.com/stratalog/strata/indexedstorage/storagetest"
	"github.com/stratalog/strata/test/backendtest"
)

func harness() storagetest.Harness { return backendtest.Redis().Harness() }

func TestConformance(t *testing.T) { storagetest.Run(t, harness()) }

// TestConformanceCluster runs the suite on Redis Cluster (STRATA_TEST_REDIS_CLUSTER_URL).
func TestConformanceCluster(t *testing.T) { storagetest.Run(t, backendtest.RedisCluster().Harness()) }

func BenchmarkStorage(b *testing.B) { storagetest.Bench(b, harness(), 0) }

// newStore opens a Store of the test's own key prefix through Open, the way an application does.
func newStore(tb testing.TB) *redis.Store { return backendtest.Redis().Open(tb).(*redis.Store) }

// storeOn is redis.New over client with prefix, failing the test on an error.
func storeOn(tb testing.TB, client goredis.UniversalClient, prefix string) *redis.Store {
	tb.Helper()
	st, err := redis.New(tb.Context(), client, &redis.Options{Prefix: prefix})
	if err != nil {
		tb.Fatalf("redis.New: %v", err)
	}
	return st
}

// newClusterStore opens a Store of the test's own key prefix on the test cluster through Open.
func newClusterStore(tb testing.TB) *redis.Store {
	return backendtest.RedisCluster().Open(tb).(*redis.Store)
}
