package oplog

import (
	"context"
	"errors"

	is "github.com/stratalog/strata/indexedstorage"
)

// The size of a chunk, the unit an archive step moves and the bound on its memory: at most
// MaxChunkEntries entries and MaxChunkBytes of payload before compression.
const (
	MaxChunkEntries = 4096
	MaxChunkBytes   = 4 << 20
)

// ErrPayloadTooLarge is returned for an entry whose payload alone exceeds MaxChunkBytes: it could never
// be archived.
var ErrPayloadTooLarge = errors.New("oplog payload larger than a chunk")

// ReadLimit bounds one Layer.Read. A read always returns at least one entry when the range holds one,
// even if that entry alone exceeds Bytes.
type ReadLimit struct {
	Entries int // at most this many entries (< 1: MaxChunkEntries)
	Bytes   int // stop once the payloads read reach this many bytes (< 1: MaxChunkBytes)
}

// ChunkLimit is one chunk's worth: what an archive step holds in memory at once.
var ChunkLimit = ReadLimit{Entries: MaxChunkEntries, Bytes: MaxChunkBytes}

func (l ReadLimit) normalized() ReadLimit {
	if l.Entries < 1 {
		l.Entries = MaxChunkEntries
	}
	if l.Bytes < 1 {
		l.Bytes = MaxChunkBytes
	}
	return l
}

// Full reports whether entries, holding payloadBytes, reach the limit.
func (l ReadLimit) Full(entries, payloadBytes int) bool {
	l = l.normalized()
	return entries >= l.Entries || payloadBytes >= l.Bytes
}

// Layer is one storage layer of the oplog: the primary (one row per entry), a compressed archive level
// (chunks in indexed storage) or a blob archive (chunks as blobs). Every method is safe for concurrent
// use; (agent, mode) selects the oplog.
type Layer interface {
	// Name identifies the layer in logs, errors and routes: "primary", "compressed-1", "blob-0".
	Name() string

	// Read returns the entries this layer holds with from ≤ index ≤ to, ascending, each index once and
	// contiguous: it starts at the first index ≥ from the layer holds and stops at limit, at to, or at
	// the first index after that the layer does not hold (a hole, or entries a concurrent step dropped
	// during the read), so a result never hides a gap; the caller reads on from the index after the
	// last one returned. A layer whose chunks overlap (two archivers raced) still returns each index
	// once. An empty result means the layer holds nothing in the range.
	Read(ctx context.Context, agent AgentID, mode Mode, from, to Index, limit ReadLimit) ([]Entry, error)

	// FirstIndex and LastIndex return the smallest and greatest index the layer holds; false when it
	// holds none.
	FirstIndex(ctx context.Context, agent AgentID, mode Mode) (Index, bool, error)
	LastIndex(ctx context.Context, agent AgentID, mode Mode) (Index, bool, error)

	// Append writes contiguous, ascending entries above the layer's last index (the archive step reads
	// LastIndex first). An indexed layer refuses an overlap with indexedstorage.ErrConflict; the blob
	// layer rewrites identical bytes. Either way readers see each index once.
	Append(ctx context.Context, agent AgentID, mode Mode, entries []Entry) error

	// DropPrefix removes what the layer holds with index ≤ upTo, atomically, and returns how many of
	// its stored units (entries of the primary, chunks of a chunked layer) this call removed. A chunked
	// layer removes whole chunks only: a chunk straddling upTo stays until a later drop covers its last
	// index. Of two drops racing over the same units, each unit is counted by the one that removed it,
	// so a drop that finds them gone already returns 0: that is how a drain tells that a concurrent one
	// moved its entries first (Step.Finished). A layer whose storage cannot tell (a blob store's Delete
	// of a missing blob succeeds) counts what it found and deleted, and may count a unit a racing drop
	// counts too; such a layer belongs at the bottom of a stack, as the blob layer does.
	DropPrefix(ctx context.Context, agent AgentID, mode Mode, upTo Index) (dropped uint64, err error)

	// Delete removes everything the layer holds for the oplog; deleting nothing is not an error.
	Delete(ctx context.Context, agent AgentID, mode Mode) error

	// ScanNamespace returns the indexed-storage namespace whose keys are the agents this layer holds
	// entries for in mode, and true, if the layer can enumerate them. Only such a layer can be the
	// source of a sweep route; a layer answering false is a target only.
	ScanNamespace(mode Mode) (ns string, ok bool)

	// ScanAgents walks the stored keys (AgentID.StoredKey) of the agents in the buckets of r, in the
	// scan namespace, with indexedstorage ScanStable semantics (a key present for the whole walk is
	// handed back at least once, whatever the caller deletes): a walk of one shard's buckets costs that
	// shard's keys. A key in the walked range that is no agent's stored key (see ParseStoredKey) may be
	// handed back too. A page's LastIDs, when set, are each agent's LastIndex in this layer, read with
	// the page. A layer whose ScanNamespace answers false returns ErrNotEnumerable.
	ScanAgents(ctx context.Context, mode Mode, r BucketRange, from is.Resume, count int) (is.Page, error)
}

