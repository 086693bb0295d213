// Package docs_test holds docs/redis.md and docs/storage-format.md to the code: a foreign writer
// copies their examples byte for byte, so every stored key, bucket, namespace, hash tag and blob path
// they show is checked against what strata computes, and the Redis key examples are generated from it.
package docs_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/redis"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
	"github.com/stratalog/strata/test/oplogtest"
)

var update = flag.Bool("update", false, "rewrite the generated blocks of docs/*.md from the code")

var docs = []string{"redis.md", "storage-format.md"}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile("../../docs/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// docStore is a Redis Store with the documented prefix, for the Redis keys it would use. It never
// talks to a server: computing a key needs none.
func docStore() *redis.Store {
	st, err := redis.New(context.Background(), goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}), &redis.Options{Prefix: "strata:"})
	if err != nil {
		panic(err) // a constant, valid prefix
	}
	return st
}

// The agent, namespace and odd key of docs/redis.md's examples.
var (
	exampleAgent = oplog.AgentID{Component: "c", Name: "a"}
	exampleNS    = oplog.CompressedNamespace(oplog.Ephemeral, 1)
	exampleOdd   = "odd key"
)

// redisExamples renders the examples of docs/redis.md's Keys section from the code.
func redisExamples() string {
	s := docStore()
	key := exampleAgent.StoredKey()
	bucket := exampleAgent.Bucket()
	tag := key[:is.BucketPrefixLen-1]
	rows := [][2]string{
		{s.RedisKey(exampleNS, key), fmt.Sprintf("the index of agent %s (bucket %d = 0x%04x)", exampleAgent.Key(), bucket, bucket)},
		{s.IndexSetKey(exampleNS, key), fmt.Sprintf("the index set of bucket %s of that namespace", tag)},
		{s.RedisKey(exampleNS, exampleOdd), "an index whose key has no bucket prefix (counted unparseable, never archived)"},
		{s.IndexSetKey(exampleNS, exampleOdd), "the namespace's unbucketed index set"},
		{s.KeyPrefix() + "{strata}layout", `"2"`},
	}
	width := 0
	for _, r := range rows {
		width = max(width, len(r[0]))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Examples, prefix `%s`, namespace `%s` (compressed level 1, where ephemeral agents write their chunks "+
		"and the sweep looks for them), agent `%s` (bucket %d = `0x%04x`, stored key `%s`):\n\n```\n",
		s.KeyPrefix(), exampleNS, exampleAgent.Key(), bucket, bucket, key)
	for _, r := range rows {
		fmt.Fprintf(&b, "%-*s    %s\n", width, r[0], r[1])
	}
	b.WriteString("```\n")
	return b.String()
}

// generated finds the block between "<!-- generated: name ..." and "<!-- end generated: name -->".
func generated(t *testing.T, doc, name string) (start, end int) {
	t.Helper()
	open := regexp.MustCompile(`(?m)^<!-- generated: ` + regexp.QuoteMeta(name) + `\b.*-->\n`).FindStringIndex(doc)
	closing := strings.Index(doc, "<!-- end generated: "+name+" -->")
	if open == nil || closing < open[1] {
		t.Fatalf("no generated block %q", name)
	}
	return open[1], closing
}

// docs/redis.md's Redis key examples are what the Redis backend computes for a real namespace and
// agent: go test ./test/docs -run TestRedisDoc_ExamplesAreTheCodes -update rewrites them.
func TestRedisDoc_ExamplesAreTheCodes(t *testing.T) {
	doc := readDoc(t, "redis.md")
	start, end := generated(t, doc, "redis-examples")
	want := redisExamples()
	if *update {
		if err := os.WriteFile("../../docs/redis.md", []byte(doc[:start]+want+doc[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got := doc[start:end]; got != want {
		t.Fatalf("docs/redis.md's examples are not the code's: run go test ./test/docs -run TestRedisDoc_ExamplesAreTheCodes -update\ngot:\n%s\nwant:\n%s", got, want)
	}
}

// trimToken cuts the punctuation that ends a sentence or a parenthesis off a token found in prose.
func trimToken(s string) string { return strings.TrimRight(s, ".,;)") }

// Every stored key the documents show (`0a5b/c:a`, in prose, tables, code and Redis keys) carries the
// bucket prefix of the agent key after it: copied, it is a key the sweep archives. (Whether the agent
// key is valid is another matter: the documents show refused ones on purpose.)
func TestDocs_StoredKeysCarryTheirAgentsBucket(t *testing.T) {
	stored := regexp.MustCompile("(?:^|[^0-9A-Za-z])([0-9a-f]{4}/[^\\s`|]+)")
	for _, name := range docs {
		checked := 0
		for _, m := range stored.FindAllStringSubmatch(readDoc(t, name), -1) {
			key := trimToken(m[1])
			bucket, ok := is.KeyBucket(key)
			component, agentName, agent := strings.Cut(key[is.BucketPrefixLen:], ":")
			if !ok || !agent || strings.Contains(component, "/") {
				continue // no bucket (4000/…), or no agent key after it (a blob path's bucket segment)
			}
			if want := (oplog.AgentID{Component: component, Name: agentName}).Bucket(); bucket != want {
				t.Errorf("%s: %q has the prefix of bucket %d, but %q is in bucket %d (stored key %s%s)",
					name, key, bucket, key[is.BucketPrefixLen:], want, is.BucketPrefix(want), key[is.BucketPrefixLen:])
			}
			checked++
		}
		if checked < 2 {
			t.Fatalf("%s: found %d stored keys to check", name, checked)
		}
	}
}

// Every bucket the documents name for an agent key ("`c:a` (bucket 2651 = `0x0a5b`)", "`billing:…`
// (13441)") is the code's.
func TestDocs_BucketLabelsAreTheCodes(t *testing.T) {
	labels := []*regexp.Regexp{
		regexp.MustCompile("`([^`]+:[^`]*)`[ (]+(?:is )?bucket (\\d+)(?: = `0x([0-9a-f]+)`)?"),
		regexp.MustCompile("`([^`]+:[^`]*)`\\s+\\((\\d+)\\)()"),
		regexp.MustCompile("agent ([^\\s`]+:[^\\s`]*) \\(bucket (\\d+)(?: = 0x([0-9a-f]+))?"),
	}
	checked := 0
	for _, name := range docs {
		doc := readDoc(t, name)
		for _, re := range labels {
			for _, m := range re.FindAllStringSubmatch(doc, -1) {
				a, err := oplog.ParseAgentKey(m[1])
				if err != nil {
					t.Errorf("%s: %q labelled with a bucket is no agent key: %v", name, m[1], err)
					continue
				}
				n, _ := strconv.Atoi(m[2])
				if a.Bucket() != n {
					t.Errorf("%s: %q is labelled bucket %d; it is %d", name, m[1], n, a.Bucket())
				}
				if m[3] != "" {
					if hex, _ := strconv.ParseInt(m[3], 16, 64); int(hex) != n {
						t.Errorf("%s: %q: bucket %d is not 0x%s", name, m[1], n, m[3])
					}
				}
				checked++
			}
		}
	}
	if checked < 5 {
		t.Fatalf("found %d bucket labels to check", checked)
	}
}

// The vectors of docs/storage-format.md that executors in other languages check themselves against:
// each row's key, as its bytes stand in the document, has the bucket and shards the row says.
func TestStorageFormat_BucketVectorsAreTheCodes(t *testing.T) {
	row := regexp.MustCompile(`(?m)^  \| (.+?) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$`)
	rows := row.FindAllStringSubmatch(readDoc(t, "storage-format.md"), -1)
	if len(rows) < 10 {
		t.Fatalf("found %d rows of the bucket vectors", len(rows))
	}
	repeated := regexp.MustCompile("^`([^`]*)` followed by (\\d+) × `([^`]+)`$")
	for _, r := range rows {
		var key string
		if m := repeated.FindStringSubmatch(r[1]); m != nil {
			n, _ := strconv.Atoi(m[2])
			key = m[1] + strings.Repeat(m[3], n)
		} else if m := regexp.MustCompile("^`([^`]+)`").FindStringSubmatch(r[1]); m != nil {
			key = m[1]
		} else {
			t.Fatalf("row %q: no key", r[0])
		}
		a, err := oplog.ParseAgentKey(key)
		if err != nil {
			t.Fatalf("row %q: %v", r[0], err)
		}
		if b, _ := strconv.Atoi(r[2]); a.Bucket() != b {
			t.Errorf("row %q: bucket %d, the code says %d", r[1], b, a.Bucket())
		}
		for i, n := range []int{1, 7, 1024, 16384} {
			if s, _ := strconv.Atoi(r[3+i]); a.Shard(n) != s {
				t.Errorf("row %q: shard among %d is %d, the code says %d", r[1], n, s, a.Shard(n))
			}
		}
	}
}

// knownNamespace reports whether ns is a namespace strata keeps an oplog layer (or erasures) in.
func knownNamespace(ns string) bool {
	for _, m := range oplog.Modes {
		if ns == oplog.PrimaryNamespace(m) || ns == oplog.ErasedNamespace(m) {
			return true
		}
		if rest, ok := strings.CutPrefix(ns, string(m)+"/compressed/"); ok {
			if l, err := strconv.Atoi(rest); err == nil && l >= 1 && oplog.CompressedNamespace(m, l) == ns {
				return true
			}
		}
	}
	return false
}

// Every namespace the documents name ("namespace `ephemeral/compressed/1`", a Redis key's {ns|T}) is
// one strata writes, and every Redis key shown with the documented prefix is the one the Redis
// backend uses: its tag the key's bucket digits (or u), the index and its set in one slot.
func TestDocs_NamespacesAndRedisKeysAreTheCodes(t *testing.T) {
	s := docStore()
	named := regexp.MustCompile("namespace `([^`{}]+)`|namespace = \"([^\"{}]+)\"|`((?:durable|ephemeral)/[a-z][a-z0-9/]*)`")
	redisKey := regexp.MustCompile(`strata:\{([^|{}]+)\|([^}]+)\}(?::((?:\S| \S)+))?`)
	checked := 0
	for _, name := range docs {
		doc := readDoc(t, name)
		for _, m := range named.FindAllStringSubmatch(doc, -1) {
			if ns := m[1] + m[2] + m[3]; !knownNamespace(ns) {
				t.Errorf("%s: namespace %q is none strata writes", name, ns)
			}
			checked++
		}
		for _, m := range redisKey.FindAllStringSubmatch(doc, -1) {
			ns, tag, key := m[1], m[2], m[3]
			if ns == "strata" {
				continue // the layout marker, {strata}layout
			}
			if !knownNamespace(ns) {
				t.Errorf("%s: Redis key %q: namespace %q is none strata writes", name, m[0], ns)
			}
			checked++
			if key == "" {
				if _, ok := is.KeyBucket(tag + "/"); tag != "u" && !ok {
					t.Errorf("%s: index set %q: tag %q is neither a bucket's four digits nor u", name, m[0], tag)
				}
				continue
			}
			if want := s.RedisKey(ns, key); m[0] != want {
				t.Errorf("%s: Redis key %q; the backend keeps index %q of %s at %q", name, m[0], key, ns, want)
			}
			if s.IndexSetKey(ns, key) != m[0][:strings.Index(m[0], "}")+1] {
				t.Errorf("%s: %q is not in the slot of its index set %q", name, m[0], s.IndexSetKey(ns, key))
			}
		}
	}
	if checked < 5 {
		t.Fatalf("found %d namespaces and Redis keys to check", checked)
	}
	// The keys the tag id bullet of docs/redis.md calls unbucketed are.
	m := regexp.MustCompile(`\("unbucketed": ([^)]*)\)`).FindStringSubmatch(readDoc(t, "redis.md"))
	if m == nil {
		t.Fatal("docs/redis.md lists no unbucketed keys")
	}
	for _, k := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(m[1], -1) {
		if b, ok := is.KeyBucket(k[1]); ok {
			t.Errorf("docs/redis.md calls %q unbucketed; it is in bucket %d", k[1], b)
		}
	}
}

// Every blob path the documents show is the path the blob layer writes for its agent and index.
func TestDocs_BlobPathsAreTheCodes(t *testing.T) {
	path := regexp.MustCompile(`(durable|ephemeral)/(\d+)/([0-9a-f]{4})/([A-Za-z0-9%._-]+)/([A-Za-z0-9%._-]+)/(\d{20})`)
	checked := 0
	for _, name := range docs {
		for _, m := range path.FindAllStringSubmatch(readDoc(t, name), -1) {
			component, err1 := url.PathUnescape(m[4])
			agentName, err2 := url.PathUnescape(m[5])
			level, _ := strconv.Atoi(m[2])
			last, _ := strconv.ParseUint(m[6], 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: %q: %v %v", name, m[0], err1, err2)
			}
			b, err := archive.NewBlob(nil, level)
			if err != nil {
				t.Fatal(err)
			}
			agent := oplog.AgentID{Component: component, Name: agentName}
			if want := b.ChunkPath(agent, oplog.Mode(m[1]), oplog.Index(last)); m[0] != want {
				t.Errorf("%s: blob path %q; the blob layer writes chunk %d of %s at %q", name, m[0], last, agent, want)
			}
			checked++
		}
	}
	if checked < 2 {
		t.Fatalf("found %d blob paths to check", checked)
	}
}

// A writer in another language that follows docs/redis.md to the letter (the example's index and
// index set keys under its own prefix, the documented Append script, a chunk of docs/storage-format.md)
// writes an oplog the sweep finds and archives: the example is a key the sweep walks.
func TestRedisDoc_AWriterFollowingTheExampleIsArchived(t *testing.T) {
	raw := testenv.RedisURL(t)
	prefix := testenv.RedisPrefix(t, raw)
	st, err := redis.Open(t.Context(), testenv.WithQuery(t, raw, redis.PrefixParam, prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })

	doc := readDoc(t, "redis.md")
	field := func(what string) string {
		m := regexp.MustCompile(`(?m)^(strata:\S+(?: \S+)*)\s{2,}` + regexp.QuoteMeta(what)).FindStringSubmatch(doc)
		if m == nil {
			t.Fatalf("docs/redis.md has no example line %q", what)
		}
		return prefix + strings.TrimPrefix(m[1], "strata:")
	}
	// What a writer copies: the index's Redis key, the stored key after its tag, and the index set.
	index, set := field("the index of agent "), field("the index set of bucket")
	storedKey := index[strings.Index(index, "}:")+2:]
	agent, err := oplog.ParseAgentKey(storedKey[is.BucketPrefixLen:])
	if err != nil {
		t.Fatalf("the example's stored key %q: %v", storedKey, err)
	}
	script := regexp.MustCompile("(?s)\\*\\*Append\\*\\*.*?```lua\n(.*?)```").FindStringSubmatch(doc)
	if script == nil {
		t.Fatal("docs/redis.md has no Append script")
	}
	const n = 3
	chunk, err := archive.EncodeChunk(oplogtest.EntriesRange(1, n))
	if err != nil {
		t.Fatal(err)
	}
	member := append(binary.BigEndian.AppendUint64(nil, n), chunk...) // id = the chunk's last index
	if err := st.Client().Eval(t.Context(), script[1], []string{index, set}, storedKey, "0", member).Err(); err != nil {
		t.Fatalf("the documented Append script: %v", err)
	}

	r := oplogtest.NewSweepRig(t, st, oplogtest.SweepConfig())
	archived := 0
	for range 2 {
		archived += r.Sweeper.SweepOnce(t.Context()).Outcomes[sweeper.OutcomeArchived]
	}
	if archived != 1 {
		t.Fatalf("the sweep archived %d agents; %s was written at %q by the documented recipe", archived, agent, index)
	}
	r.RequireExact(t, agent, oplog.Ephemeral, n)
	r.RequireDrained(t, agent, oplog.Ephemeral, n)
}

// The packed segment test vector of docs/storage-format.md is what the code reads and writes: the
// hex decodes to the listed footer, each listed chunk's bytes pass their checks and hold the listed
// entries, EncodeSegment of those chunks writes the same bytes, and each listed row value decodes to
// its footer entry and is what EncodeSegmentRef writes.
func TestStorageFormat_SegmentVectorIsTheCode(t *testing.T) {
	doc := readDoc(t, "storage-format.md")
	start := strings.Index(doc, "**Test vector.**")
	if start < 0 {
		t.Fatal("storage-format.md has no segment test vector")
	}
	doc = doc[start:]
	var hexed strings.Builder
	for _, line := range strings.Split(doc, "\n")[1:] {
		if strings.HasPrefix(line, "    ") {
			hexed.WriteString(strings.TrimSpace(line))
		} else if hexed.Len() > 0 {
			break
		}
	}
	seg, err := hex.DecodeString(hexed.String())
	if err != nil || len(seg) == 0 {
		t.Fatalf("the vector's hex: %v", err)
	}
	entries, err := archive.DecodeSegment(seg)
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile("segment\\s+`([^`]+)`").FindStringSubmatch(doc)
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\| (\\d+)\\.\\.(\\d+) \\| (\\d+) \\| (\\d+) \\| `([0-9a-f]{8})` \\| `([0-9a-f]+)` \\|$")
	rows := row.FindAllStringSubmatch(doc, -1)
	if name == nil || len(rows) != len(entries) {
		t.Fatalf("the doc lists %d rows (segment %v), the vector holds %d chunks", len(rows), name, len(entries))
	}
	payloads := [][]string{{"hello", "world"}, {"x"}}
	var chunks []archive.SegmentChunk
	for i, r := range rows {
		e := entries[i]
		got := fmt.Sprintf("%s %d %d %d %d %08x", e.Key, e.First, e.Last, e.Offset, e.Length, e.CRC)
		if want := strings.Join(r[1:6], " ") + " " + r[6]; got != want {
			t.Errorf("row %d: the doc says %q, the footer %q", i, want, got)
		}
		data, err := archive.PackedChunkBytes(e, seg[e.Offset:e.Offset+e.Length])
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := archive.DecodeChunk(data)
		if err != nil || len(decoded) != len(payloads[i]) {
			t.Fatalf("chunk %d: %d entries, %v", i, len(decoded), err)
		}
		for j, d := range decoded {
			if string(d.Payload) != payloads[i][j] {
				t.Errorf("chunk %d entry %d is %q, the doc says %q", i, j, d.Payload, payloads[i][j])
			}
		}
		chunks = append(chunks, archive.SegmentChunk{Key: e.Key, Chunk: data})
		value, _ := hex.DecodeString(r[7])
		ref, err := archive.DecodeSegmentRef(value, e.Last)
		if err != nil || ref.Chunk(e.Key, e.Last) != e || ref.Segment != name[1] {
			t.Errorf("row %d's value decodes to %+v (%v), want %+v in %s", i, ref, err, e, name[1])
		}
		if enc := archive.EncodeSegmentRef(ref); !bytes.Equal(enc, value) {
			t.Errorf("row %d: EncodeSegmentRef writes %x, the doc %x", i, enc, value)
		}
	}
	again, _, err := archive.EncodeSegment(chunks)
	if err != nil || !bytes.Equal(again, seg) {
		t.Errorf("EncodeSegment of the vector's chunks: %x (%v), the doc %x", again, err, seg)
	}
	for i, id := range []oplog.AgentID{{Component: "shop", Name: "cart/42"}, {Component: "shop", Name: "cart/7"}} {
		if entries[i].Key != id.StoredKey() {
			t.Errorf("chunk %d's key %q is not %s's stored key %q", i, entries[i].Key, id, id.StoredKey())
		}
	}
}
