// Package demo is `strata demo`: an executor with ephemeral invocations whose teardown drains are lost
// at random, the sweep finding and archiving what they stranded, and a check that every invocation's
// entries read back exactly once. It runs on the embedded SQLite default and a filesystem blob store in
// one directory, and needs nothing installed; Options.BlobURL puts the blobs elsewhere, in object
// storage for instance (s3://bucket/prefix?endpoint=…).
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratalog/strata/config"
	"github.com/stratalog/strata/internal/redact"
	"github.com/stratalog/strata/internal/sidecar"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
	"github.com/stratalog/strata/sweeper"
)

// Options shape a demo run.
type Options struct {
	Dir         string  // where the data lives (created); a second run reuses it
	BlobURL     string  // the blob store (backends.OpenBlob); empty: fs: under Dir
	Invocations int     // ephemeral invocations the executor runs
	LoseRate    float64 // share of teardown drains lost, 0..1
	Concurrency int     // invocations at once
	MaxEntries  int     // entries per invocation: 1..MaxEntries
	Seed        uint64  // 0: random
	Out         io.Writer
}

// BlobURLEnv is the environment variable `strata run` reads blob.url from; the demo honours it too,
// so STRATA_BLOB_URL=s3://bucket/prefix?… strata demo runs the demo on object storage.
const BlobURLEnv = "STRATA_BLOB_URL"

// Defaults for Options. BlobURL is STRATA_BLOB_URL's value, empty when it is unset.
func Defaults() Options {
	return Options{Dir: "strata-data", BlobURL: os.Getenv(BlobURLEnv), Invocations: 300, LoseRate: 0.3, Concurrency: 8, MaxEntries: 60}
}

// Summary is what a run found, moved and verified.
type Summary struct {
	Invocations int
	Stranded    int   // teardown drains lost: oplogs left in compressed level 1
	Archived    int   // agents the sweep drained
	BytesMoved  int64 // payload bytes the sweep moved
	Ticks       int
	Elapsed     time.Duration
	Mismatches  int // invocations whose entries did not read back exactly once
}

// ErrVerification is returned when an invocation's entries did not read back exactly once.
var ErrVerification = errors.New("verification failed")

type invocation struct {
	agent   oplog.AgentID
	entries int
	lost    bool
	think   time.Duration
}

// Run runs the demo and prints its progress and summary to opts.Out.
func Run(ctx context.Context, opts Options) (Summary, error) {
	start := time.Now()
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	seed := opts.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	cfg := demoConfig(opts)
	sc, err := sidecar.Open(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return Summary{}, err
	}
	defer sc.Close()
	sc.SetAssignment(sweeper.Assignment{ShardCount: 1, Shards: []int{0}})
	registrar := &schedule.Registrar{Store: sc.Schedules(), SweepEnabled: func() bool { return cfg.Sweep.Enabled },
		ArchiveInterval: cfg.Schedule.ArchiveInterval}

	fmt.Fprintf(out, "strata demo: %d ephemeral invocations in %s, blobs in %s, %.0f%% of teardown drains lost (seed %d)\n",
		opts.Invocations, opts.Dir, redact.URL(cfg.Blob.URL), opts.LoseRate*100, seed)

	invs := plan(rng, opts)
	ex := &executor{sc: sc, registrar: registrar, resident: map[oplog.AgentID]bool{}}
	executorDone := ex.start(ctx, invs, opts.Concurrency)
	sum := Summary{Invocations: len(invs)}
	if err := sweepUntilArchived(ctx, out, sc, cfg.Sweep.Interval, ex, executorDone, invs, &sum); err != nil {
		return sum, err
	}

	// Verification: every invocation, drained by its teardown or by the sweep, reads back exactly once.
	for _, inv := range invs {
		if err := verify(ctx, sc.Stack(), inv); err != nil {
			sum.Mismatches++
			fmt.Fprintf(out, "  MISMATCH %s: %v\n", inv.agent, err)
		}
	}
	sum.Elapsed = time.Since(start)
	fmt.Fprintf(out, "\nstranded found: %d\narchived by the sweep: %d\nbytes moved: %d\nsweep ticks: %d\nverified: %d/%d invocations read back exactly once\ntime: %s\n",
		sum.Stranded, sum.Archived, sum.BytesMoved, sum.Ticks, sum.Invocations-sum.Mismatches, sum.Invocations,
		sum.Elapsed.Round(time.Millisecond))
	if sum.Mismatches > 0 {
		return sum, fmt.Errorf("%w: %d of %d invocations", ErrVerification, sum.Mismatches, sum.Invocations)
	}
	return sum, nil
}