// ErrNotEnumerable is returned by ScanAgents of a layer that cannot enumerate its agents.
var ErrNotEnumerable = errors.New("layer cannot enumerate its agents")

// RangeScanner is implemented by a layer that can enumerate its agents (ScanNamespace answers true) and
// can walk any key range of its scan namespace, not only the bucket ranges ScanAgents takes. The sweep
// walks OutsideBuckets with it once a pass, so that keys no agent is stored under (a foreign writer's
// that lack a bucket prefix or carry one past the last bucket, or keys of the layout before buckets)
// are counted and named instead of lying where no walk of buckets meets them. The primary and the
// compressed layers implement it.
type RangeScanner interface {
	// ScanRange walks the keys of r in the scan namespace of mode, with indexedstorage ScanStable
	// semantics; a page's LastIDs, when set, are each key's last id.
	ScanRange(ctx context.Context, mode Mode, r is.KeyRange, from is.Resume, count int) (is.Page, error)
}

// OutsideBuckets returns the parts of a scan namespace that no bucket's key range covers, in key order:
// the keys below the first bucket's prefix ("0000/") and those from the bound above the last bucket
// ("4000/", BucketPrefix(Buckets)) on. No agent's stored key lies in them; together with the ranges
// of buckets 0 to Buckets-1 they cover every key.
func OutsideBuckets() []is.KeyRange {
	return []is.KeyRange{{End: is.BucketPrefix(0)}, {Start: is.BucketPrefix(Buckets)}}
}

// LastReader is implemented by a layer that reads the first entries of a range and its last index
// together, in one storage call where its storage can (indexedstorage.ClosestLastReader). The sweep's
// archive step reads its first batch this way, and with it checks that the layer's last index is still
// the one the quiet gate saw: the check costs no call of its own.
type LastReader interface {
	// ReadLast returns what Read(from, to, limit) and LastIndex return, the last index read with the
	// first of the reads that Read makes. It may stop at that last index: entries past it are a
	// writer's since the read, which a reader of both drops (a drain to the end reads no further).
	ReadLast(ctx context.Context, agent AgentID, mode Mode, from, to Index, limit ReadLimit) (entries []Entry, last Index, exists bool, err error)
}

// readLast is ReadLast where l is a LastReader, else LastIndex then Read.
func readLast(ctx context.Context, l Layer, agent AgentID, mode Mode, from, to Index, limit ReadLimit) ([]Entry, Index, bool, error) {
	if r, ok := l.(LastReader); ok {
		return r.ReadLast(ctx, agent, mode, from, to, limit)
	}
	last, exists, err := l.LastIndex(ctx, agent, mode)
	if err != nil {
		return nil, 0, false, err
	}
	entries, err := l.Read(ctx, agent, mode, from, to, limit)
	return entries, last, exists, err
}
