package oplogs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/fsblob"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
)

// longestName returns a name of CJK characters and emoji that makes component's key exactly
// indexedstorage.MaxKeyLen bytes of valid UTF-8.
func longestName(t *testing.T, component string) string {
	t.Helper()
	var b strings.Builder
	runes := []rune("日本語🎉中文😀")
	for left := oplog.MaxKeyLen - len(component) - 1; left > 0; {
		r := runes[b.Len()%len(runes)]
		if left < 20 { // finish exactly: 3-byte characters once the rest divides by 3, emoji before
			r = '字'
			if left%3 != 0 {
				r = '🎉'
			}
		}
		b.WriteRune(r)
		left -= utf8.RuneLen(r)
	}
	name := b.String()
	key := oplog.AgentID{Component: component, Name: name}.Key()
	if len(key) != oplog.MaxKeyLen || !utf8.ValidString(key) {
		t.Fatalf("key of %d bytes (valid UTF-8: %v), want %d", len(key), utf8.ValidString(key), oplog.MaxKeyLen)
	}
	return name
}

// Every valid key reaches the blob layer (DESIGN section 10): names whose escaped form is longer than a
// file name are archived through a file system and read back whole.
func TestOplog_LongestKeysAreArchivedToTheFileSystem(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		blobs, err := fsblob.New(t.Context(), t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		st := b.Open(t)
		rng := oplogtest.Seeded(t)
		shared := strings.Repeat("s", 300)
		agents := []oplog.AgentID{
			oplogtest.AgentNamed(longestName(t, "component-1")),
			oplogtest.AgentNamed(strings.Repeat("a", 256)),
			// Two names alike for their first 300 bytes: their segments must differ.
			oplogtest.AgentNamed(shared + "-one"),
			oplogtest.AgentNamed(shared + "-two"),
			{Component: strings.Repeat("c", 300), Name: "short"}, // the component's segment is bounded too
		}
		const n = 5000 // two chunks in the blob layer
		for _, layout := range []string{archive.LayoutPacked, archive.LayoutChunks} {
			// The packed layout keeps the keys in its index and its segments' footers; the chunk layout
			// makes a path of each.
			l := oplogtest.NewLayersIn(t, st, blobs, layout)
			for _, mode := range oplog.Modes {
				for _, agent := range agents {
					l.Write(t, agent, mode, 1, n, rng)
				}
				for _, agent := range agents {
					l.Drain(t, agent, mode)
					l.RequireExact(t, agent, mode, n)
					l.RequireDrained(t, agent, mode, n) // lists the agent's own directory: no other's chunks
					if layout == archive.LayoutPacked {
						continue
					}
					for _, last := range []oplog.Index{oplog.MaxChunkEntries, n} {
						path := l.Chunks(t).ChunkPath(agent, mode, last)
						if err := archive.ValidateBlobPath(path, false); err != nil {
							t.Fatal(err)
						}
						if _, err := os.Stat(filepath.Join(blobs.Root(), filepath.FromSlash(path))); err != nil {
							t.Fatalf("%d-byte name: chunk %d is not on disk: %v", len(agent.Name), last, err)
						}
					}
				}
				if layout == archive.LayoutChunks {
					if a, b := l.Chunks(t).Dir(agents[2], mode), l.Chunks(t).Dir(agents[3], mode); a == b || strings.HasPrefix(a, b) || strings.HasPrefix(b, a) {
						t.Fatalf("names alike for 300 bytes share a directory: %q, %q", a, b)
					}
				}
			}
		}
	})
}
