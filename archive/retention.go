package archive

import (
	"context"
	"errors"
	"fmt"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// ExpireOptions configures one Packed.Expire run.
type ExpireOptions struct {
	// Retention is how long an archived oplog is kept (blob.retention): one whose newest chunk's
	// segment is older than it is removed. It must be > 0.
	Retention time.Duration
	// Grace is the collector's (blob.gc_grace): the segments the removed rows pointed into that are
	// older than it are collected at once (CollectSegments' rule, row by row); younger ones are left
	// to the collector. It must be > 0.
	Grace time.Duration
	// Now is the clock (time.Now when nil), read once at the start of the run.
	Now func() time.Time
	// DryRun finds what would expire and removes nothing.
	DryRun bool
}

// ExpireReport is what one Expire run found and did. Every agent of the blob index examined is counted
// in exactly one of Expired, Young, Above, Moved and Failed.
type ExpireReport struct {
	Mode     oplog.Mode `json:"mode"`
	Level    int        `json:"level"`
	DryRun   bool       `json:"dry_run,omitempty"`
	Examined int        `json:"examined"`
	// Expired oplogs had every row removed (would have, in a dry run); Chunks counts those rows.
	Expired int    `json:"expired"`
	Chunks  uint64 `json:"chunks"`
	// Young oplogs have a chunk newer than the retention; Above ones still have entries in a layer
	// above the blob level (their archive is not whole, or the agent is writing again); Moved ones got
	// a newer chunk during the run. All are kept.
	Young int `json:"young"`
	Above int `json:"above"`
	Moved int `json:"moved"`
	// Failed lists the agents kept because a row did not decode or names no segment this layer writes
	// (its age cannot be known): a foreign writer's or a corrupt row, which strata verify reports.
	Failed []string `json:"failed,omitempty"`
	// Segments is what became of the segments the expired rows pointed into (CollectSegments' counts;
	// none in a dry run).
	Segments CollectReport `json:"segments"`
}

// Expire removes the archived oplogs of mode whose newest chunk is older than opts.Retention (its
// segment's name says when it was written): DESIGN §14's retention. An oplog expires whole or not at
// all: one that any layer above still holds entries of is kept (its archive is not whole, or it is
// being written again), and the rows go in one DropPrefix up to the last row read, so a reader sees
// all of them or none, and a chunk a drain adds meanwhile stays. Rows go first, then the segments they
// pointed into, each removed when no row points into it any more (the collector's check): a crash in
// between leaves an orphan that strata gc removes. The compressed levels are never subject to it.
func (p *Packed) Expire(ctx context.Context, above []oplog.Layer, mode oplog.Mode, opts ExpireOptions) (ExpireReport, error) {
	report := ExpireReport{Mode: mode, Level: p.level, DryRun: opts.DryRun}
	report.Segments = CollectReport{Mode: mode, Level: p.level, DryRun: opts.DryRun}
	if opts.Retention <= 0 || opts.Grace <= 0 {
		return report, fmt.Errorf("expire: %w: a retention of %v and a grace of %v, both must be > 0",
			is.ErrInvalidArgument, opts.Retention, opts.Grace)
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	start := now()
	cutoff, graceCutoff := start.Add(-opts.Retention), start.Add(-opts.Grace)
	ns := oplog.BlobIndexNamespace(mode, p.level)
	segments := map[string]bool{} // the segments expired rows pointed into
	err := walkAgents(ctx, p, mode, func(key string) error {
		report.Examined++
		agent, err := oplog.ParseStoredKey(key)
		if err != nil {
			report.Failed = append(report.Failed, key)
			return nil
		}
		kept, err := p.expireOne(ctx, above, agent, mode, cutoff, opts.DryRun, segments, &report)
		if err != nil {
			return fmt.Errorf("expire %s: %w", agent, err)
		}
		if kept != nil {
			*kept++
		}
		return nil
	})
	if err != nil || opts.DryRun {
		return report, err // a dry run removed no row, so every segment is still referenced
	}
	for path := range segments {
		if _, _, created, ok := ParseSegmentPath(path); !ok || !created.Before(graceCutoff) {
			report.Segments.Young++
			continue
		}
		report.Segments.Examined++
		if err := collectSegment(ctx, p.st, p.store, ns, path, opts.DryRun, &report.Segments); err != nil {
			return report, fmt.Errorf("expire: collect %s: %w", path, err)
		}
	}
	return report, nil
}

// expireOne removes agent's rows when its newest chunk is older than cutoff and no layer above holds
// it, adding the segments they pointed into to segments; it returns the report's counter to add the
// agent to when it is kept (nil when it expired or failed).
func (p *Packed) expireOne(ctx context.Context, above []oplog.Layer, agent oplog.AgentID, mode oplog.Mode, cutoff time.Time,
	dryRun bool, segments map[string]bool, report *ExpireReport) (kept *int, err error) {
	ns, key := oplog.BlobIndexNamespace(mode, p.level), agent.StoredKey()
	newest, found, err := p.st.Last(ctx, ns, key)
	if err != nil {
		return nil, err
	}
	if !found {
		return &report.Moved, nil // gone since the walk listed it: an erasure, another run
	}
	ref, err := DecodeSegmentRef(newest.Value, oplog.Index(newest.ID))
	_, _, created, dated := ParseSegmentPath(ref.Segment)
	if err != nil || !dated {
		report.Failed = append(report.Failed, agent.Key())
		return nil, nil
	}
	if !created.Before(cutoff) {
		return &report.Young, nil
	}
	for _, l := range above {
		if _, ok, err := l.LastIndex(ctx, agent, mode); err != nil || ok {
			return &report.Above, err
		}
	}
	rows, err := p.st.Read(ctx, ns, key, 1, newest.ID)
	if err != nil {
		return nil, err
	}
	// Read after the layers above: a drain that moved the last entries down before they were looked
	// at added its rows by now, and the oplog is not expired.
	if n := len(rows); n == 0 || rows[n-1].ID != newest.ID {
		return &report.Moved, nil
	}
	if last, _, err := p.st.LastID(ctx, ns, key); err != nil || last != newest.ID {
		return &report.Moved, err
	}
	for _, row := range rows {
		if ref, err := DecodeSegmentRef(row.Value, oplog.Index(row.ID)); err == nil && !segments[ref.Segment] {
			segments[ref.Segment] = true
			// Where compaction moved it, if it did: that segment may hold nothing live any more either.
			if to, err := movedTo(ctx, p.st, mode, p.level, ref.Segment); err == nil {
				segments[to] = true
			}
		}
	}
	report.Expired++
	if dryRun {
		report.Chunks += uint64(len(rows))
		return nil, nil
	}
	dropped, err := p.st.DropPrefix(ctx, ns, key, newest.ID)
	if err != nil {
		report.Expired--
		return nil, err
	}
	report.Chunks += dropped
	return nil, nil
}

// walkAgents calls fn with every stored key of layer's scan namespace of mode: the buckets' ranges and,
// for a layer that can walk any range, the keys outside them (a foreign writer's). A page's unreadable
// keys are skipped; fn's error ends the walk.
func walkAgents(ctx context.Context, layer oplog.Layer, mode oplog.Mode, fn func(key string) error) error {
	type part func(from is.Resume) (is.Page, error)
	parts := []part{func(from is.Resume) (is.Page, error) {
		return layer.ScanAgents(ctx, mode, oplog.BucketRange{Lo: 0, Hi: oplog.Buckets}, from, walkPage)
	}}
	if rs, ok := layer.(oplog.RangeScanner); ok {
		outside := oplog.OutsideBuckets()
		parts = []part{
			func(from is.Resume) (is.Page, error) { return rs.ScanRange(ctx, mode, outside[0], from, walkPage) },
			parts[0],
			func(from is.Resume) (is.Page, error) { return rs.ScanRange(ctx, mode, outside[1], from, walkPage) },
		}
	}
	for _, scan := range parts {
		for from := (is.Resume{}); ; {
			page, err := scan(from)
			if errors.Is(err, oplog.ErrNotEnumerable) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, key := range page.Keys {
				if err := fn(key); err != nil {
					return err
				}
			}
			if page.Done {
				break
			}
			from = page.Next
		}
	}
	return nil
}

// walkPage is how many keys a page of walkAgents asks for.
const walkPage = 256
