package testenv

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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
	release := clusterLock(tb, false)
	tb.Cleanup(release) // after the keys are gone: cleanups run last-registered first
	tb.Cleanup(func() {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: nodes})
		defer c.Close()
		ctx, cancel := Context()
		defer cancel()
		var mu sync.Mutex
		var firstErr error
		err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			iter := node.Scan(ctx, 0, EscapeGlob(prefix)+"*", 1000).Iterator()
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

// RedisClusterExclusive holds the test cluster alone until the test ends, for a test that moves slots
// or fails a master over: it waits for every test of every process that holds a prefix on the cluster
// (RedisClusterPrefix) to end, and keeps new ones from starting, so that their writes never meet a
// migration or a failover they were not written for. Call it before RedisClusterPrefix.
func RedisClusterExclusive(tb testing.TB) {
	tb.Helper()
	tb.Cleanup(clusterLock(tb, true))
}

// clusterLock takes the cluster lock shared or exclusive, with a turnstile: an exclusive taker holds
// the turnstile while it waits, so shared takers that come after it queue behind it instead of starving
// it. Both are flocks on files in the temporary directory, released when the process exits.
func clusterLock(tb testing.TB, exclusive bool) (release func()) {
	tb.Helper()
	open := func(name string) *os.File {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), name), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			tb.Fatalf("%s: %v", RedisClusterEnv, err)
		}
		return f
	}
	lock := func(f *os.File, how int) {
		if err := syscall.Flock(int(f.Fd()), how); err != nil {
			tb.Fatalf("%s: flock %s: %v", RedisClusterEnv, f.Name(), err)
		}
	}
	clusterExclusive.Lock()
	defer clusterExclusive.Unlock()
	if !exclusive && clusterExclusive.held > 0 {
		// This process holds the cluster alone: its own test's prefixes go ahead (a second flock of
		// the same file by the same process would wait for itself).
		return func() {}
	}
	turn, main := open("strata-test-redis-cluster.turnstile"), open("strata-test-redis-cluster.lock")
	lock(turn, syscall.LOCK_EX)
	if exclusive {
		lock(main, syscall.LOCK_EX)
		clusterExclusive.held++
		return func() {
			clusterExclusive.Lock()
			defer clusterExclusive.Unlock()
			clusterExclusive.held--
			turn.Close()
			main.Close()
		}
	}
	lock(main, syscall.LOCK_SH)
	turn.Close()
	return func() { main.Close() }
}

var clusterExclusive struct {
	sync.Mutex
	held int
}

func isLoopbackIP(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
