package indexedstorage

import (
	"context"
	"errors"
	"fmt"
)

// MaxBatch is the most keys one batch operation (ClosestLastMany, DropPrefixMany, AppendKeys) takes.
const MaxBatch = 4096

// KeyID is one key of a batch operation and its id: the id Closest seeks in ClosestLastMany, the upTo
// of DropPrefixMany.
type KeyID struct {
	Key string
	ID  uint64
}

// ClosestLastResult is one key's part of ClosestLastMany: what ClosestLast returns for it.
type ClosestLastResult struct {
	Entry  Entry  // Closest(ID)'s entry
	Found  bool   // Closest found one
	Last   uint64 // LastID's id
	Exists bool   // LastID found one
	Err    error  // this key's part failed (Entry, Found, Last and Exists are zero); the other keys' stand
}

// DropResult is one key's part of DropPrefixMany: what DropPrefix returns for it.
type DropResult struct {
	Dropped uint64
	Err     error // this key's part failed; whether its drop took effect is unknown, as for DropPrefix
}

// BatchReader is implemented by a Storage that reads Closest(id) and LastID of many indexes of one
// namespace in one round trip (one statement, one transaction, one script per hash slot, one lock).
// The sweep's archive phase reads a batch of agents' first chunks this way.
//
// Each key's part is ClosestLast of that key: its entry and last id come from one state of its index,
// linearizable against every other operation on that index. The batch is not atomic across keys, and
// need not be. Results are in the order of reqs. A key whose own storage cannot be read (a poisoned
// row, a Redis key of the wrong type, an unreadable file) fails its part only, in its result's Err;
// the call goes on with the other keys. The call's own error means no part is known: arguments
// invalid (ValidateBatchKeys: nothing touched), the store closed, or the round trip failed.
type BatchReader interface {
	ClosestLastMany(ctx context.Context, ns string, reqs []KeyID) ([]ClosestLastResult, error)
}

// BatchDropper is implemented by a Storage that drops a prefix of many indexes of one namespace in one
// round trip. Each key's part is DropPrefix(key, ID): atomic and linearizable on its index, with every
// rule of DropPrefix (an emptied index no longer exists, a racing Append above upTo is never lost, of
// two racing drops each entry is counted by one). Results are in the order of reqs. A key's own
// failure is its result's Err and the other keys go on; the call's own error means no part is known
// to have taken effect or not (as a DropPrefix that times out), and arguments invalid touch nothing.
// Where one call takes several indexes' locks, it takes them in one global order (ascending key order;
// PostgreSQL, whose per-index locks are hashes of the key, in ascending lock id, which stays a total
// order when two keys share a lock), so two batches never deadlock.
type BatchDropper interface {
	DropPrefixMany(ctx context.Context, ns string, reqs []KeyID) ([]DropResult, error)
}

// KeyEntries is one key of AppendKeys and the entries to append to it.
type KeyEntries struct {
	Key     string
	Entries []Entry
	// Below, where set, makes the part conditional: it conflicts, as one whose first id is not above
	// the index's last does, unless the index's last id is below Below (at most Entries[0].ID). The
	// packed blob layer sets it to an oplog's first index: a row is stored under its chunk's last
	// index, so the ids alone would let a chunk overlap the ones before it, and the condition in the
	// same step as the append spares a read of the index's last id before it.
	Below uint64
}

// Bound is the id the index's last id must be below for the part to be appended: Below where set,
// else the first entry's id. The part has entries.
func (r KeyEntries) Bound() uint64 {
	if r.Below > 0 {
		return r.Below
	}
	return r.Entries[0].ID
}

// BatchAppender is implemented by a Storage that appends to many indexes of one namespace in one round
// trip (the blob index of the packed blob layer gets a row for each agent of an archive batch this
// way). Each key's part is AppendMany(key, Entries): all or nothing on its index, linearizable against
// every other operation on it, ErrConflict (naming the index's last id) when its Bound (the first id,
// or Below) is not above the index's last, checked in the same step as the append. The batch is not
// atomic across keys. The result has one error a key, in the order of reqs (nil: appended); a key's
// failure (a conflict, a poisoned index) is its own and the other keys go on. The call's own error
// means no part is known to have taken effect or not (as an AppendMany that times out); arguments
// invalid touch nothing (ValidateAppendKeys: ErrInvalidArgument, or ErrConflict for a key's ids not
// ascending, as AppendMany says of them).
type BatchAppender interface {
	AppendKeys(ctx context.Context, ns string, reqs []KeyEntries) ([]error, error)
}

// ValidateAppendKeys checks AppendKeys's arguments: a valid namespace, at most MaxBatch keys, each a
// valid key, none twice, each key's entries a valid batch (ValidateBatch), and each Below at most its
// first id (a Below without entries is no condition on nothing: allowed).
func ValidateAppendKeys(ns string, reqs []KeyEntries) error {
	return validateBatchOf(ns, reqs, func(r KeyEntries) string { return r.Key }, func(r KeyEntries) error {
		if err := ValidateBatch(r.Entries); err != nil {
			return fmt.Errorf("key %q: %w", r.Key, err)
		}
		if len(r.Entries) > 0 && r.Below > r.Entries[0].ID {
			return fmt.Errorf("%w: key %q: below %d is above the first id %d", ErrInvalidArgument, r.Key, r.Below, r.Entries[0].ID)
		}
		return nil
	})
}

