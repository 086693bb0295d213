package baseline_test

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/backends/multisqlite"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/baseline"
	"github.com/stratalog/strata/test/baseline/baselinetest"
	"github.com/stratalog/strata/test/oplogtest"
)

var ns = oplog.CompressedNamespace(oplog.Ephemeral, 1)

// strand writes agents through strata's stack: agent i holds 1 + i%3 chunks of 3 entries each.
func strand(t *testing.T, l *oplogtest.Layers, prefix string, n int) map[oplog.AgentID]int {
	t.Helper()
	agents := map[oplog.AgentID]int{}
	for i := range n {
		a := oplogtest.AgentNamed(fmt.Sprintf("%s-%03d", prefix, i))
		chunks := 1 + i%3
		for c := range chunks {
			if err := l.Stack.Append(t.Context(), a, oplog.Ephemeral, oplogtest.EntriesRange(oplog.Index(1+3*c), 3)); err != nil {
				t.Fatal(err)
			}
		}
		agents[a] = 3 * chunks
	}
	return agents
}

// requireArchived: every agent's entries are in the baseline's blobs, once each, and nothing of the
// namespace is left in the store.
func requireArchived(t *testing.T, st is.Storage, blobs archive.BlobStore, agents map[oplog.AgentID]int) {
	t.Helper()
	ctx := t.Context()
	for a, n := range agents {
		key := a.StoredKey()
		if ok, err := st.Exists(ctx, ns, key); ok || err != nil {
			t.Errorf("%s still exists (%v)", key, err)
		}
		paths, err := blobs.List(ctx, baseline.BlobDir(key))
		if err != nil {
			t.Fatal(err)
		}
		var covered []oplog.Index
		for _, p := range paths {
			data, err := blobs.Get(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			first, last, err := archive.ChunkSpan(data)
			if err != nil {
				t.Fatalf("blob %s: %v", p, err)
			}
			if !strings.HasSuffix(p, fmt.Sprintf("%020d", last)) {
				t.Errorf("blob %s holds a chunk ending at %d", p, last)
			}
			for i := first; i <= last; i++ {
				covered = append(covered, i)
			}
		}
		if !slices.Equal(covered, oplogtest.SpanIndexes(1, n)) {
			t.Errorf("%s: blobs cover %v, want 1..%d once each", key, covered, n)
		}
	}
	page, err := st.ScanStable(ctx, ns, is.AllKeys, is.Resume{}, 10)
	if err != nil || len(page.Keys) > 0 {
		t.Errorf("the namespace still holds %q (%v)", page.Keys, err)
	}
}

func TestBaselines_ArchiveEveryAgentAndLeaveNothing(t *testing.T) {
	for _, be := range backendtest.All() {
		for _, shape := range []string{"per-agent", "batched"} {
			t.Run(be.Name+"/"+shape, func(t *testing.T) {
				st := be.Open(t)
				blobs := memory.NewBlobStore()
				var counts baseline.Counts
				// A page of 4 keys: 10 agents take several pages, the last one short.
				opts := baseline.Options{Blobs: blobs, PageSize: 4, Counts: &counts}
				eng, ok := baselinetest.For(t, st, opts, opts)
				if !ok {
					t.Skip("no engine under the store")
				}
				archive := eng.PerAgent
				if shape == "batched" {
					if archive = eng.Batched; archive == nil {
						t.Skip("no batched baseline on this engine")
					}
				}
				l := oplogtest.NewLayers(t, st, nil)
				agents := strand(t, l, shape, 10)
				n, err := archive(t.Context(), ns)
				if err != nil {
					t.Fatal(err)
				}
				if n != len(agents) || counts.Agents.Load() != int64(len(agents)) {
					t.Errorf("archived %d (counted %d), want %d", n, counts.Agents.Load(), len(agents))
				}
				if s, ok := st.(*multisqlite.Store); ok {
					// Before any strata read, which would remove an emptied file the baseline left.
					var left []string
					filepath.WalkDir(s.NamespaceDir(ns), func(path string, d fs.DirEntry, err error) error {
						if err == nil && strings.HasSuffix(path, ".db") {
							left = append(left, path)
						}
						return nil
					})
					if len(left) > 0 {
						t.Errorf("files left: %q", left)
					}
				}
				requireArchived(t, st, blobs, agents)
				if counts.RoundTrips.Load() == 0 {
					t.Error("no round trip counted")
				}
				// A second run finds nothing.
				if n, err := archive(t.Context(), ns); n != 0 || err != nil {
					t.Errorf("a second run archived %d, %v", n, err)
				}
				// strata writes the same agents again, continuing, and reads them back: the layout
				// is as the baseline left it (Redis: no index set lists a gone index).
				for a := range agents {
					if err := l.Stack.Append(t.Context(), a, oplog.Ephemeral, oplogtest.EntriesRange(100, 1)); err != nil {
						t.Fatalf("append after the baseline: %v", err)
					}
				}
				page, err := st.ScanStable(t.Context(), ns, is.AllKeys, is.Resume{}, 100)
				if err != nil || len(page.Keys) != len(agents) {
					t.Errorf("after appending again a walk found %d keys (%v), want %d", len(page.Keys), err, len(agents))
				}
			})
		}
	}
}

// TestRedisCommandStats_CountsWhatTheServerDid: a script of 20,000 calls into Redis moves the
// server's counts by at least its calls and script, and its CPU time forward (other clients of the
// server can only add to them).
func TestRedisCommandStats_CountsWhatTheServerDid(t *testing.T) {
	opts, err := goredis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	client := goredis.NewClient(opts)
	defer client.Close()
	before, err := baseline.RedisCommandStats(t.Context(), client)
	if err != nil {
		t.Fatal(err)
	}
	key := testenv.RedisPrefix(t, testenv.RedisURL(t)) + "none"
	const calls = 20000
	if err := client.Eval(t.Context(), "for i = 1, tonumber(ARGV[1]) do redis.call('ZRANGEBYLEX', KEYS[1], '-', '+') end return 1", []string{key}, calls).Err(); err != nil {
		t.Fatal(err)
	}
	after, err := baseline.RedisCommandStats(t.Context(), client)
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Calls - before.Calls; d < calls+1 {
		t.Errorf("calls moved by %d, want at least %d", d, calls+1)
	}
	if d := after.Scripts - before.Scripts; d < 1 {
		t.Errorf("scripts moved by %d, want at least 1", d)
	}
	if after.CPU <= before.CPU {
		t.Errorf("server CPU went from %v to %v over %d calls", before.CPU, after.CPU, calls)
	}
}
