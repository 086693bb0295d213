package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	is "github.com/stratalog/strata/indexedstorage"
)

// Bucket probes go in batches of one round trip each: the first batch small (a dense range fills a page
// from a few buckets), later ones sized by how many keys the buckets probed so far held, and at most
// maxProbeBatch (a sparse range, most buckets empty: an E = 1 walk of all 16,384 buckets in a handful
// of round trips). Off a cluster the batch is one script that stops once the page is full, so it
// reads no more than the page whatever the batch's size, and its first batch is larger.
const (
	firstProbeBatch         = 16
	firstScriptedProbeBatch = 256
	maxProbeBatch           = 4096
)

// ScanStable walks the index sets: those of the buckets is.RangeBuckets(r) gives, in bucket order, and
// the namespace's unbucketed set, merged so that the walk is in ascending byte order, each key once.
// A page is the count smallest keys above the last one handed back (the marker); ZRANGEBYLEX seeks to
// it in each set, so a walk's cost is the keys it returns plus its bucket probes, never other keys of
// the database.
func (s *Store) ScanStable(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	if err := is.ValidateScanRange(ns, r, count); err != nil {
		return is.Page{}, fail(is.OpScanStable, ns, "", err)
	}
	marker, start, err := from.Marker()
	if err != nil {
		return is.Page{}, fail(is.OpScanStable, ns, "", err)
	}
	if s.closed.Load() {
		return is.Page{}, fail(is.OpScanStable, ns, "", is.ErrClosed)
	}
	lower, exclusiveLower := r.Start, false
	if !start {
		lower, exclusiveLower = r.After(marker)
	}
	rest := is.KeyRange{Start: lower, End: r.End}
	if r.Empty() || rest.Empty() {
		return is.Page{Done: true}, nil
	}
	zr := &goredis.ZRangeBy{Min: "[" + lower, Max: "+"}
	switch {
	case exclusiveLower:
		zr.Min = "(" + lower
	case lower == "":
		zr.Min = "-"
	}
	if r.Bounded() {
		zr.Max = "(" + r.End
	}
	keys, probed, done, err := s.scanSets(ctx, ns, rest, zr, count)
	if err != nil {
		return is.Page{}, fail(is.OpScanStable, ns, "", fmt.Errorf("%v: %w", r, classify(err)))
	}
	page := is.Page{Done: true}
	if !done {
		// The marker is the last key of the merge, whether or not lastIDs keeps it.
		page = is.Page{Next: is.MarkerResume(keys[len(keys)-1])}
	}
	page.Keys, page.LastIDs = s.pageLastIDs(ctx, ns, keys, probed)
	return page, nil
}

// pageLastIDs pairs a page's keys with their last ids: those the probe script read with the index
// sets (probed; on one node), and for the rest (unbucketed keys, and every key on a cluster) one
// pipeline of lastIDs. The rules are lastIDs's: a key whose index is gone is left out, and a read that
// failed leaves the whole page without ids, every key kept.
func (s *Store) pageLastIDs(ctx context.Context, ns string, keys []string, probed map[string]probedID) ([]string, []uint64) {
	var rest []string
	for _, k := range keys {
		id, ok := probed[k]
		if !ok {
			rest = append(rest, k)
		} else if id.failed {
			return keys, nil
		}
	}
	if len(rest) == len(keys) {
		return s.lastIDs(ctx, ns, keys)
	}
	restKept, restIDs := s.lastIDs(ctx, ns, rest)
	if len(rest) > 0 && restIDs == nil {
		return keys, nil
	}
	fromRest := make(map[string]uint64, len(restKept))
	for i, k := range restKept {
		fromRest[k] = restIDs[i]
	}
	kept := make([]string, 0, len(keys))
	ids := make([]uint64, 0, len(keys))
	for _, k := range keys {
		if id, ok := probed[k]; ok {
			if id.exists {
				kept, ids = append(kept, k), append(ids, id.id)
			}
		} else if id, ok := fromRest[k]; ok {
			kept, ids = append(kept, k), append(ids, id)
		}
	}
	return kept, ids
}

// probedID is what the probe script read of a bucketed key's index with its set: the last id, or that
// the index is gone, or that the read failed.
type probedID struct {
	id             uint64
	exists, failed bool
}

// lastIDsScript returns the id bytes of each index's greatest member (false for an index that does
// not exist). KEYS: indexes of one tag, so of one slot.
var lastIDsScript = goredis.NewScript(`
local out = {}
for i, k in ipairs(KEYS) do
  local m = redis.call('ZRANGE', k, -1, -1)
  if #m == 0 then out[i] = false else out[i] = string.sub(m[1], 1, 8) end
end
return out
`)

