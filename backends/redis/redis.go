// Package redis is the indexedstorage.Storage backend on Redis (go-redis/v9), on one node (redis://)
// or on Redis Cluster (redis+cluster://). docs/redis.md documents the layout for foreign writers.
//
// Each index is one Redis key, P{ns|T}:key (P the Store's prefix, ns the namespace, T the key's
// bucket as four hex digits, or "u" for a key without a bucket prefix), holding a sorted set whose
// scores are all 0 and whose members are the entry's id as 8 big-endian bytes followed by the value.
// Members of equal score are ordered byte for byte, so the lexicographic range commands (ZRANGEBYLEX,
// ZREMRANGEBYLEX) order and bound by id exactly over the whole 1..2^63−1 range; float scores would
// lose precision above 2^53.
//
// Beside the indexes, each (namespace, bucket) has an index set, P{ns|T}: a sorted set of scores 0
// whose members are the keys of the indexes that exist. The same script that creates an index (its
// first append) adds it there, and the same script that empties it (DropPrefix to empty, Delete)
// removes it, so membership and data never disagree. The braces are a Redis Cluster hash tag: an index
// and its index set share one slot, so every script touches one slot and runs unchanged on a cluster.
//
//   - Append and AppendMany run one script that refuses the batch unless its first id is above every
//     id the index holds, then adds the whole batch and lists the index: all or nothing.
//   - DropPrefix is one script: ZREMRANGEBYLEX and, if that emptied the index (Redis deletes a sorted
//     set it empties), ZREM from the index set. An Append above the bound is before or after it,
//     never lost.
//   - Delete is one script: UNLINK and ZREM.
//   - ClosestLastMany, DropPrefixMany and AppendKeys (is.BatchReader, is.BatchDropper,
//     is.BatchAppender) call the per-key scripts' Lua functions over many indexes in one script, each
//     key under pcall so that a key of the wrong type fails alone: one script on one node, one a hash
//     tag (so a slot) on a cluster, all in one pipeline (batch.go).
//   - ScanStable walks the index sets of the buckets the range meets (is.RangeBuckets), in bucket
//     order, and the namespace's unbucketed set beside them, merging the two: every key once, in
//     ascending byte order, resumed by the last key handed back (ZRANGEBYLEX seeks there), so the
//     caller may delete as it goes. The probes of many buckets go in one pipeline, so a walk over all
//     16,384 buckets costs a few round trips a page, and nothing in it depends on other keys of the
//     database. The backend declares OrderedScan. Each page carries its keys' last ids
//     (Page.LastIDs): on one node the probe script reads them with the sets (a page is one round trip
//     when its keys are bucketed), on a cluster one more pipeline of the id-only script does; a key
//     whose index went in between is left out, and a page whose id reads fail (a foreign value) goes
//     without ids.
//
// The key prefix isolates Stores sharing a database; two prefixes on one database must not be
// prefixes of each other, and a prefix holds no '{' or '}' (it would move the hash tag).
//
// Open refuses a plain redis:// URL that reaches a Redis Cluster node (use redis+cluster://), and a
// prefix that holds keys of the layout before this one (no index sets: this version cannot see them);
// a prefix of this layout carries the marker key P{strata}layout = "2". See CheckLayout.
//
// go-redis retries a command whose reply was lost (MaxRetries), and on a cluster follows MOVED and ASK
// redirects and retries TRYAGAIN and CLUSTERDOWN; what still fails of those is ErrTransient. An Append
// retried that way after its first attempt was applied returns ErrConflict although the entry is
// written, as a caller's own retry would; readers of the index's last id (the archive step) converge
// either way.
//
// With WaitReplicas set (Open's wait_replicas and wait_timeout), every write (Append, AppendMany,
// DropPrefix, Delete) is followed on the same connection by WAIT n timeout, and fails with
// ErrTransient when fewer replicas acknowledged it in time: an archive step then does not drop the
// layer above on the strength of a write only one node holds.
package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	is "github.com/stratalog/strata/indexedstorage"
)

