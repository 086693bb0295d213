package scheduletest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
)

// claimHook is a store whose every Claim reports how many rows it handed out.
type claimHook struct {
	schedule.Store
	claimed chan<- int
}

func (h claimHook) Claim(ctx context.Context, owner string, buckets []oplog.BucketRange, now time.Time, lease time.Duration, limit int) ([]schedule.Row, error) {
	rows, err := h.Store.Claim(ctx, owner, buckets, now, lease, limit)
	h.claimed <- len(rows)
	return rows, err
}

// runSchedulers is the done-when check of issue 11: two schedulers, each on its own handle of the
// table, never run two rows of one agent at once.
func runSchedulers(t *testing.T, h Harness) {
	t.Run("TwoSchedulersNeverRunTwoRowsOfOneAgentAtOnce", func(t *testing.T) {
		first := h.New(t)
		stores := []schedule.Store{first, h.reopen(t, first)}
		const agents = 12

		// Each agent goes Idle, then Exited with no entry between (one action registered twice), then
		// runs again and goes Idle at two later last indexes: three rows per agent. Registrations come
		// agent by agent, so an agent's rows are next to each other in due order.
		var clock atomic.Int64
		clock.Store(t0.Add(-time.Hour).UnixMilli())
		reg := &schedule.Registrar{Store: first, Now: func() time.Time { return time.UnixMilli(clock.Add(1)) }}
		for a := range agents {
			id := oplog.AgentID{Component: "comp", Name: fmt.Sprint("agent-", a)}
			for _, step := range []struct {
				status schedule.Status
				last   oplog.Index
			}{{schedule.StatusIdle, 1}, {schedule.StatusExited, 1}, {schedule.StatusIdle, 2}, {schedule.StatusExited, 3}} {
				if _, err := reg.RegisterArchiveIfNeeded(t.Context(), id, oplog.Durable, step.status, step.last); err != nil {
					t.Fatal(err)
				}
			}
		}
		rows := rowsOf(t, first)
		if len(rows) != 3*agents {
			t.Fatalf("%d rows registered, want 3 per agent (Idle then Exited at one last index is one row)", len(rows))
		}

		// The schedulers run in rounds, each RunOnce of both at once. A round's handlers wait at its gate
		// until both claims have returned and every row claimed has entered its handler, so any two rows
		// of one agent claimed in a round, by either scheduler, are running at the same time: an overlap
		// is forced whenever the stores would allow one, without sleeping.
		var (
			mu       sync.Mutex
			inFlight = map[string]int{}
			overlaps []string
			runs     = map[int64]int{}
			gate     atomic.Pointer[chan struct{}]
		)
		claimed := make(chan int, 2)
		entered := make(chan struct{}, 2*schedule.DefaultConcurrency)
		handler := func(ctx context.Context, row schedule.Row) error {
			wait := *gate.Load()
			subject := row.Action.Subject()
			mu.Lock()
			inFlight[subject]++
			if n := inFlight[subject]; n > 1 {
				overlaps = append(overlaps, fmt.Sprintf("%s: %d rows at once (row %d)", subject, n, row.ID))
			}
			runs[row.ID]++
			mu.Unlock()
			entered <- struct{}{}
			<-wait
			mu.Lock()
			inFlight[subject]--
			mu.Unlock()
			return nil
		}
		var scheds []*schedule.Scheduler
		for i, st := range stores {
			s, err := schedule.NewScheduler(claimHook{st, claimed}, handler, func() []oplog.BucketRange { return All },
				schedule.Config{Owner: fmt.Sprint("scheduler-", i), Now: func() time.Time { return t0 }}, nil)
			if err != nil {
				t.Fatal(err)
			}
			scheds = append(scheds, s)
		}
		for round := 0; ; round++ {
			if round > 3*agents {
				t.Fatalf("still claiming after %d rounds", round)
			}
			g := make(chan struct{})
			gate.Store(&g)
			var wg sync.WaitGroup
			errs := make([]error, len(scheds))
			for i, s := range scheds {
				wg.Go(func() { _, errs[i] = s.RunOnce(t.Context()) })
			}
			n := <-claimed + <-claimed
			for range n {
				<-entered
			}
			close(g)
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if n == 0 {
				break
			}
		}
		if len(overlaps) > 0 {
			t.Errorf("%d overlapping runs of one agent's rows, first: %s", len(overlaps), overlaps[0])
		}
		for _, r := range rows {
			if runs[r.ID] != 1 {
				t.Errorf("row %d (%s@%d) ran %d times, want once", r.ID, r.Action.Agent, r.Action.LastIndex, runs[r.ID])
			}
		}
		if left := rowsOf(t, first); len(left) != 0 {
			t.Errorf("%d rows left: %+v", len(left), left)
		}
	})
}
