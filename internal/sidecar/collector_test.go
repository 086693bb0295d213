package sidecar

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/config"
	"github.com/stratalog/strata/oplog"
)

// putOrphan writes a segment that no index row points into, made age before now.
func putOrphan(t *testing.T, s *Sidecar, mode oplog.Mode, now time.Time, age time.Duration) string {
	t.Helper()
	chunk, err := archive.EncodeChunk([]oplog.Entry{{Index: 1, Payload: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	data, _, err := archive.EncodeSegment([]archive.SegmentChunk{{Key: "k", Chunk: chunk}})
	if err != nil {
		t.Fatal(err)
	}
	path := archive.SegmentPath(mode, 0, now.Add(-age), 1)
	if err := s.blobs.Put(t.Context(), path, data); err != nil {
		t.Fatal(err)
	}
	return path
}

// blockingList is a blob store whose List, once armed, says it was entered and waits for its context.
type blockingList struct {
	archive.BlobStore
	entered chan struct{}
}

func (b *blockingList) List(ctx context.Context, prefix string) ([]string, error) {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// Each tick of blob.gc_interval runs the collector over every mode: orphans past blob.gc_grace go,
// younger ones stay, and the run is counted.
func TestCollectLoop_RemovesOrphansPastTheGraceEveryTick(t *testing.T) {
	s, _, clk := testSidecar(t, func(c *config.Config) { c.Blob.GCInterval, c.Blob.GCGrace = time.Minute, time.Hour })
	old := putOrphan(t, s, oplog.Ephemeral, clk.Now(), 2*time.Hour)
	oldDurable := putOrphan(t, s, oplog.Durable, clk.Now(), 2*time.Hour)
	young := putOrphan(t, s, oplog.Ephemeral, clk.Now(), time.Minute)
	ticks := make(chan time.Time)
	runs := make(chan []archive.CollectReport)
	s.collectTicks = ticks
	s.afterCollect = func(r []archive.CollectReport, err error) {
		if err != nil {
			t.Error(err)
		}
		runs <- r
	}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.collectLoop(ctx); close(done) }()
	defer func() { stop(); <-done }()

	ticks <- clk.Now()
	reports := <-runs
	if len(reports) != len(oplog.Modes) {
		t.Fatalf("%d reports, want one per mode", len(reports))
	}
	removed := 0
	for _, r := range reports {
		removed += r.Removed
	}
	if removed != 2 {
		t.Fatalf("reports %+v, want the two old orphans removed", reports)
	}
	left, err := s.blobs.List(t.Context(), "")
	if err != nil || !slices.Equal(left, []string{young}) {
		t.Fatalf("blobs left %q (%v), want only %s (not %s, %s)", left, err, young, old, oldDurable)
	}
}

// blob.gc_interval = 0 runs no collector: the loop returns at once.
func TestCollectLoop_OffAtZeroInterval(t *testing.T) {
	s, _, clk := testSidecar(t, func(c *config.Config) { c.Blob.GCInterval = 0 })
	orphan := putOrphan(t, s, oplog.Ephemeral, clk.Now(), 48*time.Hour)
	s.collectLoop(t.Context()) // returns, or the test hangs
	if left, _ := s.blobs.List(t.Context(), ""); !slices.Equal(left, []string{orphan}) {
		t.Fatalf("blobs left %q, want the orphan untouched", left)
	}
}

// Shutdown cuts a collector run under way and Serve returns only once the loop has: the run blocked in
// the blob store's List ends with its context.
func TestServe_StopsTheCollectorCleanlyOnShutdown(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Storage.URL = "sqlite://" + dir + "/strata.db"
	cfg.Schedule.URL = cfg.Storage.URL
	cfg.Blob.URL = "fs://" + dir + "/blobs"
	cfg.Blob.GCInterval = time.Minute
	s, err := Open(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	blocking := &blockingList{BlobStore: s.blobs, entered: make(chan struct{}, 1)}
	s.blobs = blocking
	ticks := make(chan time.Time)
	s.collectTicks = ticks
	finished := make(chan error, 1)
	s.afterCollect = func(_ []archive.CollectReport, err error) { finished <- err }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()

	ticks <- time.Now()
	<-blocking.entered // the run is inside List
	stop()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	select {
	case err := <-finished:
		if err == nil {
			t.Fatal("the cut run reported no error")
		}
	default:
		t.Fatal("Serve returned before the collector's run ended")
	}
}

// With blob.retention set, each collector run removes the archived oplogs older than it, whole, and
// keeps the younger ones and any a layer above still holds.
func TestCollectLoop_ExpiresArchivedOplogsOlderThanTheRetention(t *testing.T) {
	s, _, clk := testSidecar(t, func(c *config.Config) {
		c.Blob.GCInterval, c.Blob.GCGrace, c.Blob.Retention = time.Minute, time.Hour, 24*time.Hour
	})
	old, stranded := strand(t, s, "old", 5), strand(t, s, "stranded", 3)
	if _, err := s.stack.Drain(t.Context(), old, oplog.Ephemeral); err != nil {
		t.Fatal(err)
	}
	ticks := make(chan time.Time)
	runs := make(chan error)
	s.collectTicks = ticks
	s.afterCollect = func(_ []archive.CollectReport, err error) { runs <- err }
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.collectLoop(ctx); close(done) }()
	defer func() { stop(); <-done }()

	ticks <- clk.Now()
	if err := <-runs; err != nil {
		t.Fatal(err)
	}
	readBack(t, s, old, 5) // a day has not passed
	clk.Advance(25 * time.Hour)
	young := strand(t, s, "young", 4)
	if _, err := s.stack.Drain(t.Context(), young, oplog.Ephemeral); err != nil {
		t.Fatal(err)
	}
	ticks <- clk.Now()
	if err := <-runs; err != nil {
		t.Fatal(err)
	}
	readBack(t, s, old, 0)
	readBack(t, s, stranded, 3) // never archived: the compressed level is not subject to retention
	if left, err := s.blobs.List(t.Context(), archive.SegmentsPrefix(oplog.Ephemeral, 0)); err != nil || len(left) != 1 {
		t.Fatalf("segments left %q (%v), want only the young agent's", left, err)
	}
}
