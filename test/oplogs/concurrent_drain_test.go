package oplogs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stratalog/strata/archive"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
)

// drainTally counts what went wrong over the rounds of a concurrent-drain test.
type drainTally struct {
	errors, lost, doubled int
	// overlapping counts blob entries held by more than one chunk in rounds without a writer: two
	// drains then read the same batches, and a drain that lost the race must not put its own again.
	// With a writer the two can read the same batch up to different last indices and put both at
	// once (a blob store has no conditional put); readers still get each entry once, which the rest
	// checks, and racingWriter counts them apart.
	overlapping, racingWriter int
	// miscounted counts interleavings in which the two drains did not count each hop once between them
	// (Drained.Hops): the sweep counts archived on it.
	miscounted int
	first      []string // the first few failures, for the message
}

func (d *drainTally) note(format string, args ...any) {
	if len(d.first) < 8 {
		d.first = append(d.first, fmt.Sprintf(format, args...))
	}
}

// writeSmall appends from..from+n-1 in batches of 5–60 entries, so that an ephemeral oplog sits in
// compressed-1 as many small chunks and a durable one in the primary spans several read windows.
func writeSmall(ctx context.Context, stack *oplog.Stack, agent oplog.AgentID, mode oplog.Mode, from oplog.Index, n int, rng *rand.Rand) error {
	for n > 0 {
		size := min(n, 5+rng.IntN(56))
		if err := stack.Append(ctx, agent, mode, oplogtest.EntriesRange(from, size)); err != nil {
			return fmt.Errorf("append %d..%d: %w", from, from+oplog.Index(size)-1, err)
		}
		from += oplog.Index(size)
		n -= size
	}
	return nil
}

// checkOnce reads the agent back through the stack and layer by layer and counts, into tally, the
// indices of 1..n that are missing or wrong (lost), held by more than one layer after the drains
// (doubled), and held more than once by the blob layer's chunks (overlapping, readers still get them
// once).
func checkOnce(t *testing.T, l *oplogtest.Layers, agent oplog.AgentID, mode oplog.Mode, n int, writer bool, tally *drainTally) {
	t.Helper()
	ctx := t.Context()
	next := oplog.Index(1)
	for {
		entries, err := l.Stack.Read(ctx, agent, mode, next, 1000)
		if err != nil {
			tally.errors++
			tally.note("%s: read from %d: %v", agent, next, err)
			return
		}
		if len(entries) == 0 {
			break
		}
		for _, e := range entries {
			switch {
			case e.Index < next:
				tally.doubled++
				tally.note("%s: index %d read twice", agent, e.Index)
				continue
			case e.Index > next:
				tally.lost += int(e.Index - next)
				tally.note("%s: indices %d..%d missing", agent, next, e.Index-1)
			}
			if !bytes.Equal(e.Payload, oplogtest.Payload(e.Index)) {
				tally.lost++
				tally.note("%s: entry %d has payload %q", agent, e.Index, e.Payload)
			}
			next = e.Index + 1
		}
	}
	if got := int(next) - 1; got < n {
		tally.lost += n - got
		tally.note("%s: read back up to %d, want %d", agent, got, n)
	} else if got > n {
		tally.doubled += got - n
		tally.note("%s: read back up to %d, only %d were written", agent, got, n)
	}

	// Each index in exactly one layer: both drains ran to completion, so all of it is in the bottom
	// layer alone, and the layers above hold nothing.
	held := map[oplog.Index]int{}
	for _, layer := range l.Stack.Layers() {
		for from := oplog.Index(1); ; {
			batch, err := layer.Read(ctx, agent, mode, from, 1<<62, oplog.ChunkLimit)
			if err != nil {
				tally.errors++
				tally.note("%s: read %s: %v", agent, layer.Name(), err)
				return
			}
			if len(batch) == 0 {
				break
			}
			for _, e := range batch {
				held[e.Index]++
			}
			from = batch[len(batch)-1].Index + 1
		}
	}
	for i := oplog.Index(1); int(i) <= n; i++ {
		if held[i] > 1 {
			tally.doubled++
			tally.note("%s: index %d held by %d layers", agent, i, held[i])
		}
	}
	for _, ns := range []string{oplog.PrimaryNamespace(mode), oplog.CompressedNamespace(mode, 1)} {
		if ok, err := l.St.Exists(ctx, ns, agent.StoredKey()); ok || err != nil {
			tally.errors++
			tally.note("%s: %s still exists after both drains (%v)", agent, ns, err)
		}
	}
	seen := map[oplog.Index]bool{}
	overlapping := 0
	for _, i := range l.BlobCoverage(t, agent, mode) {
		if seen[i] {
			overlapping++
		}
		seen[i] = true
	}
	switch {
	case overlapping > 0 && writer:
		tally.racingWriter += overlapping
	case overlapping > 0:
		tally.overlapping += overlapping
		tally.note("%s: %d entries in more than one blob chunk", agent, overlapping)
	}
}

