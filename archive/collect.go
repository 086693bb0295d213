package archive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// ParseSegmentPath is SegmentPath's inverse: the mode, level and creation time (to the nanosecond) of
// a path SegmentPath makes, ok false for anything else. It is strict: a known mode, a level in
// strconv.Itoa's form, exactly 20 decimal digits that fit an int64, '-', exactly 16 lower-case hex
// digits, and nothing more.
func ParseSegmentPath(path string) (mode oplog.Mode, level int, created time.Time, ok bool) {
	modePart, rest, ok1 := strings.Cut(path, "/")
	levelPart, rest, ok2 := strings.Cut(rest, "/")
	name, ok3 := strings.CutPrefix(rest, "segments/")
	if !ok1 || !ok2 || !ok3 {
		return "", 0, time.Time{}, false
	}
	m, err := oplog.ParseMode(modePart)
	if err != nil {
		return "", 0, time.Time{}, false
	}
	l, err := strconv.Atoi(levelPart)
	if err != nil || l < 0 || strconv.Itoa(l) != levelPart {
		return "", 0, time.Time{}, false
	}
	const digits, hexDigits = 20, 16
	if len(name) != digits+1+hexDigits || name[digits] != '-' {
		return "", 0, time.Time{}, false
	}
	for i := 0; i < digits; i++ {
		if name[i] < '0' || name[i] > '9' {
			return "", 0, time.Time{}, false
		}
	}
	for _, c := range []byte(name[digits+1:]) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", 0, time.Time{}, false
		}
	}
	nanos, err := strconv.ParseInt(name[:digits], 10, 64)
	if err != nil {
		return "", 0, time.Time{}, false
	}
	return m, l, time.Unix(0, nanos), true
}

// SegmentsPrefix is the blob path prefix under which blob level level of mode keeps its segments.
func SegmentsPrefix(mode oplog.Mode, level int) string {
	return fmt.Sprintf("%s/%d/segments/", mode, level)
}

// CollectOptions configures one CollectSegments run.
type CollectOptions struct {
	// Grace is how old a segment's name must say it is before it may be removed; it must be > 0, and
	// longer than any archive step may run (sweep.max_agent_duration): see CollectSegments.
	Grace time.Duration
	// Now is the collector's clock (time.Now when nil), read once at the start of the run.
	Now func() time.Time
	// MaxSegments bounds the segments one run reads, those older than the grace (0: no limit); a
	// young one costs no call. A run cut by it says where the next one resumes (CollectReport.Next).
	MaxSegments int
	// After resumes a run: only segments whose paths sort after it are examined ("" from the start).
	After string
	// DryRun finds what would be removed and removes nothing.
	DryRun bool
	// Window, when > 0, limits the run to the segments whose name's time is within Window before the
	// cutoff (now − Grace): those that crossed the grace lately. A segment's rows are written once, by
	// the step that wrote it, so a segment that was referenced when it crossed the grace stays so until
	// a removal of rows (retention, erasure) that owns its clean-up; a collector that runs every
	// interval with a window of a few intervals reads each segment a few times in its life, not once a
	// run, and lists only the names of the window (a prefix of their time digits). 0: every segment
	// older than the grace (strata gc, and the sidecar's first run).
	Window time.Duration
}