// lastIDs reads the last id of each of a page's keys in one pipeline: one script, which reads each
// index's last member and returns its 8 id bytes only; on a cluster one script per tag (the keys of
// one bucket, or the unbucketed ones, share a slot). It returns the keys that still exist with
// their ids. A key whose index went between the index set's read and this one is left out of the
// page, as a walk may leave out a key deleted during it. If any read fails (an index another writer
// replaced with a value of another type, a connection lost), the page goes without ids, all its
// keys kept: ids are an optimisation, and the caller reads each index itself and meets the failure
// there.
func (s *Store) lastIDs(ctx context.Context, ns string, keys []string) ([]string, []uint64) {
	if len(keys) == 0 {
		return keys, nil
	}
	// On a cluster, runs of one tag: a page is in key order, so a bucket's keys are consecutive;
	// unbucketed keys interleave with them and make runs of their own.
	type run struct {
		start, end int
		cmd        *goredis.Cmd
	}
	var runs []run
	pipe := s.client.Pipeline()
	for i := 0; i < len(keys); {
		tag := tagID(keys[i])
		j := i + 1
		for j < len(keys) && (!s.cluster || tagID(keys[j]) == tag) {
			j++
		}
		data := make([]string, 0, j-i)
		for _, k := range keys[i:j] {
			data = append(data, s.RedisKey(ns, k))
		}
		// EVAL, not EVALSHA: a pipeline cannot fall back on NOSCRIPT; Redis caches the script by its
		// digest either way.
		runs = append(runs, run{start: i, end: j, cmd: lastIDsScript.Eval(ctx, pipe, data)})
		i = j
	}
	_, _ = pipe.Exec(ctx)
	kept := make([]string, 0, len(keys))
	ids := make([]uint64, 0, len(keys))
	for _, r := range runs {
		vals, err := r.cmd.Slice()
		if err != nil || len(vals) != r.end-r.start {
			return keys, nil
		}
		for i, v := range vals {
			if v == nil {
				continue // gone since the index set listed it
			}
			b, ok := v.(string)
			if !ok || len(b) != idLen {
				return keys, nil
			}
			kept = append(kept, keys[r.start+i])
			ids = append(ids, decodeID(b))
		}
	}
	return kept, ids
}

// scanSets returns the count smallest keys of ns within zr (whose bounds are rest's) and whether they
// are all there are, with the last ids the probes read of bucketed keys (on one node). It may return
// fewer (a page may be short): never a key beyond one it has not seen all the keys below.
func (s *Store) scanSets(ctx context.Context, ns string, rest is.KeyRange, zr *goredis.ZRangeBy, count int) (_ []string, _ map[string]probedID, done bool, _ error) {
	withCount := func(n int) *goredis.ZRangeBy {
		b := *zr
		b.Count = int64(n)
		return &b
	}
	lo, hi := is.RangeBuckets(rest)

	// The first round trip asks the unbucketed set and the first batch of buckets together.
	pipe := s.client.Pipeline()
	unbucketed := pipe.ZRangeByLex(ctx, s.setKey(ns, unbucketedTag), withCount(count))
	var loose, bucketed []string
	var probed map[string]probedID
	if !s.cluster {
		probed = make(map[string]probedID, count)
	}
	next := lo // the first bucket not yet probed
	minBatch := firstProbeBatch
	if !s.cluster {
		minBatch = firstScriptedProbeBatch
	}
	batch := minBatch
	// cut: bucketed keys above the last one collected may exist that were not read.
	cut := false
	for first := true; ; first = false {
		need := count - len(bucketed)
		if !first {
			if probesDone(next, hi, need, cut, loose, count) {
				break
			}
			pipe = s.client.Pipeline()
		}
		end := min(next+batch, hi)
		limit := s.probeLimit(need, end-next)
		probe := s.probe(ctx, pipe, ns, next, end, withCount(limit), probed)
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, nil, false, err
		}
		if first {
			var err error
			if loose, err = unbucketed.Result(); err != nil {
				return nil, nil, false, err
			}
		}
		sets, err := probe()
		if err != nil {
			return nil, nil, false, err
		}
		var found, setsRead int
		bucketed, found, setsRead, cut = collectProbed(bucketed, sets, limit, count)
		next += setsRead
		batch = nextProbeBatch(batch, minBatch, count-len(bucketed), setsRead, found)
	}
	keys, done, err := mergePage(bucketed, loose, count, cut)
	return keys, probed, done, err
}