// Store is the Redis backend. Make one with New or Open.
type Store struct {
	client goredis.UniversalClient
	prefix string
	// owned: the Store made the client (Open) and closes it on Close.
	owned  bool
	closed atomic.Bool
	// cluster is set for a ClusterClient: SCAN reaches one node only, so Scan refuses it.
	cluster bool
	// noScan is set for clients whose SCAN reaches one shard only (cluster, ring).
	noScan bool
	// sharded is set for clients whose keys live on several servers (cluster, ring): a script touches
	// the keys of one hash tag only.
	sharded bool
	wait    WaitOptions
	// readOnly: made by OpenExisting, the Store writes nothing, the layout marker included.
	readOnly bool
}

// WaitOptions make each write wait for replicas: WAIT Replicas Timeout on the write's own connection.
// Zero Replicas waits for none.
type WaitOptions struct {
	Replicas int
	Timeout  time.Duration
}

var (
	_ is.Storage = (*Store)(nil)
	_ is.Capable = (*Store)(nil)
)

// Options configures New. A nil *Options is the zero Options, and a zero field means its default.
type Options struct {
	// Prefix starts every Redis key of the Store (none when empty); it must hold no '{' or '}', which
	// would change the keys' hash slots.
	Prefix string
	// Wait makes each write wait for replicas; the zero WaitOptions waits for none.
	Wait WaitOptions
}

// New returns a Store over client. client may be a *goredis.Client (one node, or a failover client
// in front of one master) or a *goredis.ClusterClient. The Store does not own the client: Close marks
// the Store closed and leaves the client open for its owner. New checks nothing on the server (ctx is
// for the signature's sake): call CheckLayout (Open does) to refuse a prefix of the previous layout.
// A prefix with '{' or '}' is ErrInvalidArgument.
//
// For ctx deadlines to bound each call, the client needs ContextTimeoutEnabled (Open sets it).
func New(_ context.Context, client goredis.UniversalClient, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		return nil, fmt.Errorf("%w: Redis key prefix %q holds '{' or '}'", is.ErrInvalidArgument, o.Prefix)
	}
	s := &Store{client: client, prefix: o.Prefix, wait: o.Wait}
	switch client.(type) {
	case *goredis.ClusterClient:
		s.cluster, s.noScan, s.sharded = true, true, true
	case *goredis.Ring:
		s.noScan, s.sharded = true, true
	}
	return s, nil
}

// Capabilities: ScanStable hands back each key once, in ascending byte order.
func (s *Store) Capabilities() is.Capabilities {
	return is.Capabilities{OrderedScan: true, UniqueScan: true}
}

// Client returns the client the Store talks through, for callers (benchmarks, tools) that need the
// engine itself.
func (s *Store) Client() goredis.UniversalClient { return s.client }

// KeyPrefix returns the prefix every Redis key of this Store starts with.
func (s *Store) KeyPrefix() string { return s.prefix }

// IsCluster reports whether the Store talks to a Redis Cluster.
func (s *Store) IsCluster() bool { return s.cluster }

// Wait returns how writes wait for replicas.
func (s *Store) Wait() WaitOptions { return s.wait }

// Close marks the Store closed and, if Open made the client, closes it. Later calls return ErrClosed;
// Close itself is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) || !s.owned {
		return nil
	}
	if err := s.client.Close(); err != nil && !errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("redis: close: %w", classify(err))
	}
	return nil
}

// The id bytes lead every member, so a member is never shorter than this.
const idLen = 8

// begin validates an index's arguments and checks the Store is open: the first thing every per-index
// operation does. Its error has been through fail.
func (s *Store) begin(op is.Operation, ns, key string) error {
	if err := is.ValidateIndex(ns, key); err != nil {
		return fail(op, ns, key, err)
	}
	if s.closed.Load() {
		return fail(op, ns, key, is.ErrClosed)
	}
	return nil
}

// backendName names this backend (a node, a cluster or a ring alike) in its errors.
const backendName = "redis"

// fail is the one place an operation's error takes its shape: classified, and named by the operation
// (as metrics name it) and the index, in an is.OpError. A scan passes an empty key. A nil err returns
// nil.
func fail(op is.Operation, ns, key string, err error) error {
	return is.NewOpError(backendName, op, ns, key, classify(err))
}

func (s *Store) Exists(ctx context.Context, ns, key string) (bool, error) {
	if err := s.begin(is.OpExists, ns, key); err != nil {
		return false, err
	}
	n, err := s.client.Exists(ctx, s.RedisKey(ns, key)).Result()
	if err != nil {
		return false, fail(is.OpExists, ns, key, err)
	}
	return n > 0, nil
}

