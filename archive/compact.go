package archive

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
	"unicode/utf8"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// MovedNamespace is the indexed-storage namespace of packed blob level level's segment moves:
// "{mode}/blobmoved/{L}", key a segment path compaction rewrote, one row (id 1) saying where its live
// chunks went (docs/storage-format.md). Index rows keep naming the old segment: a row cannot be
// rewritten in place, and rewriting an agent's rows would show a reader part of its oplog.
func MovedNamespace(mode oplog.Mode, level int) string {
	return fmt.Sprintf("%s/blobmoved/%d", mode, level)
}

// segmentMove is a move row's value: the segment the chunks went to, and each moved chunk's offset
// there by its offset in the old one. Encoded: version 1 byte (= 1); the new path's length uvarint and
// its bytes; the count uvarint; that many pairs of uvarints, old offset then new.
type segmentMove struct {
	To      string
	Offsets map[uint64]uint64
}

const segmentMoveVersion = 1

func encodeMove(m segmentMove, order []uint64) []byte {
	out := []byte{segmentMoveVersion}
	out = binary.AppendUvarint(out, uint64(len(m.To)))
	out = append(out, m.To...)
	out = binary.AppendUvarint(out, uint64(len(order)))
	for _, old := range order {
		out = binary.AppendUvarint(out, old)
		out = binary.AppendUvarint(out, m.Offsets[old])
	}
	return out
}

func decodeMove(value []byte) (segmentMove, error) {
	rd := footerReader{data: value}
	if v := rd.byte(); rd.err == nil && v != segmentMoveVersion {
		return segmentMove{}, fmt.Errorf("%w: segment move version %d, this reader knows %d", ErrCorruptSegment, v, segmentMoveVersion)
	}
	n := rd.uvarint()
	if rd.err == nil && (n == 0 || n > MaxSegmentPathLen) {
		return segmentMove{}, fmt.Errorf("%w: segment move to a path of %d bytes", ErrCorruptSegment, n)
	}
	to := string(rd.bytes(n))
	count := rd.uvarint()
	if rd.err == nil && count > MaxSegmentChunks {
		return segmentMove{}, fmt.Errorf("%w: segment move of %d chunks", ErrCorruptSegment, count)
	}
	m := segmentMove{To: to, Offsets: make(map[uint64]uint64, count)}
	for range count {
		old := rd.uvarint()
		m.Offsets[old] = rd.uvarint()
	}
	if rd.err == nil && len(rd.data) > 0 {
		rd.err = errors.New("data after the last offset")
	}
	if rd.err != nil || !utf8.ValidString(to) {
		return segmentMove{}, fmt.Errorf("%w: segment move: %v", ErrCorruptSegment, cmpErr(rd.err, "path not UTF-8"))
	}
	return m, nil
}

func cmpErr(err error, otherwise string) error {
	if err != nil {
		return err
	}
	return errors.New(otherwise)
}

// maxMoves bounds the moves followed from a row's segment: a segment compacted, its successor
// compacted again, … A chain longer than this is treated as broken.
const maxMoves = 16

// followMoves is where the chunk ref names is now: ref itself when its segment was never compacted
// (moved false), else the end of the chain of moves from it. found is false when a move on the way does
// not list the chunk (compaction judged it dead: its row was removed).
func followMoves(ctx context.Context, st is.Storage, mode oplog.Mode, level int, ref SegmentRef) (at SegmentRef, moved, found bool, err error) {
	ns, at := MovedNamespace(mode, level), ref
	for hop := 0; ; hop++ {
		row, ok, err := st.Last(ctx, ns, at.Segment)
		if err != nil {
			return at, moved, false, err
		}
		if !ok {
			return at, moved, true, nil
		}
		if hop == maxMoves {
			return at, true, false, fmt.Errorf("%w: more than %d moves from segment %s", ErrCorruptSegment, maxMoves, ref.Segment)
		}
		m, err := decodeMove(row.Value)
		if err != nil {
			return at, true, false, fmt.Errorf("move of %s: %w", at.Segment, err)
		}
		off, ok := m.Offsets[at.Offset]
		if !ok {
			return at, true, false, nil
		}
		at.Segment, at.Offset, moved = m.To, off, true
	}
}

// movedTo is where the chain of moves from segment ends (segment itself when it was never moved).
func movedTo(ctx context.Context, st is.Storage, mode oplog.Mode, level int, segment string) (string, error) {
	ns := MovedNamespace(mode, level)
	for range maxMoves {
		row, ok, err := st.Last(ctx, ns, segment)
		if err != nil || !ok {
			return segment, err
		}
		m, err := decodeMove(row.Value)
		if err != nil {
			return segment, fmt.Errorf("move of %s: %w", segment, err)
		}
		segment = m.To
	}
	return segment, fmt.Errorf("%w: more than %d moves to %s", ErrCorruptSegment, maxMoves, segment)
}

// CompactOptions configures one CompactSegments run.
type CompactOptions struct {
	// Grace is the collector's (blob.gc_grace): only segments older than it are rewritten, when the
	// step that wrote one has ended and its rows are all there. It must be > 0.
	Grace time.Duration
	// Now is the clock (time.Now when nil), read once before the listing and for the new names.
	Now func() time.Time
	// DryRun finds what would be rewritten and writes nothing.
	DryRun bool
}

