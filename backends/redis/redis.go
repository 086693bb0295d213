// Package redis is the indexedstorage.Storage backend on Redis (go-redis/v9).
//
// Each index is one Redis key, prefix + namespace + ":" + key, holding a sorted set whose scores are
// all 0 and whose members are the entry's id as 8 big-endian bytes followed by the value. Members of
// equal score are ordered byte for byte, so the lexicographic range commands (ZRANGEBYLEX,
// ZREMRANGEBYLEX) order and bound by id exactly over the whole 1..2^63−1 range; float scores would
// lose precision above 2^53. Every operation is one command or one Lua script, so each is atomic on
// the server:
//
//   - Append and AppendMany run one script that refuses the batch unless its first id is above every
//     id the index holds, then adds the whole batch: all or nothing.
//   - DropPrefix is one ZREMRANGEBYLEX. Redis deletes a sorted set it empties, so an index emptied
//     this way stops existing at that instant, and an Append above the bound is either before or after
//     it, never lost.
//   - ScanStable is one SCAN with MATCH over the glob-escaped key prefix, resumed by the SCAN cursor,
//     which tolerates deletion: a key present for the whole walk is returned at least once. Pages may
//     be short, empty, larger than count (SCAN's COUNT is a hint) or repeat keys, so the backend
//     declares no ordering capability.
//
// The key prefix isolates Stores sharing a database; two prefixes on one database must not be
// prefixes of each other (a key may contain ':', so "a:" and "a:b:" could name the same Redis key).
// A SCAN call examines COUNT slots of the whole database whatever its MATCH, so a walk costs calls in
// proportion to every key in the database, not just the namespace's: give strata a logical database
// of its own when others hold many keys.
//
// go-redis retries a command whose reply was lost (MaxRetries). An Append retried that way after its
// first attempt was applied returns ErrConflict although the entry is written, as a caller's own
// retry would; readers of the index's last id (the archive step) converge either way.
//
// Only a single Redis node (or a failover client in front of one master) is supported. Redis Cluster
// is not supported yet: per-index operations would work, but a SCAN reaches one node only, so Scan
// and ScanStable refuse a cluster or ring client rather than miss keys.
package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	goredis "github.com/redis/go-redis/v9"

	is "github.com/stratalog/strata/indexedstorage"
)

// Store is the Redis backend. Make one with New or Open.
type Store struct {
	client goredis.UniversalClient
	prefix string
	// matchPrefix is prefix escaped for a MATCH pattern, computed once.
	matchPrefix string
	// owned: the Store made the client (Open) and closes it on Close.
	owned  bool
	closed atomic.Bool
	// noScan is set for clients whose SCAN reaches one shard only (cluster, ring).
	noScan bool
}

var _ is.Storage = (*Store)(nil)

// New returns a Store over client whose Redis keys all start with prefix. The Store does not own the
// client: Close marks the Store closed and leaves the client open for its owner.
//
// For ctx deadlines to bound each call, the client needs ContextTimeoutEnabled (Open sets it).
func New(client goredis.UniversalClient, prefix string) *Store {
	s := &Store{client: client, prefix: prefix, matchPrefix: escapeGlob(prefix)}
	switch client.(type) {
	case *goredis.ClusterClient, *goredis.Ring:
		s.noScan = true
	}
	return s
}

// Client returns the client the Store talks through, for callers (benchmarks, tools) that need the
// engine itself.
func (s *Store) Client() goredis.UniversalClient { return s.client }

// KeyPrefix returns the prefix every Redis key of this Store starts with.
func (s *Store) KeyPrefix() string { return s.prefix }

// Close marks the Store closed and, if Open made the client, closes it. Later calls return ErrClosed;
// Close itself is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) || !s.owned {
		return nil
	}
	if err := s.client.Close(); err != nil && !errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("redis close: %w", classify(err))
	}
	return nil
}

// The id bytes lead every member, so a member is never shorter than this.
const idLen = 8

// redisKey is the Redis key of an index. A namespace never contains ':', so the first ':' after the
// prefix ends the namespace.
func (s *Store) redisKey(ns, key string) string { return s.prefix + ns + ":" + key }

// begin validates an index's arguments and checks the Store is open: the first thing every per-index
// operation does.
func (s *Store) begin(ns, key string) error {
	if err := is.ValidateIndex(ns, key); err != nil {
		return err
	}
	if s.closed.Load() {
		return is.ErrClosed
	}
	return nil
}

// fail gives a native error its one line of context and its classification.
func fail(op is.Operation, ns, key string, err error) error {
	return fmt.Errorf("redis %s %s:%q: %w", op, ns, key, classify(err))
}

