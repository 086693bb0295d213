package redis

import (
	"strings"

	is "github.com/stratalog/strata/indexedstorage"
)

// The Redis keys of a Store (docs/redis.md has the same, for foreign writers). P is the Store's
// prefix, ns the namespace, key the index key, and T the key's tag id: its bucket's four lowercase hex
// digits (the key's own first four bytes) when the key starts with a bucket prefix (is.KeyBucket), else
// the single letter "u" (unbucketed).
//
//	P{ns|T}:key    the index: a sorted set of entries (scores 0, members id‖value)
//	P{ns|T}        the index set of (ns, T): a sorted set (scores 0) whose members are the keys of the
//	               indexes of ns in that bucket (or unbucketed) that exist
//	P{strata}layout  the layout marker: the string "2"
//
// Redis Cluster hashes only what lies between a key's first '{' and the first '}' after it, so the
// index and its index set share the slot of "ns|T" and every script, which touches those two keys,
// runs in one slot. A prefix holds no '{' or '}' (Open refuses one; New's callers must keep to it), so
// the first '{' is always the tag's; a namespace holds neither, nor '|'; what follows the '}' may be
// any bytes, braces included.
const (
	unbucketedTag = "u"
	layoutKey     = "{strata}layout"
	// layoutVersion is what layoutKey holds for this layout. The layout before it (one key per index,
	// P + ns + ":" + key, and no index sets) wrote no marker.
	layoutVersion = "2"
)

// tagID is the tag id T of an index key.
func tagID(key string) string {
	if _, ok := is.KeyBucket(key); ok {
		return key[:is.BucketPrefixLen-1]
	}
	return unbucketedTag
}

// setKey is the index set of (ns, tag id).
func (s *Store) setKey(ns, tag string) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + len(ns) + len(tag) + 3)
	b.WriteString(s.prefix)
	b.WriteByte('{')
	b.WriteString(ns)
	b.WriteByte('|')
	b.WriteString(tag)
	b.WriteByte('}')
	return b.String()
}

// keys returns the Redis key of an index and of the index set that lists it.
func (s *Store) keys(ns, key string) (data, set string) {
	set = s.setKey(ns, tagID(key))
	return set + ":" + key, set
}

// RedisKey returns the Redis key that holds the index (ns, key)'s entries: P{ns|T}:key. It is for
// tools and tests that reach the engine itself; the index is listed in its index set only while that
// key exists, by the Store's own scripts.
func (s *Store) RedisKey(ns, key string) string {
	data, _ := s.keys(ns, key)
	return data
}

// IndexSetKey returns the Redis key of the index set that lists (ns, key) while it exists.
func (s *Store) IndexSetKey(ns, key string) string {
	_, set := s.keys(ns, key)
	return set
}

// parseDataKey is keys' inverse for a Redis key SCAN found: the index key of ns it holds, and false
// for any other key (another namespace, an index set, a key whose tag does not match its key).
func (s *Store) parseDataKey(ns, redisKey string) (string, bool) {
	head := s.prefix + "{" + ns + "|"
	if !strings.HasPrefix(redisKey, head) {
		return "", false
	}
	rest := redisKey[len(head):]
	tag, key, ok := strings.Cut(rest, "}:")
	if !ok || key == "" || tagID(key) != tag {
		return "", false
	}
	return key, true
}
