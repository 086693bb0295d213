package testenv

import (
	"context"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// RedisClusterEnv names the Redis Cluster tests run against, as backends/redis.Open takes it:
// redis+cluster://127.0.0.1:7000,127.0.0.1:7001/ (.ci/services.d/redis-cluster.sh starts one and
// exports it).
const RedisClusterEnv = "STRATA_TEST_REDIS_CLUSTER_URL"

// RedisClusterURL returns STRATA_TEST_REDIS_CLUSTER_URL, skipping the test when it is unset (failing it
// under CI=true). Every node it names must be a loopback address, and the first must answer: tests do
// not start a cluster themselves (the service script does).
func RedisClusterURL(tb testing.TB) string {
	tb.Helper()
	raw := envURL(tb, RedisClusterEnv, "source .ci/services.d/redis-cluster.sh to start a local cluster and set it")
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatalf("%s=%q is not a URL: %v", RedisClusterEnv, raw, err)
	}
	if u.Scheme != "redis+cluster" {
		tb.Fatalf("%s=%q: want a redis+cluster:// URL", RedisClusterEnv, raw)
	}
	for i, host := range strings.Split(u.Host, ",") {
		node := &url.URL{Scheme: "redis", Host: host}
		if i == 0 {
			requireLoopback(tb, RedisClusterEnv, node, "6379", "")
			continue
		}
		if h := node.Hostname(); h != "localhost" && !isLoopbackIP(h) {
			tb.Fatalf("%s names node %q: tests only ever talk to loopback addresses", RedisClusterEnv, host)
		}
	}
	return raw
}

// RedisClusterNodes returns the seed nodes of the cluster URL, host:port each.
func RedisClusterNodes(tb testing.TB, raw string) []string {
	tb.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatalf("%s: %v", RedisClusterEnv, err)
	}
	return strings.Split(u.Host, ",")
}

// RedisClusterClient returns a client of the cluster, closed when the test ends, for tests that reach
// the engine itself.
func RedisClusterClient(tb testing.TB, raw string) *redis.ClusterClient {
	tb.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: RedisClusterNodes(tb, raw)})
	tb.Cleanup(func() { c.Close() })
	return c
}

// RedisClusterPrefix returns a key prefix of the test's own and deletes every key under it, on every
// master, when the test ends. Tests share the cluster (it has database 0 only), so they never
// FLUSHALL.
func RedisClusterPrefix(tb testing.TB, raw string) string {
	tb.Helper()
	prefix := UniqueName("strata-test-") + ":"
	nodes := RedisClusterNodes(tb, raw)
	tb.Cleanup(func() {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: nodes})
		defer c.Close()
		ctx, cancel := Context()
		defer cancel()
		var mu sync.Mutex
		var firstErr error
		err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			iter := node.Scan(ctx, 0, escapeGlob(prefix)+"*", 1000).Iterator()
			pipe := node.Pipeline()
			n := 0
			for iter.Next(ctx) {
				// Keys of different slots: one UNLINK each, pipelined.
				pipe.Unlink(ctx, iter.Val())
				if n++; n%1000 == 0 {
					if _, err := pipe.Exec(ctx); err != nil {
						return err
					}
				}
			}
			if n%1000 != 0 {
				if _, err := pipe.Exec(ctx); err != nil {
					return err
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err := iter.Err(); err != nil && firstErr == nil {
				firstErr = err
			}
			return nil
		})
		if err == nil {
			err = firstErr
		}
		if err != nil {
			tb.Errorf("clean up redis cluster prefix %s: %v", prefix, err)
		}
	})
	return prefix
}

func isLoopbackIP(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