// demoConfig is the sidecar's configuration of a demo run: SQLite and a filesystem blob store in
// opts.Dir (or opts.BlobURL), and a short sweep interval.
func demoConfig(opts Options) config.Config {
	cfg := config.Default()
	cfg.Storage.URL = "sqlite:" + filepath.Join(opts.Dir, "strata.db")
	cfg.Schedule.URL = cfg.Storage.URL
	cfg.Blob.URL = "fs:" + filepath.Join(opts.Dir, "blobs")
	if opts.BlobURL != "" {
		cfg.Blob.URL = opts.BlobURL
	}
	cfg.Sweep.Interval = 250 * time.Millisecond
	return cfg
}

// plan is the run's invocations: each a fresh agent with its entries, think time, and whether its
// teardown drain is lost.
func plan(rng *rand.Rand, opts Options) []invocation {
	run := fmt.Sprintf("%x", rng.Uint32())
	invs := make([]invocation, opts.Invocations)
	for i := range invs {
		invs[i] = invocation{
			agent:   oplog.AgentID{Component: "demo-shop", Name: fmt.Sprintf("cart/%s/%04d", run, i)},
			entries: 1 + rng.IntN(opts.MaxEntries),
			lost:    rng.Float64() < opts.LoseRate,
			think:   time.Duration(10+rng.IntN(60)) * time.Millisecond,
		}
	}
	return invs
}

// executor runs the invocations: each writes its entries straight into compressed level 1, takes the
// registration hook (which, with the sweep on, writes nothing), and tears down with a detached drain
// that is sometimes lost. While one runs its agent is resident, so that the sweep leaves it alone.
type executor struct {
	sc        *sidecar.Sidecar
	registrar *schedule.Registrar
	done      atomic.Int64 // invocations finished
	lost      atomic.Int64 // of them, those whose teardown drain was lost

	mu       sync.Mutex // guards resident and firstErr
	resident map[oplog.AgentID]bool
	firstErr error
}

// start runs invs in the background, at most concurrency at once, and closes the channel it returns
// when all are done.
func (ex *executor) start(ctx context.Context, invs []invocation, concurrency int) <-chan struct{} {
	executorDone := make(chan struct{})
	go func() {
		defer close(executorDone)
		sem := make(chan struct{}, max(concurrency, 1))
		var wg sync.WaitGroup
		for _, inv := range invs {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				ex.run(ctx, inv)
			})
		}
		wg.Wait()
	}()
	return executorDone
}

// run is one invocation, its agent resident while it runs.
func (ex *executor) run(ctx context.Context, inv invocation) {
	ex.setResident(inv.agent, true)
	err := invoke(ctx, ex.sc.Stack(), ex.registrar, inv)
	ex.setResident(inv.agent, false)
	if err != nil {
		ex.mu.Lock()
		if ex.firstErr == nil {
			ex.firstErr = err
		}
		ex.mu.Unlock()
	}
	if inv.lost {
		ex.lost.Add(1)
	}
	ex.done.Add(1)
}

// setResident marks agent resident or not and publishes the resident set to the sidecar.
func (ex *executor) setResident(agent oplog.AgentID, resident bool) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if resident {
		ex.resident[agent] = true
	} else {
		delete(ex.resident, agent)
	}
	set := make([]oplog.AgentID, 0, len(ex.resident))
	for a := range ex.resident {
		set = append(set, a)
	}
	ex.sc.SetResident(set)
}

func (ex *executor) err() error {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.firstErr
}

// maxDemoTicks bounds the sweep ticks of a run.
const maxDemoTicks = 400

// sweepUntilArchived ticks the sweep beside the executor, as the sidecar would, until the executor is
// done and no invocation's oplog is left in compressed level 1, adding to sum what it saw.
func sweepUntilArchived(ctx context.Context, out io.Writer, sc *sidecar.Sidecar, interval time.Duration, ex *executor,
	executorDone <-chan struct{}, invs []invocation, sum *Summary) error {
	finished := false
	for {
		if !finished {
			select {
			case <-executorDone:
				finished = true
				if err := ex.err(); err != nil {
					return fmt.Errorf("executor: %w", err)
				}
				sum.Stranded = int(ex.lost.Load())
				fmt.Fprintf(out, "  executor: all %d invocations done; %d teardown drains were lost, stranding their oplogs\n",
					len(invs), sum.Stranded)
			default:
			}
		}
		left, err := strandedLeft(ctx, sc.Stack(), invs)
		if err != nil {
			return err
		}
		if finished && left == 0 {
			return nil
		}
		if sum.Ticks >= maxDemoTicks {
			return fmt.Errorf("%d oplogs still stranded after %d ticks", left, sum.Ticks)
		}
		tick(ctx, out, sc, sum, ex.done.Load(), len(invs))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(interval) // the quiet gate wants the next pass to be a little later
	}
}