func (s *Store) Append(ctx context.Context, ns, key string, id uint64, value []byte) error {
	return s.appendEntries(ctx, is.OpAppend, ns, key, []is.Entry{{ID: id, Value: value}})
}

func (s *Store) AppendMany(ctx context.Context, ns, key string, entries []is.Entry) error {
	return s.appendEntries(ctx, is.OpAppendMany, ns, key, entries)
}

// appendScript adds a batch to an index unless the batch's first id is not above the index's last,
// and lists the index in its index set. KEYS: the index, its index set. ARGV[1] is the index key (the
// set's member); then score and member alternate ("0", member, "0", member, ...), ids strictly
// increasing (checked by the caller). The check compares members with ZLEXCOUNT, Redis's own byte
// comparison: Lua's string comparison follows the server's collation locale and its numbers are
// doubles, both wrong for 8-byte big-endian ids. ZADD runs in chunks to stay under Lua's unpack limit
// (about 8000 values); the script as a whole is atomic, and nothing in it can fail after the check,
// so a batch is written entirely or not at all, with its listing. A conflict is an error reply
// carrying the index's last id in hex.
var appendScript = goredis.NewScript(appendLua + `return append_entries(KEYS[1], KEYS[2], string.sub(ARGV[3], 1, 8), ARGV[1], ARGV, 2, #ARGV)`)

// appendLua is the append as a Lua function of the index, its index set, the bound (8 bytes: the
// first id, or an AppendKeys part's Below, that every id the index holds must be below), the index
// key and the score/member pairs args[from..to], which appendScript and the batch append
// (appendKeysScript) both call. It is docs/redis.md's Append script, the same commands in the same
// order.
const appendLua = `
local function append_entries(key, set, bound, member, args, from, to)
  if redis.call('ZLEXCOUNT', key, '[' .. bound, '+') > 0 then
    local last = redis.call('ZRANGE', key, -1, -1)[1]
    local hex = ''
    for i = 1, 8 do hex = hex .. string.format('%02x', string.byte(last, i) or 0) end
    return redis.error_reply('` + conflictCode + ` ' .. hex)
  end
  for i = from, to, 4000 do
    redis.call('ZADD', key, unpack(args, i, math.min(i + 3999, to)))
  end
  redis.call('ZADD', set, 'NX', 0, member)
  return (to - from + 1) / 2
end
`

func (s *Store) appendEntries(ctx context.Context, op is.Operation, ns, key string, entries []is.Entry) error {
	if err := s.begin(op, ns, key); err != nil {
		return err
	}
	if err := is.ValidateBatch(entries); err != nil {
		return fail(op, ns, key, err)
	}
	if len(entries) == 0 {
		return nil
	}
	data, set := s.keys(ns, key)
	args := appendMembers(make([]any, 0, 1+2*len(entries)), key, entries)
	if err := s.write(ctx, appendScript, data, set, args); err != nil {
		return fail(op, ns, key, appendFailure(err, entries[0].ID))
	}
	return nil
}

// appendMembers appends to args what appendLua takes of an index: its key (the index set's member),
// then "0" and each entry's member, id‖value. One buffer holds every member; each member is its own
// full slice of it.
func appendMembers(args []any, key string, entries []is.Entry) []any {
	size := 0
	for _, e := range entries {
		size += idLen + len(e.Value)
	}
	buf := make([]byte, 0, size)
	args = append(args, key)
	for _, e := range entries {
		start := len(buf)
		buf = binary.BigEndian.AppendUint64(buf, e.ID)
		buf = append(buf, e.Value...)
		args = append(args, "0", buf[start:len(buf):len(buf)])
	}
	return args
}

// appendFailure is an append's error: a conflict reply becomes ErrConflict naming the refused first id
// and the index's last id.
func appendFailure(err error, first uint64) error {
	if last, ok := conflictLast(err); ok {
		return fmt.Errorf("%w: id %d is not above the index's last id %d", is.ErrConflict, first, last)
	}
	return err
}