// CollectReport is what one CollectSegments run found and did. Every segment examined is counted in
// exactly one of Young, Referenced, Removed, Corrupt, Failed and Vanished.
type CollectReport struct {
	Mode  oplog.Mode `json:"mode"`
	Level int        `json:"level"`
	// Examined counts the segments whose names parse that the run looked at.
	Examined int `json:"examined"`
	// Young counts segments not older than the grace: kept without being read.
	Young int `json:"young"`
	// Referenced counts segments that an index row still points into: kept.
	Referenced int `json:"referenced"`
	// Removed counts the orphans removed (in a dry run: that would be), RemovedBytes their sizes, and
	// RemovedPaths names them.
	Removed      int      `json:"removed"`
	RemovedBytes int64    `json:"removed_bytes"`
	RemovedPaths []string `json:"removed_paths,omitempty"`
	// Corrupt names segments whose footer does not decode: kept, since nothing says which rows to look
	// for.
	Corrupt []string `json:"corrupt,omitempty"`
	// Failed lists segments kept because a lookup of their rows failed.
	Failed []CollectFailure `json:"failed,omitempty"`
	// PutBack counts segments removed and written again at once because rows pointing into them
	// appeared meanwhile, or the second look failed (each is also counted in Referenced or Failed).
	PutBack int `json:"put_back,omitempty"`
	// Vanished counts segments listed that were gone when read (another collector removed them).
	Vanished int `json:"vanished"`
	// Foreign counts paths under the segments prefix that are not segment names: never touched.
	Foreign int `json:"foreign"`
	// Settled counts segments older than the run's Window (listed under its prefix): not read.
	Settled int `json:"settled,omitempty"`
	// Next is the last segment this run read when MaxSegments cut it (pass it as After to go on), ""
	// when the listing was walked to its end.
	Next   string `json:"next,omitempty"`
	DryRun bool   `json:"dry_run,omitempty"`
}

// CollectFailure is a segment kept because the lookup of its rows failed.
type CollectFailure struct {
	Segment string `json:"segment"`
	Err     string `json:"error"`
}