// tick runs one sweep pass, adds it to sum, and prints it.
func tick(ctx context.Context, out io.Writer, sc *sidecar.Sidecar, sum *Summary, done int64, invocations int) {
	rep := sc.Sweeper().SweepOnce(ctx)
	sum.Ticks++
	for _, rr := range rep.Routes {
		sum.BytesMoved += rr.Bytes
	}
	sum.Archived += rep.Outcomes[sweeper.OutcomeArchived]
	fmt.Fprintf(out, "  sweep tick %2d: executor %3d/%d done | scanned %3d: resident %3d, waiting %3d, archived %3d\n",
		sum.Ticks, done, invocations, scanned(rep), rep.Outcomes[sweeper.OutcomeResident],
		rep.Outcomes[sweeper.OutcomeWaiting], rep.Outcomes[sweeper.OutcomeArchived])
}

func payload(a oplog.AgentID, i int) []byte { return fmt.Appendf(nil, "%s step %d", a.Name, i) }

// invoke is one ephemeral invocation: entries in one to three writes, the registration hook, and a
// teardown drain unless it is lost.
func invoke(ctx context.Context, stack *oplog.Stack, reg *schedule.Registrar, inv invocation) error {
	time.Sleep(inv.think) // the agent's own work, so that the sweep runs while invocations are live
	next := 1
	for next <= inv.entries {
		n := min(inv.entries-next+1, 1+inv.entries/3)
		batch := make([]oplog.Entry, n)
		for i := range batch {
			batch[i] = oplog.Entry{Index: oplog.Index(next + i), Payload: payload(inv.agent, next+i)}
		}
		if err := stack.Append(ctx, inv.agent, oplog.Ephemeral, batch); err != nil {
			return err
		}
		next += n
	}
	if _, err := reg.RegisterArchiveIfNeeded(ctx, inv.agent, oplog.Ephemeral, schedule.StatusExited, oplog.Index(inv.entries)); err != nil {
		return err
	}
	if inv.lost {
		return nil
	}
	_, err := stack.Drain(ctx, inv.agent, oplog.Ephemeral)
	return err
}

func strandedLeft(ctx context.Context, stack *oplog.Stack, invs []invocation) (int, error) {
	level1 := stack.Archives()[0]
	n := 0
	for _, inv := range invs {
		_, ok, err := level1.LastIndex(ctx, inv.agent, oplog.Ephemeral)
		if err != nil {
			return 0, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

func verify(ctx context.Context, stack *oplog.Stack, inv invocation) error {
	entries, err := stack.Read(ctx, inv.agent, oplog.Ephemeral, 1, inv.entries+10)
	if err != nil {
		return err
	}
	if len(entries) != inv.entries {
		return fmt.Errorf("read %d entries, wrote %d", len(entries), inv.entries)
	}
	for i, e := range entries {
		if e.Index != oplog.Index(i+1) || string(e.Payload) != string(payload(inv.agent, i+1)) {
			return fmt.Errorf("entry %d is index %d %q", i+1, e.Index, e.Payload)
		}
	}
	archives := stack.Archives()
	if _, ok, err := archives[0].LastIndex(ctx, inv.agent, oplog.Ephemeral); err != nil || ok {
		return fmt.Errorf("still in compressed level 1 (%v)", err)
	}
	// Everything is in the blob store, the bottom layer, and reads back from it alone.
	blob := archives[len(archives)-1]
	last, ok, err := blob.LastIndex(ctx, inv.agent, oplog.Ephemeral)
	if err != nil || !ok || last != oplog.Index(inv.entries) {
		return fmt.Errorf("the blob store's last index is %d (%v, %v), want %d", last, ok, err, inv.entries)
	}
	return nil
}

func scanned(rep sweeper.Report) int {
	n := 0
	for _, rr := range rep.Routes {
		n += rr.Scanned
	}
	return n
}
