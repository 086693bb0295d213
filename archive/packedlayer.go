package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// DefaultSegmentGrace is how old a segment must be before the collector may remove it for want of
// index rows (CollectSegments), and so how long an archive step may take between writing a segment
// and writing its rows. It is far longer than any step may run (the sweep's per-batch timeout is
// max_agent_duration).
const DefaultSegmentGrace = time.Hour

// MaxSegmentBytes is the size at which a segment being packed is closed and the rest of the batch's
// chunks go into another: a batch of large agents writes several segments rather than one that holds
// every chunk in memory twice.
const MaxSegmentBytes = 64 << 20

// ErrSegmentMissing is returned for a blob index row whose segment is gone while the row is still
// there: the chunk it points to is lost (a store restored without it, a segment removed by hand). It
// is an oplog.ErrIntegrity.
var ErrSegmentMissing = oplog.NewIntegrityError("blob index row points at a missing segment")

// PackedOptions configures a Packed layer; the zero value and nil are the defaults.
type PackedOptions struct {
	// Grace is the collector's grace (DefaultSegmentGrace when 0): a step that has not written its
	// rows within half of it packs its segment again under a new name, and one that finishes its rows
	// past it checks its segment is still there.
	Grace time.Duration
	// Now is the clock segment names and the grace are read from (time.Now when nil).
	Now func() time.Time
}

// Packed is a blob archive level (DESIGN §13) whose chunks are packed into segments, one blob per batch
// of agents (the packed segment format of EncodeSegment, at SegmentPath), with an index in indexed
// storage: namespace oplog.BlobIndexNamespace(mode, L), key the agent's stored key, one row per chunk
// with id = its last index and value = EncodeSegmentRef of where it is. A read is an index read and a
// ranged read of the segment, never a LIST; the last index is one LastID; the agents are the index's
// keys. An archive writes the segment first, then the rows, then the source drops: a crash between
// the first two leaves a segment nothing points at, which the collector removes after the grace.
type Packed struct {
	st    is.Storage
	store BlobStore
	level int
	name  string
	grace time.Duration
	now   func() time.Time

	// beforeRows, when set, runs after a batch's segments are written and before their rows are (a
	// test forces interleavings with the collector there).
	beforeRows func(segments []string)
}

// NewPacked returns packed blob level level (≥ 0) over store, its index in st.
func NewPacked(st is.Storage, store BlobStore, level int, opts *PackedOptions) (*Packed, error) {
	if level < 0 {
		return nil, fmt.Errorf("blob archive level must be at least 0, got %d", level)
	}
	p := &Packed{st: st, store: store, level: level, name: fmt.Sprintf("blob-%d", level), grace: DefaultSegmentGrace, now: time.Now}
	if opts != nil {
		if opts.Grace < 0 {
			return nil, fmt.Errorf("packed blob layer: a grace of %v", opts.Grace)
		}
		if opts.Grace > 0 {
			p.grace = opts.Grace
		}
		if opts.Now != nil {
			p.now = opts.Now
		}
	}
	return p, nil
}

var (
	_ oplog.Layer         = (*Packed)(nil)
	_ oplog.LastReader    = (*Packed)(nil)
	_ oplog.BatchAppender = (*Packed)(nil)
	_ oplog.RangeScanner  = (*Packed)(nil)
)

func (p *Packed) Name() string { return p.name }

// Level is the layer's level, the L of its paths and its index's namespace.
func (p *Packed) Level() int { return p.level }

// ScanNamespace is the blob index's: the layer can enumerate its agents.
func (p *Packed) ScanNamespace(mode oplog.Mode) (string, bool) {
	return oplog.BlobIndexNamespace(mode, p.level), true
}

// ScanAgents walks the agents of the buckets r that the blob index holds rows for.
func (p *Packed) ScanAgents(ctx context.Context, mode oplog.Mode, r oplog.BucketRange, from is.Resume, count int) (is.Page, error) {
	return p.ScanRange(ctx, mode, r.Keys(), from, count)
}