// probesDone reports whether scanSets has probed enough buckets: none left below hi, the page full
// (need ≤ 0) or cut short, or count loose keys below every key the next bucket can hold.
func probesDone(next, hi, need int, cut bool, loose []string, count int) bool {
	if next >= hi || need <= 0 || cut {
		return true
	}
	// Every key of a bucket not yet probed is ≥ its prefix: once count loose keys lie below it, no
	// bucketed key beyond can make the page.
	return len(loose) == count && is.BucketPrefix(next) > loose[count-1]
}

// probeLimit is how many keys each probe of a batch of buckets reads. On a cluster, in a large batch
// (sparse buckets) that is a few, so that a run of dense buckets after empty ones cannot make one
// round trip read batch × count keys (the script off a cluster stops at need keys by itself); a probe
// that comes back full ends the collection there, which keeps it a prefix of the walk's order.
func (s *Store) probeLimit(need, buckets int) int {
	if s.cluster && buckets > firstProbeBatch*4 {
		return min(need, max(16, 4*need/buckets+1))
	}
	return need
}

// collectProbed appends the probed sets' keys to bucketed, in bucket order, up to the first set that
// came back full (limit keys: it may hold more) or filled the page. found is how many keys it took,
// probed how many sets, and cut whether it stopped at such a set.
func collectProbed(bucketed []string, sets [][]string, limit, count int) (_ []string, found, probed int, cut bool) {
	for _, got := range sets {
		probed++
		found += len(got)
		bucketed = append(bucketed, got...)
		if len(got) == limit || len(bucketed) >= count {
			return bucketed, found, probed, true
		}
	}
	return bucketed, found, probed, false
}

// nextProbeBatch sizes the next batch of buckets to what the buckets held so far: about enough to
// fill the left keys of the page, or four times the last when they held none.
func nextProbeBatch(batch, minBatch, left, probed, found int) int {
	if found == 0 {
		return min(batch*4, maxProbeBatch)
	}
	return min(max(minBatch, left*probed/found+1), maxProbeBatch)
}

// mergePage merges the bucketed and the loose keys a walk collected into its page of at most count
// keys, and says whether the walk is done.
func mergePage(bucketed, loose []string, count int, cut bool) ([]string, bool, error) {
	if len(bucketed) > count {
		bucketed = bucketed[:count]
	}
	merged := mergeSorted(bucketed, loose, count)
	// Neither source may hand back a key above a key of the other that was cut short there: keys
	// between were not read.
	if cut && len(bucketed) > 0 {
		merged = upTo(merged, bucketed[len(bucketed)-1])
	}
	if len(loose) == count {
		merged = upTo(merged, loose[count-1])
	}
	done := !cut && len(loose) < count && len(merged) == len(bucketed)+len(loose)
	if len(merged) == 0 && !done {
		// Cannot happen (a source cut short contributes its last key), but never hand back a page
		// that would restart the walk.
		return nil, false, errors.New("walk made no progress")
	}
	return merged, done, nil
}

// probeScript reads the index sets of KEYS in order from ARGV[1] to ARGV[2] (ZRANGEBYLEX bounds), at
// most ARGV[3] members in all: it stops at the set that fills them, and returns one reply a set read:
// its members, then the last id of each member's index (ZRANGE -1 -1 of KEYS[i]..':'..member, its 8
// id bytes), "" for an index that is gone and "!" for one whose read failed (a key of another type),
// so that a page's last ids cost no round trip of their own. The indexes are not in KEYS: this script
// runs on one node only (a cluster reads each bucket's set with its own command).
var probeScript = goredis.NewScript(`
local out = {}
local left = tonumber(ARGV[3])
for i, k in ipairs(KEYS) do
  local got = redis.call('ZRANGEBYLEX', k, ARGV[1], ARGV[2], 'LIMIT', 0, left)
  local reply = {}
  for j, m in ipairs(got) do reply[j] = m end
  for j, m in ipairs(got) do
    local ok, last = pcall(redis.call, 'ZRANGE', k .. ':' .. m, -1, -1)
    if not ok then
      reply[#got + j] = '!'
    elseif #last == 0 then
      reply[#got + j] = ''
    else
      reply[#got + j] = string.sub(last[1], 1, 8)
    end
  end
  out[i] = reply
  left = left - #got
  if left <= 0 then break end
end
return out
`)

