package archive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// The kinds of a verification finding (DESIGN §14).
const (
	// FindingMissing: an index row's segment (or, through moves, its chunk) is not in the blob store.
	FindingMissing = "missing"
	// FindingCorrupt: an object's bytes do not check out: a chunk whose CRC, span or decoding fails, a
	// segment whose footer does not decode (a truncated object among them).
	FindingCorrupt = "corrupt"
	// FindingOrphaned: an object nothing points to: a packed segment older than the grace into which
	// no row points, a blob under the chunk layout's prefix that is no chunk of an agent.
	FindingOrphaned = "orphaned"
	// FindingDangling: an index row that does not lead to a chunk of its own: it does not decode, points
	// past its segment's end or between its chunks, or at another agent's chunk.
	FindingDangling = "dangling"
	// FindingGap: an agent's archived indices skip some: consecutive chunks that do not meet.
	FindingGap = "gap"
)

// FindingKinds are the kinds of finding, in the order reports list them.
var FindingKinds = []string{FindingMissing, FindingCorrupt, FindingOrphaned, FindingDangling, FindingGap}

// Finding is one fault verification found: its kind, the agent it concerns (its key; "" for an object
// no agent owns), where (a blob path, an index row) and what.
type Finding struct {
	Kind   string `json:"kind"`
	Agent  string `json:"agent,omitempty"`
	Where  string `json:"where"`
	Detail string `json:"detail"`
}

// VerifyOptions configures one Verify run.
type VerifyOptions struct {
	// Layout is the blob level's layout: LayoutPacked ("" too) or LayoutChunks.
	Layout string
	// Sample is the share of agents verified, in (0, 1] (0: all). Orphans are looked for only in a full
	// run: a sample cannot say that nothing points to an object.
	Sample float64
	// Grace is the collector's (blob.gc_grace): a segment younger than it may be one whose rows are
	// still being written, and is never called an orphan. 0: DefaultSegmentGrace.
	Grace time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// MaxBytes and MaxDuration bound a run (the scrub's budget; 0: none): a run that reaches one stops
	// and says so (Truncated), having verified what it read.
	MaxBytes    int64
	MaxDuration time.Duration
}

// VerifyReport is what one Verify run of a mode's blob level read and found.
type VerifyReport struct {
	Mode      oplog.Mode `json:"mode"`
	Level     int        `json:"level"`
	Layout    string     `json:"layout"`
	Agents    int        `json:"agents"`
	Chunks    int        `json:"chunks"`
	Objects   int        `json:"objects"`
	Bytes     int64      `json:"bytes"`
	Truncated bool       `json:"truncated,omitempty"`
	Findings  []Finding  `json:"findings"`
}

// Count is how many findings of kind the report holds.
func (r VerifyReport) Count(kind string) int {
	n := 0
	for _, f := range r.Findings {
		if f.Kind == kind {
			n++
		}
	}
	return n
}

// errBudget ends a run whose byte or time budget is spent.
var errBudget = errors.New("verification budget spent")

type verifier struct {
	st     is.Storage
	blobs  BlobStore
	mode   oplog.Mode
	level  int
	opts   VerifyOptions
	start  time.Time
	report *VerifyReport
}

func (v *verifier) find(kind, agent, where, format string, args ...any) {
	v.report.Findings = append(v.report.Findings, Finding{Kind: kind, Agent: agent, Where: where, Detail: fmt.Sprintf(format, args...)})
}

// read gets a whole object, counting it against the budget first.
func (v *verifier) read(ctx context.Context, path string) ([]byte, error) {
	if v.opts.MaxDuration > 0 && v.now().Sub(v.start) >= v.opts.MaxDuration ||
		v.opts.MaxBytes > 0 && v.report.Bytes >= v.opts.MaxBytes {
		return nil, errBudget
	}
	data, err := v.blobs.Get(ctx, path)
	if err == nil {
		v.report.Objects++
		v.report.Bytes += int64(len(data))
	}
	return data, err
}

func (v *verifier) now() time.Time {
	if v.opts.Now != nil {
		return v.opts.Now()
	}
	return time.Now()
}

// sampled says whether the agent is in this run's sample.
func (v *verifier) sampled() bool {
	return v.opts.Sample <= 0 || v.opts.Sample >= 1 || rand.Float64() < v.opts.Sample
}