// ScanRange walks the keys of r in the blob index.
func (p *Packed) ScanRange(ctx context.Context, mode oplog.Mode, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	page, err := p.st.ScanStable(ctx, oplog.BlobIndexNamespace(mode, p.level), r, from, count)
	if err != nil {
		return page, fmt.Errorf("%s: scan %s keys of %v: %w", p.name, mode, r, err)
	}
	return page, nil
}

func (p *Packed) Read(ctx context.Context, agent oplog.AgentID, mode oplog.Mode, from, to oplog.Index, limit oplog.ReadLimit) ([]oplog.Entry, error) {
	entries, _, _, err := p.read(ctx, agent, mode, from, to, limit, false)
	return entries, err
}

// ReadLast is oplog.LastReader's: the first row and the last id come from one ClosestLast call.
func (p *Packed) ReadLast(ctx context.Context, agent oplog.AgentID, mode oplog.Mode, from, to oplog.Index, limit oplog.ReadLimit) ([]oplog.Entry, oplog.Index, bool, error) {
	return p.read(ctx, agent, mode, from, to, limit, true)
}

// read reads the chunks of the range through the index, each with one ranged read of its segment.
func (p *Packed) read(ctx context.Context, agent oplog.AgentID, mode oplog.Mode, from, to oplog.Index, limit oplog.ReadLimit, withLast bool) ([]oplog.Entry, oplog.Index, bool, error) {
	ns, key := oplog.BlobIndexNamespace(mode, p.level), agent.StoredKey()
	return readIndexed(ctx, p.st, p.name, ns, agent, from, to, limit, withLast, func(ctx context.Context, row is.Entry) ([]byte, bool, error) {
		data, err := p.chunk(ctx, mode, ns, key, row)
		if errors.Is(err, errRowGone) {
			return nil, false, nil
		}
		return data, err == nil, err
	})
}

// errRowGone: a row's segment was missing, and so was the row when looked at again (an erasure or an
// expiry removed both since the row was read): the layer no longer holds the chunk.
var errRowGone = errors.New("blob index row removed during the read")

// chunk reads the chunk row points to: one ranged read of its segment, checked against the row.
func (p *Packed) chunk(ctx context.Context, mode oplog.Mode, ns, key string, row is.Entry) ([]byte, error) {
	ref, err := DecodeSegmentRef(row.Value, oplog.Index(row.ID))
	if err != nil {
		return nil, err
	}
	data, err := GetRange(ctx, p.store, ref.Segment, int64(ref.Offset), int64(ref.Length))
	if errors.Is(err, ErrBlobNotFound) {
		// Compaction rewrote the segment: its moves say where the chunk went (CompactSegments).
		at, moved, found, merr := followMoves(ctx, p.st, mode, p.level, ref)
		if merr != nil {
			return nil, merr
		}
		if moved && found {
			ref = at
			data, err = GetRange(ctx, p.store, ref.Segment, int64(ref.Offset), int64(ref.Length))
		}
	}
	if errors.Is(err, ErrBlobNotFound) {
		// Rows go before their segment (retention, erasure, the collector): a row still there
		// means the chunk is lost.
		again, ok, rerr := p.st.Closest(ctx, ns, key, row.ID)
		switch {
		case rerr != nil:
			return nil, rerr
		case !ok || again.ID != row.ID || !bytes.Equal(again.Value, row.Value):
			return nil, errRowGone
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrSegmentMissing, ref.Segment, err)
	}
	if err != nil {
		return nil, fmt.Errorf("segment %s: %w", ref.Segment, err)
	}
	return PackedChunkBytes(ref.Chunk(key, oplog.Index(row.ID)), data)
}

// FirstIndex is the first row's first index: no segment is read.
func (p *Packed) FirstIndex(ctx context.Context, agent oplog.AgentID, mode oplog.Mode) (oplog.Index, bool, error) {
	row, ok, err := p.st.First(ctx, oplog.BlobIndexNamespace(mode, p.level), agent.StoredKey())
	if err != nil || !ok {
		return 0, false, p.wrap("first index", agent, err)
	}
	ref, err := DecodeSegmentRef(row.Value, oplog.Index(row.ID))
	if err != nil {
		return 0, false, fmt.Errorf("%s: agent %s, chunk stored under index %d: %w", p.name, agent, row.ID, err)
	}
	return ref.First, true, nil
}

