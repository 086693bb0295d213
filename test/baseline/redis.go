package baseline

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// Redis archives a namespace of strata's Redis layout (docs/redis.md, layout 2): the index of a stored
// key k with bucket digits T at Prefix{ns|T}:k, a sorted set whose members are the id as 8 big-endian
// bytes and then the value, all of score 0; the index set Prefix{ns|T} lists the indexes of (ns, T) that
// exist. It archives the bucketed keys (the sets of T = 0000…3fff), as the sweep does, and drops with
// the documented drop script, so an index emptied is unlisted in the same step. One client serves
// Redis and Redis Cluster: every pipeline below go-redis splits by node on a cluster.
type Redis struct {
	Client goredis.UniversalClient
	Prefix string
	Options
}

// redisDrop is docs/redis.md's "Drop up to an id", as it is.
var redisDrop = goredis.NewScript(`local n = redis.call('ZREMRANGEBYLEX', KEYS[1], '-', ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('ZREM', KEYS[2], ARGV[2])
end
return n`)

// probeBatch is how many index sets one pipeline of the walk reads.
const probeBatch = 1024

func (r *Redis) set(ns, tag string) string { return r.Prefix + "{" + ns + "|" + tag + "}" }

// walk hands fn the namespace's bucketed keys, at most PageSize at a time, in bucket order: a
// pipeline of ZRANGE over probeBatch index sets a round trip.
func (r *Redis) walk(ctx context.Context, ns string, fn func(keys []string) error) error {
	var page []string
	for lo := 0; lo < 16384; lo += probeBatch {
		pipe := r.Client.Pipeline()
		cmds := make([]*goredis.StringSliceCmd, 0, probeBatch)
		for b := lo; b < lo+probeBatch; b++ {
			cmds = append(cmds, pipe.ZRange(ctx, r.set(ns, fmt.Sprintf("%04x", b)), 0, -1))
		}
		r.Counts.rt(1)
		if _, err := pipe.Exec(ctx); err != nil && err != goredis.Nil {
			return fmt.Errorf("baseline redis probe of %s: %w", ns, err)
		}
		for _, c := range cmds {
			page = append(page, c.Val()...)
			for len(page) >= r.pageSize() {
				if err := fn(page[:r.pageSize()]); err != nil {
					return err
				}
				page = append([]string(nil), page[r.pageSize():]...)
			}
		}
	}
	if len(page) > 0 {
		return fn(page)
	}
	return nil
}

// index is the Redis key of a stored key's index and of its index set; ok is false for a key without a
// bucket prefix (the walk meets none).
func (r *Redis) index(ns, key string) (index, set string) {
	tag := "u"
	if len(key) > 4 && key[4] == '/' {
		if b, err := strconv.ParseUint(key[:4], 16, 16); err == nil && b < 16384 && strings.ToLower(key[:4]) == key[:4] {
			tag = key[:4]
		}
	}
	return r.set(ns, tag) + ":" + key, r.set(ns, tag)
}

type redisRow struct {
	id    uint64
	value string
}

func decodeMembers(members []string) ([]redisRow, error) {
	rows := make([]redisRow, len(members))
	for i, m := range members {
		if len(m) < 8 {
			return nil, fmt.Errorf("baseline redis member of %d bytes", len(m))
		}
		rows[i] = redisRow{binary.BigEndian.Uint64([]byte(m[:8])), m[8:]}
	}
	return rows, nil
}

// dropArgs are the drop script's keys and arguments for the rows up to last.
func (r *Redis) dropArgs(ns, key string, last uint64) (keys []string, bound, member string) {
	index, set := r.index(ns, key)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], last+1)
	return []string{index, set}, "(" + string(b[:]), key
}

func (r *Redis) put(ctx context.Context, key string, rows []redisRow) error {
	for _, row := range rows {
		if err := r.Blobs.Put(ctx, BlobPath(key, row.id), []byte(row.value)); err != nil {
			return err
		}
	}
	return nil
}

// PerAgent: the walk, then per key, Workers at once: the whole index (ZRANGE 0 -1, one round trip),
// a blob a member, the drop script up to the last id read (EVALSHA, one round trip).
func (r *Redis) PerAgent(ctx context.Context, ns string) (int, error) {
	archived := 0
	err := r.walk(ctx, ns, func(keys []string) error {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(r.workers())
		for _, key := range keys {
			g.Go(func() error {
				index, _ := r.index(ns, key)
				r.Counts.rt(1)
				members, err := r.Client.ZRange(gctx, index, 0, -1).Result()
				if err != nil {
					return fmt.Errorf("baseline redis read %s %q: %w", ns, key, err)
				}
				rows, err := decodeMembers(members)
				if err != nil || len(rows) == 0 {
					return err
				}
				if err := r.put(gctx, key, rows); err != nil {
					return err
				}
				keys, bound, member := r.dropArgs(ns, key, rows[len(rows)-1].id)
				r.Counts.rt(1)
				if err := redisDrop.Run(gctx, r.Client, keys, bound, member).Err(); err != nil {
					return fmt.Errorf("baseline redis drop %s %q: %w", ns, key, err)
				}
				return nil
			})
		}
		err := g.Wait()
		if err == nil {
			archived += len(keys)
			r.Counts.agents(len(keys))
		}
		return err
	})
	return archived, err
}