// dropScript removes the entries up to a bound and, if that emptied the index, its listing. KEYS: the
// index, its index set; ARGV: the exclusive lex bound, the index key. The listing goes whenever the
// index does not exist, so a listing without data (written by hand) heals too.
var dropScript = goredis.NewScript(dropPrefixLua + `return drop_prefix(KEYS[1], KEYS[2], ARGV[1], ARGV[2])`)

// dropPrefixLua is the drop as a Lua function of the index, its index set, the bound and the index
// key, which dropScript and the batch drop (dropPrefixManyScript) both call. It is docs/redis.md's
// drop script, the same commands in the same order.
const dropPrefixLua = `
local function drop_prefix(key, set, bound, member)
  local n = redis.call('ZREMRANGEBYLEX', key, '-', bound)
  if redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', set, member)
  end
  return n
end
`

// deleteScript removes an index and its listing. KEYS: the index, its index set; ARGV: the index key.
// UNLINK frees a large index's memory off the server's main thread.
var deleteScript = goredis.NewScript(`
redis.call('UNLINK', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 0
`)

// write runs a writing script over an index and its set and, where configured, waits for replicas
// on the same connection. Its result is the script's integer reply.
func (s *Store) write(ctx context.Context, script *goredis.Script, data, set string, args []any) error {
	_, err := s.writeInt(ctx, script, data, set, args)
	return err
}

func (s *Store) writeInt(ctx context.Context, script *goredis.Script, data, set string, args []any) (int64, error) {
	if s.readOnly {
		return 0, fmt.Errorf("%w: the store was opened read-only", is.ErrInvalidArgument)
	}
	keys := []string{data, set}
	if s.wait.Replicas <= 0 {
		return script.Run(ctx, s.client, keys, args...).Int64()
	}
	// WAIT counts the replicas that acknowledged every write of its own connection, so the script and
	// WAIT go in one pipeline, which go-redis sends on one connection of the node that holds the key.
	var pipe goredis.Pipeliner
	if cc, ok := s.client.(*goredis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, data)
		if err != nil {
			return 0, err
		}
		pipe = node.Pipeline()
	} else {
		pipe = s.client.Pipeline()
	}
	// EVAL rather than EVALSHA: a pipeline cannot fall back on NOSCRIPT.
	run := script.Eval(ctx, pipe, keys, args...)
	wait := pipe.Do(ctx, "WAIT", s.wait.Replicas, s.wait.Timeout.Milliseconds())
	_, _ = pipe.Exec(ctx)
	n, err := run.Int64()
	if err != nil {
		return 0, err
	}
	return n, s.waited(wait)
}

// waited reads the reply of the WAIT that followed a write: nil if enough replicas acknowledged it.
func (s *Store) waited(wait *goredis.Cmd) error {
	acked, err := wait.Int64()
	if err != nil {
		return fmt.Errorf("written, but WAIT failed: %w", err)
	}
	if acked < int64(s.wait.Replicas) {
		return is.Classify(is.ErrTransient, fmt.Errorf("written, but %d of %d replicas acknowledged it within %s (WAIT)", acked, s.wait.Replicas, s.wait.Timeout))
	}
	return nil
}

func (s *Store) Length(ctx context.Context, ns, key string) (uint64, error) {
	if err := s.begin(is.OpLength, ns, key); err != nil {
		return 0, err
	}
	n, err := s.client.ZCard(ctx, s.RedisKey(ns, key)).Result()
	if err != nil {
		return 0, fail(is.OpLength, ns, key, err)
	}
	return uint64(n), nil
}

func (s *Store) Read(ctx context.Context, ns, key string, from, to uint64) ([]is.Entry, error) {
	if err := s.begin(is.OpRead, ns, key); err != nil {
		return nil, err
	}
	lo, hi, ok := is.ClampRange(from, to)
	if !ok {
		return nil, nil
	}
	// hi ≤ MaxID, so hi+1 ≤ 2^63 still encodes in 8 bytes and bounds the range exclusively.
	members, err := s.client.ZRangeByLex(ctx, s.RedisKey(ns, key), &goredis.ZRangeBy{
		Min: inclusive(lo), Max: exclusive(hi + 1),
	}).Result()
	if err != nil {
		return nil, fail(is.OpRead, ns, key, err)
	}
	entries, err := decode(members)
	if err != nil {
		return nil, fail(is.OpRead, ns, key, err)
	}
	return entries, nil
}