// LastIndex is the index's last id: a chunk's row is stored under its last index.
func (p *Packed) LastIndex(ctx context.Context, agent oplog.AgentID, mode oplog.Mode) (oplog.Index, bool, error) {
	id, ok, err := p.st.LastID(ctx, oplog.BlobIndexNamespace(mode, p.level), agent.StoredKey())
	return oplog.Index(id), ok, p.wrap("last index", agent, err)
}

var _ oplog.BatchLastReader = (*Packed)(nil)

// LastIndexMany reads every agent's last id of the index in one storage call.
func (p *Packed) LastIndexMany(ctx context.Context, mode oplog.Mode, agents []oplog.AgentID) ([]oplog.LastResult, error) {
	return lastIndexMany(ctx, p.st, oplog.BlobIndexNamespace(mode, p.level), p.name, agents)
}

// lastIndexMany reads the last id of each agent's index of ns in one call: ClosestLastMany of an id
// above is.MaxID, whose Closest part no entry can answer, so a backend skips its seek (PostgreSQL and
// SQLite bind it as NULL, Redis reads an empty range) and reads the last id alone.
func lastIndexMany(ctx context.Context, st is.Storage, ns, layer string, agents []oplog.AgentID) ([]oplog.LastResult, error) {
	keys := make([]is.KeyID, len(agents))
	for i, a := range agents {
		keys[i] = is.KeyID{Key: a.StoredKey(), ID: is.MaxID + 1}
	}
	found, err := is.ClosestLastMany(ctx, st, ns, keys)
	if err != nil {
		return nil, fmt.Errorf("%s: last index of %d agents: %w", layer, len(agents), err)
	}
	out := make([]oplog.LastResult, len(agents))
	for i, f := range found {
		out[i] = oplog.LastResult{Last: oplog.Index(f.Last), Exists: f.Exists}
		if f.Err != nil {
			out[i].Err = fmt.Errorf("%s: last index of %s: %w", layer, agents[i], f.Err)
		}
	}
	return out, nil
}

var _ oplog.OverlapRefuser = (*Packed)(nil)

// RefusesOverlap: AppendBatch refuses any entry at or below the index's last id (its rows' Below), so a
// hop into the layer need not read the last id before it appends. On a Storage without
// is.BatchAppender the condition is a read just before each append, no earlier than the hop's own.
func (p *Packed) RefusesOverlap() bool { return true }

// Append is AppendBatch of one oplog: its chunks in a segment of their own; entries the layer holds
// already, byte for byte, stand as appended (nil).
func (p *Packed) Append(ctx context.Context, agent oplog.AgentID, mode oplog.Mode, entries []oplog.Entry) error {
	errs, err := p.AppendBatch(ctx, mode, []oplog.AppendRequest{{Agent: agent, Entries: entries}})
	if err != nil {
		return err
	}
	if errors.Is(errs[0], oplog.ErrHeldAlready) {
		return nil // a rewrite of identical bytes stands, as in the chunk layout
	}
	return errs[0]
}

// AppendBatch writes every request's entries as chunks packed into segments (one for the batch, more
// past MaxSegmentChunks chunks or MaxSegmentBytes), then every chunk's index row in one AppendKeys per
// is.MaxBatch oplogs. An oplog's rows conflict, as an indexed layer's do, when the index's last id is
// not below its first entry's index (another archiver wrote there first), checked in the same step as
// the rows' insert (is.KeyEntries.Below: the rows are stored under their chunks' last indices, and the
// ids alone would let a chunk overlap the ones before it). Unless the layer already holds exactly those
// entries (then its part is oplog.ErrHeldAlready: nothing appended, nothing lost, as a rewrite of
// identical bytes in the chunk layout), that oplog fails with is.ErrConflict. Either way its chunks
// stay in the segment unreferenced. An oplog whose entries are invalid fails alone; a segment that
// cannot be written fails the oplogs of its group (nothing of them is indexed).
func (p *Packed) AppendBatch(ctx context.Context, mode oplog.Mode, reqs []oplog.AppendRequest) ([]error, error) {
	out := make([]error, len(reqs))
	var parts []packedPart
	seen := make(map[string]int, len(reqs))
	for i, r := range reqs {
		key := r.Agent.StoredKey()
		if j, dup := seen[key]; dup {
			out[i] = fmt.Errorf("%s: append to %s: %w: the agent is in the batch twice (also at %d)", p.name, r.Agent, is.ErrInvalidArgument, j)
			continue
		}
		seen[key] = i
		chunks, err := encodeChunks(r.Entries)
		if err != nil {
			out[i] = fmt.Errorf("%s: append to %s: %w", p.name, r.Agent, err)
			continue
		}
		if len(chunks) > 0 { // appending nothing writes nothing
			parts = append(parts, packedPart{req: i, key: key, chunks: chunks})
		}
	}
	for len(parts) > 0 {
		n := min(len(parts), is.MaxBatch)
		p.appendGroup(ctx, mode, parts[:n], reqs, out)
		parts = parts[n:]
	}
	return out, nil
}

