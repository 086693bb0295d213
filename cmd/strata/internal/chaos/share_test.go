package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
)

// holdKey marks an operation that holds its slot until the channel it carries is closed.
type holdKey struct{}

func TestShareSlots_TheSweepsDutyCountsSlotsHeldNotTimeQueued(t *testing.T) {
	ctx := t.Context()
	inner := is.Intercept(memory.New(), func(ctx context.Context, _ is.Operation, do func(context.Context) error) error {
		if release, ok := ctx.Value(holdKey{}).(chan struct{}); ok {
			<-release
		}
		return do(ctx)
	})
	shared, sweepView, busy := shareSlots(inner, 1)
	t0 := time.Now()

	release := make(chan struct{})
	execDone, sweepDone := make(chan error, 1), make(chan error, 1)
	go func() {
		execDone <- shared.Append(context.WithValue(ctx, holdKey{}, release), "ns", "executor", 1, []byte("x"))
	}()
	waitFor(t, func() bool { return shared.Stats().InFlight == 1 })
	go func() { sweepDone <- sweepView.Append(ctx, "ns", "sweep", 1, []byte("x")) }()
	waitFor(t, func() bool { return shared.Stats().Waiting == 1 })

	// The sweep is queued behind the executor's slot: it holds nothing yet.
	if d := busy.duty(window{from: t0, to: time.Now().Add(time.Hour)}, time.Now()); d != 0 {
		t.Fatalf("duty %v while the sweep only queued", d)
	}
	close(release)
	if err := <-execDone; err != nil {
		t.Fatal(err)
	}
	if err := <-sweepDone; err != nil {
		t.Fatal(err)
	}
	busy.mu.Lock()
	spans, inFlight := len(busy.spans), busy.inFlight
	busy.mu.Unlock()
	if spans != 1 || inFlight != 0 {
		t.Fatalf("%d busy spans, %d in flight after the sweep's one operation; want 1 and 0", spans, inFlight)
	}
	// The executor's operation went through the same limiter without counting as the sweep's.
	if st := shared.Stats(); st.Acquired != 2 {
		t.Fatalf("limiter handed out %d slots, want 2", st.Acquired)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
	}
}