// AppendKeys appends each key's entries: in one call where st is a BatchAppender, else AppendMany of
// each key in turn, with ClosestLastMany's rule for failures. There a key's Below is checked by a read
// of its last id before its AppendMany, not in one step with it: a writer between the two can put an
// id at or above Below that the append does not see (a Storage without BatchAppender has no
// conditional append of its own).
func AppendKeys(ctx context.Context, st Storage, ns string, reqs []KeyEntries) ([]error, error) {
	if b, ok := st.(BatchAppender); ok {
		return b.AppendKeys(ctx, ns, reqs)
	}
	if err := ValidateAppendKeys(ns, reqs); err != nil {
		return nil, err
	}
	out := make([]error, len(reqs))
	eachPart(reqs, func(r KeyEntries) string { return r.Key },
		func(i int) error { out[i] = appendBelow(ctx, st, ns, reqs[i]); return out[i] },
		func(i int, err error) { out[i] = err })
	return out, nil
}

// appendBelow is AppendMany of r, after a read of the index's last id where r.Below is set.
func appendBelow(ctx context.Context, st Storage, ns string, r KeyEntries) error {
	if r.Below > 0 && len(r.Entries) > 0 {
		last, ok, err := st.LastID(ctx, ns, r.Key)
		if err != nil {
			return err
		}
		if ok && last >= r.Below {
			return fmt.Errorf("%w: id %d is not above the index's last id %d", ErrConflict, r.Below, last)
		}
	}
	return st.AppendMany(ctx, ns, r.Key, r.Entries)
}

// ValidateBatchKeys checks a batch operation's arguments: a valid namespace, at most MaxBatch keys,
// each a valid key, none twice (two parts on one index in one call would have no order).
func ValidateBatchKeys(ns string, reqs []KeyID) error {
	return validateBatchOf(ns, reqs, keyOf, nil)
}

// validateBatchOf checks what every batch operation's arguments share: a valid namespace, at most
// MaxBatch parts, each a valid key, none twice; and with part set, each part's own arguments, checked
// in the order of reqs after its key.
func validateBatchOf[R any](ns string, reqs []R, key func(R) string, part func(R) error) error {
	if err := ValidateNamespace(ns); err != nil {
		return err
	}
	if len(reqs) > MaxBatch {
		return fmt.Errorf("%w: a batch of %d keys, at most %d", ErrInvalidArgument, len(reqs), MaxBatch)
	}
	seen := make(map[string]struct{}, len(reqs))
	for _, r := range reqs {
		k := key(r)
		if err := ValidateKey(k); err != nil {
			return err
		}
		if _, dup := seen[k]; dup {
			return fmt.Errorf("%w: key %q twice in one batch", ErrInvalidArgument, k)
		}
		seen[k] = struct{}{}
		if part != nil {
			if err := part(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// ClosestLastMany reads Closest and LastID of each key of reqs: in one call where st is a BatchReader
// (a wrapper of this package is one, and one call, where what it wraps is one), else ClosestLast of
// each key in turn. The fallback keeps each part's rules: a key's failure is its own, except one that
// says the store cannot be reached now (ErrTransient, ErrClosed, the context's end), which the keys
// after it are given too, untried.
func ClosestLastMany(ctx context.Context, st Storage, ns string, reqs []KeyID) ([]ClosestLastResult, error) {
	if b, ok := st.(BatchReader); ok {
		return b.ClosestLastMany(ctx, ns, reqs)
	}
	if err := ValidateBatchKeys(ns, reqs); err != nil {
		return nil, err
	}
	out := make([]ClosestLastResult, len(reqs))
	eachPart(reqs, keyOf, func(i int) (err error) {
		r := &out[i]
		r.Entry, r.Found, r.Last, r.Exists, err = ClosestLast(ctx, st, ns, reqs[i].Key, reqs[i].ID)
		return err
	}, func(i int, err error) { out[i] = ClosestLastResult{Err: err} })
	return out, nil
}

// DropPrefixMany drops the prefix of each key of reqs: in one call where st is a BatchDropper, else
// DropPrefix of each key in turn, with ClosestLastMany's rule for failures.
func DropPrefixMany(ctx context.Context, st Storage, ns string, reqs []KeyID) ([]DropResult, error) {
	if b, ok := st.(BatchDropper); ok {
		return b.DropPrefixMany(ctx, ns, reqs)
	}
	if err := ValidateBatchKeys(ns, reqs); err != nil {
		return nil, err
	}
	out := make([]DropResult, len(reqs))
	eachPart(reqs, keyOf, func(i int) (err error) {
		out[i].Dropped, err = st.DropPrefix(ctx, ns, reqs[i].Key, reqs[i].ID)
		return err
	}, func(i int, err error) { out[i] = DropResult{Err: err} })
	return out, nil
}

// keyOf is a KeyID's key.
func keyOf(r KeyID) string { return r.Key }

// eachPart is the per-key fallbacks' loop: do runs each part in turn, and a part that fails is given
// its error (failed), every other result of it zero; once a failure says the store cannot be reached
// (stopsBatch), the parts after it are not tried and fail with ErrNotTried wrapping it.
func eachPart[R any](reqs []R, key func(R) string, do func(i int) error, failed func(i int, err error)) {
	var stop error
	for i, r := range reqs {
		if stop != nil {
			failed(i, untried(key(r), stop))
			continue
		}
		if err := do(i); err != nil {
			failed(i, err)
			if stopsBatch(err) {
				stop = err
			}
		}
	}
}

// stopsBatch reports whether err says the store cannot be reached now, rather than that one index
// cannot be read: the per-key fallbacks try no further key after it.
func stopsBatch(err error) bool {
	return errors.Is(err, ErrTransient) || errors.Is(err, ErrClosed) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// ErrNotTried marks a batch part that was not tried because an earlier key's failure said the store
// could not be reached; it wraps that failure, so errors.Is finds ErrTransient or ErrClosed through it.
var ErrNotTried = errors.New("not tried")

func untried(key string, cause error) error {
	return fmt.Errorf("key %q %w after an earlier key failed: %w", key, ErrNotTried, cause)
}