// Two drains of one agent at once (its teardown drain and the sweep; two sidecars during a hand-off),
// through Stack.Drain as both use it, over a few hundred entries in small pieces: every read of a hop
// takes several storage calls (primary windows, compressed chunks), so one drain's reads cross the
// other's drops. Each round ends with every entry readable exactly once, intact, in the bottom layer
// alone, and neither drain failed (DESIGN §10: a read racing a drop is retried or read from one
// snapshot, never handed on with a gap).
func TestOplog_ConcurrentDrainsConverge(t *testing.T) {
	rounds := 40
	if !testenv.Long() {
		rounds = 10 // the quick mode's share of the random rounds
	}
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		l := oplogtest.NewLayers(t, b.Open(t), nil)
		rng := oplogtest.Seeded(t)
		var tally drainTally
		for round := range rounds {
			for _, mode := range oplog.Modes {
				agent := oplogtest.AgentNamed(fmt.Sprintf("drained-twice-%s-%02d", mode, round))
				n := 300 + rng.IntN(500)
				// Odd rounds: a writer appends one batch above while both drain. One: every append
				// that lands during a step can cost a drain one more hop, and MaxHops leaves slack for
				// one writer, not for a stream of them.
				writer := round%2 == 1
				written := n
				if writer {
					written = n + 1 + rng.IntN(200)
				}
				if err := writeSmall(t.Context(), l.Stack, agent, mode, 1, n, rng); err != nil {
					t.Fatal(err)
				}
				start := make(chan struct{})
				errs := make([]error, 3)
				drained := make([]oplog.Drained, 2)
				var wg sync.WaitGroup
				for j := range 2 {
					wg.Go(func() {
						<-start
						drained[j], errs[j] = l.Stack.Drain(t.Context(), agent, mode)
					})
				}
				if writer {
					wg.Go(func() {
						<-start
						errs[2] = l.Stack.Append(t.Context(), agent, mode, oplogtest.EntriesRange(oplog.Index(n+1), written-n))
					})
				}
				close(start)
				wg.Wait()
				if errs[2] != nil {
					t.Fatalf("%s: writer: %v", agent, errs[2])
				}
				for j, err := range errs[:2] {
					if err != nil {
						tally.errors++
						tally.note("%s: drain %d: %v (invalid entries: %t)", agent, j, err, errors.Is(err, oplog.ErrInvalidEntries))
					}
				}
				// Without a writer (whose entries make more hops), the hop out of the top layer of the
				// mode (the primary, compressed level 1) is finished by exactly one of the two: no hop
				// appends to that layer, so no entry comes back to it once moved. (A hop out of a lower
				// layer may be finished by both: a drain racing the hop into it can put back a batch the
				// other had already moved on, and drop it again itself.)
				top := map[oplog.Mode]int{oplog.Durable: 0, oplog.Ephemeral: 1}[mode]
				if !writer && drained[0].Finished(top) == drained[1].Finished(top) {
					tally.miscounted++
					tally.note("%s: the hop out of layer %d finished by both or neither (%t, %t)", agent, top, drained[0].Finished(top), drained[1].Finished(top))
				}
				if writer {
					// What the writer appended after both drains looked is moved by the next drain.
					if _, err := l.Stack.Drain(t.Context(), agent, mode); err != nil {
						tally.errors++
						tally.note("%s: drain after the writer: %v", agent, err)
					}
				}
				checkOnce(t, l, agent, mode, written, writer, &tally)
			}
		}
		t.Logf("%d rounds × %d modes: %d errors, %d lost, %d doubled, %d blob entries in overlapping chunks (%d more beside a racing writer), %d hop counts off",
			rounds, len(oplog.Modes), tally.errors, tally.lost, tally.doubled, tally.overlapping, tally.racingWriter, tally.miscounted)
		if tally.errors+tally.lost+tally.doubled+tally.overlapping+tally.miscounted > 0 {
			t.Fatalf("concurrent drains: %d errors, %d lost, %d doubled, %d blob entries in overlapping chunks, %d hop counts off; first: %q",
				tally.errors, tally.lost, tally.doubled, tally.overlapping, tally.miscounted, tally.first)
		}
	})
}

