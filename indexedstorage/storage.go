// Package indexedstorage is the contract every strata storage backend implements: an index, addressed
// by (namespace, key), maps uint64 ids to byte values. The oplog layers and the sweeper are written
// against this contract only; the conformance suite in indexedstorage/storagetest checks that a backend
// meets it.
//
// Namespaces are short ASCII strings made by the layer that owns them (see ValidateNamespace). Keys are
// arbitrary UTF-8, 1–1024 bytes, without NUL; they may contain '/', ':', '%', '_', '*', '?', '[', ']'
// and '\', which every backend treats literally. Ids run from 1 to MaxID (2^63−1), so they fit a signed
// 64-bit column on every engine.
//
// A Storage classifies the failures it recognises with the sentinels in this package, checked with
// errors.Is: ErrInvalidArgument, ErrConflict, ErrClosed and ErrTransient. A failure it does not
// recognise (a table dropped under it, a server out of memory) matches none of them and is to be
// treated as permanent: only ErrTransient is ever retried. A Storage never panics on a storage error.
// A backend's operation returns its errors as an *OpError, made in one place per backend, naming the
// backend, the operation (its metric label) and the index, and unwrapping to the sentinel and the
// engine's own error.
package indexedstorage

import (
	"context"
	"math"
)

// MaxID is the largest id an index can hold.
const MaxID uint64 = math.MaxInt64

// MaxKeyLen is the longest key, in bytes, every backend accepts.
const MaxKeyLen = 1024

// Entry is one id and its value. A Storage copies Value on write and hands out values the caller owns.
type Entry struct {
	ID    uint64
	Value []byte
}

// Storage is an indexed store. Implementations must be safe for concurrent use by multiple goroutines.
//
// An index exists exactly while it holds at least one entry: writing the first entry creates it, and
// removing the last one (DropPrefix or Delete) removes it. Operations on a missing index behave as on an
// empty one and never create it.
//
// Arguments are validated before anything is touched: a namespace, key or prefix that breaks the rules
// of ValidateNamespace, ValidateKey or ValidatePrefix, an id outside 1..MaxID where an id is written, or a
// count below 1 must return an error matching ErrInvalidArgument and change nothing. After Close every
// method must return an error matching ErrClosed.
type Storage interface {
	// Exists reports whether the index holds at least one entry.
	Exists(ctx context.Context, ns, key string) (bool, error)

	// Append writes one entry. The id must be greater than every id the index holds; otherwise Append
	// must return ErrConflict and write nothing.
	Append(ctx context.Context, ns, key string, id uint64, value []byte) error

	// AppendMany writes entries as if by consecutive Appends, all or nothing: ids must be strictly
	// increasing and the first above the index's last id. If any entry would conflict, AppendMany must
	// return ErrConflict and write none of the batch; an invalid id anywhere in the batch is
	// ErrInvalidArgument and writes none. An empty batch is a no-op and does not create the index.
	AppendMany(ctx context.Context, ns, key string, entries []Entry) error

	// Length returns the number of entries; 0 for a missing index.
	Length(ctx context.Context, ns, key string) (uint64, error)

	// Read returns the entries with ids in the closed range [from, to], ascending; empty (not an error)
	// for a missing index or when from > to. The bounds are bounds, not ids: from 0 reads from the
	// first entry, and to above MaxID reads to the last.
	Read(ctx context.Context, ns, key string, from, to uint64) ([]Entry, error)

	// First returns the entry with the smallest id; false when the index is empty or missing.
	First(ctx context.Context, ns, key string) (Entry, bool, error)

	// Last returns the entry with the greatest id; false when the index is empty or missing.
	Last(ctx context.Context, ns, key string) (Entry, bool, error)

	// LastID returns the greatest id without its value (a chunk's value can be megabytes, its id is
	// what an archive step and the sweep's gate read); false when the index is empty or missing. It
	// agrees with Last at every instant.
	LastID(ctx context.Context, ns, key string) (id uint64, ok bool, err error)

	// Closest returns the entry with the smallest id ≥ id; false if there is none. Closest(0) is First.
	Closest(ctx context.Context, ns, key string, id uint64) (Entry, bool, error)

	// DropPrefix removes every entry with id ≤ upTo, atomically, and returns how many it removed. An
	// index emptied this way no longer exists: Exists is false and no scan returns its key. An Append
	// above upTo that runs concurrently must never be lost, whichever order the two take effect in.
	DropPrefix(ctx context.Context, ns, key string, upTo uint64) (dropped uint64, err error)

	// Delete removes the index and all its entries. Deleting a missing index must return nil.
	Delete(ctx context.Context, ns, key string) error

	// Scan is the backend's native paging over the keys of ns that start with prefix: cursor 0 starts
	// a walk and a returned next of 0 means it is done. It is kept for parity with other stores and is
	// not safe while the caller deletes what it walks (a positional cursor steps over keys after a
	// deletion); use ScanStable for that. count is a hint of how many keys a call examines (≥ 1).
	Scan(ctx context.Context, ns, prefix string, cursor uint64, count int) (next uint64, keys []string, err error)

	// ScanStable walks the keys of ns in the range r (Start ≤ key < End, compared byte for byte; a
	// prefix is PrefixRange(prefix)), resuming by seeking rather than by position, so the caller may
	// delete keys as it goes. An ordered backend seeks to r.Start; a walk of a small range costs that
	// range, not the namespace.
	//
	// The zero Resume starts a walk; each page's Next continues it until a page reports Done. A key
	// present for the whole walk must be handed back at least once, in Keys or, when the backend
	// cannot read that index's own storage, in Unreadable; a key created or deleted during the walk
	// may or may not be. One unreadable index must not fail the page: the walk moves past it. A page
	// holds at most count keys unless the backend documents otherwise, and may be empty without being
	// Done. An empty range is one Done page. A Resume minted by another kind of backend, or malformed,
	// must return ErrInvalidArgument, never restart the walk silently; bounds that are not valid
	// UTF-8, hold NUL or exceed MaxKeyLen are ErrInvalidArgument too (ValidateRange).
	//
	// Backends that hand back every key once, in ascending byte order, declare it through
	// Capabilities (see CapabilitiesOf).
	ScanStable(ctx context.Context, ns string, r KeyRange, from Resume, count int) (Page, error)

	// Close releases the backend's resources. Every later call returns ErrClosed; Close itself is
	// idempotent.
	Close() error
}

