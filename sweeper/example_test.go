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
	level1, _ := archive.NewCompressed(st, 1)
	bottom, _ := archive.NewBlob(blobs, 0)
	stack, _ := oplog.NewStack(oplog.NewPrimary(st), level1, bottom)

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