// probe queues on pipe the reads of the index sets of buckets [lo, hi) within zr, at most zr.Count
// members of each, and returns what reads their members once pipe has run. A Redis server that is not
// a cluster node holds every set, so one script reads them in order, zr.Count members in all: one
// command instead of one a bucket, which on a walk of 16,384 buckets is most of the walk's cost, and it
// returns the sets it read, up to the one that filled zr.Count. On a cluster each bucket's set has a
// slot of its own, and a script may touch one slot only: there the reads are one command each, which
// the cluster client sends to each set's node.
//
// On one node the script also reads each member's last id, which the returned function records in
// probed.
func (s *Store) probe(ctx context.Context, pipe goredis.Pipeliner, ns string, lo, hi int, zr *goredis.ZRangeBy, probed map[string]probedID) func() ([][]string, error) {
	if lo >= hi {
		return func() ([][]string, error) { return nil, nil } // a range of unbucketed keys only: no set to read
	}
	sets := make([]string, 0, hi-lo)
	for b := lo; b < hi; b++ {
		sets = append(sets, s.setKey(ns, hexTag(b)))
	}
	if !s.cluster {
		// EVAL, not EVALSHA: a pipeline cannot fall back on NOSCRIPT.
		cmd := probeScript.Eval(ctx, pipe, sets, zr.Min, zr.Max, zr.Count)
		return func() ([][]string, error) {
			vals, err := cmd.Slice()
			if err != nil {
				return nil, err
			}
			if len(vals) == 0 || len(vals) > len(sets) {
				return nil, fmt.Errorf("index set probe: %d replies for %d sets", len(vals), len(sets))
			}
			out := make([][]string, len(vals))
			for i, v := range vals {
				reply, ok := v.([]any)
				if !ok || len(reply)%2 != 0 {
					return nil, fmt.Errorf("index set probe: reply %d is %T of %d", i, v, len(reply))
				}
				n := len(reply) / 2
				out[i] = make([]string, n)
				for j, m := range reply[:n] {
					if out[i][j], ok = m.(string); !ok {
						return nil, fmt.Errorf("index set probe: member of reply %d is %T", i, m)
					}
					id, _ := reply[n+j].(string)
					switch {
					case id == "":
						probed[out[i][j]] = probedID{}
					case len(id) == idLen:
						probed[out[i][j]] = probedID{id: decodeID(id), exists: true}
					default:
						probed[out[i][j]] = probedID{failed: true}
					}
				}
			}
			return out, nil
		}
	}
	cmds := make([]*goredis.StringSliceCmd, len(sets))
	for i, set := range sets {
		cmds[i] = pipe.ZRangeByLex(ctx, set, zr)
	}
	return func() ([][]string, error) {
		out := make([][]string, len(cmds))
		for i, c := range cmds {
			got, err := c.Result()
			if err != nil {
				return nil, err
			}
			out[i] = got
		}
		return out, nil
	}
}

// upTo keeps the keys of an ascending list that are ≤ last.
func upTo(keys []string, last string) []string {
	n, found := slices.BinarySearch(keys, last)
	if found {
		n++
	}
	return keys[:n]
}

