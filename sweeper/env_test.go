package sweeper_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
)

// probe wraps the storage under the stack: it counts reads per key and pages, can return every key of a
// page twice (as Redis SCAN may), add latency, and run a hook on each page.
type probe struct {
	is.Storage
	mu         sync.Mutex
	lasts      map[string]int
	pages      int
	duplicate  bool
	latency    time.Duration
	onPage     func(n int)
	afterLast  func(key string, n int) // after the n-th read of key's last entry returns
	beforeLast func(key string)        // as a read of key's last entry begins
	afterRead  func(key string)        // after a read of one of key's entries (Closest) returns
	noPageIDs  bool                    // pages carry no last ids: the sweep must read each key
	// stamped: pages carry no last ids but a stamp of each key's index (is.Page.Stamps), as multi-file
	// SQLite's do; the stamp is the index's last id, read past the count, so it is equal exactly while
	// the index is unchanged.
	stamped   bool
	unvouched map[string]bool // keys a stamped page gives an empty stamp ("cannot tell")
}

// Last and LastID count as reads of key's last entry alike.
func (p *probe) Last(ctx context.Context, ns, key string) (e is.Entry, ok bool, err error) {
	err = p.readLast(ctx, ns, key, func() (err error) { e, ok, err = p.Storage.Last(ctx, ns, key); return })
	return e, ok, err
}

func (p *probe) LastID(ctx context.Context, ns, key string) (id uint64, ok bool, err error) {
	err = p.readLast(ctx, ns, key, func() (err error) { id, ok, err = p.Storage.LastID(ctx, ns, key); return })
	return id, ok, err
}

func (p *probe) Closest(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, error) {
	e, ok, err := p.Storage.Closest(ctx, ns, key, id)
	p.mu.Lock()
	after := p.afterRead
	p.mu.Unlock()
	if after != nil {
		after(key)
	}
	return e, ok, err
}

// readLast counts the reads of the sweep's source layers only: the blob index's last ids are the
// archive's step 2 in the target, not the gate's.
func (p *probe) readLast(ctx context.Context, ns, key string, read func() error) error {
	p.mu.Lock()
	if !strings.Contains(ns, "/blobindex/") {
		p.lasts[key]++
	}
	lat, n, after, before := p.latency, p.lasts[key], p.afterLast, p.beforeLast
	p.mu.Unlock()
	if before != nil {
		before(key)
	}
	if err := sleep(ctx, lat); err != nil {
		return err
	}
	err := read()
	if after != nil {
		after(key, n)
	}
	return err
}