// packedPart is one oplog of an AppendBatch: its request's position, stored key and encoded chunks.
type packedPart struct {
	req    int
	key    string
	chunks []encodedChunk
}

// appendGroup is AppendBatch of at most is.MaxBatch oplogs: their segments, then their rows.
func (p *Packed) appendGroup(ctx context.Context, mode oplog.Mode, parts []packedPart, reqs []oplog.AppendRequest, out []error) {
	failAll := func(err error) {
		for _, pt := range parts {
			out[pt.req] = fmt.Errorf("%s: append to %s: %w", p.name, reqs[pt.req].Agent, err)
		}
	}
	segs, rows, err := p.writeSegments(ctx, mode, parts)
	if err == nil && p.now().Sub(segs[0].created) >= p.grace/2 {
		// The segments are halfway to the collector's grace with no row yet: rows written now might
		// meet a collector that already judged them orphans. Pack them again under new names.
		segs, rows, err = p.writeSegments(ctx, mode, parts)
		if err == nil && p.now().Sub(segs[0].created) >= p.grace/2 {
			err = fmt.Errorf("writing %d segments took more than half the collector's grace (%v): %w", len(segs), p.grace, is.ErrTransient)
		}
	}
	if err != nil {
		failAll(err)
		return
	}
	if p.beforeRows != nil {
		names := make([]string, len(segs))
		for i, s := range segs {
			names[i] = s.path
		}
		p.beforeRows(names)
	}
	for i, pt := range parts {
		rows[i].Below = uint64(reqs[pt.req].Entries[0].Index)
	}
	errs, err := is.AppendKeys(ctx, p.st, oplog.BlobIndexNamespace(mode, p.level), rows)
	if err == nil && len(errs) != len(rows) {
		err = fmt.Errorf("index rows: %d results for %d oplogs", len(errs), len(rows))
	}
	if err != nil {
		failAll(fmt.Errorf("index rows: %w", err))
		return
	}
	if p.now().Sub(segs[0].created) >= p.grace {
		// The rows landed past the grace: a collector may have removed a segment before they did.
		// Put back any that is gone before the source drops what they hold.
		if err := p.restore(ctx, segs); err != nil {
			failAll(err)
			return
		}
	}
	for i, pt := range parts {
		err := errs[i]
		if errors.Is(err, is.ErrConflict) && p.holdsAlready(ctx, mode, reqs[pt.req]) {
			err = oplog.ErrHeldAlready
		}
		if err != nil {
			out[pt.req] = fmt.Errorf("%s: append to %s: %w", p.name, reqs[pt.req].Agent, err)
		}
	}
}

// holdsAlready reports whether the layer holds every entry of r, byte for byte: a concurrent archive of
// the same agent (two sidecars during a hand-off) indexed the same chunks first. The append then stands
// as done (oplog.ErrHeldAlready), as a put of identical bytes does in the chunk layout; its own copies
// stay unreferenced in the segment. Any doubt (a read error, a difference) answers false and the
// conflict stands.
func (p *Packed) holdsAlready(ctx context.Context, mode oplog.Mode, r oplog.AppendRequest) bool {
	first, last := r.Entries[0].Index, r.Entries[len(r.Entries)-1].Index
	got, err := p.Read(ctx, r.Agent, mode, first, last, oplog.ReadLimit{Entries: len(r.Entries), Bytes: math.MaxInt})
	if err != nil || len(got) != len(r.Entries) {
		return false
	}
	for i, e := range got {
		if e.Index != r.Entries[i].Index || !bytes.Equal(e.Payload, r.Entries[i].Payload) {
			return false
		}
	}
	return true
}

