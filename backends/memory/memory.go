// Package memory is an in-process indexedstorage.Storage: a B-tree of keys per namespace, so that
// ScanStable seeks in O(log n), and a slice of entries per index. It is the reference backend for the
// conformance suite and the storage of unit tests; it keeps nothing across a restart.
package memory

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/google/btree"

	is "github.com/stratalog/strata/indexedstorage"
)

// Store is the memory backend. The zero value is not usable; call New.
type Store struct {
	mu         sync.RWMutex
	namespaces map[string]*namespace
	closed     bool
}

type namespace struct {
	keys    *btree.BTreeG[string]
	indexes map[string][]is.Entry // ascending ids, never empty
}

// New returns an empty Store. Unlike the other backends' New it takes no context, options or error:
// it does no I/O, has nothing to configure and cannot fail (gocloud's memblob.OpenBucket is the same),
// and tests build it inline by the dozen. NewBlobStore and NewScheduleStore follow it.
func New() *Store { return &Store{namespaces: make(map[string]*namespace)} }

var (
	_ is.Storage       = (*Store)(nil)
	_ is.BatchReader   = (*Store)(nil)
	_ is.BatchDropper  = (*Store)(nil)
	_ is.BatchAppender = (*Store)(nil)
)

// Capabilities: keys come back once each, ascending.
func (s *Store) Capabilities() is.Capabilities {
	return is.Capabilities{OrderedScan: true, UniqueScan: true}
}

// Close drops every index. Later calls return ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.namespaces = nil
	return nil
}

// backendName names this backend in its errors.
const backendName = "memory"

// fail is the one place this backend's errors take their shape: every error an operation returns
// goes through it.
func fail(op is.Operation, ns, key string, err error) error {
	return is.NewOpError(backendName, op, ns, key, err)
}