func (s *Store) Exists(ctx context.Context, ns, key string) (bool, error) {
	if err := s.begin(ns, key); err != nil {
		return false, err
	}
	n, err := s.client.Exists(ctx, s.redisKey(ns, key)).Result()
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

// appendScript adds a batch to a sorted set unless the batch's first id is not above the set's last.
// ARGV alternates score and member ("0", member, "0", member, ...), ids strictly increasing (checked
// by the caller). The check compares members with ZLEXCOUNT, Redis's own byte comparison: Lua's
// string comparison follows the server's collation locale and its numbers are doubles, both wrong for
// 8-byte big-endian ids. ZADD runs in chunks to stay under Lua's unpack limit (about 8000 values);
// the script as a whole is atomic, and nothing in it can fail after the check, so a batch is written
// entirely or not at all. A conflict is an error reply carrying the index's last id in hex.
var appendScript = goredis.NewScript(`
local key = KEYS[1]
if redis.call('ZLEXCOUNT', key, '[' .. string.sub(ARGV[2], 1, 8), '+') > 0 then
  local last = redis.call('ZRANGE', key, -1, -1)[1]
  local hex = ''
  for i = 1, 8 do hex = hex .. string.format('%02x', string.byte(last, i) or 0) end
  return redis.error_reply('` + conflictCode + ` ' .. hex)
end
local n = #ARGV
for i = 1, n, 4000 do
  redis.call('ZADD', key, unpack(ARGV, i, math.min(i + 3999, n)))
end
return n / 2
`)

func (s *Store) appendEntries(ctx context.Context, op is.Operation, ns, key string, entries []is.Entry) error {
	if err := s.begin(ns, key); err != nil {
		return err
	}
	if err := is.ValidateBatch(entries); err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	// One buffer for every member; each member is its own full slice of it.
	size := 0
	for _, e := range entries {
		size += idLen + len(e.Value)
	}
	buf := make([]byte, 0, size)
	args := make([]any, 0, 2*len(entries))
	for _, e := range entries {
		start := len(buf)
		buf = binary.BigEndian.AppendUint64(buf, e.ID)
		buf = append(buf, e.Value...)
		args = append(args, "0", buf[start:len(buf):len(buf)])
	}
	err := appendScript.Run(ctx, s.client, []string{s.redisKey(ns, key)}, args...).Err()
	if err != nil {
		return fmt.Errorf("redis %s %s:%q id %d: %w", op, ns, key, entries[0].ID, classify(err))
	}
	return nil
}

func (s *Store) Length(ctx context.Context, ns, key string) (uint64, error) {
	if err := s.begin(ns, key); err != nil {
		return 0, err
	}
	n, err := s.client.ZCard(ctx, s.redisKey(ns, key)).Result()
	if err != nil {
		return 0, fail(is.OpLength, ns, key, err)
	}
	return uint64(n), nil
}

func (s *Store) Read(ctx context.Context, ns, key string, from, to uint64) ([]is.Entry, error) {
	if err := s.begin(ns, key); err != nil {
		return nil, err
	}
	lo, hi, ok := is.ClampRange(from, to)
	if !ok {
		return nil, nil
	}
	// hi ≤ MaxID, so hi+1 ≤ 2^63 still encodes in 8 bytes and bounds the range exclusively.
	members, err := s.client.ZRangeByLex(ctx, s.redisKey(ns, key), &goredis.ZRangeBy{
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

// lastIDScript returns the id bytes of the set's greatest member, not the value after them.
var lastIDScript = goredis.NewScript(`
local m = redis.call('ZRANGE', KEYS[1], -1, -1)
if #m == 0 then return false end
return string.sub(m[1], 1, 8)
`)

// LastID runs one script that hands back the last member's 8 id bytes only, so a chunk of megabytes is
// never sent to read its id.
func (s *Store) LastID(ctx context.Context, ns, key string) (uint64, bool, error) {
	if err := s.begin(ns, key); err != nil {
		return 0, false, err
	}
	b, err := lastIDScript.Run(ctx, s.client, []string{s.redisKey(ns, key)}).Text()
	switch {
	case errors.Is(err, goredis.Nil):
		return 0, false, nil
	case err != nil:
		return 0, false, fail(is.OpLastID, ns, key, err)
	case len(b) != idLen:
		return 0, false, fail(is.OpLastID, ns, key, fmt.Errorf("member of %d bytes is not a strata entry (another writer uses this key?)", len(b)))
	}
	return decodeID(b), true, nil
}

func (s *Store) Closest(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, error) {
	if id > is.MaxID {
		if err := s.begin(ns, key); err != nil {
			return is.Entry{}, false, err
		}
		return is.Entry{}, false, nil // no id can be that large
	}
	return s.one(ctx, is.OpClosest, ns, key, func(k string) *goredis.StringSliceCmd {
		return s.client.ZRangeByLex(ctx, k, &goredis.ZRangeBy{Min: inclusive(max(id, 1)), Max: "+", Count: 1})
	})
}

// one runs a query that returns at most one member and decodes it.
func (s *Store) one(ctx context.Context, op is.Operation, ns, key string, query func(redisKey string) *goredis.StringSliceCmd) (is.Entry, bool, error) {
	if err := s.begin(ns, key); err != nil {
		return is.Entry{}, false, err
	}
	members, err := query(s.redisKey(ns, key)).Result()
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
	if err := s.begin(ns, key); err != nil {
		return 0, err
	}
	if upTo == 0 {
		return 0, nil // ids start at 1
	}
	upTo = min(upTo, is.MaxID)
	n, err := s.client.ZRemRangeByLex(ctx, s.redisKey(ns, key), "-", exclusive(upTo+1)).Result()
	if err != nil {
		return 0, fail(is.OpDropPrefix, ns, key, err)
	}
	return uint64(n), nil
}

func (s *Store) Delete(ctx context.Context, ns, key string) error {
	if err := s.begin(ns, key); err != nil {
		return err
	}
	// UNLINK frees a large index's memory off the server's main thread.
	if err := s.client.Unlink(ctx, s.redisKey(ns, key)).Err(); err != nil {
		return fail(is.OpDelete, ns, key, err)
	}
	return nil
}

// Scan is one SCAN call: cursor is Redis's own, 0 starts and a returned 0 ends the walk. count is
// SCAN's COUNT hint, so a call may return more or fewer keys than count, and a walk may repeat keys.
func (s *Store) Scan(ctx context.Context, ns, prefix string, cursor uint64, count int) (uint64, []string, error) {
	if err := is.ValidateScan(ns, prefix, count); err != nil {
		return 0, nil, err
	}
	return s.scan(ctx, is.OpScan, ns, prefix, cursor, count)
}

// ScanStable is one SCAN call resumed by its cursor, which survives deletions behind it. Pages may be
// short, empty, larger than count, or repeat keys; the walk is Done when SCAN returns cursor 0. MATCH
// selects the range's common prefix; the range itself is checked on the keys SCAN hands back.
func (s *Store) ScanStable(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	if err := is.ValidateScanRange(ns, r, count); err != nil {
		return is.Page{}, err
	}
	cursor, _, err := from.Cursor()
	if err != nil {
		return is.Page{}, err
	}
	if r.Empty() {
		if s.closed.Load() {
			return is.Page{}, is.ErrClosed
		}
		return is.Page{Done: true}, nil
	}
	next, keys, err := s.scan(ctx, is.OpScanStable, ns, commonPrefix(r), cursor, count)
	if err != nil {
		return is.Page{}, err
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { return !r.Contains(k) })
	if next == 0 {
		return is.Page{Keys: keys, Done: true}, nil
	}
	return is.Page{Keys: keys, Next: is.CursorResume(next)}, nil
}

// commonPrefix is the longest prefix every key of a non-empty range shares: of an unbounded range,
// none; of a bounded one, what Start shares with the last key below End, which is End's common part
// with Start unless the two differ only in End's last byte position.
func commonPrefix(r is.KeyRange) string {
	if !r.Bounded() {
		return ""
	}
	n := 0
	for n < len(r.Start) && n < len(r.End) && r.Start[n] == r.End[n] {
		n++
	}
	// Back off to a rune boundary, so that the MATCH pattern is valid UTF-8 text.
	for n > 0 && n < len(r.Start) && !utf8.RuneStart(r.Start[n]) {
		n--
	}
	return r.Start[:n]
}

func (s *Store) scan(ctx context.Context, op is.Operation, ns, prefix string, cursor uint64, count int) (uint64, []string, error) {
	if s.closed.Load() {
		return 0, nil, is.ErrClosed
	}
	if s.noScan {
		return 0, nil, fmt.Errorf("redis %s %s: %w: scanning Redis Cluster or a ring is not supported yet", op, ns, is.ErrInvalidArgument)
	}
	// A namespace is made of [A-Za-z0-9/._-] only, none of them special in a pattern.
	match := s.matchPrefix + ns + ":" + escapeGlob(prefix) + "*"
	keys, next, err := s.client.Scan(ctx, cursor, match, int64(count)).Result()
	if err != nil {
		return 0, nil, fmt.Errorf("redis %s %s prefix %q: %w", op, ns, prefix, classify(err))
	}
	// Strip the Redis key down to the index key, in place. MATCH already filtered; the check keeps a
	// pattern bug from ever handing back another Store's or namespace's key.
	strip := s.prefix + ns + ":"
	out := keys[:0]
	for _, k := range keys {
		if strings.HasPrefix(k, strip) && strings.HasPrefix(k[len(strip):], prefix) {
			out = append(out, k[len(strip):])
		}
	}
	return next, out, nil
}

// escapeGlob escapes what a MATCH pattern treats specially, so the pattern matches s literally.
func escapeGlob(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
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