// Capabilities are the optional guarantees a backend makes beyond the contract. The conformance suite
// runs its stricter checks only where a backend declares them, never by the backend's name.
type Capabilities struct {
	// OrderedScan: ScanStable hands back each key once per walk, in ascending byte order, with no
	// page larger than count.
	OrderedScan bool
	// UniqueScan: ScanStable never hands back a key twice in one walk (implied by OrderedScan).
	UniqueScan bool
}

// Capable is implemented by a Storage that declares Capabilities.
type Capable interface {
	Capabilities() Capabilities
}

// CapabilitiesOf returns what st declares, or the zero Capabilities (the bare contract).
func CapabilitiesOf(st Storage) Capabilities {
	if c, ok := st.(Capable); ok {
		caps := c.Capabilities()
		if caps.OrderedScan {
			caps.UniqueScan = true
		}
		return caps
	}
	return Capabilities{}
}

// ClosestLastReader is implemented by a Storage that reads Closest(id) and LastID of one index
// together: in one round trip, from one state of the index (one script, one statement), so that the
// result is what the two would return at one instant. The sweep's archive step reads an agent's first
// chunk this way and checks, in the same call, that nothing was appended since the quiet gate saw the
// agent.
type ClosestLastReader interface {
	// ClosestLast returns Closest(id)'s entry and found, and LastID's id and ok.
	ClosestLast(ctx context.Context, ns, key string, id uint64) (entry Entry, found bool, last uint64, exists bool, err error)
}

// ClosestLast reads Closest(id) and LastID of one index: in one call where st is a ClosestLastReader
// (a wrapper of this package is one, and one call, where what it wraps is one), else LastID first,
// then Closest (two calls, and two instants: an append between them may show in the
// entry and not in last, a drop in last and not in the entry).
func ClosestLast(ctx context.Context, st Storage, ns, key string, id uint64) (entry Entry, found bool, last uint64, exists bool, err error) {
	if r, ok := st.(ClosestLastReader); ok {
		return r.ClosestLast(ctx, ns, key, id)
	}
	if last, exists, err = st.LastID(ctx, ns, key); err != nil {
		return Entry{}, false, 0, false, err
	}
	entry, found, err = st.Closest(ctx, ns, key, id)
	return entry, found, last, exists, err
}

// DeepScanner is implemented by a Storage whose ScanStable reads every entry of the keys a page
// returns (SQL's GROUP BY key: cheapest where a key holds one entry or a few, as in an archive layer,
// where a key holds an agent's chunks) and which can also walk at a cost per key, however many entries
// each holds (a loose index scan), for a namespace of deep indexes: the primary layer, one entry per
// oplog entry. ScanDeep has ScanStable's contract exactly, its Resume tokens included; it costs more
// than ScanStable on keys of one entry.
type DeepScanner interface {
	ScanDeep(ctx context.Context, ns string, r KeyRange, from Resume, count int) (Page, error)
}

// ScanDeep is st's ScanDeep where st is a DeepScanner (a wrapper of this package is one where what it
// wraps is one), else its ScanStable.
func ScanDeep(ctx context.Context, st Storage, ns string, r KeyRange, from Resume, count int) (Page, error) {
	if d, ok := st.(DeepScanner); ok {
		return d.ScanDeep(ctx, ns, r, from, count)
	}
	return st.ScanStable(ctx, ns, r, from, count)
}
