package selftest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	is "github.com/stratalog/strata/indexedstorage"
)

// The batch operations of the reference store (is.BatchReader, is.BatchDropper), as the memory backend
// has them: every key read under one read lock, or dropped under one write lock. Their mutants are the
// defects a backend's one statement or script of many keys could have.
const (
	// bugBatchDropCountedTwice counts each key's drop under the read lock, lets go, and drops under the
	// write lock (a count query, then the DELETE): two racing batches count the same entries.
	bugBatchDropCountedTwice bug = "batchDropCountedTwice"
	// bugBatchReadTwoInstants reads each key's Closest and its last id under two locks.
	bugBatchReadTwoInstants bug = "batchReadTwoInstants"
	// bugBatchLocksInRequestOrder locks each index's row as it reaches it in the request, not in key
	// order: two batches of the same keys in opposite orders wait on each other for ever.
	bugBatchLocksInRequestOrder bug = "batchLocksInRequestOrder"
	// bugBatchStopsAtKeyError ends the batch at a key whose own storage fails and hands back the keys
	// after it as zero results with no error, unread and undropped.
	bugBatchStopsAtKeyError bug = "batchStopsAtKeyError"
	// bugBatchAppendFailsAll fails every key of an AppendKeys whose one key conflicts, appending none.
	bugBatchAppendFailsAll bug = "batchAppendFailsAll"
	// bugBatchAppendStopsAtConflict ends an AppendKeys at its first conflicting key and reports the keys
	// after it appended (nil) without appending them.
	bugBatchAppendStopsAtConflict bug = "batchAppendStopsAtConflict"
	// bugBatchAppendIgnoresBelow appends a part whose Below is not above the index's last id, as long
	// as its first id is: the ids alone decide.
	bugBatchAppendIgnoresBelow bug = "batchAppendIgnoresBelow"
)

func init() {
	mutants = append(mutants,
		mutant{bugBatchDropCountedTwice, "DropPrefixMany counts each key's entries under the read lock and drops them under the write lock: two racing batch drops both count the same entries"},
		mutant{bugBatchReadTwoInstants, "ClosestLastMany reads each key's Closest, lets go of the lock, then its last id: a key's part comes from two states of its index"},
		mutant{bugBatchLocksInRequestOrder, "DropPrefixMany takes each index's row lock in the order of the request, not of the keys: two batches of the same keys in opposite orders deadlock"},
		mutant{bugBatchStopsAtKeyError, "a batch stops at a key whose storage fails and reports the keys after it as success (nil Err, zero results) without reading or dropping them"},
		mutant{bugBatchAppendFailsAll, "AppendKeys fails every key when one key's append conflicts, appending none: a key's failure is not its own"},
		mutant{bugBatchAppendStopsAtConflict, "AppendKeys stops at the first key whose append conflicts and reports the keys after it appended, though nothing of theirs was written"},
		mutant{bugBatchAppendIgnoresBelow, "AppendKeys ignores a part's Below: a row is appended above the index's last id though the index holds ids at or above Below (a packed chunk overlapping the ones before it)"},
	)
}

var (
	_ is.BatchReader   = (*store)(nil)
	_ is.BatchDropper  = (*store)(nil)
	_ is.BatchAppender = (*store)(nil)
)

// AppendKeys appends each key's entries as AppendMany does, key after key.
func (s *store) AppendKeys(ctx context.Context, ns string, reqs []is.KeyEntries) ([]error, error) {
	if err := is.ValidateAppendKeys(ns, reqs); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, is.ErrClosed
	}
	out := make([]error, len(reqs))
	if s.bug == bugBatchAppendFailsAll {
		for _, r := range reqs {
			last, exists, err := s.LastID(ctx, ns, r.Key)
			if err == nil && exists && len(r.Entries) > 0 && r.Entries[0].ID <= last {
				for i := range out {
					out[i] = fmt.Errorf("%w: key %q", is.ErrConflict, r.Key)
				}
				return out, nil
			}
		}
	}
	for i, r := range reqs {
		if s.bug == bugBatchAppendIgnoresBelow {
			r.Below = 0
		}
		out[i] = s.appendKey(ns, r)
		if s.bug == bugBatchAppendStopsAtConflict && errors.Is(out[i], is.ErrConflict) {
			return out, nil // the parts after it stay nil: reported appended, never written
		}
	}
	return out, nil
}

// ClosestLastMany reads every key under one read lock.
func (s *store) ClosestLastMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.ClosestLastResult, error) {
	if err := is.ValidateBatchKeys(ns, reqs); err != nil {
		return nil, err
	}
	if s.bug == bugBatchReadTwoInstants {
		return s.closestLastManyTwoInstants(ctx, ns, reqs)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, is.ErrClosed
	}
	res := make([]is.ClosestLastResult, len(reqs))
	for i, r := range reqs {
		x := s.indexes[s.ident(ns, r.Key)]
		if x != nil && x.poisoned {
			res[i].Err = s.poisonErr("closest last many", ns, r.Key)
			if s.bug == bugBatchStopsAtKeyError {
				return res, nil // the keys after it: zero, and no error
			}
			continue
		}
		entries := entriesOf(x)
		if j := search(entries, r.ID); j < len(entries) {
			res[i].Entry, res[i].Found = out(entries[j], false), true
		}
		if n := len(entries); n > 0 {
			res[i].Last, res[i].Exists = entries[n-1].ID, true
		}
	}
	return res, nil
}

