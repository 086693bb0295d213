package sidecar

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/stratalog/strata/archive"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// CollectedLevels are the blob levels whose packed segments the collector walks: the stack
// archive.DefaultStack builds has one blob level, 0.
var CollectedLevels = []int{0}

// CollectAll runs archive.CollectSegments for every mode and every level of CollectedLevels, in turn,
// and returns each run's report. An error ends it with the reports so far, the failed run's last.
func CollectAll(ctx context.Context, st is.Storage, blobs archive.BlobStore, opts archive.CollectOptions) ([]archive.CollectReport, error) {
	var reports []archive.CollectReport
	for _, mode := range oplog.Modes {
		for _, level := range CollectedLevels {
			r, err := archive.CollectSegments(ctx, st, blobs, mode, level, opts)
			reports = append(reports, r)
			if err != nil {
				return reports, err
			}
		}
	}
	return reports, nil
}

// collectWindowIntervals is how many intervals back from the grace a collector run after the first
// looks: a segment is read by a few runs after it crosses the grace, whatever the runs missed.
const collectWindowIntervals = 3

// collectLoop runs CollectAll every blob.gc_interval (never when it is 0) until ctx ends, logging what
// each run found and counting it. A run under way when ctx ends is cut at its next storage call, which
// is safe: a segment is removed by one call, after it was judged an orphan, and a run cut before that
// call leaves it to the next run.
func (s *Sidecar) collectLoop(ctx context.Context) {
	interval := s.cfg.Blob.GCInterval
	if interval <= 0 {
		return
	}
	ticks := s.collectTicks
	if ticks == nil {
		t := time.NewTicker(interval)
		defer t.Stop()
		ticks = t.C
	}
	// The first run looks at every segment past the grace (orphans of the time the sidecar was down
	// included); later runs at those that crossed it within the last few intervals (Window).
	var window time.Duration
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		s.expireAll(ctx)
		reports, err := CollectAll(ctx, s.storage, s.blobs, archive.CollectOptions{Grace: s.cfg.Blob.GCGrace, Now: s.now, Window: window})
		if err == nil {
			window = collectWindowIntervals * interval
		}
		s.recordCollect(ctx, reports, err)
		if s.afterCollect != nil {
			s.afterCollect(reports, err)
		}
	}
}

// expireAll removes the archived oplogs older than blob.retention (when set) from the packed blob level
// of every mode (archive.Packed.Expire), before the collector's run; what it found is logged and
// counted. Its failure is logged and the next run tries again: nothing younger is lost by a run cut
// short (config refuses a retention without the packed layout).
func (s *Sidecar) expireAll(ctx context.Context) {
	retention := s.cfg.Blob.Retention
	layers := s.stack.Layers()
	packed, ok := layers[len(layers)-1].(*archive.Packed)
	if retention <= 0 || !ok {
		return
	}
	log := s.log.With("component", "retention")
	for _, mode := range oplog.Modes {
		r, err := packed.Expire(ctx, layers[:len(layers)-1], mode, archive.ExpireOptions{
			Retention: retention, Grace: s.cfg.Blob.GCGrace, Now: s.now})
		level := slog.LevelDebug
		if r.Expired > 0 {
			level = slog.LevelInfo
		}
		if len(r.Failed) > 0 {
			level = slog.LevelWarn
		}
		log.Log(ctx, level, "retention", "mode", mode, "examined", r.Examined, "expired", r.Expired, "chunks", r.Chunks,
			"young", r.Young, "above", r.Above, "failed", r.Failed, "segments_removed", r.Segments.Removed)
		if s.gcMetrics != nil {
			s.gcMetrics.expired.Add(ctx, int64(r.Expired), metric.WithAttributes(attribute.String("mode", string(mode))))
		}
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("retention run failed; the next collector run tries again", "mode", mode, "err", err)
			}
			return
		}
	}
}

