package archive_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/faults"
)

func TestUnescapeSegment_InvertsEscapeAndRefusesTheRest(t *testing.T) {
	for _, s := range []string{"shop", "cart/42", "日本", "a.b%c", "..", strings.Repeat("x", 255)} {
		if got, ok := archive.UnescapeSegment(archive.EscapeSegment(s)); !ok || got != s {
			t.Fatalf("UnescapeSegment(EscapeSegment(%q)) = %q, %v", s, got, ok)
		}
	}
	for _, seg := range []string{"a.b", "%2f", "%4", "%41", "a%", archive.PathSegment(strings.Repeat("x", 300))} {
		if got, ok := archive.UnescapeSegment(seg); ok {
			t.Fatalf("UnescapeSegment(%q) = %q, accepted", seg, got)
		}
	}
}

// migrationFixture is a chunk-layout blob level holding agents archived as the chunk layer writes
// them: several chunks each, one agent with a name too long for a path segment.
func migrationFixture(t *testing.T, blobs archive.BlobStore) (map[oplog.AgentID][]oplog.Entry, oplog.AgentID) {
	t.Helper()
	chunks, err := archive.NewBlob(blobs, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[oplog.AgentID][]oplog.Entry{}
	long := oplog.AgentID{Component: "c", Name: strings.Repeat("long", 80)}
	for i := range 12 {
		a := agentN(i)
		if i == 11 {
			a = long
		}
		n := 1 + i*700 // up to two chunks
		es := entriesFrom(1, n, i)
		if err := chunks.Append(t.Context(), a, oplog.Ephemeral, es); err != nil {
			t.Fatal(err)
		}
		want[a] = es
	}
	return want, long
}

// Every agent ends in the packed layout, read back whole through the index, with its chunk blobs gone;
// an agent whose path cannot be parsed is left and named unless the caller names it.
func TestMigrateChunks_PacksEveryAgentAndRemovesItsChunks(t *testing.T) {
	ctx := t.Context()
	st, blobs := memory.New(), memory.NewBlobStore()
	want, long := migrationFixture(t, blobs)
	rep, err := archive.MigrateChunks(ctx, st, blobs, oplog.Ephemeral, 0, archive.MigrateOptions{Batch: 5})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Agents != 11 || len(rep.Unknown) != 1 || len(rep.Failed) != 0 {
		t.Fatalf("report %+v, want 11 agents and the long-named one unknown", rep)
	}
	rep, err = archive.MigrateChunks(ctx, st, blobs, oplog.Ephemeral, 0, archive.MigrateOptions{Agents: []oplog.AgentID{long}})
	if err != nil || rep.Agents != 1 || len(rep.Unknown) != 0 {
		t.Fatalf("with the long name given: %+v %v", rep, err)
	}
	p := newPacked(t, st, blobs, nil)
	for a, es := range want {
		requireRead(t, p, a, es)
	}
	paths, _ := blobs.List(ctx, "")
	for _, path := range paths {
		if !strings.HasPrefix(path, "ephemeral/0/segments/") {
			t.Fatalf("%s left after the migration", path)
		}
	}
	if len(paths) > 8 {
		t.Fatalf("%d segments for 12 agents in batches of 5", len(paths))
	}
}

// A crash can stop the migration at any storage or blob call: every agent still reads back whole in one
// layout or the other, and a re-run converges to all of them packed, nothing lost or doubled.
func TestMigrateChunks_InterruptedAtEveryCallConverges(t *testing.T) {
	ctx := t.Context()
	probeIn := &faults.Injector{}
	{
		st, blobs := memory.New(), memory.NewBlobStore()
		migrationFixture(t, blobs)
		probeIn.Count()
		if _, err := archive.MigrateChunks(ctx, probeIn.Storage(st), probeIn.Blobs(blobs), oplog.Ephemeral, 0, archive.MigrateOptions{Batch: 4}); err != nil {
			t.Fatal(err)
		}
	}
	calls, _ := probeIn.Calls()
	for k := 1; k <= calls; k++ {
		for _, when := range []faults.When{faults.Before, faults.After} {
			t.Run(fmt.Sprintf("call-%d-%s", k, when), func(t *testing.T) {
				st, blobs := memory.New(), memory.NewBlobStore()
				want, long := migrationFixture(t, blobs)
				in := &faults.Injector{}
				in.Arm(k, when)
				rep, err := archive.MigrateChunks(ctx, in.Storage(st), in.Blobs(blobs), oplog.Ephemeral, 0, archive.MigrateOptions{Batch: 4})
				if err == nil && len(rep.Failed) == 0 {
					t.Fatalf("the injected fault went unreported: %+v", rep)
				}
				if err != nil && !errors.Is(err, faults.ErrInjected) {
					t.Fatal(err)
				}
				chunks, _ := archive.NewBlob(blobs, 0)
				p := newPacked(t, st, blobs, nil)
				stack, _ := oplog.NewStack(oplog.NewPrimary(st), p, chunks) // reads the packed layout, then the chunks
				for a, es := range want {
					if a == long {
						continue
					}
					got, err := stack.Read(ctx, a, oplog.Ephemeral, 1, 100_000)
					if err != nil || len(got) != len(es) {
						t.Fatalf("%s after the fault: %d entries, %v; want %d", a, len(got), err, len(es))
					}
				}
				rep, err = archive.MigrateChunks(ctx, st, blobs, oplog.Ephemeral, 0, archive.MigrateOptions{})
				if err != nil || len(rep.Failed) != 0 {
					t.Fatalf("re-run: %+v %v", rep, err)
				}
				for a, es := range want {
					if a != long {
						requireRead(t, p, a, es)
						if _, ok, _ := chunks.LastIndex(ctx, a, oplog.Ephemeral); ok {
							t.Fatalf("%s: chunks left after the re-run", a)
						}
					}
				}
			})
		}
	}
}

// An agent whose packed rows disagree with its chunks (the packed layout archived other entries under
// those indices) is reported and keeps its chunks.
func TestMigrateChunks_AnAgentThatDiffersKeepsItsChunks(t *testing.T) {
	ctx := t.Context()
	st, blobs := memory.New(), memory.NewBlobStore()
	want, _ := migrationFixture(t, blobs)
	p := newPacked(t, st, blobs, nil)
	a := agentN(3)
	other := entriesFrom(1, 5, 99)
	if err := p.Append(ctx, a, oplog.Ephemeral, other); err != nil {
		t.Fatal(err)
	}
	rep, err := archive.MigrateChunks(ctx, st, blobs, oplog.Ephemeral, 0, archive.MigrateOptions{})
	if err != nil || len(rep.Failed) != 1 || !strings.Contains(rep.Failed[0], a.String()) {
		t.Fatalf("report %+v %v, want %s failed", rep, err, a)
	}
	chunks, _ := archive.NewBlob(blobs, 0)
	got, err := chunks.Read(ctx, a, oplog.Ephemeral, 1, 100_000, oplog.ReadLimit{Entries: 1 << 20})
	if err != nil || len(got) != len(want[a]) {
		t.Fatalf("%s's chunks: %d entries, %v", a, len(got), err)
	}
}
