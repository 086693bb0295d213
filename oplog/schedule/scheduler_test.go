package schedule_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
	"github.com/stratalog/strata/oplog/schedule/scheduletest"
)

func registerOne(t *testing.T, store schedule.Store) {
	t.Helper()
	row := schedule.NewRow{DueAt: t0, Action: schedule.ArchiveOplog{Agent: oplog.AgentID{Component: "c", Name: "a"}, Mode: oplog.Durable, LastIndex: 1}}
	if _, err := store.Register(t.Context(), row); err != nil {
		t.Fatal(err)
	}
}

func TestConfig_ValidateNamesTheFieldTheValueAndTheRange(t *testing.T) {
	ok := schedule.Config{Owner: "me"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("zero fields take the defaults: %v", err)
	}
	for _, c := range []struct {
		set  func(*schedule.Config)
		want string
	}{
		{func(c *schedule.Config) { c.Lease = 2 * time.Nanosecond }, "schedule lease 2ns: want 0 (the default) or from 1s to 24h0m0s"},
		{func(c *schedule.Config) { c.Lease = 25 * time.Hour }, "schedule lease 25h0m0s: want 0 (the default) or from 1s to 24h0m0s"},
		{func(c *schedule.Config) { c.Lease = -time.Second }, "schedule lease -1s"},
		{func(c *schedule.Config) { c.PollInterval = time.Millisecond }, "schedule poll_interval 1ms: want 0 (the default) or from 10ms to 1h0m0s"},
		{func(c *schedule.Config) { c.Concurrency = 1 << 40 }, "schedule concurrency 1099511627776: want 0 (the default) or from 1 to 1024"},
		{func(c *schedule.Config) { c.Concurrency = -1 }, "schedule concurrency -1"},
		{func(c *schedule.Config) { c.MaxAttempts = 1001 }, "schedule max_attempts 1001: want 0 (the default) or from 1 to 1000"},
		{func(c *schedule.Config) { c.BackoffMax = 1 << 62 }, "schedule backoff_max"},
		{func(c *schedule.Config) { c.BackoffBase = time.Microsecond }, "schedule backoff_base 1µs"},
		{func(c *schedule.Config) { c.ShutdownGrace = 2 * time.Hour }, "schedule shutdown_grace 2h0m0s: want a negative value (none), 0 (the default) or up to 1h0m0s"},
		{func(c *schedule.Config) { c.Owner = "" }, "schedule owner is empty"},
	} {
		cfg := ok
		c.set(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("Validate = %v; want %q", err, c.want)
		}
	}
	for _, r := range []schedule.Range[time.Duration]{schedule.LeaseRange, schedule.PollIntervalRange, schedule.BackoffRange} {
		if r.Min <= 0 || r.Max < r.Min {
			t.Errorf("range %v allows a duration that divides or ticks to nothing", r)
		}
	}
}

// A lease of 2 ns used to pass, and then the lease renewal's time.NewTicker(lease/3) panicked in a
// goroutine and took the process down.
func TestNewScheduler_RefusesALeaseThatWouldTickToNothing(t *testing.T) {
	store := memory.NewScheduleStore()
	registerOne(t, store)
	handler := func(context.Context, schedule.Row) error { return nil }
	s, err := schedule.NewScheduler(store, handler, func() []oplog.BucketRange { return scheduletest.All },
		schedule.Config{Owner: "me", Lease: 2 * time.Nanosecond, Now: func() time.Time { return t0 }}, nil)
	if err == nil {
		s.RunOnce(t.Context()) // what used to panic
		t.Fatal("NewScheduler accepted a lease of 2ns")
	}
	if !strings.Contains(err.Error(), "lease 2ns") {
		t.Fatalf("error %q does not name the lease", err)
	}
}