// afterCall returns st such that fire runs once, right after the k-th Read, Closest or ClosestLast
// through it returns: the other drain running to its end between two reads of a hop.
func afterCall(st is.Storage, k int, fire func()) is.Storage {
	return after(st, k, fire, is.OpRead, is.OpClosest, is.OpClosestLast)
}

// afterClosest is afterCall counting Closest calls only.
func afterClosest(st is.Storage, k int, fire func()) is.Storage {
	return after(st, k, fire, is.OpClosest)
}

func after(st is.Storage, k int, fire func(), ops ...is.Operation) is.Storage {
	var mu sync.Mutex
	calls := 0
	return is.Intercept(st, func(ctx context.Context, op is.Operation, do func(context.Context) error) error {
		err := do(ctx)
		if slices.Contains(ops, op) {
			mu.Lock()
			calls++
			now := calls == k
			mu.Unlock()
			if now {
				fire()
			}
		}
		return err
	})
}

// The interleaving the 40 rounds hit by chance, forced at every read: drain A reads part of a hop, the
// other drain B then runs to its end (moves everything, drops the sources), and A goes on. A must not
// hand B's work back: nothing re-appended (each index in one blob chunk, the moved counts add up to one
// move per hop) and no error.
func TestOplog_DrainRacedByAWholeDrainBetweenTwoReadsConverges(t *testing.T) {
	const n = 700 // three primary windows; about twenty compressed chunks
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		plain := oplogtest.NewLayers(t, b.Open(t), nil)
		fixed := func() *rand.Rand { return rand.New(rand.NewPCG(3, 4)) }
		for _, mode := range oplog.Modes {
			hops := map[oplog.Mode]int{oplog.Durable: 2, oplog.Ephemeral: 1}[mode]
			drain := func(st *oplog.Stack, agent oplog.AgentID) (oplog.Drained, error) {
				return st.Drain(t.Context(), agent, mode)
			}
			if failed, reads := raceAfterEachRead(t, plain, "raced-"+string(mode), mode, n, hops, fixed, drain); len(failed) > 0 {
				t.Errorf("%s: %d of %d interleavings went wrong:\n%s", mode, len(failed), reads, strings.Join(failed, "\n"))
			}
		}
	})
}

// raceAfterEachRead counts the reads of drainA on a clean agent of n entries, then for each k races
// drainA on a fresh agent with a whole teardown drain run right after drainA's k-th read (Read,
// Closest or ClosestLast), and returns what went wrong in each interleaving: errors, entries lost or
// doubled (the two drains must move n × hops entries in all), blob chunks overlapping, and hops
// counted other than once (each of the hops is finished by exactly one of the two drains).
func raceAfterEachRead(t *testing.T, plain *oplogtest.Layers, name string, mode oplog.Mode, n, hops int, fixed func() *rand.Rand,
	drainA func(*oplog.Stack, oplog.AgentID) (oplog.Drained, error)) (failed []string, reads int) {
	t.Helper()
	probe := oplogtest.AgentNamed("probe-" + name)
	if err := writeSmall(t.Context(), plain.Stack, probe, mode, 1, n, fixed()); err != nil {
		t.Fatal(err)
	}
	var cc oplogtest.CallCounter
	counted := oplogtest.NewLayers(t, cc.Wrap(plain.St), plain.Blobs)
	if _, err := drainA(counted.Stack, probe); err != nil {
		t.Fatal(err)
	}
	calls := cc.Reset()
	reads = calls[is.OpRead] + calls[is.OpClosest] + calls[is.OpClosestLast]
	t.Logf("%s: a clean drain makes %d reads (%v)", name, reads, calls)
	for k := 1; k <= reads; k++ {
		agent := oplogtest.AgentNamed(fmt.Sprintf("%s-%02d", name, k))
		if err := writeSmall(t.Context(), plain.Stack, agent, mode, 1, n, fixed()); err != nil {
			t.Fatal(err)
		}
		var dB oplog.Drained
		var errB error
		a := oplogtest.NewLayers(t, afterCall(plain.St, k, func() {
			dB, errB = plain.Stack.Drain(t.Context(), agent, mode)
		}), plain.Blobs)
		dA, errA := drainA(a.Stack, agent)
		var tally drainTally
		for _, err := range []error{errA, errB} {
			if err != nil {
				tally.errors++
				tally.note("%v", err)
			}
		}
		checkOnce(t, plain, agent, mode, n, false, &tally)
		if moved := dA.Moved + dB.Moved; moved != n*hops {
			tally.note("the drains moved %d+%d entries, want %d in all", dA.Moved, dB.Moved, n*hops)
			tally.doubled += moved - n*hops
		}
		// Each hop is finished by exactly one drain here, lower layers' too: the other drain runs whole
		// between two reads, before this one looks below, so this one never puts a moved batch back.
		if dA.Hops+dB.Hops != hops {
			tally.note("the drains finished %d+%d hops, want %d in all", dA.Hops, dB.Hops, hops)
			tally.miscounted++
		}
		// The hops are out of the last layers above the bottom; each is one drain's.
		for layer := len(plain.Stack.Layers()) - 1 - hops; layer < len(plain.Stack.Layers())-1; layer++ {
			if dA.Finished(layer) == dB.Finished(layer) {
				tally.note("the hop out of layer %d: finished by the first drain %t, by the second %t", layer, dA.Finished(layer), dB.Finished(layer))
				tally.miscounted++
			}
		}
		if tally.errors+tally.lost+tally.doubled+tally.overlapping+tally.miscounted > 0 {
			failed = append(failed, fmt.Sprintf("after read %d: %d errors, %d lost, %d doubled, %d in overlapping blob chunks, %d hop counts off %q",
				k, tally.errors, tally.lost, tally.doubled, tally.overlapping, tally.miscounted, tally.first))
		}
	}
	return failed, reads
}

