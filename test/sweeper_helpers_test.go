package test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
)

// callCounter counts the operations that reach a storage, by operation.
type callCounter struct {
	mu    sync.Mutex
	calls map[is.Operation]int
}

func (c *callCounter) wrap(st is.Storage) is.Storage {
	c.calls = map[is.Operation]int{}
	return is.Intercept(st, func(ctx context.Context, op is.Operation, do func(context.Context) error) error {
		c.mu.Lock()
		c.calls[op]++
		c.mu.Unlock()
		return do(ctx)
	})
}

func (c *callCounter) reset() map[is.Operation]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = map[is.Operation]int{}
	return out
}

// sweepRig is a sweeper over a default stack on some storage, owning the single shard.
type sweepRig struct {
	*layers
	sw       *sweeper.Sweeper
	resident sync.Map // oplog.AgentID → bool
	drained  atomic.Int64
}

func newSweepRig(t testing.TB, st is.Storage, cfg sweeper.Config) *sweepRig {
	t.Helper()
	r := &sweepRig{layers: newLayers(t, st, nil)}
	sw, err := sweeper.New(cfg, r.stack, sweeper.Options{
		Residency: func(a oplog.AgentID) bool { _, ok := r.resident.Load(a); return ok },
		Shards:    func() (sweeper.Assignment, bool) { return sweeper.Assignment{ShardCount: 1, Shards: []int{0}}, true },
		OnDrained: func(oplog.AgentID, oplog.Mode) { r.drained.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	r.sw = sw
	return r
}

// strandAgents writes n ephemeral agents of entries each into compressed level 1.
func (r *sweepRig) strandAgents(t testing.TB, prefix string, n, entries int) []oplog.AgentID {
	t.Helper()
	agents := make([]oplog.AgentID, n)
	for i := range agents {
		agents[i] = agentNamed(fmt.Sprintf("%s-%05d", prefix, i))
		if err := r.stack.Append(t.Context(), agents[i], oplog.Ephemeral, entriesRange(1, entries)); err != nil {
			t.Fatal(err)
		}
	}
	return agents
}

// strandedCount returns how many of the agents compressed level 1 still holds.
func (r *sweepRig) strandedCount(t testing.TB, agents []oplog.AgentID) int {
	t.Helper()
	n := 0
	for _, a := range agents {
		ok, err := r.st.Exists(t.Context(), oplog.CompressedNamespace(oplog.Ephemeral, 1), a.Key())
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			n++
		}
	}
	return n
}