// mergeSorted merges two ascending lists of distinct keys (no key in both: a key is either bucketed or
// not) and keeps the first n.
func mergeSorted(a, b []string, n int) []string {
	if len(b) == 0 {
		return a[:min(len(a), n)]
	}
	out := make([]string, 0, min(len(a)+len(b), n))
	i, j := 0, 0
	for len(out) < n && (i < len(a) || j < len(b)) {
		if j >= len(b) || (i < len(a) && a[i] < b[j]) {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	return out
}

// hexTag is the tag id of a bucket: its four lowercase hex digits.
func hexTag(bucket int) string {
	p := is.BucketPrefix(bucket)
	return p[:len(p)-1]
}

// Scan is the backend's native paging over the keys of ns that start with prefix. On one node it is
// one SCAN call: cursor is Redis's own, 0 starts and a returned 0 ends the walk; count is SCAN's COUNT
// hint, so a call may return more or fewer keys than count, and a walk may repeat keys; it costs calls
// in proportion to every key of the database. SCAN reaches one node of a cluster, so on a cluster Scan
// pages through the index sets by position instead (scanSetsByPosition). A ring is refused.
func (s *Store) Scan(ctx context.Context, ns, prefix string, cursor uint64, count int) (uint64, []string, error) {
	if err := is.ValidateScan(ns, prefix, count); err != nil {
		return 0, nil, fail(is.OpScan, ns, "", err)
	}
	if s.closed.Load() {
		return 0, nil, fail(is.OpScan, ns, "", is.ErrClosed)
	}
	if s.cluster {
		return s.scanSetsByPosition(ctx, ns, prefix, cursor, count)
	}
	if s.noScan {
		return 0, nil, fail(is.OpScan, ns, "", fmt.Errorf("%w: SCAN reaches one node of a ring: use ScanStable", is.ErrInvalidArgument))
	}
	// A namespace is made of [A-Za-z0-9/._-] only, none of them special in a pattern; '{', '}' and '|'
	// are not special either.
	match := escapeGlob(s.prefix) + "{" + ns + "|*}:" + escapeGlob(prefix) + "*"
	keys, next, err := s.client.Scan(ctx, cursor, match, int64(count)).Result()
	if err != nil {
		return 0, nil, fail(is.OpScan, ns, "", fmt.Errorf("prefix %q: %w", prefix, classify(err)))
	}
	// Strip the Redis key down to the index key, in place. MATCH already filtered; the parse keeps a
	// pattern's looseness ('*' may cross a '}:' inside a key) from handing back a key that is not one.
	out := keys[:0]
	for _, k := range keys {
		if key, ok := s.parseDataKey(ns, k); ok && strings.HasPrefix(key, prefix) {
			out = append(out, key)
		}
	}
	return next, slices.Clip(out), nil
}

// Positions of scanSetsByPosition: the index sets of buckets 0..Buckets-1, then the unbucketed set.
const (
	unbucketedPos  = is.Buckets
	positionsBatch = 256
)

// scanSetsByPosition is Scan on a cluster: a cursor is (set position << 32 | offset in that set),
// 0 the start, and a call reads up to count keys from up to positionsBatch sets (LIMIT offset count),
// so, like SCAN, it is positional: a key deleted behind the cursor shifts the keys after it.
func (s *Store) scanSetsByPosition(ctx context.Context, ns, prefix string, cursor uint64, count int) (uint64, []string, error) {
	r := is.PrefixRange(prefix)
	lo, hi := is.RangeBuckets(r)
	pos, off := int(cursor>>32), int64(cursor&0xffffffff)
	if pos > unbucketedPos {
		return 0, nil, fail(is.OpScan, ns, "", fmt.Errorf("%w: cursor %d is not one this backend hands out", is.ErrInvalidArgument, cursor))
	}
	if cursor == 0 {
		pos = lo
	}
	if pos >= hi && pos < unbucketedPos {
		pos, off = unbucketedPos, 0
	}
	zr := goredis.ZRangeBy{Min: "[" + prefix, Max: "+"}
	if prefix == "" {
		zr.Min = "-"
	}
	if r.Bounded() {
		zr.Max = "(" + r.End
	}
	var keys []string
	for len(keys) < count {
		// The positions of this call: a batch of buckets, or the unbucketed set.
		end := min(pos+positionsBatch, hi)
		if pos >= hi {
			end = pos + 1
		}
		pipe := s.client.Pipeline()
		probes := make([]*goredis.StringSliceCmd, 0, end-pos)
		for p := pos; p < end; p++ {
			zb := zr
			zb.Count = int64(count - len(keys))
			if p == pos {
				zb.Offset = off
			}
			tag := unbucketedTag
			if p < unbucketedPos {
				tag = hexTag(p)
			}
			probes = append(probes, pipe.ZRangeByLex(ctx, s.setKey(ns, tag), &zb))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, nil, fail(is.OpScan, ns, "", fmt.Errorf("prefix %q: %w", prefix, classify(err)))
		}
		for i, pr := range probes {
			got, _ := pr.Result()
			if p := pos + i; len(keys)+len(got) >= count {
				take := count - len(keys)
				keys = append(keys, got[:take]...)
				start := int64(0)
				if i == 0 {
					start = off
				}
				return uint64(p)<<32 | uint64(start+int64(take)), keys, nil
			}
			keys = append(keys, got...)
		}
		pos, off = end, 0
		if pos >= hi && pos < unbucketedPos {
			pos = unbucketedPos
		}
		if pos > unbucketedPos {
			return 0, keys, nil
		}
		if len(keys) == 0 {
			// An empty call still moves: hand back where the next one starts.
			return uint64(pos) << 32, keys, nil
		}
	}
	return uint64(pos)<<32 | uint64(off), keys, nil
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