// The sweep's drain (DrainSeen, whose first read is the gate's re-check) raced the same way by an
// executor's teardown drain, forced after each of its reads: nothing lost, nothing doubled, no error.
func TestOplog_SweepDrainRacedByATeardownDrainBetweenTwoReadsConverges(t *testing.T) {
	const n = 700 // several compressed chunks
	mode := oplog.Ephemeral
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		plain := oplogtest.NewLayers(t, b.Open(t), nil)
		fixed := func() *rand.Rand { return rand.New(rand.NewPCG(5, 6)) }
		drain := func(st *oplog.Stack, agent oplog.AgentID) (oplog.Drained, error) {
			return st.DrainSeen(t.Context(), agent, mode, 1, n)
		}
		if failed, reads := raceAfterEachRead(t, plain, "raced-seen", mode, n, 1, fixed, drain); len(failed) > 0 {
			t.Errorf("%d of %d interleavings went wrong:\n%s", len(failed), reads, strings.Join(failed, "\n"))
		}
	})
}

// A read of the whole stack racing a drain's batch: the primary is read first and holds only what the
// drain has not reached, then compressed-1's first chunk is read, then the drain moves one batch of
// compressed-1 (4,096 entries) to the blob and drops it, so compressed-1's read ends after its first
// chunk, short of the entries past the batch that it still holds. Merging what each layer returned
// would hand on a gap between the batch and the primary's entries; the read must stop at the batch.
func TestRead_StackReadRacingADrainBatchHasNoGap(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		ctx := t.Context()
		plain := oplogtest.NewLayers(t, b.Open(t), nil)
		agent, mode := oplogtest.AgentNamed("read-across-a-batch"), oplog.Durable
		c1, err := archive.NewCompressed(plain.St, 1)
		if err != nil {
			t.Fatal(err)
		}
		for first := oplog.Index(1); first <= 5000; first += 100 {
			if err := c1.Append(ctx, agent, mode, oplogtest.EntriesRange(first, 100)); err != nil {
				t.Fatal(err)
			}
		}
		if err := plain.Stack.Primary().Append(ctx, agent, mode, oplogtest.EntriesRange(5001, 1000)); err != nil {
			t.Fatal(err)
		}
		// The primary's read jumps over its empty prefix with one Closest; compressed-1's first chunk
		// is the second.
		raced := afterClosest(plain.St, 2, func() {
			if err := plain.Blob.Append(ctx, agent, mode, oplogtest.EntriesRange(1, oplog.MaxChunkEntries)); err != nil {
				t.Error(err)
			}
			if _, err := c1.DropPrefix(ctx, agent, mode, oplog.MaxChunkEntries); err != nil {
				t.Error(err)
			}
		})
		l := oplogtest.NewLayers(t, raced, plain.Blobs)
		got, err := l.Stack.Read(ctx, agent, mode, 1, 6000)
		if err != nil {
			t.Fatal(err)
		}
		requireRun(t, "stack read racing a drain's batch", got, 1, oplog.MaxChunkEntries)
		plain.RequireExact(t, agent, mode, 6000)
	})
}