// writtenSegment is a segment an AppendBatch wrote: its path, bytes and the time its name carries.
type writtenSegment struct {
	path    string
	data    []byte
	created time.Time
}

// writeSegments packs the parts' chunks into segments, in order, puts each, and returns them with the
// index rows of each part (in the order of parts).
func (p *Packed) writeSegments(ctx context.Context, mode oplog.Mode, parts []packedPart) ([]writtenSegment, []is.KeyEntries, error) {
	rows := make([]is.KeyEntries, len(parts))
	var segs []writtenSegment
	var pending []SegmentChunk
	var owners []int // pending[j] belongs to parts[owners[j]]
	size := 0
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		created := p.now()
		path := SegmentPath(mode, p.level, created, rand.Uint64())
		data, listed, err := EncodeSegment(pending)
		if err != nil {
			return err
		}
		if err := p.store.Put(ctx, path, data); err != nil {
			return fmt.Errorf("put segment %s: %w", path, err)
		}
		segs = append(segs, writtenSegment{path: path, data: data, created: created})
		for j, c := range listed {
			ref := SegmentRef{Segment: path, First: c.First, Offset: c.Offset, Length: c.Length, CRC: c.CRC}
			rows[owners[j]].Entries = append(rows[owners[j]].Entries, is.Entry{ID: uint64(c.Last), Value: EncodeSegmentRef(ref)})
		}
		pending, owners, size = pending[:0], owners[:0], 0
		return nil
	}
	for i, pt := range parts {
		rows[i].Key = pt.key
		for _, ch := range pt.chunks {
			if len(pending) == MaxSegmentChunks || (len(pending) > 0 && size+len(ch.data) > MaxSegmentBytes) {
				if err := flush(); err != nil {
					return nil, nil, err
				}
			}
			pending = append(pending, SegmentChunk{Key: pt.key, Chunk: ch.data})
			owners = append(owners, i)
			size += len(ch.data)
		}
	}
	if err := flush(); err != nil {
		return nil, nil, err
	}
	return segs, rows, nil
}

// restore puts back each of segs that is gone, with the bytes it was written with.
func (p *Packed) restore(ctx context.Context, segs []writtenSegment) error {
	for _, s := range segs {
		_, err := GetRange(ctx, p.store, s.path, 0, 0)
		if errors.Is(err, ErrBlobNotFound) {
			err = p.store.Put(ctx, s.path, s.data)
		}
		if err != nil {
			return fmt.Errorf("segment %s, indexed past the collector's grace: %w", s.path, err)
		}
	}
	return nil
}

// DropPrefix removes the index rows of the chunks ending at or below upTo and returns how many: the
// storage's own count, so of two racing drops each chunk is counted once. The segments stay until no
// row points into them (the collector).
func (p *Packed) DropPrefix(ctx context.Context, agent oplog.AgentID, mode oplog.Mode, upTo oplog.Index) (uint64, error) {
	dropped, err := p.st.DropPrefix(ctx, oplog.BlobIndexNamespace(mode, p.level), agent.StoredKey(), uint64(upTo))
	if err != nil {
		return 0, p.wrap("drop prefix", agent, err)
	}
	return dropped, nil
}

// Delete removes the oplog's index rows: its chunks are unreachable at once, and their bytes go when
// the collector (or compaction) removes the segments.
func (p *Packed) Delete(ctx context.Context, agent oplog.AgentID, mode oplog.Mode) error {
	return p.wrap("delete", agent, p.st.Delete(ctx, oplog.BlobIndexNamespace(mode, p.level), agent.StoredKey()))
}

func (p *Packed) wrap(what string, agent oplog.AgentID, err error) error {
	return wrapLayer(p.name, what, agent, err)
}