// Verify reads every archived chunk of mode's blob level back and checks it (DESIGN §14): in the
// packed layout through the blob index (every row's chunk read from its segment, following moves, its
// CRC, span and place checked, an agent's rows checked to meet) and every segment's footer; in the
// chunk layout through the listing (every chunk decoded, its name against its span, an agent's chunks
// checked to meet). It reports each fault as a Finding and goes on; its error is a storage error that
// ended the run (the report holds what was found until then). A run that spends its budget stops
// with Truncated set and no error.
func Verify(ctx context.Context, st is.Storage, blobs BlobStore, mode oplog.Mode, level int, opts VerifyOptions) (VerifyReport, error) {
	layout := opts.Layout
	if layout == "" {
		layout = LayoutPacked
	}
	report := VerifyReport{Mode: mode, Level: level, Layout: layout, Findings: []Finding{}}
	if opts.Sample < 0 || opts.Sample > 1 || level < 0 {
		return report, fmt.Errorf("verify: %w: sample %v, level %d", is.ErrInvalidArgument, opts.Sample, level)
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultSegmentGrace
	}
	v := &verifier{st: st, blobs: blobs, mode: mode, level: level, opts: opts, report: &report}
	v.start = v.now()
	var err error
	switch layout {
	case LayoutPacked:
		err = v.packed(ctx)
	case LayoutChunks:
		err = v.chunks(ctx)
	default:
		return report, fmt.Errorf("verify: %w: layout %q", is.ErrInvalidArgument, layout)
	}
	if errors.Is(err, errBudget) {
		report.Truncated, err = true, nil
	}
	return report, err
}

// segmentState is what the segment pass learned of one segment.
type segmentState struct {
	size    int64
	corrupt bool                 // its footer does not decode: its chunks cannot be told apart
	chunks  map[uint64]chunkSeen // by offset
	created time.Time
	dated   bool
}

type chunkSeen struct {
	chunk PackedChunk
	err   error // its bytes' check (PackedChunkBytes)
}

// packed verifies the packed layout: the segments first (each read once), then the rows.
func (v *verifier) packed(ctx context.Context) error {
	prefix := SegmentsPrefix(v.mode, v.level)
	paths, err := v.blobs.List(ctx, prefix)
	if err != nil {
		return fmt.Errorf("verify: list %s: %w", prefix, err)
	}
	segments := make(map[string]*segmentState, len(paths))
	for _, path := range paths {
		data, err := v.read(ctx, path)
		if errors.Is(err, ErrBlobNotFound) {
			continue // removed since the listing (the collector): not referenced, or rows say so below
		}
		if err != nil {
			return err
		}
		s := &segmentState{size: int64(len(data)), chunks: map[uint64]chunkSeen{}}
		_, _, s.created, s.dated = ParseSegmentPath(path)
		segments[path] = s
		chunks, err := DecodeSegment(data)
		if err != nil {
			s.corrupt = true
			v.find(FindingCorrupt, "", path, "segment of %d bytes: %v", len(data), err)
			continue
		}
		for _, c := range chunks {
			_, cerr := PackedChunkBytes(c, data[c.Offset:c.Offset+c.Length])
			s.chunks[c.Offset] = chunkSeen{chunk: c, err: cerr}
		}
	}
	referenced := map[string]bool{}
	p, err := NewPacked(v.st, v.blobs, v.level, nil)
	if err != nil {
		return err
	}
	ns := oplog.BlobIndexNamespace(v.mode, v.level)
	sampledAll := v.opts.Sample <= 0 || v.opts.Sample >= 1
	err = walkAgents(ctx, p, v.mode, func(key string) error {
		if !v.sampled() {
			return nil
		}
		rows, err := v.st.Read(ctx, ns, key, 1, is.MaxID)
		if err != nil {
			return err
		}
		if len(rows) > 0 {
			v.report.Agents++
		}
		return v.packedRows(ctx, key, rows, segments, referenced)
	})
	if err != nil {
		return err
	}
	if !sampledAll {
		return nil
	}
	cutoff := v.start.Add(-v.opts.Grace)
	for _, path := range paths {
		s, ok := segments[path]
		if !ok || referenced[path] || !s.dated || !s.created.Before(cutoff) {
			continue
		}
		// A segment compaction rewrote and has not deleted yet is referenced through its move.
		if to, err := movedTo(ctx, v.st, v.mode, v.level, path); err == nil && to != path && referenced[to] {
			continue
		}
		v.find(FindingOrphaned, "", path, "segment of %d bytes older than the grace (%v) into which no index row points", s.size, v.opts.Grace)
	}
	return nil
}