// recordCollect logs one collector run's reports (a line per mode and level that found anything to
// act on or to worry about) and counts them.
func (s *Sidecar) recordCollect(ctx context.Context, reports []archive.CollectReport, err error) {
	log := s.log.With("component", "gc")
	for _, r := range reports {
		level := slog.LevelDebug
		if r.Removed > 0 || r.PutBack > 0 || len(r.Corrupt) > 0 || len(r.Failed) > 0 {
			level = slog.LevelInfo
		}
		if len(r.Corrupt) > 0 || len(r.Failed) > 0 {
			level = slog.LevelWarn
		}
		log.Log(ctx, level, "segment collector", "mode", r.Mode, "level", r.Level, "examined", r.Examined,
			"young", r.Young, "referenced", r.Referenced, "removed", r.Removed, "removed_bytes", r.RemovedBytes,
			"corrupt", r.Corrupt, "failed", r.Failed, "put_back", r.PutBack, "foreign", r.Foreign)
		if s.gcMetrics != nil {
			mode := metric.WithAttributes(attribute.String("mode", string(r.Mode)))
			s.gcMetrics.removed.Add(ctx, int64(r.Removed), mode)
			s.gcMetrics.removedBytes.Add(ctx, r.RemovedBytes, mode)
			s.gcMetrics.corrupt.Record(ctx, int64(len(r.Corrupt)), mode)
		}
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
		if ctx.Err() == nil {
			log.Warn("segment collector failed; the next run starts over", "err", err)
		}
	}
	if s.gcMetrics != nil {
		s.gcMetrics.runs.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
	}
}

// gcMetrics are the collector's instruments.
type gcMetrics struct {
	runs         metric.Int64Counter
	removed      metric.Int64Counter
	removedBytes metric.Int64Counter
	corrupt      metric.Int64Gauge
	expired      metric.Int64Counter
}

func newGCMetrics(mp metric.MeterProvider) (*gcMetrics, error) {
	meter := mp.Meter("github.com/stratalog/strata/sidecar")
	m := &gcMetrics{}
	var err error
	if m.runs, err = meter.Int64Counter("strata_gc_runs",
		metric.WithDescription("Runs of the segment collector, by outcome (ok, error).")); err != nil {
		return nil, err
	}
	if m.removed, err = meter.Int64Counter("strata_gc_segments_removed",
		metric.WithDescription("Orphan packed segments the collector removed, by mode.")); err != nil {
		return nil, err
	}
	if m.removedBytes, err = meter.Int64Counter("strata_gc_removed_bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes of the orphan packed segments the collector removed, by mode.")); err != nil {
		return nil, err
	}
	if m.corrupt, err = meter.Int64Gauge("strata_gc_corrupt_segments",
		metric.WithDescription("Packed segments whose footer does not decode, by mode, as the collector's last run found them: kept, "+
			"and worth a look (strata verify).")); err != nil {
		return nil, err
	}
	if m.expired, err = meter.Int64Counter("strata_retention_expired_oplogs",
		metric.WithDescription("Archived oplogs removed whole for being older than blob.retention, by mode.")); err != nil {
		return nil, err
	}
	// Every series from start-up, at 0, as the sidecar's other counters.
	ctx := context.Background()
	for _, outcome := range []string{"ok", "error"} {
		m.runs.Add(ctx, 0, metric.WithAttributes(attribute.String("outcome", outcome)))
	}
	for _, mode := range oplog.Modes {
		attrs := metric.WithAttributes(attribute.String("mode", string(mode)))
		m.removed.Add(ctx, 0, attrs)
		m.removedBytes.Add(ctx, 0, attrs)
		m.expired.Add(ctx, 0, attrs)
	}
	return m, nil
}

// VerifyAll runs archive.Verify for every mode and every level of CollectedLevels, in turn, and
// returns each run's report. An error ends it with the reports so far, the failed run's last.
func VerifyAll(ctx context.Context, st is.Storage, blobs archive.BlobStore, opts archive.VerifyOptions) ([]archive.VerifyReport, error) {
	var reports []archive.VerifyReport
	for _, mode := range oplog.Modes {
		for _, level := range CollectedLevels {
			r, err := archive.Verify(ctx, st, blobs, mode, level, opts)
			reports = append(reports, r)
			if err != nil {
				return reports, err
			}
		}
	}
	return reports, nil
}
