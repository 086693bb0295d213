package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
	"github.com/stratalog/strata/oplog/schedule/scheduletest"
)

var t0 = time.UnixMilli(1_800_000_000_000)

// clock is a test clock moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newStack(t *testing.T) (*oplog.Stack, *memory.Store) {
	t.Helper()
	st := memory.New()
	stack, err := archive.DefaultStack(st, memory.NewBlobStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return stack, st
}

// newScheduler is a scheduler of every bucket.
func newScheduler(t *testing.T, store schedule.Store, h schedule.Handler, cfg schedule.Config) *schedule.Scheduler {
	t.Helper()
	s, err := schedule.NewScheduler(store, h, func() []oplog.BucketRange { return scheduletest.All }, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func appendN(t *testing.T, stack *oplog.Stack, agent oplog.AgentID, mode oplog.Mode, from, n int) {
	t.Helper()
	var entries []oplog.Entry
	for i := from; i < from+n; i++ {
		entries = append(entries, oplog.Entry{Index: oplog.Index(i), Payload: []byte(fmt.Sprint(i))})
	}
	if err := stack.Append(t.Context(), agent, mode, entries); err != nil {
		t.Fatal(err)
	}
}

// The durable route's switch takes durable rows off the commit path while it is on, and only durable
// ones; turning it off brings them back, and the ephemeral switch never touches them.
func TestRegistrar_DurableRowsOnlyWhileTheDurableRouteIsOff(t *testing.T) {
	store := memory.NewScheduleStore()
	sweepOn, durableOn := false, true
	r := &schedule.Registrar{Store: store, SweepEnabled: func() bool { return sweepOn },
		DurableSweepEnabled: func() bool { return durableOn }, ArchiveInterval: time.Hour, Now: func() time.Time { return t0 }}
	eph := oplog.AgentID{Component: "c", Name: "eph"}
	dur := oplog.AgentID{Component: "c", Name: "dur"}
	ctx := t.Context()
	if wrote, err := r.RegisterArchiveIfNeeded(ctx, dur, oplog.Durable, schedule.StatusIdle, 3); wrote || err != nil {
		t.Fatalf("durable with the durable route on: wrote %v, %v", wrote, err)
	}
	if wrote, err := r.RegisterArchiveIfNeeded(ctx, eph, oplog.Ephemeral, schedule.StatusIdle, 3); !wrote || err != nil {
		t.Fatalf("ephemeral with the sweep off and the durable route on: wrote %v, %v", wrote, err)
	}
	if rows, _ := store.Rows(ctx); len(rows) != 1 || rows[0].Action.Mode != oplog.Ephemeral {
		t.Fatalf("rows with the durable route on: %+v", rows)
	}
	durableOn, sweepOn = false, true
	if wrote, err := r.RegisterArchiveIfNeeded(ctx, dur, oplog.Durable, schedule.StatusExited, 4); !wrote || err != nil {
		t.Fatalf("durable with the durable route off: wrote %v, %v", wrote, err)
	}
	rows, _ := store.Rows(ctx)
	if len(rows) != 2 || rows[1].Action != (schedule.ArchiveOplog{Agent: dur, Mode: oplog.Durable, LastIndex: 4}) {
		t.Fatalf("rows after turning the durable route off: %+v", rows)
	}
}

func TestRegistrar_EphemeralRowsOnlyWhileSweepIsDisabled(t *testing.T) {
	store := memory.NewScheduleStore()
	enabled := true
	r := &schedule.Registrar{Store: store, SweepEnabled: func() bool { return enabled }, ArchiveInterval: time.Hour,
		Now: func() time.Time { return t0 }}
	eph := oplog.AgentID{Component: "c", Name: "eph"}
	dur := oplog.AgentID{Component: "c", Name: "dur"}
	ctx := t.Context()

	for _, status := range []schedule.Status{schedule.StatusIdle, schedule.StatusFailed, schedule.StatusExited} {
		if wrote, err := r.RegisterArchiveIfNeeded(ctx, eph, oplog.Ephemeral, status, 3); wrote || err != nil {
			t.Fatalf("ephemeral %s with the sweep enabled: wrote %v, %v", status, wrote, err)
		}
		if wrote, err := r.RegisterArchiveIfNeeded(ctx, dur, oplog.Durable, status, 3); !wrote || err != nil {
			t.Fatalf("durable %s: wrote %v, %v", status, wrote, err)
		}
	}
	if wrote, _ := r.RegisterArchiveIfNeeded(ctx, dur, oplog.Durable, schedule.StatusRunning, 3); wrote {
		t.Fatal("a running agent was registered")
	}
	// Idle, Failed and Exited at one last index register one action three times: one row.
	rows, _ := store.Rows(ctx)
	if len(rows) != 1 {
		t.Fatalf("%d rows with the sweep enabled, want the durable one", len(rows))
	}
	for _, row := range rows {
		if row.Action.Mode != oplog.Durable || !row.DueAt.Equal(t0.Add(time.Hour)) || row.Bucket != dur.Bucket() {
			t.Fatalf("row %+v", row)
		}
	}

	enabled = false
	if wrote, err := r.RegisterArchiveIfNeeded(ctx, eph, oplog.Ephemeral, schedule.StatusIdle, 9); !wrote || err != nil {
		t.Fatalf("ephemeral with the sweep disabled: wrote %v, %v", wrote, err)
	}
	rows, _ = store.Rows(ctx)
	if len(rows) != 2 || rows[1].Action != (schedule.ArchiveOplog{Agent: eph, Mode: oplog.Ephemeral, LastIndex: 9}) {
		t.Fatalf("rows after disabling the sweep: %+v", rows)
	}
}

func TestArchiveHandler_IgnoresGoneAndMovedOnOplogs(t *testing.T) {
	stack, _ := newStack(t)
	store := memory.NewScheduleStore()
	h := &schedule.ArchiveHandler{Stack: stack, Store: store}
	agent := oplog.AgentID{Component: "c", Name: "a"}
	ctx := t.Context()

	out, err := h.Handle(ctx, schedule.Row{Action: schedule.ArchiveOplog{Agent: agent, Mode: oplog.Durable, LastIndex: 5}})
	if err != nil || out != schedule.OutcomeGone {
		t.Fatalf("gone oplog: %s %v", out, err)
	}
	appendN(t, stack, agent, oplog.Durable, 1, 10)
	out, err = h.Handle(ctx, schedule.Row{Action: schedule.ArchiveOplog{Agent: agent, Mode: oplog.Durable, LastIndex: 5}})
	if err != nil || out != schedule.OutcomeMovedOn {
		t.Fatalf("stale last index: %s %v", out, err)
	}
	if last, _, _ := stack.Primary().LastIndex(ctx, agent, oplog.Durable); last != 10 {
		t.Fatalf("a moved-on row archived anyway: primary ends at %d", last)
	}
}

func TestArchiveHandler_ArchivesOneHopAndRegistersTheNext(t *testing.T) {
	stack, _ := newStack(t)
	store := memory.NewScheduleStore()
	h := &schedule.ArchiveHandler{Stack: stack, Store: store}
	agent := oplog.AgentID{Component: "c", Name: "a"}
	ctx := t.Context()
	appendN(t, stack, agent, oplog.Durable, 1, 10)
	row := schedule.Row{DueAt: t0, Bucket: agent.Bucket(), Action: schedule.ArchiveOplog{Agent: agent, Mode: oplog.Durable, LastIndex: 10}}

	out, err := h.Handle(ctx, row)
	if err != nil || out != schedule.OutcomeNextHop {
		t.Fatalf("first hop: %s %v", out, err)
	}
	if _, ok, _ := stack.Primary().LastIndex(ctx, agent, oplog.Durable); ok {
		t.Fatal("the primary still holds entries after the first hop")
	}
	if last, _, _ := stack.Archives()[0].LastIndex(ctx, agent, oplog.Durable); last != 10 {
		t.Fatalf("compressed layer ends at %d after the first hop", last)
	}
	rows, _ := store.Rows(ctx)
	if len(rows) != 1 || rows[0].Action != row.Action || rows[0].Bucket != agent.Bucket() {
		t.Fatalf("next-hop rows: %+v", rows)
	}
	out, err = h.Handle(ctx, rows[0])
	if err != nil || out != schedule.OutcomeArchived {
		t.Fatalf("second hop: %s %v", out, err)
	}
	if last, _, _ := stack.Archives()[1].LastIndex(ctx, agent, oplog.Durable); last != 10 {
		t.Fatalf("blob layer ends at %d", last)
	}
	if rows, _ := store.Rows(ctx); len(rows) != 1 {
		t.Fatalf("a drained oplog registered another row: %+v", rows)
	}
	entries, err := stack.Read(ctx, agent, oplog.Durable, 1, 100)
	if err != nil || len(entries) != 10 {
		t.Fatalf("read back %d entries, %v", len(entries), err)
	}
}

func TestScheduler_RunsDueRowsToTheBottomLayer(t *testing.T) {
	stack, _ := newStack(t)
	store := memory.NewScheduleStore()
	clk := &clock{now: t0}
	reg := &schedule.Registrar{Store: store, ArchiveInterval: time.Minute, Now: clk.Now}
	h := &schedule.ArchiveHandler{Stack: stack, Store: store}
	sched := newScheduler(t, store, h.Run, schedule.Config{Owner: "me", Now: clk.Now})
	ctx := t.Context()
	var agents []oplog.AgentID
	for i := range 6 {
		a := oplog.AgentID{Component: "c", Name: fmt.Sprint("agent-", i)}
		agents = append(agents, a)
		appendN(t, stack, a, oplog.Durable, 1, 5+i)
		if _, err := reg.RegisterArchiveIfNeeded(ctx, a, oplog.Durable, schedule.StatusIdle, oplog.Index(5+i)); err != nil {
			t.Fatal(err)
		}
	}
	if tally, _ := sched.RunOnce(ctx); tally.Claimed != 0 {
		t.Fatalf("claimed %d rows before they were due", tally.Claimed)
	}
	clk.Advance(time.Minute)
	for range 10 {
		if _, err := sched.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if c, _ := store.Counts(ctx, t0); c != (schedule.Counts{}) {
		t.Fatalf("rows left: %+v", c)
	}
	for i, a := range agents {
		last, ok, _ := stack.Archives()[1].LastIndex(ctx, a, oplog.Durable)
		if !ok || last != oplog.Index(5+i) {
			t.Fatalf("%s: blob layer ends at %d", a, last)
		}
	}
}

func TestScheduler_FailingHandlerBacksOffThenFails(t *testing.T) {
	store := memory.NewScheduleStore()
	clk := &clock{now: t0}
	calls := 0
	failing := func(context.Context, schedule.Row) error { calls++; return errors.New("storage is down") }
	cfg := schedule.Config{Owner: "me", Now: clk.Now, MaxAttempts: 3, BackoffBase: time.Second, BackoffMax: time.Minute}
	sched := newScheduler(t, store, failing, cfg)
	ctx := t.Context()
	if _, err := store.Register(ctx, schedule.NewRow{DueAt: t0, Action: schedule.ArchiveOplog{Agent: oplog.AgentID{Component: "c", Name: "a"}, Mode: oplog.Durable, LastIndex: 1}}); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		advance time.Duration
		tally   schedule.Tally
	}{
		{0, schedule.Tally{Claimed: 1, Retried: 1}},
		{999 * time.Millisecond, schedule.Tally{}}, // inside the 1 s backoff
		{time.Millisecond, schedule.Tally{Claimed: 1, Retried: 1}},
		{time.Second, schedule.Tally{}}, // inside the 2 s backoff
		{time.Second, schedule.Tally{Claimed: 1, Failed: 1}},
		{time.Hour, schedule.Tally{}}, // failed for good
	}
	for i, w := range want {
		clk.Advance(w.advance)
		got, err := sched.RunOnce(ctx)
		if err != nil || got != w.tally {
			t.Fatalf("round %d: %+v %v, want %+v", i, got, err, w.tally)
		}
	}
	if calls != 3 {
		t.Fatalf("handler ran %d times, want 3", calls)
	}
	if c, _ := store.Counts(ctx, t0); c != (schedule.Counts{Failed: 1}) {
		t.Fatalf("counts %+v", c)
	}
}

func TestRetryDelay(t *testing.T) {
	for attempts, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 10: time.Minute, 100: time.Minute} {
		if got := schedule.RetryDelay(attempts, time.Second, time.Minute); got != want {
			t.Fatalf("RetryDelay(%d) = %v, want %v", attempts, got, want)
		}
	}
}

func TestAction_RoundTripAndRejectsGarbage(t *testing.T) {
	a := schedule.ArchiveOplog{Agent: oplog.AgentID{Component: "c", Name: "x:y/z %"}, Mode: oplog.Ephemeral, LastIndex: 42}
	data, err := schedule.MarshalAction(a)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := schedule.UnmarshalAction(data); err != nil || got != a {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, bad := range []string{`{`, `{"kind":"other"}`, `{"kind":"archive_oplog","component":"c","name":"n","mode":"bogus"}`,
		`{"kind":"archive_oplog","component":"a:b","name":"n","mode":"durable"}`} {
		if _, err := schedule.UnmarshalAction([]byte(bad)); err == nil {
			t.Fatalf("accepted %s", bad)
		}
	}
}
