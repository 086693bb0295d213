package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/backoff"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
)

// executor simulates an agent executor: closed-loop workers run invocations back to back. An
// invocation thinks (the agent's own work), writes its entries to the oplog, takes the registration
// hook on its commit path, and — for an ephemeral agent — starts a detached teardown drain that is lost
// with some probability. Latency is measured from the start to the end of the commit path.
type executor struct {
	stack     *oplog.Stack
	registrar *schedule.Registrar
	rec       *recorder
	think     time.Duration
	entries   int
	loseRate  float64
	run       string

	mu       sync.Mutex
	resident map[oplog.AgentID]bool
	agents   []written
	active   map[oplog.AgentID]time.Time // when each agent last wrote: the durable route's idle signal

	locks sync.Map // oplog.AgentID → *sync.Mutex: an invocation holds its agent's while it commits

	seq     atomic.Int64
	lost    atomic.Int64
	errs    atomic.Int64
	drains  sync.WaitGroup
	lastErr atomic.Value
}

// written is what an invocation left in the oplog, for the read-back check.
type written struct {
	agent   oplog.AgentID
	mode    oplog.Mode
	entries int
}

func newExecutor(stack *oplog.Stack, reg *schedule.Registrar, think time.Duration, entries int, loseRate float64, run string) *executor {
	return &executor{stack: stack, registrar: reg, rec: &recorder{}, think: think, entries: entries, loseRate: loseRate,
		run: run, resident: map[oplog.AgentID]bool{}, active: map[oplog.AgentID]time.Time{}}
}

// isResident is the sweep's residency callback: the agents whose invocation is under way.
func (e *executor) isResident(a oplog.AgentID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.resident[a]
}

func (e *executor) setResident(a oplog.AgentID, on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if on {
		e.resident[a] = true
	} else {
		delete(e.resident, a)
	}
}

// lock is the agent's mutex, which the invocation holds while it commits and the durable route takes
// through TryLock.
func (e *executor) lock(a oplog.AgentID) *sync.Mutex {
	m, _ := e.locks.LoadOrStore(a, &sync.Mutex{})
	return m.(*sync.Mutex)
}

// TryLock is the executor's sweeper.Locker.
func (e *executor) TryLock(_ context.Context, a oplog.AgentID, _ oplog.Mode) (func(), bool, error) {
	m := e.lock(a)
	if !m.TryLock() {
		return nil, false, nil
	}
	return m.Unlock, true, nil
}

// lastActive is the durable route's idle signal: when the agent last wrote, from memory.
func (e *executor) lastActive(a oplog.AgentID) (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.active[a]
	return t, ok
}

// work runs invocations of mode until ctx ends.
func (e *executor) work(ctx context.Context, mode oplog.Mode, rng *rand.Rand) {
	for ctx.Err() == nil {
		e.invoke(ctx, mode, rng.Float64() < e.loseRate)
	}
}

func (e *executor) invoke(ctx context.Context, mode oplog.Mode, loseTeardown bool) {
	n := e.seq.Add(1)
	agent := oplog.AgentID{Component: "chaos-" + string(mode), Name: fmt.Sprintf("%s/%07d", e.run, n)}
	start := time.Now()
	e.setResident(agent, true)
	time.Sleep(e.think)
	entries := make([]oplog.Entry, e.entries)
	for i := range entries {
		entries[i] = oplog.Entry{Index: oplog.Index(i + 1), Payload: payload(agent, i+1)}
	}
	// The commit path runs under the agent's lock: the durable route drains an agent only under it.
	m := e.lock(agent)
	m.Lock()
	defer m.Unlock()
	e.mu.Lock()
	e.active[agent] = time.Now()
	e.mu.Unlock()
	// Work is never abandoned: a slow store makes the invocation slow, it does not drop it, so the
	// read-back check can demand every entry. The context only ends with the run.
	if err := retry(ctx, func() error {
		err := e.stack.Append(context.WithoutCancel(ctx), agent, mode, entries)
		if errors.Is(err, is.ErrConflict) {
			// A retry after a lost reply meets its own write: the entries are there.
			if last, ok, lerr := e.stack.LastIndex(context.WithoutCancel(ctx), agent, mode); lerr == nil && ok && last == oplog.Index(e.entries) {
				return nil
			}
		}
		return err
	}); err != nil {
		e.fail(err)
		return
	}
	e.mu.Lock()
	e.agents = append(e.agents, written{agent: agent, mode: mode, entries: e.entries})
	e.mu.Unlock()
	status := schedule.StatusIdle
	if mode == oplog.Ephemeral {
		status = schedule.StatusExited
	}
	if err := retry(ctx, func() error {
		_, err := e.registrar.RegisterArchiveIfNeeded(context.WithoutCancel(ctx), agent, mode, status, oplog.Index(e.entries))
		return err
	}); err != nil {
		e.fail(err)
	}
	e.rec.add(sample{start: start, latency: time.Since(start), durable: mode == oplog.Durable})
	if mode == oplog.Durable {
		e.setResident(agent, false)
		return
	}
	if loseTeardown {
		e.lost.Add(1)
		e.setResident(agent, false)
		return
	}
	// The teardown drain is detached: the invocation has returned.
	e.drains.Go(func() {
		defer e.setResident(agent, false)
		if _, err := e.stack.Drain(context.Background(), agent, mode); err != nil {
			e.fail(err)
		}
	})
}

// strand runs n invocations at once, without think time or measurement, all losing their teardown:
// the backlog a crashed executor leaves.
func (e *executor) strand(ctx context.Context, n int) {
	think := e.think
	e.think = 0
	var wg sync.WaitGroup
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	for range 8 {
		wg.Go(func() {
			for range jobs {
				e.invoke(ctx, oplog.Ephemeral, true)
			}
		})
	}
	wg.Wait()
	e.think, e.rec = think, &recorder{} // setup, not measured
}

func (e *executor) fail(err error) {
	e.errs.Add(1)
	e.lastErr.Store(err)
}

func (e *executor) written() []written {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]written(nil), e.agents...)
}

func payload(a oplog.AgentID, i int) []byte { return fmt.Appendf(nil, "%s#%d", a.Name, i) }

// retry retries a storage call that failed while the run goes on: under an injected fault a pool may
// time out, and the executor's invocation waits rather than losing its work.
func retry(ctx context.Context, op func() error) error {
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = op(); err == nil || ctx.Err() != nil {
			return err
		}
		if backoff.Wait(ctx, 100*time.Millisecond) != nil {
			return err // the run ended while waiting
		}
	}
	return err
}
