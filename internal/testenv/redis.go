package testenv

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// RedisPrefix returns a key prefix of the test's own and deletes every key under it when the test
// ends. Tests share one server, so they never FLUSHALL or FLUSHDB.
func RedisPrefix(tb testing.TB, url string) string {
	tb.Helper()
	prefix := UniqueName("strata-test-") + ":"
	opts, err := redis.ParseURL(url)
	if err != nil {
		tb.Fatalf("%s: %v", RedisEnv, err)
	}
	tb.Cleanup(func() {
		client := redis.NewClient(opts)
		defer client.Close()
		ctx, cancel := Context()
		defer cancel()
		iter := client.Scan(ctx, 0, EscapeGlob(prefix)+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
			if len(keys) == 1000 {
				client.Unlink(ctx, keys...)
				keys = keys[:0]
			}
		}
		if len(keys) > 0 {
			client.Unlink(ctx, keys...)
		}
		if err := iter.Err(); err != nil {
			tb.Errorf("clean up redis prefix %s: %v", prefix, err)
		}
	})
	return prefix
}

// EscapeGlob escapes the characters Redis MATCH patterns treat specially. The prefix UniqueName makes
// contains none, but the cleanup must never widen to other tests' keys if that changes.
func EscapeGlob(s string) string {
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

// RedisKeys is every key under prefix (a literal prefix: no glob character in it), sorted; on a
// cluster, of every master.
func RedisKeys(tb testing.TB, c redis.UniversalClient, prefix string) []string {
	tb.Helper()
	var keys []string
	scan := func(node redis.UniversalClient) error {
		iter := node.Scan(tb.Context(), 0, prefix+"*", 1000).Iterator()
		for iter.Next(tb.Context()) {
			keys = append(keys, iter.Val())
		}
		return iter.Err()
	}
	var err error
	if cluster, ok := c.(*redis.ClusterClient); ok {
		// ForEachMaster calls its function on every master at once: collect them, then scan in turn.
		var mu sync.Mutex
		var nodes []*redis.Client
		err = cluster.ForEachMaster(tb.Context(), func(_ context.Context, node *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			nodes = append(nodes, node)
			return nil
		})
		for _, node := range nodes {
			if err == nil {
				err = scan(node)
			}
		}
	} else {
		err = scan(c)
	}
	if err != nil {
		tb.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}
