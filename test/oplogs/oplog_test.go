package oplogs_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/fsblob"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/faults"
	"github.com/stratalog/strata/test/oplogtest"
)

// Sizes around the chunk limit of 4,096 entries, and one spanning several chunks.
var oplogSizes = []int{1, 4095, 4096, 4097, 10_000}

func TestOplog_DrainMovesEveryEntryToTheBottomOnce(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		l := oplogtest.NewLayers(t, b.Open(t), nil)
		rng := oplogtest.Seeded(t)
		for _, mode := range oplog.Modes {
			for _, n := range oplogSizes {
				agent := oplogtest.AgentNamed(fmt.Sprintf("%s-%d", mode, n))
				l.Write(t, agent, mode, 1, n, rng)
				l.RequireExact(t, agent, mode, n)
				d := l.Drain(t, agent, mode)
				wantHops := map[oplog.Mode]int{oplog.Durable: 2, oplog.Ephemeral: 1}[mode]
				if d.Hops != wantHops || d.Moved != n*wantHops {
					t.Fatalf("%s: drain %+v, want %d hops moving %d entries each", agent, d, wantHops, n)
				}
				l.RequireExact(t, agent, mode, n)
				l.RequireDrained(t, agent, mode, n)
			}
		}
	})
}

func TestOplog_WritesAndReadsAcrossArchivesAndReopening(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		st := b.Open(t)
		blobs := oplogtest.NewLayers(t, st, nil).Blobs
		rng := oplogtest.Seeded(t)
		for _, mode := range oplog.Modes {
			agent := oplogtest.AgentNamed("reopened-" + string(mode))
			l := oplogtest.NewLayers(t, st, blobs)
			l.Write(t, agent, mode, 1, 5000, rng)
			if _, err := l.Stack.ArchiveStep(t.Context(), agent, mode); err != nil {
				t.Fatal(err)
			}
			l.RequireExact(t, agent, mode, 5000)

			// A process restart: new handles on the same storage, a new stack over them.
			l = oplogtest.NewLayers(t, b.Reopen(t, st), blobs)
			l.RequireExact(t, agent, mode, 5000)
			l.Write(t, agent, mode, 5001, 1000, rng)
			l.RequireExact(t, agent, mode, 6000)
			l.Drain(t, agent, mode)
			l.RequireDrained(t, agent, mode, 6000)

			// A second lifetime of the same agent after its archive.
			l = oplogtest.NewLayers(t, b.Reopen(t, st), blobs)
			l.Write(t, agent, mode, 6001, 4200, rng)
			l.RequireExact(t, agent, mode, 10_200)
			l.Drain(t, agent, mode)
			l.RequireExact(t, agent, mode, 10_200)
			l.RequireDrained(t, agent, mode, 10_200)
		}
	})
}

// A crash can stop a drain between any two storage calls. For every call k a clean drain makes, fail
// the k-th (before it reaches the store, and after the store applied it): every entry must still read
// back exactly once, and a re-run must converge to the drained state with nothing lost or doubled.
// crashBlobKinds are the blob levels the every-call crash tests run over: the packed layout on a file
// system and on S3 on every backend, and the chunk layout on memory storage.
func crashBlobKinds(b backendtest.Backend) []oplogtest.BlobKind {
	if b.Name == "memory" {
		return append(slices.Clone(oplogtest.PackedBlobKinds), oplogtest.ChunksInMemory)
	}
	return oplogtest.PackedBlobKinds
}

// injectedLayers is a stack over b whose storage and blob calls go through one fault injector; the
// layers' St and Blobs are the stores themselves, so the checks read them directly, uncounted.
func injectedLayers(t *testing.T, b backendtest.Backend, k oplogtest.BlobKind) (*faults.Injector, *oplogtest.Layers) {
	t.Helper()
	in := &faults.Injector{}
	base := oplogtest.NewLayersIn(t, b.Open(t), k.Open(t), k.Layout)
	l := oplogtest.NewLayersIn(t, in.Storage(base.St), in.Blobs(base.Blobs), k.Layout)
	l.St, l.Blobs = base.St, base.Blobs
	return in, l
}

func TestOplog_DrainInterruptedAtEveryStorageCallConverges(t *testing.T) {
	const n = 4096 + 2500 // two batches a hop, so a fault can fall between batches
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		if b.Name != "memory" {
			testenv.SkipUnlessLong(t, "the crash windows on engines other than memory")
		}
		oplogtest.EachBlobKind(t, crashBlobKinds(b), func(t *testing.T, k oplogtest.BlobKind) {
			in, l := injectedLayers(t, b, k)
			// The same chunking for every agent, so each makes the calls the probe counted.
			fixed := func() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }
			for _, mode := range oplog.Modes {
				probe := oplogtest.AgentNamed("probe-" + string(mode))
				l.Write(t, probe, mode, 1, n, fixed())
				in.Count()
				l.Drain(t, probe, mode)
				calls, names := in.Calls()
				t.Logf("%s: a clean drain makes %d storage calls: %s", mode, calls, strings.Join(names, ", "))
				for k := 1; k <= calls; k++ {
					for _, when := range []faults.When{faults.Before, faults.After} {
						agent := oplogtest.AgentNamed(fmt.Sprintf("%s-crash-%d-%s", mode, k, when))
						l.Write(t, agent, mode, 1, n, fixed())
						in.Arm(k, when)
						_, err := l.Stack.Drain(t.Context(), agent, mode)
						in.Count()
						if !errors.Is(err, faults.ErrInjected) {
							t.Fatalf("call %d (%s): drain returned %v, want the injected fault", k, when, err)
						}
						l.RequireExact(t, agent, mode, n)
						l.Drain(t, agent, mode)
						l.RequireExact(t, agent, mode, n)
						l.RequireDrained(t, agent, mode, n)
					}
				}
			}
		})
	})
}

