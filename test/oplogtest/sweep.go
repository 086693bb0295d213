package oplogtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
)

// callCounter counts the operations that reach a storage, by operation.
type CallCounter struct {
	mu    sync.Mutex
	calls map[is.Operation]int
}

func (c *CallCounter) Wrap(st is.Storage) is.Storage {
	c.calls = map[is.Operation]int{}
	return is.Intercept(st, func(ctx context.Context, op is.Operation, do func(context.Context) error) error {
		c.mu.Lock()
		c.calls[op]++
		c.mu.Unlock()
		return do(ctx)
	})
}

func (c *CallCounter) Reset() map[is.Operation]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = map[is.Operation]int{}
	return out
}

// sweepRig is a sweeper over a default stack on some storage, owning the single shard.
type SweepRig struct {
	*Layers
	Sweeper     *sweeper.Sweeper
	Resident    sync.Map    // oplog.AgentID → bool
	AllResident atomic.Bool // every agent is resident, whatever Resident holds
	Drained     atomic.Int64
}

func NewSweepRig(t testing.TB, st is.Storage, cfg sweeper.Config) *SweepRig {
	t.Helper()
	return NewSweepRigOn(t, NewLayers(t, st, nil), cfg)
}

// NewSweepRigOn is NewSweepRig over layers the test already has.
func NewSweepRigOn(t testing.TB, l *Layers, cfg sweeper.Config) *SweepRig {
	t.Helper()
	return NewSweepRigOwning(t, l, cfg, sweeper.Assignment{ShardCount: 1, Shards: []int{0}})
}

// NewSweepRigOwning is NewSweepRigOn with the shards of assign instead of the single one: one of a
// fleet of sidecars over the same storage.
func NewSweepRigOwning(t testing.TB, l *Layers, cfg sweeper.Config, assign sweeper.Assignment) *SweepRig {
	t.Helper()
	r := &SweepRig{Layers: l}
	sw, err := sweeper.New(cfg, r.Stack, sweeper.Options{
		Residency: func(a oplog.AgentID) bool {
			_, ok := r.Resident.Load(a)
			return ok || r.AllResident.Load()
		},
		Shards:    func() (sweeper.Assignment, bool) { return assign, true },
		OnDrained: func(oplog.AgentID, oplog.Mode) { r.Drained.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Sweeper = sw
	return r
}

// strandAgents writes n ephemeral agents of entries each into compressed level 1.
func (r *SweepRig) StrandAgents(t testing.TB, prefix string, n, entries int) []oplog.AgentID {
	t.Helper()
	agents := make([]oplog.AgentID, n)
	for i := range agents {
		agents[i] = AgentNamed(fmt.Sprintf("%s-%05d", prefix, i))
		if err := r.Stack.Append(t.Context(), agents[i], oplog.Ephemeral, EntriesRange(1, entries)); err != nil {
			t.Fatal(err)
		}
	}
	return agents
}

// SweepConfig is the default sweep configuration with a one-second interval.
func SweepConfig() sweeper.Config {
	c := sweeper.DefaultConfig()
	c.Interval = time.Second
	return c
}