// packedRows checks one agent's index rows against the segments.
func (v *verifier) packedRows(ctx context.Context, key string, rows []is.Entry, segments map[string]*segmentState, referenced map[string]bool) error {
	agent := key
	if a, err := oplog.ParseStoredKey(key); err == nil {
		agent = a.Key()
	}
	var prevLast oplog.Index
	for i, row := range rows {
		v.report.Chunks++
		where := fmt.Sprintf("%s row %d", oplog.BlobIndexNamespace(v.mode, v.level), row.ID)
		ref, err := DecodeSegmentRef(row.Value, oplog.Index(row.ID))
		if err != nil {
			v.find(FindingDangling, agent, where, "%v", err)
			prevLast = oplog.Index(row.ID)
			continue
		}
		if i > 0 && ref.First != prevLast+1 {
			v.find(FindingGap, agent, where, "indices %d..%d are in no chunk: the chunk before ends at %d, this one starts at %d",
				prevLast+1, ref.First-1, prevLast, ref.First)
		}
		prevLast = oplog.Index(row.ID)
		at := ref
		s, ok := segments[at.Segment]
		if !ok {
			var moved, found bool
			if at, moved, found, err = followMoves(ctx, v.st, v.mode, v.level, ref); err != nil {
				v.find(FindingDangling, agent, where, "its segment's moves: %v", err)
				continue
			}
			s, ok = segments[at.Segment]
			if moved && !found {
				v.find(FindingMissing, agent, where, "segment %s was compacted without this chunk", ref.Segment)
				continue
			}
		}
		if !ok {
			v.find(FindingMissing, agent, where, "chunk %d..%d: segment %s is not in the blob store", ref.First, row.ID, at.Segment)
			continue
		}
		referenced[at.Segment] = true
		switch c, known := s.chunks[at.Offset]; {
		case s.corrupt:
			v.find(FindingCorrupt, agent, where, "chunk %d..%d: its segment %s does not decode", ref.First, row.ID, at.Segment)
		case int64(at.Offset)+int64(at.Length) > s.size:
			v.find(FindingDangling, agent, where, "chunk %d..%d at %d+%d points past the end of segment %s (%d bytes)",
				ref.First, row.ID, at.Offset, at.Length, at.Segment, s.size)
		case !known:
			v.find(FindingDangling, agent, where, "chunk %d..%d: segment %s has no chunk at offset %d", ref.First, row.ID, at.Segment, at.Offset)
		case c.chunk.Key != key || c.chunk.Last != oplog.Index(row.ID) || c.chunk.First != ref.First ||
			c.chunk.Length != at.Length || c.chunk.CRC != at.CRC:
			v.find(FindingDangling, agent, where, "chunk %d..%d: segment %s holds %q %d..%d at offset %d",
				ref.First, row.ID, at.Segment, c.chunk.Key, c.chunk.First, c.chunk.Last, at.Offset)
		case c.err != nil:
			v.find(FindingCorrupt, agent, where, "chunk %d..%d in segment %s: %v", ref.First, row.ID, at.Segment, c.err)
		}
	}
	return nil
}

// chunks verifies the chunk layout through its listing: every blob under the level's prefix is a chunk
// of an agent, decodes, holds the span its name says, and meets the agent's chunk before it.
func (v *verifier) chunks(ctx context.Context) error {
	prefix := fmt.Sprintf("%s/%d/", v.mode, v.level)
	paths, err := v.blobs.List(ctx, prefix)
	if err != nil {
		return fmt.Errorf("verify: list %s: %w", prefix, err)
	}
	type agentChunks struct {
		agent string
		paths []string
		lasts []oplog.Index
	}
	byDir := map[string]*agentChunks{}
	var dirs []string
	for _, path := range paths {
		if strings.HasPrefix(path, prefix+"segments/") {
			continue // the packed layout's, verified with it
		}
		agent, known, _, _, dir, last, ok := ParseChunkPath(path)
		if !ok {
			if v.opts.Sample <= 0 || v.opts.Sample >= 1 {
				v.find(FindingOrphaned, "", path, "not a chunk of any agent (the chunk layout names chunks {mode}/{L}/{bucket}/{component}/{name}/{last index})")
			}
			continue
		}
		a := byDir[dir]
		if a == nil {
			a = &agentChunks{agent: dir}
			if known {
				a.agent = agent.Key()
			}
			byDir[dir] = a
			dirs = append(dirs, dir)
		}
		a.paths, a.lasts = append(a.paths, path), append(a.lasts, last)
	}
	for _, dir := range dirs {
		a := byDir[dir]
		if !v.sampled() {
			continue
		}
		v.report.Agents++
		order := make([]int, len(a.paths))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(i, j int) int { return cmp.Compare(a.lasts[i], a.lasts[j]) })
		var prevLast oplog.Index
		for k, i := range order {
			path, last := a.paths[i], a.lasts[i]
			v.report.Chunks++
			data, err := v.read(ctx, path)
			if errors.Is(err, ErrBlobNotFound) {
				v.find(FindingMissing, a.agent, path, "listed, then not found")
				continue
			}
			if err != nil {
				return err
			}
			first, spanLast, err := ChunkSpan(data)
			if err == nil {
				_, err = DecodeChunk(data)
			}
			if err != nil {
				v.find(FindingCorrupt, a.agent, path, "chunk of %d bytes: %v", len(data), err)
				prevLast = last
				continue
			}
			if spanLast != last {
				v.find(FindingCorrupt, a.agent, path, "named for index %d, holds %d..%d", last, first, spanLast)
			}
			if k > 0 && first != prevLast+1 {
				v.find(FindingGap, a.agent, path, "indices %d..%d are in no chunk: the chunk before ends at %d, this one starts at %d "+
					"(a chunk object deleted, or never written)", prevLast+1, first-1, prevLast, first)
			}
			prevLast = spanLast
		}
	}
	return nil
}