// CollectSegments removes the orphan segments of packed blob level level of mode: the segments whose
// name's time is older than opts.Grace and into which no row of the blob index
// (oplog.BlobIndexNamespace(mode, level), st) points. It lists the level's segments, in name order
// (creation order), and for each one older than the grace reads it, decodes its footer, and looks up
// the row of each chunk the footer lists (key, id = the chunk's last index) in is.ClosestLastMany
// calls of at most is.MaxBatch keys: the segment is referenced when some row is there and its value
// names this segment. A segment younger than the grace, one whose footer does not decode (corrupt: we
// cannot know which rows point into it) and one whose lookup failed are kept; a name that does not
// parse is foreign and kept. A storage error (the list, a read, a lookup call, a delete) ends the run
// with that error and the report of what was done before it; deleting a segment already gone counts
// as done.
//
// Why the grace makes this safe. An archive step writes its segment (a name with the step's time),
// then its rows, then drops above; a crash between the first two is what leaves an orphan. A step is
// bounded by the sweep's per-batch timeout (sweep.max_agent_duration), which the grace must exceed
// (config validates it), so once a segment's name is older than the grace the step that wrote it has
// ended: its rows are in the index, or never will be. The collector reads its clock once, before it
// lists, so every lookup happens when the segment is at least as old as it judged it. And a step that
// finds itself past half the grace before its rows packs its segment again under a fresh name, and one
// whose rows land past the grace checks its segment is still there and puts it back (Packed), while
// the collector looks at the rows again after each delete and puts the segment back if some appeared:
// whichever acts last sees the other's write, so a slow step and the collector never together leave
// rows pointing at nothing. The margin between the grace and max_agent_duration also absorbs clock
// skew between the writer's host and the collector's.
func CollectSegments(ctx context.Context, st is.Storage, blobs BlobStore, mode oplog.Mode, level int, opts CollectOptions) (CollectReport, error) {
	report := CollectReport{Mode: mode, Level: level, DryRun: opts.DryRun}
	if opts.Grace <= 0 {
		return report, fmt.Errorf("collect segments: %w: a grace of %v, it must be > 0", is.ErrInvalidArgument, opts.Grace)
	}
	if opts.MaxSegments < 0 {
		return report, fmt.Errorf("collect segments: %w: at most %d segments a run", is.ErrInvalidArgument, opts.MaxSegments)
	}
	if level < 0 {
		return report, fmt.Errorf("collect segments: %w: blob level %d", is.ErrInvalidArgument, level)
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	cutoff := now().Add(-opts.Grace)
	prefix := SegmentsPrefix(mode, level)
	var settledBefore time.Time
	if opts.Window > 0 {
		settledBefore = cutoff.Add(-opts.Window)
		prefix += commonPrefix(segmentTime(settledBefore), segmentTime(cutoff))
	}
	paths, err := blobs.List(ctx, prefix)
	if err != nil {
		return report, fmt.Errorf("collect segments: list %s: %w", prefix, err)
	}
	ns := oplog.BlobIndexNamespace(mode, level)
	read, lastRead := 0, ""
	for _, path := range paths {
		if path <= opts.After {
			continue
		}
		m, l, created, ok := ParseSegmentPath(path)
		if !ok || m != mode || l != level {
			report.Foreign++
			continue
		}
		if !created.Before(cutoff) {
			report.Examined++
			report.Young++
			continue
		}
		if created.Before(settledBefore) {
			report.Settled++
			continue
		}
		if opts.MaxSegments > 0 && read == opts.MaxSegments {
			report.Next = lastRead
			return report, nil
		}
		read, lastRead = read+1, path
		report.Examined++
		if err := collectSegment(ctx, st, blobs, ns, path, opts.DryRun, &report); err != nil {
			return report, fmt.Errorf("collect segments: %s: %w", path, err)
		}
	}
	return report, nil
}

// segmentTime is t as a segment name writes it: 20 decimal digits of nanoseconds since 1970.
func segmentTime(t time.Time) string { return fmt.Sprintf("%020d", max(t.UnixNano(), 0)) }

// commonPrefix is the longest prefix a and b share.
func commonPrefix(a, b string) string {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return a[:n]
}

// putBackTimeout bounds the second look at a removed segment's rows and its putting back.
const putBackTimeout = time.Minute

// collectSegment reads the segment at path, older than the grace, and removes it when no row of ns
// points into it (not in a dry run), counting in report what it found. Its error is a storage error
// that ends the run.
func collectSegment(ctx context.Context, st is.Storage, blobs BlobStore, ns, path string, dryRun bool, report *CollectReport) error {
	data, err := blobs.Get(ctx, path)
	if errors.Is(err, ErrBlobNotFound) {
		report.Vanished++
		return nil
	}
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	chunks, err := DecodeSegment(data)
	if err != nil {
		report.Corrupt = append(report.Corrupt, path)
		return nil
	}
	referenced, err := segmentReferenced(ctx, st, ns, path, chunks)
	var failed *lookupFailure
	switch {
	case errors.As(err, &failed):
		report.Failed = append(report.Failed, CollectFailure{Segment: path, Err: failed.err.Error()})
		return nil
	case err != nil:
		return err
	case referenced:
		report.Referenced++
		return nil
	}
	if !dryRun {
		if err := blobs.Delete(ctx, path); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		// Rows that landed between the lookup and the delete (a step that outran the grace) would now
		// point at nothing: look once more, and put the segment back if they did, or if the look
		// fails. The step checks its segment after its rows too (Packed), so whichever of the two
		// acts last sees the other's write. Neither a shutdown nor a stalled store may cut this
		// between the delete and the put: it runs on a context of its own, bounded.
		after, cancel := context.WithTimeout(context.WithoutCancel(ctx), putBackTimeout)
		defer cancel()
		again, err := segmentReferenced(after, st, ns, path, chunks)
		if err != nil || again {
			if perr := blobs.Put(after, path, data); perr != nil {
				return fmt.Errorf("put back after its rows appeared (or could not be looked up again): %w", errors.Join(perr, err))
			}
			report.PutBack++
			if err != nil {
				report.Failed = append(report.Failed, CollectFailure{Segment: path, Err: err.Error()})
			} else {
				report.Referenced++
			}
			return nil
		}
	}
	report.Removed++
	report.RemovedBytes += int64(len(data))
	report.RemovedPaths = append(report.RemovedPaths, path)
	return nil
}

// lookupFailure is a lookup of a segment's rows that failed for that segment only (a key's own
// failure, a row that does not decode, a footer key the storage refuses): the segment is kept and the
// run goes on.
type lookupFailure struct{ err error }

func (f *lookupFailure) Error() string { return f.err.Error() }

// segmentReferenced reports whether some row of ns points into the segment at path: the row of a
// chunk its footer lists (key, id = the chunk's last index) whose value names path. A row there that
// names another segment (the same chunk indexed from another step's segment) does not count. Every
// chunk is looked up, in as few ClosestLastMany calls as the keys allow, unless one is found
// referenced first; a failed lookup of one chunk is a *lookupFailure unless another chunk is found
// referenced.
func segmentReferenced(ctx context.Context, st is.Storage, ns, path string, chunks []PackedChunk) (bool, error) {
	var failed error
	for _, batch := range lookupBatches(chunks) {
		reqs := make([]is.KeyID, len(batch))
		for i, c := range batch {
			reqs[i] = is.KeyID{Key: c.Key, ID: uint64(c.Last)}
		}
		found, err := is.ClosestLastMany(ctx, st, ns, reqs)
		if errors.Is(err, is.ErrInvalidArgument) {
			// The footer decoded, but the storage refuses one of its keys: this segment's problem.
			failed = cmp.Or(failed, err)
			continue
		}
		if err != nil {
			return false, fmt.Errorf("look up the rows of %d chunks: %w", len(reqs), err)
		}
		if len(found) != len(reqs) {
			return false, fmt.Errorf("look up the rows of %d chunks: %d results", len(reqs), len(found))
		}
		for i, f := range found {
			c := batch[i]
			if f.Err != nil {
				failed = cmp.Or(failed, fmt.Errorf("row %d of %q: %w", c.Last, c.Key, f.Err))
				continue
			}
			if !f.Found || f.Entry.ID != uint64(c.Last) {
				continue
			}
			ref, err := DecodeSegmentRef(f.Entry.Value, c.Last)
			if err != nil {
				// Which segment a row that does not decode points into is unknown: keep.
				failed = cmp.Or(failed, fmt.Errorf("row %d of %q: %w", c.Last, c.Key, err))
				continue
			}
			if ref.Segment == path {
				return true, nil
			}
			// A row naming a segment compaction moved points here when the moves lead here.
			if mode, level, _, ok := ParseSegmentPath(path); ok {
				at, moved, found, err := followMoves(ctx, st, mode, level, ref)
				if err != nil {
					failed = cmp.Or(failed, fmt.Errorf("row %d of %q: %w", c.Last, c.Key, err))
					continue
				}
				if moved && found && at.Segment == path && at.Offset == c.Offset {
					return true, nil
				}
			}
		}
	}
	if failed != nil {
		return false, &lookupFailure{failed}
	}
	return false, nil
}

// lookupBatches groups chunks into ClosestLastMany calls: a call takes a key once, so the n-th chunk
// of one key goes into the n-th call, and no call takes more than is.MaxBatch. A segment lists an
// agent's chunks once each and most agents have one, so most segments need one call.
func lookupBatches(chunks []PackedChunk) [][]PackedChunk {
	var batches [][]PackedChunk
	seen := make(map[string]int, len(chunks))
	for _, c := range chunks {
		n := seen[c.Key]
		seen[c.Key] = n + 1
		if n == len(batches) {
			batches = append(batches, nil)
		}
		batches[n] = append(batches[n], c)
	}
	var out [][]PackedChunk
	for _, b := range batches {
		for len(b) > is.MaxBatch {
			out = append(out, b[:is.MaxBatch])
			b = b[is.MaxBatch:]
		}
		out = append(out, b)
	}
	return out
}