// closestLastManyTwoInstants reads each key's Closest under one read lock and its last id under
// another, with the lock let go between them.
func (s *store) closestLastManyTwoInstants(ctx context.Context, ns string, reqs []is.KeyID) ([]is.ClosestLastResult, error) {
	out := make([]is.ClosestLastResult, len(reqs))
	for i, r := range reqs {
		e, found, err := s.Closest(ctx, ns, r.Key, r.ID)
		if err == nil {
			runtime.Gosched()
			out[i].Last, out[i].Exists, err = s.LastID(ctx, ns, r.Key)
		}
		if err != nil {
			if s.isClosed() {
				return nil, is.ErrClosed
			}
			out[i] = is.ClosestLastResult{Err: err}
			continue
		}
		out[i].Entry, out[i].Found = e, found
	}
	return out, nil
}

func (s *store) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}

// DropPrefixMany drops every key's prefix under one write lock.
func (s *store) DropPrefixMany(_ context.Context, ns string, reqs []is.KeyID) ([]is.DropResult, error) {
	if err := is.ValidateBatchKeys(ns, reqs); err != nil {
		return nil, err
	}
	switch s.bug {
	case bugBatchDropCountedTwice:
		return s.dropManyCountedFirst(ns, reqs)
	case bugBatchLocksInRequestOrder:
		return s.dropManyRowLocks(ns, reqs)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, is.ErrClosed
	}
	out := make([]is.DropResult, len(reqs))
	for i, r := range reqs {
		if err := s.updateLocked("drop many", ns, r.Key, s.keepsEmpty(), s.drop(r.ID, &out[i].Dropped)); err != nil {
			out[i] = is.DropResult{Err: err}
			if s.bug == bugBatchStopsAtKeyError {
				return out, nil // the keys after it: zero, and no error
			}
		}
	}
	return out, nil
}

// dropManyCountedFirst counts what each key's drop will remove under the read lock, then drops under
// the write lock and reports the counts.
func (s *store) dropManyCountedFirst(ns string, reqs []is.KeyID) ([]is.DropResult, error) {
	out := make([]is.DropResult, len(reqs))
	s.mu.RLock()
	closed := s.closed
	for i, r := range reqs {
		x := s.indexes[s.ident(ns, r.Key)]
		if x == nil || !x.poisoned {
			out[i].Dropped = uint64(s.cut(entriesOf(x), r.ID))
		}
	}
	s.mu.RUnlock()
	if closed {
		return nil, is.ErrClosed
	}
	runtime.Gosched()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, is.ErrClosed
	}
	for i, r := range reqs {
		var ignored uint64
		if err := s.updateLocked("drop many", ns, r.Key, s.keepsEmpty(), s.drop(r.ID, &ignored)); err != nil {
			out[i] = is.DropResult{Err: err}
		}
	}
	return out, nil
}

// dropManyRowLocks locks each index's row in the order of reqs, holding every one, then drops them
// all: a second batch that locks the same rows in another order waits on the first while the first
// waits on it.
func (s *store) dropManyRowLocks(ns string, reqs []is.KeyID) ([]is.DropResult, error) {
	var held []*sync.Mutex
	defer func() {
		for _, m := range held {
			m.Unlock()
		}
	}()
	for _, r := range reqs {
		m := s.rowLock(s.ident(ns, r.Key))
		m.Lock()
		held = append(held, m)
		runtime.Gosched()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, is.ErrClosed
	}
	out := make([]is.DropResult, len(reqs))
	for i, r := range reqs {
		if err := s.updateLocked("drop many", ns, r.Key, s.keepsEmpty(), s.drop(r.ID, &out[i].Dropped)); err != nil {
			out[i] = is.DropResult{Err: err}
		}
	}
	return out, nil
}

// rowLock is the lock of one index's row, made on first use.
func (s *store) rowLock(id ident) *sync.Mutex {
	s.rowMu.Lock()
	defer s.rowMu.Unlock()
	m := s.rows[id]
	if m == nil {
		m = new(sync.Mutex)
		s.rows[id] = m
	}
	return m
}

// perKey hides the reference store's optional methods but Capabilities (ClosestLast and the batches),
// so that the suite checks the per-key fallbacks of is.ClosestLast, is.ClosestLastMany and
// is.DropPrefixMany.
type perKey struct{ is.Storage }

func (p perKey) Capabilities() is.Capabilities { return is.CapabilitiesOf(p.Storage) }