func TestOplog_WriterRacingTheArchiveLosesNothing(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		l := oplogtest.NewLayers(t, b.Open(t), nil)
		rng := oplogtest.Seeded(t)
		for _, mode := range oplog.Modes {
			agent := oplogtest.AgentNamed("raced-" + string(mode))
			const total = 12_000
			batches := []int{}
			for left := total; left > 0; {
				size := min(left, 1+rng.IntN(900))
				batches = append(batches, size)
				left -= size
			}
			done := make(chan struct{})
			var writeErr error
			go func() {
				defer close(done)
				next := oplog.Index(1)
				for _, size := range batches {
					if writeErr = l.Stack.Append(t.Context(), agent, mode, oplogtest.EntriesRange(next, size)); writeErr != nil {
						return
					}
					next += oplog.Index(size)
				}
			}()
			var archiveErr error
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					if _, archiveErr = l.Stack.Drain(t.Context(), agent, mode); archiveErr != nil && !errors.Is(archiveErr, oplog.ErrStepCap) {
						return
					}
					archiveErr = nil
				}
			})
			wg.Wait()
			if writeErr != nil || archiveErr != nil {
				t.Fatalf("writer: %v; archiver: %v", writeErr, archiveErr)
			}
			l.RequireExact(t, agent, mode, total)
			l.Drain(t, agent, mode)
			l.RequireExact(t, agent, mode, total)
			l.RequireDrained(t, agent, mode, total)
		}
	})
}

var awkwardNames = []string{"a/b/c", "x:y:z", "100%", "%2F", "..", "../../etc/passwd", ".", "with space", " ", "ünïcödé 日本語 🎉", `back\slash`, "*?[]", "-"}

func TestOplog_AgentNamesSurviveEveryLayer(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		blobs, err := fsblob.New(t.Context(), t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		l := oplogtest.NewLayers(t, b.Open(t), blobs)
		rng := oplogtest.Seeded(t)
		for _, mode := range oplog.Modes {
			for i, name := range awkwardNames {
				agent := oplogtest.AgentNamed(name)
				l.Write(t, agent, mode, 1, 50+i, rng)
			}
			for i, name := range awkwardNames {
				agent := oplogtest.AgentNamed(name)
				l.Drain(t, agent, mode)
				l.RequireExact(t, agent, mode, 50+i)
				l.RequireDrained(t, agent, mode, 50+i)
			}
		}
	})
}

func TestOplog_CorruptChunkIsReportedWithAgentAndIndex(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		l := oplogtest.NewLayers(t, b.Open(t), nil)
		ctx := t.Context()
		agent := oplogtest.AgentNamed("corrupted")
		if err := l.Stack.Append(ctx, agent, oplog.Ephemeral, oplogtest.EntriesRange(1, 100)); err != nil {
			t.Fatal(err)
		}
		ns := oplog.CompressedNamespace(oplog.Ephemeral, 1)
		rows, err := l.St.Read(ctx, ns, agent.StoredKey(), 0, ^uint64(0))
		if err != nil || len(rows) != 1 {
			t.Fatalf("compressed rows: %d, %v", len(rows), err)
		}
		bad := rows[0].Value
		bad[len(bad)/2] ^= 0x10
		if err := l.St.Delete(ctx, ns, agent.StoredKey()); err != nil {
			t.Fatal(err)
		}
		if err := l.St.Append(ctx, ns, agent.StoredKey(), rows[0].ID, bad); err != nil {
			t.Fatal(err)
		}
		requireCorrupt(t, l, agent)
		if _, err := l.Stack.Drain(ctx, agent, oplog.Ephemeral); !errors.Is(err, archive.ErrCorruptChunk) {
			t.Fatalf("drain of a corrupt chunk: %v, want ErrCorruptChunk", err)
		}
		if ok, _ := l.St.Exists(ctx, ns, agent.StoredKey()); !ok {
			t.Fatal("the drain dropped the corrupt chunk: its entries are gone")
		}

		// The same in the blob layer.
		other := oplogtest.AgentNamed("corrupted-blob")
		l.Write(t, other, oplog.Ephemeral, 1, 100, oplogtest.Seeded(t))
		l.Drain(t, other, oplog.Ephemeral)
		l.CorruptBlobChunk(t, other, oplog.Ephemeral, 100)
		requireCorrupt(t, l, other)
	})
}

func requireCorrupt(t *testing.T, l *oplogtest.Layers, agent oplog.AgentID) {
	t.Helper()
	_, err := l.Stack.Read(t.Context(), agent, oplog.Ephemeral, 1, 200)
	if !errors.Is(err, archive.ErrCorruptChunk) {
		t.Fatalf("read of a corrupt chunk: %v, want ErrCorruptChunk", err)
	}
	if msg := err.Error(); !strings.Contains(msg, agent.Key()) || !strings.Contains(msg, "100") {
		t.Fatalf("error %q does not name the agent %s and the chunk's index 100", msg, agent)
	}
}
