package indexedstorage_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
)

// gated counts the Appends running inside it and holds each until the test opens the gate.
type gated struct {
	*memory.Store
	entered chan struct{}
	gate    chan struct{}
	running atomic.Int64
	maxSeen atomic.Int64
}

func (g *gated) Append(ctx context.Context, ns, key string, id uint64, value []byte) error {
	n := g.running.Add(1)
	for m := g.maxSeen.Load(); n > m && !g.maxSeen.CompareAndSwap(m, n); m = g.maxSeen.Load() {
	}
	g.entered <- struct{}{}
	<-g.gate
	g.running.Add(-1)
	return g.Store.Append(ctx, ns, key, id, value)
}

func TestLimit_BoundsConcurrentOperationsAcrossCallers(t *testing.T) {
	const limit, callers = 3, 10
	inner := &gated{Store: memory.New(), entered: make(chan struct{}, callers), gate: make(chan struct{})}
	lim := is.Limit(inner, limit)
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() { errs <- lim.Append(t.Context(), "ns", "k"+string(rune('a'+i)), 1, nil) })
	}
	for range limit {
		<-inner.entered
	}
	// With the first three inside and held, the other seven must be queued in the limiter.
	for lim.Stats().Waiting != callers-limit {
		select {
		case <-inner.entered:
			t.Fatalf("an operation beyond the limit of %d started", limit)
		default:
		}
		time.Sleep(time.Millisecond)
	}
	if got := inner.running.Load(); got != limit {
		t.Fatalf("%d operations running, want %d", got, limit)
	}
	close(inner.gate)
	go func() {
		for range inner.entered {
		}
	}()
	wg.Wait()
	close(errs)
	close(inner.entered)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := lim.Stats()
	if inner.maxSeen.Load() != limit || st.MaxInFlight != limit || st.Acquired != callers || st.InFlight != 0 {
		t.Fatalf("max running %d, stats %+v; want max %d and %d acquisitions", inner.maxSeen.Load(), st, limit, callers)
	}
	if st.WaitTotal <= 0 {
		t.Fatalf("seven callers queued but the recorded wait is %v", st.WaitTotal)
	}
}

func TestLimit_WaitCutByDeadlineIsTransientAndRunsNothing(t *testing.T) {
	inner := &gated{Store: memory.New(), entered: make(chan struct{}, 2), gate: make(chan struct{})}
	lim := is.Limit(inner, 1)
	done := make(chan error)
	go func() { done <- lim.Append(context.Background(), "ns", "held", 1, nil) }()
	<-inner.entered
	ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	err := lim.Append(ctx, "ns", "queued", 1, nil)
	if !errors.Is(err, is.ErrTransient) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued past its deadline: %v, want transient deadline", err)
	}
	close(inner.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ok, _ := lim.Exists(t.Context(), "ns", "queued"); ok {
		t.Fatal("the operation that never got a slot was run anyway")
	}
}

func TestLimit_ForwardsCapabilitiesAndClose(t *testing.T) {
	st := memory.New()
	lim := is.Limit(st, 2)
	if !is.CapabilitiesOf(lim).OrderedScan {
		t.Fatal("Limit hid the inner storage's capabilities")
	}
	if lim.Unwrap() != is.Storage(st) {
		t.Fatal("Unwrap does not return the inner storage")
	}
	if err := lim.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Exists(t.Context(), "ns", "k"); !errors.Is(err, is.ErrClosed) {
		t.Fatalf("Close did not reach the inner storage: %v", err)
	}
}
