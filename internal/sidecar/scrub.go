package sidecar

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/stratalog/strata/archive"
)

// scrubLoop runs VerifyAll every scrub.interval (never when it is 0) until ctx ends, within the
// scrub's byte and time budgets, logging each finding and counting them by kind: an object store that
// lost data is noticed within one interval, not by a reader months later. A run cut by its budget
// verified what it read; the next one starts over.
func (s *Sidecar) scrubLoop(ctx context.Context) {
	interval := s.cfg.Scrub.Interval
	if interval <= 0 {
		return
	}
	ticks := s.scrubTicks
	if ticks == nil {
		t := time.NewTicker(interval)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		reports, err := VerifyAll(ctx, s.storage, s.blobs, archive.VerifyOptions{Layout: s.cfg.Blob.Layout, Grace: s.cfg.Blob.GCGrace,
			Now: s.now, MaxBytes: int64(s.cfg.Scrub.MaxBytes), MaxDuration: s.cfg.Scrub.MaxDuration})
		s.recordScrub(ctx, reports, err)
		if s.afterScrub != nil {
			s.afterScrub(reports, err)
		}
	}
}

// recordScrub logs one scrub's findings (each a warning) and its summary, and counts them.
func (s *Sidecar) recordScrub(ctx context.Context, reports []archive.VerifyReport, err error) {
	log := s.log.With("component", "scrub")
	found := map[string]int64{}
	for _, r := range reports {
		for _, f := range r.Findings {
			found[f.Kind]++
			log.Warn("scrub finding", "mode", r.Mode, "level", r.Level, "kind", f.Kind, "agent", f.Agent, "where", f.Where, "detail", f.Detail)
		}
		level := slog.LevelInfo
		if len(r.Findings) > 0 {
			level = slog.LevelWarn
		}
		log.Log(ctx, level, "scrub", "mode", r.Mode, "level", r.Level, "agents", r.Agents, "chunks", r.Chunks, "objects", r.Objects,
			"bytes", r.Bytes, "truncated", r.Truncated, "findings", len(r.Findings))
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
		if ctx.Err() == nil {
			log.Warn("scrub failed; the next one starts over", "err", err)
		}
	}
	if s.scrubMetrics == nil {
		return
	}
	s.scrubMetrics.runs.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
	for _, kind := range archive.FindingKinds {
		attrs := metric.WithAttributes(attribute.String("kind", kind))
		s.scrubMetrics.findings.Add(ctx, found[kind], attrs)
		if err == nil { // a failed run did not look everywhere: the last complete one's count stands
			s.scrubMetrics.last.Record(ctx, found[kind], attrs)
		}
	}
}

// scrubMetrics are the scrub's instruments.
type scrubMetrics struct {
	runs     metric.Int64Counter
	findings metric.Int64Counter
	last     metric.Int64Gauge
}

func newScrubMetrics(mp metric.MeterProvider) (*scrubMetrics, error) {
	meter := mp.Meter("github.com/stratalog/strata/sidecar")
	m := &scrubMetrics{}
	var err error
	if m.runs, err = meter.Int64Counter("strata_scrub_runs",
		metric.WithDescription("Runs of the background scrub (scrub.interval), by outcome (ok, error).")); err != nil {
		return nil, err
	}
	if m.findings, err = meter.Int64Counter("strata_scrub_findings",
		metric.WithDescription("Findings of the scrub runs, by kind (missing, corrupt, orphaned, dangling, gap): a fault is "+
			"counted by every run that finds it.")); err != nil {
		return nil, err
	}
	if m.last, err = meter.Int64Gauge("strata_scrub_last_findings",
		metric.WithDescription("Findings of the last scrub that ran to its end, by kind: 0 when the blob layer verified clean, "+
			"and before any scrub.")); err != nil {
		return nil, err
	}
	ctx := context.Background()
	for _, outcome := range []string{"ok", "error"} {
		m.runs.Add(ctx, 0, metric.WithAttributes(attribute.String("outcome", outcome)))
	}
	// Every series from start-up, at 0 (the alert reads the gauge: 0 until a scrub finds something).
	for _, kind := range archive.FindingKinds {
		m.findings.Add(ctx, 0, metric.WithAttributes(attribute.String("kind", kind)))
		m.last.Record(ctx, 0, metric.WithAttributes(attribute.String("kind", kind)))
	}
	return m, nil
}