func (s *Store) First(ctx context.Context, ns, key string) (is.Entry, bool, error) {
	return s.one(ctx, is.OpFirst, ns, key, func(k string) *goredis.StringSliceCmd {
		return s.client.ZRange(ctx, k, 0, 0)
	})
}

func (s *Store) Last(ctx context.Context, ns, key string) (is.Entry, bool, error) {
	return s.one(ctx, is.OpLast, ns, key, func(k string) *goredis.StringSliceCmd {
		return s.client.ZRange(ctx, k, -1, -1)
	})
}

// LastID reads the last member and keeps its id. Redis has no command that returns part of a member,
// and a script that cuts the id out server-side copies the whole member into Lua first, which measured
// slower than sending it (BENCHMARKS.md §1: 2.3 ms against 1.0 ms for a 1 MiB chunk on loopback).
func (s *Store) LastID(ctx context.Context, ns, key string) (uint64, bool, error) {
	if err := s.begin(is.OpLastID, ns, key); err != nil {
		return 0, false, err
	}
	members, err := s.client.ZRange(ctx, s.RedisKey(ns, key), -1, -1).Result()
	switch {
	case err != nil:
		return 0, false, fail(is.OpLastID, ns, key, err)
	case len(members) == 0:
		return 0, false, nil
	case len(members[0]) < idLen:
		return 0, false, fail(is.OpLastID, ns, key, fmt.Errorf("member of %d bytes is not a strata entry (another writer uses this key?)", len(members[0])))
	}
	return decodeID(members[0]), true, nil
}

func (s *Store) Closest(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, error) {
	if id > is.MaxID {
		if err := s.begin(is.OpClosest, ns, key); err != nil {
			return is.Entry{}, false, err
		}
		return is.Entry{}, false, nil // no id can be that large
	}
	return s.one(ctx, is.OpClosest, ns, key, func(k string) *goredis.StringSliceCmd {
		return s.client.ZRangeByLex(ctx, k, &goredis.ZRangeBy{Min: inclusive(max(id, 1)), Max: "+", Count: 1})
	})
}

// closestLastScript returns the id bytes of the index's last member and its closest member at or
// above ARGV[1] (a ZRANGEBYLEX bound), each false where there is none. The closest member is usually
// the last one too (an agent's one chunk): ZREVRANK tells so without copying the last member into Lua,
// which for a chunk of megabytes costs more than the round trip this script saves. KEYS: the index.
var closestLastScript = goredis.NewScript(closestLastLua + `return closest_last(KEYS[1], ARGV[1])`)

// closestLastLua is closestLastScript as a Lua function of the index and the bound, which the batch
// read (closestLastManyScript) calls too.
const closestLastLua = `
local function closest_last(key, bound)
  local c = redis.call('ZRANGEBYLEX', key, bound, '+', 'LIMIT', 0, 1)
  if #c == 1 and redis.call('ZREVRANK', key, c[1]) == 0 then
    return {string.sub(c[1], 1, 8), c[1]}
  end
  local m = redis.call('ZRANGE', key, -1, -1)
  if #m == 0 then return {false, false} end
  if #c == 0 then return {string.sub(m[1], 1, 8), false} end
  return {string.sub(m[1], 1, 8), c[1]}
end
`

// ClosestLast is one script (is.ClosestLastReader).
func (s *Store) ClosestLast(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, uint64, bool, error) {
	if id > is.MaxID {
		last, exists, err := s.LastID(ctx, ns, key) // no id can be that large
		return is.Entry{}, false, last, exists, fail(is.OpClosestLast, ns, key, err)
	}
	if err := s.begin(is.OpClosestLast, ns, key); err != nil {
		return is.Entry{}, false, 0, false, err
	}
	vals, err := closestLastScript.Run(ctx, s.client, []string{s.RedisKey(ns, key)}, inclusive(max(id, 1))).Slice()
	if err != nil {
		return is.Entry{}, false, 0, false, fail(is.OpClosestLast, ns, key, err)
	}
	r, err := decodeClosestLast(vals)
	if err != nil {
		return is.Entry{}, false, 0, false, fail(is.OpClosestLast, ns, key, err)
	}
	return r.Entry, r.Found, r.Last, r.Exists, nil
}