// Batched: the walk, then a page at a time: one pipeline reads every index of the page (ZRANGE 0 -1
// each), the blobs are put Workers at once, one pipeline runs the drop script for each up to the last
// id read (EVALSHA, the script loaded once before).
func (r *Redis) Batched(ctx context.Context, ns string) (int, error) {
	r.Counts.rt(1)
	if err := redisDrop.Load(ctx, r.Client).Err(); err != nil {
		return 0, fmt.Errorf("baseline redis script load: %w", err)
	}
	archived := 0
	err := r.walk(ctx, ns, func(keys []string) error {
		pipe := r.Client.Pipeline()
		cmds := make([]*goredis.StringSliceCmd, len(keys))
		for i, key := range keys {
			index, _ := r.index(ns, key)
			cmds[i] = pipe.ZRange(ctx, index, 0, -1)
		}
		r.Counts.rt(1)
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("baseline redis read of a page of %s: %w", ns, err)
		}
		rows := make([][]redisRow, len(keys))
		for i, c := range cmds {
			var err error
			if rows[i], err = decodeMembers(c.Val()); err != nil {
				return err
			}
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(r.workers())
		for i, key := range keys {
			g.Go(func() error { return r.put(gctx, key, rows[i]) })
		}
		if err := g.Wait(); err != nil {
			return err
		}
		pipe = r.Client.Pipeline()
		n := 0
		for i, key := range keys {
			if len(rows[i]) == 0 {
				continue
			}
			keys, bound, member := r.dropArgs(ns, key, rows[i][len(rows[i])-1].id)
			redisDrop.EvalSha(ctx, pipe, keys, bound, member)
			n++
		}
		if n > 0 {
			r.Counts.rt(1)
			if _, err := pipe.Exec(ctx); err != nil {
				return fmt.Errorf("baseline redis drop of a page of %s: %w", ns, err)
			}
		}
		archived += len(keys)
		r.Counts.agents(len(keys))
		return nil
	})
	return archived, err
}

// RedisStats is what INFO commandstats and INFO cpu count, summed over the servers.
type RedisStats struct {
	Calls   int64 // every command executed, those run by scripts included, INFO left out
	Scripts int64 // EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, FCALL, FCALL_RO
	// CPU is the server processes' CPU time (used_cpu_user + used_cpu_sys): on a server of one
	// thread, the work every client asked of it, what commandstats' usec leaves out (reading and
	// parsing requests, writing replies, a script's calls into Redis) included.
	CPU time.Duration
}

// RedisCommandStats reads INFO commandstats and INFO cpu of the server (every master of a cluster),
// through INFO all: INFO takes one section before Redis 7. The counts are the server's: they include
// every other client's commands.
func RedisCommandStats(ctx context.Context, client goredis.UniversalClient) (RedisStats, error) {
	var total RedisStats
	if c, ok := client.(*goredis.ClusterClient); ok {
		var mu sync.Mutex
		err := c.ForEachMaster(ctx, func(ctx context.Context, node *goredis.Client) error {
			info, err := node.Info(ctx, "all").Result()
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			total = total.plus(parseRedisInfo(info))
			return nil
		})
		return total, err
	}
	info, err := client.Info(ctx, "all").Result()
	if err != nil {
		return total, err
	}
	return parseRedisInfo(info), nil
}

func (s RedisStats) plus(o RedisStats) RedisStats {
	return RedisStats{Calls: s.Calls + o.Calls, Scripts: s.Scripts + o.Scripts, CPU: s.CPU + o.CPU}
}

// parseRedisInfo reads the counts of RedisStats from the text of one server's INFO commandstats and
// INFO cpu; lines it does not know are left out.
func parseRedisInfo(info string) RedisStats {
	var st RedisStats
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if name == "used_cpu_user" || name == "used_cpu_sys" {
			if secs, err := strconv.ParseFloat(rest, 64); err == nil {
				st.CPU += time.Duration(math.Round(secs*1e6)) * time.Microsecond // INFO gives µs
			}
			continue
		}
		name, ok = strings.CutPrefix(name, "cmdstat_")
		if !ok || name == "info" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			continue
		}
		st.Calls += n
		switch name {
		case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
			st.Scripts += n
		}
	}
	return st
}