// read runs fn under the read lock with the index's entries (nil when missing), after validation.
func (s *Store) read(op is.Operation, ns, key string, fn func(entries []is.Entry)) error {
	if err := is.ValidateIndex(ns, key); err != nil {
		return fail(op, ns, key, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fail(op, ns, key, is.ErrClosed)
	}
	if n := s.namespaces[ns]; n != nil {
		fn(n.indexes[key])
	} else {
		fn(nil)
	}
	return nil
}

// write runs fn under the write lock; fn returns the index's new entries (empty removes the index).
func (s *Store) write(op is.Operation, ns, key string, fn func(entries []is.Entry) ([]is.Entry, error)) error {
	if err := is.ValidateIndex(ns, key); err != nil {
		return fail(op, ns, key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fail(op, ns, key, is.ErrClosed)
	}
	return fail(op, ns, key, s.update(ns, key, fn))
}

// update replaces the entries of one index by what fn returns, under the write lock the caller holds.
func (s *Store) update(ns, key string, fn func(entries []is.Entry) ([]is.Entry, error)) error {
	n := s.namespaces[ns]
	var old []is.Entry
	if n != nil {
		old = n.indexes[key]
	}
	updated, err := fn(old)
	if err != nil {
		return err
	}
	switch {
	case len(updated) == 0 && n != nil && old != nil:
		delete(n.indexes, key)
		n.keys.Delete(key)
	case len(updated) > 0:
		if n == nil {
			n = &namespace{keys: btree.NewG(32, func(a, b string) bool { return a < b }), indexes: map[string][]is.Entry{}}
			s.namespaces[ns] = n
		}
		if old == nil {
			n.keys.ReplaceOrInsert(key)
		}
		n.indexes[key] = updated
	}
	return nil
}

func (s *Store) Exists(_ context.Context, ns, key string) (exists bool, err error) {
	err = s.read(is.OpExists, ns, key, func(entries []is.Entry) { exists = len(entries) > 0 })
	return exists, err
}

func (s *Store) Append(_ context.Context, ns, key string, id uint64, value []byte) error {
	return s.appendEntries(is.OpAppend, ns, key, []is.Entry{{ID: id, Value: value}})
}

func (s *Store) AppendMany(_ context.Context, ns, key string, batch []is.Entry) error {
	return s.appendEntries(is.OpAppendMany, ns, key, batch)
}

func (s *Store) appendEntries(op is.Operation, ns, key string, batch []is.Entry) error {
	if err := is.ValidateBatch(batch); err != nil {
		return fail(op, ns, key, err)
	}
	return s.write(op, ns, key, appendUpdate(is.KeyEntries{Key: key, Entries: batch}))
}

// appendUpdate is the update of AppendMany(batch), ids already validated.
func appendUpdate(r is.KeyEntries) func(entries []is.Entry) ([]is.Entry, error) {
	return func(entries []is.Entry) ([]is.Entry, error) {
		if len(r.Entries) == 0 {
			return entries, nil
		}
		if n := len(entries); n > 0 && r.Bound() <= entries[n-1].ID {
			return nil, conflict(r.Bound(), entries[n-1].ID)
		}
		for _, e := range r.Entries {
			entries = append(entries, is.Entry{ID: e.ID, Value: slices.Clone(orEmpty(e.Value))})
		}
		return entries, nil
	}
}

func (s *Store) Length(_ context.Context, ns, key string) (n uint64, err error) {
	err = s.read(is.OpLength, ns, key, func(entries []is.Entry) { n = uint64(len(entries)) })
	return n, err
}

func (s *Store) Read(_ context.Context, ns, key string, from, to uint64) (out []is.Entry, err error) {
	lo, hi, ok := is.ClampRange(from, to)
	err = s.read(is.OpRead, ns, key, func(entries []is.Entry) {
		if !ok {
			return
		}
		for _, e := range entries[search(entries, lo):] {
			if e.ID > hi {
				break
			}
			out = append(out, copyEntry(e))
		}
	})
	return out, err
}

func (s *Store) First(_ context.Context, ns, key string) (is.Entry, bool, error) {
	e, found, _, _, err := s.closestLast(is.OpFirst, ns, key, 0)
	return e, found, err
}

func (s *Store) Last(_ context.Context, ns, key string) (last is.Entry, found bool, err error) {
	err = s.read(is.OpLast, ns, key, func(entries []is.Entry) {
		if n := len(entries); n > 0 {
			last, found = copyEntry(entries[n-1]), true
		}
	})
	return last, found, err
}

func (s *Store) LastID(_ context.Context, ns, key string) (id uint64, found bool, err error) {
	err = s.read(is.OpLastID, ns, key, func(entries []is.Entry) {
		if n := len(entries); n > 0 {
			id, found = entries[n-1].ID, true
		}
	})
	return id, found, err
}

func (s *Store) Closest(_ context.Context, ns, key string, id uint64) (is.Entry, bool, error) {
	e, found, _, _, err := s.closestLast(is.OpClosest, ns, key, id)
	return e, found, err
}

// ClosestLast reads both under one lock (is.ClosestLastReader).
func (s *Store) ClosestLast(_ context.Context, ns, key string, id uint64) (closest is.Entry, found bool, last uint64, exists bool, err error) {
	return s.closestLast(is.OpClosestLast, ns, key, id)
}

func (s *Store) closestLast(op is.Operation, ns, key string, id uint64) (closest is.Entry, found bool, last uint64, exists bool, err error) {
	var r is.ClosestLastResult
	err = s.read(op, ns, key, func(entries []is.Entry) { r = closestLastOf(entries, id) })
	return r.Entry, r.Found, r.Last, r.Exists, err
}

// closestLastOf is ClosestLast of one index's entries.
func closestLastOf(entries []is.Entry, id uint64) (r is.ClosestLastResult) {
	if i := search(entries, id); i < len(entries) {
		r.Entry, r.Found = copyEntry(entries[i]), true
	}
	if n := len(entries); n > 0 {
		r.Last, r.Exists = entries[n-1].ID, true
	}
	return r
}

// ClosestLastMany reads every key under one read lock (is.BatchReader).
func (s *Store) ClosestLastMany(_ context.Context, ns string, reqs []is.KeyID) ([]is.ClosestLastResult, error) {
	if err := is.ValidateBatchKeys(ns, reqs); err != nil {
		return nil, fail(is.OpClosestLastMany, ns, "", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, fail(is.OpClosestLastMany, ns, "", is.ErrClosed)
	}
	out := make([]is.ClosestLastResult, len(reqs))
	n := s.namespaces[ns]
	for i, r := range reqs {
		var entries []is.Entry
		if n != nil {
			entries = n.indexes[r.Key]
		}
		out[i] = closestLastOf(entries, r.ID)
	}
	return out, nil
}

func (s *Store) DropPrefix(_ context.Context, ns, key string, upTo uint64) (dropped uint64, err error) {
	err = s.write(is.OpDropPrefix, ns, key, dropPrefix(upTo, &dropped))
	return dropped, err
}

// DropPrefixMany drops every key's prefix under one write lock (is.BatchDropper).
func (s *Store) DropPrefixMany(_ context.Context, ns string, reqs []is.KeyID) ([]is.DropResult, error) {
	if err := is.ValidateBatchKeys(ns, reqs); err != nil {
		return nil, fail(is.OpDropPrefixMany, ns, "", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fail(is.OpDropPrefixMany, ns, "", is.ErrClosed)
	}
	out := make([]is.DropResult, len(reqs))
	for i, r := range reqs {
		if err := s.update(ns, r.Key, dropPrefix(r.ID, &out[i].Dropped)); err != nil {
			out[i] = is.DropResult{Err: fail(is.OpDropPrefixMany, ns, r.Key, err)}
		}
	}
	return out, nil
}

// AppendKeys appends every key's entries under one write lock (is.BatchAppender).
func (s *Store) AppendKeys(_ context.Context, ns string, reqs []is.KeyEntries) ([]error, error) {
	if err := is.ValidateAppendKeys(ns, reqs); err != nil {
		return nil, fail(is.OpAppendKeys, ns, "", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fail(is.OpAppendKeys, ns, "", is.ErrClosed)
	}
	out := make([]error, len(reqs))
	for i, r := range reqs {
		if len(r.Entries) == 0 {
			continue // AppendMany of nothing touches nothing, an absent index included
		}
		if err := s.update(ns, r.Key, appendUpdate(r)); err != nil {
			out[i] = fail(is.OpAppendKeys, ns, r.Key, err)
		}
	}
	return out, nil
}

// dropPrefix is the update of DropPrefix(upTo), which counts what it removed in dropped.
func dropPrefix(upTo uint64, dropped *uint64) func(entries []is.Entry) ([]is.Entry, error) {
	return func(entries []is.Entry) ([]is.Entry, error) {
		cut := search(entries, upTo+1)
		if upTo >= is.MaxID {
			cut = len(entries)
		}
		*dropped = uint64(cut)
		// Copy the survivors so the dropped values are not kept alive by the backing array.
		return slices.Clone(entries[cut:]), nil
	}
}

func (s *Store) Delete(_ context.Context, ns, key string) error {
	return s.write(is.OpDelete, ns, key, func([]is.Entry) ([]is.Entry, error) { return nil, nil })
}

// Scan pages by position: cursor is how many matching keys earlier calls walked past.
func (s *Store) Scan(_ context.Context, ns, prefix string, cursor uint64, count int) (next uint64, keys []string, err error) {
	if err := is.ValidateScan(ns, prefix, count); err != nil {
		return 0, nil, fail(is.OpScan, ns, "", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, nil, fail(is.OpScan, ns, "", is.ErrClosed)
	}
	skip := cursor
	more := false
	s.ascend(ns, is.PrefixRange(prefix), prefix, func(key string) bool {
		if skip > 0 {
			skip--
			return true
		}
		if len(keys) == count {
			more = true
			return false
		}
		keys = append(keys, key)
		return true
	})
	if more {
		next = cursor + uint64(len(keys))
	}
	return next, keys, nil
}

// ScanStable seeks past the marker of the last page in the namespace's B-tree.
func (s *Store) ScanStable(_ context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	if err := is.ValidateScanRange(ns, r, count); err != nil {
		return is.Page{}, fail(is.OpScanStable, ns, "", err)
	}
	marker, start, err := from.Marker()
	if err != nil {
		return is.Page{}, fail(is.OpScanStable, ns, "", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return is.Page{}, fail(is.OpScanStable, ns, "", is.ErrClosed)
	}
	seek := r.Start
	if !start && marker > seek {
		seek = marker
	}
	var page is.Page
	more := false
	s.ascend(ns, r, seek, func(key string) bool {
		if !start && key <= marker {
			return true
		}
		if len(page.Keys) == count {
			more = true
			return false
		}
		entries := s.namespaces[ns].indexes[key]
		page.Keys, page.LastIDs = append(page.Keys, key), append(page.LastIDs, entries[len(entries)-1].ID)
		return true
	})
	if more {
		page.Next = is.MarkerResume(page.Keys[len(page.Keys)-1])
	} else {
		page.Done = true
	}
	return page, nil
}

// ascend calls fn for the keys of ns from seek on while they lie in r and fn returns true. The caller
// holds the lock.
func (s *Store) ascend(ns string, r is.KeyRange, seek string, fn func(key string) bool) {
	n := s.namespaces[ns]
	if n == nil {
		return
	}
	n.keys.AscendGreaterOrEqual(seek, func(key string) bool {
		return (!r.Bounded() || key < r.End) && fn(key)
	})
}

// search returns the position of the first entry with an id ≥ id.
func search(entries []is.Entry, id uint64) int {
	i, _ := slices.BinarySearchFunc(entries, id, func(e is.Entry, id uint64) int {
		switch {
		case e.ID < id:
			return -1
		case e.ID > id:
			return 1
		}
		return 0
	})
	return i
}

func conflict(id, last uint64) error {
	return fmt.Errorf("%w: id %d is not above the index's last id %d", is.ErrConflict, id, last)
}

func copyEntry(e is.Entry) is.Entry { return is.Entry{ID: e.ID, Value: slices.Clone(orEmpty(e.Value))} }

// orEmpty keeps "an empty value" distinct from nil on every path, as the SQL backends store it.
func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