func (p *probe) ScanStable(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	p.mu.Lock()
	p.pages++
	n, dup, lat, hook, noIDs, stamped := p.pages, p.duplicate, p.latency, p.onPage, p.noPageIDs, p.stamped
	p.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	if err := sleep(ctx, lat); err != nil {
		return is.Page{}, err
	}
	page, err := p.Storage.ScanStable(ctx, ns, r, from, count)
	if noIDs || stamped {
		page.LastIDs = nil
	}
	if stamped && err == nil {
		page.Stamps = make([]string, len(page.Keys))
		for i, k := range page.Keys {
			id, ok, err := p.Storage.LastID(ctx, ns, k)
			if err != nil {
				return is.Page{}, err
			}
			p.mu.Lock()
			unvouched := p.unvouched[k]
			p.mu.Unlock()
			if ok && !unvouched {
				page.Stamps[i] = fmt.Sprint("last ", id)
			}
		}
	}
	if dup {
		var twice []string
		var ids []uint64
		for i, k := range page.Keys {
			twice = append(twice, k, k)
			if page.LastIDs != nil {
				ids = append(ids, page.LastIDs[i], page.LastIDs[i])
			}
		}
		page.Keys, page.LastIDs = twice, ids
	}
	return page, err
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (p *probe) lastsOf(a oplog.AgentID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lasts[a.StoredKey()]
}

func (p *probe) set(fn func(p *probe)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(p)
}

// env is a sweep over a default stack (primary → compressed-1 → blob-0) on memory storage.
type env struct {
	t     *testing.T
	st    *probe
	blobs *memory.BlobStore
	stack *oplog.Stack
	sw    *sweeper.Sweeper
	logs  *bytes.Buffer

	mu       sync.Mutex
	resident map[oplog.AgentID]bool
	assign   sweeper.Assignment
	assigned bool
	drained  map[oplog.AgentID]int
}

type envOption func(*env, *sweeper.Options, *[]oplog.Layer)

// withCompressedLevels puts n compressed levels above the blob layer.
func withCompressedLevels(n int) envOption {
	return func(e *env, _ *sweeper.Options, archives *[]oplog.Layer) {
		*archives = e.defaultArchives(n)
	}
}

// defaultArchives are the archive layers of archive.DefaultStack with levels compressed levels, for an
// option to wrap before the env builds its stack.
func (e *env) defaultArchives(levels int) []oplog.Layer {
	e.t.Helper()
	stack, err := archive.DefaultStack(e.st, e.blobs, &archive.StackOptions{CompressedLevels: levels})
	if err != nil {
		e.t.Fatal(err)
	}
	return stack.Archives()
}

func withOptions(fn func(*sweeper.Options)) envOption {
	return func(_ *env, o *sweeper.Options, _ *[]oplog.Layer) { fn(o) }
}

func newEnv(t *testing.T, cfg sweeper.Config, opts ...envOption) *env {
	t.Helper()
	return newEnvOn(t, memory.New(), cfg, opts...)
}

func newEnvOn(t *testing.T, st is.Storage, cfg sweeper.Config, opts ...envOption) *env {
	t.Helper()
	e := &env{t: t, st: &probe{Storage: st, lasts: map[string]int{}}, blobs: memory.NewBlobStore(), logs: &bytes.Buffer{},
		resident: map[oplog.AgentID]bool{}, assign: sweeper.Assignment{ShardCount: 1, Shards: []int{0}}, assigned: true,
		drained: map[oplog.AgentID]int{}}
	archives := e.defaultArchives(1)
	o := sweeper.Options{
		Residency: func(a oplog.AgentID) bool { e.mu.Lock(); defer e.mu.Unlock(); return e.resident[a] },
		Shards:    func() (sweeper.Assignment, bool) { e.mu.Lock(); defer e.mu.Unlock(); return e.assign, e.assigned },
		OnDrained: func(a oplog.AgentID, _ oplog.Mode) { e.mu.Lock(); defer e.mu.Unlock(); e.drained[a]++ },
		Logger:    slog.New(slog.NewTextHandler(&lockedWriter{w: e.logs}, nil)),
		// Run ticks at once: the tests that run it wait for its ticks, not for a stagger.
		FirstTickJitter: func() float64 { return 0 },
	}
	for _, opt := range opts {
		opt(e, &o, &archives)
	}
	stack, err := oplog.NewStack(oplog.NewPrimary(e.st), archives...)
	if err != nil {
		t.Fatal(err)
	}
	e.stack = stack
	if e.sw, err = sweeper.New(cfg, stack, o); err != nil {
		t.Fatal(err)
	}
	return e
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func config() sweeper.Config {
	c := sweeper.DefaultConfig()
	c.Interval = time.Second
	return c
}

func (e *env) setResident(a oplog.AgentID, on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.resident[a] = on
}

func (e *env) setAssignment(a sweeper.Assignment, known bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.assign, e.assigned = a, known
}

func (e *env) drainedCount(a oplog.AgentID) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.drained[a]
}

func agent(name string) oplog.AgentID { return oplog.AgentID{Component: "shop", Name: name} }

// strand writes entries from..from+n-1 of an ephemeral agent into compressed level 1, as an executor
// whose teardown drain was lost leaves them.
func (e *env) strand(a oplog.AgentID, from, n int) {
	e.t.Helper()
	var entries []oplog.Entry
	for i := from; i < from+n; i++ {
		entries = append(entries, oplog.Entry{Index: oplog.Index(i), Payload: []byte(fmt.Sprint(a.Name, "#", i))})
	}
	if err := e.stack.Append(e.t.Context(), a, oplog.Ephemeral, entries); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) tick() sweeper.Report {
	e.t.Helper()
	return e.sw.SweepOnce(e.t.Context())
}

// inLayer reports whether the storage still holds the agent at compressed level 1.
func (e *env) inLayer(a oplog.AgentID) bool {
	e.t.Helper()
	ok, err := e.st.Storage.Exists(e.t.Context(), oplog.CompressedNamespace(oplog.Ephemeral, 1), a.StoredKey())
	if err != nil {
		e.t.Fatal(err)
	}
	return ok
}

// requireArchived checks what moved: the agent is gone from compressed level 1, its chunks are in the
// blob layer, and a reader gets back exactly 1..n.
func (e *env) requireArchived(a oplog.AgentID, n int) {
	e.t.Helper()
	if e.inLayer(a) {
		e.t.Fatalf("%s is still in compressed level 1", a)
	}
	layers := e.stack.Layers()
	bottom := layers[len(layers)-1]
	if _, found, err := bottom.LastIndex(e.t.Context(), a, oplog.Ephemeral); err != nil || !found {
		e.t.Fatalf("%s has no chunk in the blob layer (%v)", a, err)
	}
	e.requireReadable(a, n)
}

// requireStranded checks nothing moved: the agent is still in compressed level 1 and nowhere below.
func (e *env) requireStranded(a oplog.AgentID, n int) {
	e.t.Helper()
	if !e.inLayer(a) {
		e.t.Fatalf("%s left compressed level 1", a)
	}
	e.requireReadable(a, n)
}

func (e *env) requireReadable(a oplog.AgentID, n int) {
	e.t.Helper()
	e.requireReadableIn(a, oplog.Ephemeral, n)
}

// requireReadableIn checks a reader of the agent's oplog of mode gets back exactly entries 1..n.
func (e *env) requireReadableIn(a oplog.AgentID, mode oplog.Mode, n int) {
	e.t.Helper()
	entries, err := e.stack.Read(e.t.Context(), a, mode, 1, n+10)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(entries) != n {
		e.t.Fatalf("%s: read %d entries, want %d", a, len(entries), n)
	}
	for i, en := range entries {
		if en.Index != oplog.Index(i+1) || string(en.Payload) != fmt.Sprint(a.Name, "#", i+1) {
			e.t.Fatalf("%s: entry %d is %d %q", a, i, en.Index, en.Payload)
		}
	}
}