// CompactReport is what one CompactSegments run found and did. Every segment examined is counted in
// exactly one of Young, Whole, Compacted, Dead, Kept and Failed.
type CompactReport struct {
	Mode     oplog.Mode `json:"mode"`
	Level    int        `json:"level"`
	DryRun   bool       `json:"dry_run,omitempty"`
	Examined int        `json:"examined"`
	Young    int        `json:"young"`
	// Whole segments hold no dead chunk. Compacted ones held live and dead chunks and were rewritten
	// (DeadChunks and DeadBytes are what was left out); Dead ones held no live chunk and were left to
	// the collector; Kept ones were moved before but gained a live chunk the move lacks.
	Whole      int   `json:"whole"`
	Compacted  int   `json:"compacted"`
	Dead       int   `json:"dead"`
	Kept       int   `json:"kept"`
	DeadChunks int   `json:"dead_chunks"`
	DeadBytes  int64 `json:"dead_bytes"`
	// Written lists the new segments; Failed the segments left as they were for a reason of their own
	// (a footer or a row that does not decode, a lookup the storage refused).
	Written []string         `json:"written,omitempty"`
	Failed  []CollectFailure `json:"failed,omitempty"`
}

// CompactSegments rewrites the packed segments of mode's blob level that hold chunks no row points to
// any more (erased, expired) beside live ones (DESIGN §14): the live chunks' bytes are copied, as they
// are, into a new segment; a move row ({mode}/blobmoved/{L}, MovedNamespace) records where each went;
// the old segment is deleted last. A reader that finds a row's segment missing follows the moves, and
// so does the collector when it asks whether a segment is referenced. A crash after the new segment
// leaves an orphan the collector removes; after the move row, both segments, and the next run deletes
// the old one. After the delete the rows are looked at again, and the old segment is put back if a
// live chunk the move lacks appeared (a step that outran the grace), as the collector does.
func CompactSegments(ctx context.Context, st is.Storage, blobs BlobStore, mode oplog.Mode, level int, opts CompactOptions) (CompactReport, error) {
	report := CompactReport{Mode: mode, Level: level, DryRun: opts.DryRun}
	if opts.Grace <= 0 || level < 0 {
		return report, fmt.Errorf("compact segments: %w: a grace of %v, level %d", is.ErrInvalidArgument, opts.Grace, level)
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	started := now()
	cutoff := started.Add(-opts.Grace)
	paths, err := blobs.List(ctx, SegmentsPrefix(mode, level))
	if err != nil {
		return report, fmt.Errorf("compact segments: list: %w", err)
	}
	for _, path := range paths {
		m, l, created, ok := ParseSegmentPath(path)
		if !ok || m != mode || l != level {
			continue // foreign: never touched
		}
		report.Examined++
		if !created.Before(cutoff) {
			report.Young++
			continue
		}
		if err := compactSegment(ctx, st, blobs, mode, level, path, started, opts.DryRun, &report); err != nil {
			return report, fmt.Errorf("compact segments: %s: %w", path, err)
		}
	}
	return report, nil
}

// liveChunks reports, for each chunk of the segment at path, whether a row points to it: the row of its
// key and last index names path at its offset, directly or through moves.
func liveChunks(ctx context.Context, st is.Storage, mode oplog.Mode, level int, path string, chunks []PackedChunk) ([]bool, error) {
	ns := oplog.BlobIndexNamespace(mode, level)
	live := make([]bool, len(chunks))
	at := make(map[PackedChunkID]int, len(chunks))
	for i, c := range chunks {
		at[PackedChunkID{c.Key, c.Last}] = i
	}
	for _, batch := range lookupBatches(chunks) {
		reqs := make([]is.KeyID, len(batch))
		for i, c := range batch {
			reqs[i] = is.KeyID{Key: c.Key, ID: uint64(c.Last)}
		}
		found, err := is.ClosestLastMany(ctx, st, ns, reqs)
		if err != nil {
			return nil, fmt.Errorf("look up the rows of %d chunks: %w", len(reqs), err)
		}
		for i, f := range found {
			c := batch[i]
			if f.Err != nil {
				return nil, &lookupFailure{fmt.Errorf("row %d of %q: %w", c.Last, c.Key, f.Err)}
			}
			if !f.Found || f.Entry.ID != uint64(c.Last) {
				continue
			}
			ref, err := DecodeSegmentRef(f.Entry.Value, c.Last)
			if err != nil {
				return nil, &lookupFailure{fmt.Errorf("row %d of %q: %w", c.Last, c.Key, err)}
			}
			if ref.Segment != path {
				var moved, ok bool
				if ref, moved, ok, err = followMoves(ctx, st, mode, level, ref); err != nil {
					return nil, err
				}
				if !moved || !ok || ref.Segment != path {
					continue
				}
			}
			if ref.Offset == c.Offset {
				live[at[PackedChunkID{c.Key, c.Last}]] = true
			}
		}
	}
	return live, nil
}

// PackedChunkID names a chunk of a segment by its agent's stored key and last index, as its row does.
type PackedChunkID struct {
	Key  string
	Last oplog.Index
}

// compactSegment rewrites one segment older than the grace when it holds dead and live chunks.
func compactSegment(ctx context.Context, st is.Storage, blobs BlobStore, mode oplog.Mode, level int, path string,
	now time.Time, dryRun bool, report *CompactReport) error {
	data, err := blobs.Get(ctx, path)
	if errors.Is(err, ErrBlobNotFound) {
		report.Dead++ // gone since the listing (the collector, another run)
		return nil
	}
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	chunks, err := DecodeSegment(data)
	if err != nil {
		report.Failed = append(report.Failed, CollectFailure{Segment: path, Err: err.Error()})
		return nil
	}
	live, err := liveChunks(ctx, st, mode, level, path, chunks)
	var failed *lookupFailure
	if errors.As(err, &failed) {
		report.Failed = append(report.Failed, CollectFailure{Segment: path, Err: failed.err.Error()})
		return nil
	}
	if err != nil {
		return err
	}
	var keep []SegmentChunk
	var order []uint64
	var deadBytes int64
	for i, c := range chunks {
		if !live[i] {
			deadBytes += int64(c.Length)
			continue
		}
		b, err := PackedChunkBytes(c, data[c.Offset:c.Offset+c.Length])
		if err != nil {
			report.Failed = append(report.Failed, CollectFailure{Segment: path, Err: err.Error()})
			return nil
		}
		keep, order = append(keep, SegmentChunk{Key: c.Key, Chunk: b}), append(order, c.Offset)
	}
	movedNs := MovedNamespace(mode, level)
	prior, moved, err := st.Last(ctx, movedNs, path)
	if err != nil {
		return err
	}
	switch {
	case moved:
		// A run before this one wrote the move and did not get to the delete.
		return finishMove(ctx, st, blobs, mode, level, path, data, chunks, prior.Value, dryRun, report)
	case len(keep) == len(chunks):
		report.Whole++
		return nil
	case len(keep) == 0:
		report.Dead++ // the collector's: no row points into it
		return nil
	}
	report.Compacted++
	report.DeadChunks += len(chunks) - len(keep)
	report.DeadBytes += deadBytes
	if dryRun {
		return nil
	}
	newData, newChunks, err := EncodeSegment(keep)
	if err != nil {
		return err
	}
	to := SegmentPath(mode, level, now, rand.Uint64())
	if err := blobs.Put(ctx, to, newData); err != nil {
		return fmt.Errorf("write %s: %w", to, err)
	}
	report.Written = append(report.Written, to)
	move := segmentMove{To: to, Offsets: make(map[uint64]uint64, len(order))}
	for i, old := range order {
		move.Offsets[old] = newChunks[i].Offset
	}
	value := encodeMove(move, order)
	if err := st.Append(ctx, movedNs, path, 1, value); errors.Is(err, is.ErrConflict) {
		// Another run moved it first: its move stands, and the segment just written is an orphan the
		// collector removes.
		if prior, _, err = st.Last(ctx, movedNs, path); err != nil {
			return err
		}
		value = prior.Value
	} else if err != nil {
		return fmt.Errorf("record the move to %s: %w", to, err)
	}
	return finishMove(ctx, st, blobs, mode, level, path, data, chunks, value, false, nil)
}

// finishMove deletes the segment at path, whose move (value) is recorded, once every live chunk of it
// is in the move, and puts it back if one the move lacks turns up after the delete. A segment with a
// live chunk the move lacks is kept (report.Kept).
func finishMove(ctx context.Context, st is.Storage, blobs BlobStore, mode oplog.Mode, level int, path string, data []byte,
	chunks []PackedChunk, value []byte, dryRun bool, report *CompactReport) error {
	move, err := decodeMove(value)
	if err != nil {
		if report != nil {
			report.Failed = append(report.Failed, CollectFailure{Segment: path, Err: err.Error()})
		}
		return nil
	}
	covered := func(ctx context.Context) (bool, error) {
		live, err := liveChunks(ctx, st, mode, level, path, chunks)
		if err != nil {
			return false, err
		}
		for i, c := range chunks {
			if _, ok := move.Offsets[c.Offset]; live[i] && !ok {
				return false, nil
			}
		}
		return true, nil
	}
	if report != nil {
		if ok, err := covered(ctx); err != nil || !ok {
			if err == nil {
				report.Kept++
			}
			return err
		}
		report.Compacted++
	}
	if dryRun {
		return nil
	}
	if err := blobs.Delete(ctx, path); err != nil && !errors.Is(err, ErrBlobNotFound) {
		return fmt.Errorf("delete after the move: %w", err)
	}
	after, cancel := context.WithTimeout(context.WithoutCancel(ctx), putBackTimeout)
	defer cancel()
	if ok, err := covered(after); err != nil || !ok {
		if perr := blobs.Put(after, path, data); perr != nil {
			return fmt.Errorf("put back after a live chunk the move lacks appeared (or could not be looked up): %w", errors.Join(perr, err))
		}
	}
	return nil
}