// decodeClosestLast reads closest_last's reply: the last member's id bytes and the closest member,
// each nil where there is none. Its error has not been through fail.
func decodeClosestLast(vals []any) (is.ClosestLastResult, error) {
	bad := func(what string) (is.ClosestLastResult, error) {
		return is.ClosestLastResult{}, fmt.Errorf("%s (another writer uses this key?)", what)
	}
	if len(vals) != 2 {
		return bad(fmt.Sprintf("script returned %d values", len(vals)))
	}
	if vals[0] == nil {
		return is.ClosestLastResult{}, nil
	}
	lastBytes, ok := vals[0].(string)
	if !ok || len(lastBytes) != idLen {
		return bad("last member is not a strata entry")
	}
	r := is.ClosestLastResult{Last: decodeID(lastBytes), Exists: true}
	if vals[1] == nil {
		return r, nil
	}
	member, ok := vals[1].(string)
	if !ok {
		return bad("closest member is not a string")
	}
	entries, err := decode([]string{member})
	if err != nil {
		return is.ClosestLastResult{}, err
	}
	r.Entry, r.Found = entries[0], true
	return r, nil
}

// one runs a query that returns at most one member and decodes it.
func (s *Store) one(ctx context.Context, op is.Operation, ns, key string, query func(redisKey string) *goredis.StringSliceCmd) (is.Entry, bool, error) {
	if err := s.begin(op, ns, key); err != nil {
		return is.Entry{}, false, err
	}
	members, err := query(s.RedisKey(ns, key)).Result()
	if err != nil {
		return is.Entry{}, false, fail(op, ns, key, err)
	}
	if len(members) == 0 {
		return is.Entry{}, false, nil
	}
	entries, err := decode(members[:1])
	if err != nil {
		return is.Entry{}, false, fail(op, ns, key, err)
	}
	return entries[0], true, nil
}

func (s *Store) DropPrefix(ctx context.Context, ns, key string, upTo uint64) (uint64, error) {
	if err := s.begin(is.OpDropPrefix, ns, key); err != nil {
		return 0, err
	}
	if upTo == 0 {
		return 0, nil // ids start at 1
	}
	upTo = min(upTo, is.MaxID)
	data, set := s.keys(ns, key)
	n, err := s.writeInt(ctx, dropScript, data, set, []any{exclusive(upTo + 1), key})
	if err != nil {
		return uint64(max(n, 0)), fail(is.OpDropPrefix, ns, key, err)
	}
	return uint64(n), nil
}

func (s *Store) Delete(ctx context.Context, ns, key string) error {
	if err := s.begin(is.OpDelete, ns, key); err != nil {
		return err
	}
	data, set := s.keys(ns, key)
	if err := s.write(ctx, deleteScript, data, set, []any{key}); err != nil {
		return fail(is.OpDelete, ns, key, err)
	}
	return nil
}

// inclusive and exclusive are ZRANGEBYLEX bounds at an id: every member of that id (any value) is ≥
// "[id", and every member of a smaller id is < "(id".
func inclusive(id uint64) string { return "[" + idBytes(id) }
func exclusive(id uint64) string { return "(" + idBytes(id) }

func idBytes(id uint64) string {
	var b [idLen]byte
	binary.BigEndian.PutUint64(b[:], id)
	return string(b[:])
}

// decode turns members into entries. The values share one buffer, each a full slice of its own so
// that appending to one cannot overwrite the next.
func decode(members []string) ([]is.Entry, error) {
	size := 0
	for _, m := range members {
		if len(m) < idLen {
			return nil, fmt.Errorf("member of %d bytes is not a strata entry (another writer uses this key?)", len(m))
		}
		size += len(m) - idLen
	}
	buf := make([]byte, size)
	entries := make([]is.Entry, len(members))
	off := 0
	for i, m := range members {
		n := copy(buf[off:], m[idLen:])
		entries[i] = is.Entry{ID: decodeID(m), Value: buf[off : off+n : off+n]}
		off += n
	}
	return entries, nil
}

// decodeID reads the big-endian id at the start of a member without converting it to []byte.
func decodeID(m string) uint64 {
	var id uint64
	for i := range idLen {
		id = id<<8 | uint64(m[i])
	}
	return id
}