// Run's rows keep running after its context is cancelled, for the grace, and Run waits for them.
func TestScheduler_RowsUnderWayFinishWithinTheShutdownGrace(t *testing.T) {
	store := memory.NewScheduleStore()
	registerOne(t, store)
	started, proceed := make(chan struct{}), make(chan struct{})
	var errAfterCancel error
	finished := make(chan struct{})
	handler := func(ctx context.Context, _ schedule.Row) error {
		close(started)
		<-proceed
		errAfterCancel = ctx.Err()
		close(finished)
		return nil
	}
	s := newScheduler(t, store, handler, schedule.Config{Owner: "me", ShutdownGrace: time.Hour, Now: func() time.Time { return t0 }})
	ctx, cancel := context.WithCancel(t.Context())
	returned := make(chan struct{})
	go func() {
		s.Run(ctx)
		close(returned)
	}()
	<-started
	cancel()
	close(proceed)
	<-returned
	select {
	case <-finished:
	default:
		t.Fatal("Run returned before the row under way finished")
	}
	if errAfterCancel != nil {
		t.Fatalf("the row's context was cancelled with Run's (%v); want it running for the grace", errAfterCancel)
	}
	if c, _ := store.Counts(t.Context(), t0); c != (schedule.Counts{}) {
		t.Fatalf("counts %+v; want the finished row acknowledged", c)
	}
}

// A row still running when the grace elapses is cut, Run returns, and the row is left to its lease: not
// released (which would count an attempt and, on the last one, fail it), and run again later.
func TestScheduler_ShutdownGraceCutsARowThatDoesNotFinish(t *testing.T) {
	store := memory.NewScheduleStore()
	registerOne(t, store)
	clk := &clock{now: t0}
	started, cutBy := make(chan struct{}), make(chan error, 1)
	blackHoled := func(ctx context.Context, _ schedule.Row) error {
		close(started)
		<-ctx.Done() // a store that never answers
		cutBy <- context.Cause(ctx)
		return ctx.Err()
	}
	s := newScheduler(t, store, blackHoled, schedule.Config{Owner: "me", MaxAttempts: 1, ShutdownGrace: time.Nanosecond, Now: clk.Now})
	ctx, cancel := context.WithCancel(t.Context())
	returned := make(chan struct{})
	go func() {
		s.Run(ctx)
		close(returned)
	}()
	<-started
	cancel()
	select {
	case <-returned:
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after its context was cancelled: the shutdown waits on a row that never finishes")
	}
	select {
	case cause := <-cutBy:
		if !errors.Is(cause, schedule.ErrShutdownGrace) {
			t.Fatalf("the row was cancelled by %v; want the shutdown grace", cause)
		}
	default:
		t.Fatal("Run returned before the row it cut had returned")
	}

	rows, _ := store.Rows(t.Context())
	if len(rows) != 1 || rows[0].Failed || rows[0].LeaseOwner != "me" {
		t.Fatalf("rows after the cut: %+v; want the row still leased to me, not failed", rows)
	}
	clk.Advance(schedule.DefaultLease + time.Millisecond)
	ok := func(context.Context, schedule.Row) error { return nil }
	other := newScheduler(t, store, ok, schedule.Config{Owner: "other", Now: clk.Now})
	if tally, err := other.RunOnce(t.Context()); err != nil || tally != (schedule.Tally{Claimed: 1, Succeeded: 1}) {
		t.Fatalf("after the lease expired: %+v %v; want the cut row claimed and run again", tally, err)
	}
}

func TestScheduler_RunOnceLeavesACancelledRowToItsLease(t *testing.T) {
	store := memory.NewScheduleStore()
	registerOne(t, store)
	ctx, cancel := context.WithCancel(t.Context())
	h := func(ctx context.Context, _ schedule.Row) error { cancel(); return ctx.Err() }
	s := newScheduler(t, store, h, schedule.Config{Owner: "me", MaxAttempts: 1, Now: func() time.Time { return t0 }})
	if tally, err := s.RunOnce(ctx); err != nil || tally != (schedule.Tally{Claimed: 1, Cut: 1}) {
		t.Fatalf("%+v %v; want the row counted as cut", tally, err)
	}
	if c, _ := store.Counts(t.Context(), t0); c != (schedule.Counts{Pending: 1}) {
		t.Fatalf("counts %+v; want the row pending, not failed", c)
	}
}
