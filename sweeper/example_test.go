package sweeper_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
	"github.com/stratalog/strata/sweeper"
)

// An executor embedding strata: it builds the layer stack over its own storage, takes the registration
// hook on its commit path (which writes nothing for an ephemeral agent while the sweep is on), and runs
// the sweep in-process with its own residency and shard callbacks. The invocation's teardown drain is
// lost; the sweep finds the stranded oplog and archives it.
func Example_embeddedExecutor() {
	ctx := context.Background()

	// Storage: any indexedstorage.Storage (backends.Open picks one from a URL) and a blob store.
	st, blobs := memory.New(), memory.NewBlobStore()
	stack, err := archive.DefaultStack(st, blobs, nil)
	if err != nil {
		fmt.Println(err)
		return
	}

	// The executor's own state: which agents it runs, and one switch for the sweep.
	var mu sync.Mutex
	running := map[oplog.AgentID]bool{}
	sweepOn := true
	registrar := &schedule.Registrar{
		Store:           memory.NewScheduleStore(),
		SweepEnabled:    func() bool { return sweepOn },
		ArchiveInterval: 24 * time.Hour,
	}

	// An ephemeral invocation: a fresh agent writes its entries, ends, and its teardown drain is lost.
	agent := oplog.AgentID{Component: "shop", Name: "cart-42"}
	mu.Lock()
	running[agent] = true
	mu.Unlock()
	_ = stack.Append(ctx, agent, oplog.Ephemeral, []oplog.Entry{
		{Index: 1, Payload: []byte("add item")},
		{Index: 2, Payload: []byte("checkout")},
	})
	wrote, _ := registrar.RegisterArchiveIfNeeded(ctx, agent, oplog.Ephemeral, schedule.StatusExited, 2)
	fmt.Println("scheduled row on the commit path:", wrote)
	mu.Lock()
	delete(running, agent)
	mu.Unlock()

	// The sweep, in-process.
	cfg := sweeper.DefaultConfig()
	cfg.Interval = sweeper.MinInterval
	drained := make(chan oplog.AgentID, 1)
	sw, err := sweeper.New(cfg, stack, sweeper.Options{
		Residency: func(a oplog.AgentID) bool { mu.Lock(); defer mu.Unlock(); return running[a] },
		Shards: func() (sweeper.Assignment, bool) {
			return sweeper.Assignment{ShardCount: 1, Shards: []int{0}}, true
		},
		OnDrained: func(a oplog.AgentID, _ oplog.Mode) { drained <- a },
		// One sweep in one process has no fleet to stagger against: tick at once.
		FirstTickJitter: func() float64 { return 0 },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- sw.Run(runCtx) }()
	fmt.Println("archived by the sweep:", (<-drained).Key())
	stop()
	<-done

	entries, _ := stack.Read(ctx, agent, oplog.Ephemeral, 1, 10)
	for _, e := range entries {
		fmt.Printf("entry %d: %s\n", e.Index, e.Payload)
	}
	// Output:
	// scheduled row on the commit path: false
	// archived by the sweep: shop:cart-42
	// entry 1: add item
	// entry 2: checkout
}

// agentMutexes is an executor's per-agent lock: its workers and its own size-triggered archiving hold
// an agent's mutex while they write or move it, and the durable route takes it through TryLock.
type agentMutexes struct {
	mu    sync.Mutex
	locks map[oplog.AgentID]*sync.Mutex
}

func newAgentMutexes() *agentMutexes { return &agentMutexes{locks: map[oplog.AgentID]*sync.Mutex{}} }

func (l *agentMutexes) get(a oplog.AgentID) *sync.Mutex {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.locks[a] == nil {
		l.locks[a] = &sync.Mutex{}
	}
	return l.locks[a]
}

func (l *agentMutexes) TryLock(_ context.Context, a oplog.AgentID, _ oplog.Mode) (func(), bool, error) {
	m := l.get(a)
	if !m.TryLock() {
		return nil, false, nil // busy: the sweep declines and asks again on a later pass
	}
	return m.Unlock, true, nil
}

// The durable route, for an executor that embeds strata: durable agents are swept too, so no durable
// commit path registers a row either. It needs the executor's Locker, its idle signal (LastActive,
// from memory) and OnDrained; the Registrar's DurableSweepEnabled is wired to the sweep's switch, so
// that turning the route off brings the rows back.
func Example_durableRoute() {
	ctx := context.Background()
	st, blobs := memory.New(), memory.NewBlobStore()
	stack, err := archive.DefaultStack(st, blobs, nil)
	if err != nil {
		fmt.Println(err)
		return
	}

	locks := newAgentMutexes()
	var mu sync.Mutex
	lastActive := map[oplog.AgentID]time.Time{}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC) // the executor's clock, here a fixed one

	cfg := sweeper.DefaultConfig() // durable_min_idle: 24 h
	drained := make(chan oplog.AgentID, 1)
	sw, err := sweeper.New(cfg, stack, sweeper.Options{
		Shards: func() (sweeper.Assignment, bool) {
			return sweeper.Assignment{ShardCount: 1, Shards: []int{0}}, true
		},
		DurableRoute: true,
		Locker:       locks,
		LastActive: func(a oplog.AgentID) (time.Time, bool) {
			mu.Lock()
			defer mu.Unlock()
			t, ok := lastActive[a]
			return t, ok
		},
		OnDrained: func(a oplog.AgentID, _ oplog.Mode) { drained <- a },
		Now:       func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	registrar := &schedule.Registrar{
		Store:               memory.NewScheduleStore(),
		SweepEnabled:        func() bool { return cfg.Enabled },
		DurableSweepEnabled: sw.DurableRouteOn,
		ArchiveInterval:     cfg.DurableMinIdle,
	}

	// A durable agent runs, under its lock, and goes idle.
	agent := oplog.AgentID{Component: "crm", Name: "account-7"}
	m := locks.get(agent)
	m.Lock()
	_ = stack.Append(ctx, agent, oplog.Durable, []oplog.Entry{{Index: 1, Payload: []byte("opened")}, {Index: 2, Payload: []byte("renewed")}})
	mu.Lock()
	lastActive[agent] = now
	mu.Unlock()
	m.Unlock()
	wrote, _ := registrar.RegisterArchiveIfNeeded(ctx, agent, oplog.Durable, schedule.StatusIdle, 2)
	fmt.Println("scheduled row on the commit path:", wrote)

	rep := sw.SweepOnce(ctx)
	fmt.Println("within the idle age:", rep.Outcomes[sweeper.OutcomeActive], "active")

	mu.Lock()
	now = now.Add(25 * time.Hour) // a day later, untouched
	mu.Unlock()
	sw.SweepOnce(ctx) // first sighting
	sw.SweepOnce(ctx) // unchanged across two passes: drained under the lock
	fmt.Println("archived by the durable route:", (<-drained).Key())
	entries, _ := stack.Read(ctx, agent, oplog.Durable, 1, 10)
	for _, e := range entries {
		fmt.Printf("entry %d: %s\n", e.Index, e.Payload)
	}
	// Output:
	// scheduled row on the commit path: false
	// within the idle age: 1 active
	// archived by the durable route: crm:account-7
	// entry 1: opened
	// entry 2: renewed
}
