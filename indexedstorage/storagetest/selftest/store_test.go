package selftest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	is "github.com/stratalog/strata/indexedstorage"
)

// store is the reference: a plain, obviously correct indexedstorage.Storage (one map of indexes, keys
// sorted afresh for every scan) written to be easy to break in one place. Its bug field, when set,
// switches on exactly one defect at the line that would carry it in a real backend; the zero bug is
// the reference itself, which must pass the whole suite.
type store struct {
	bug bug
	*storage
	closed bool // guarded by storage.mu: Close of this handle
}

// storage is what outlives a handle: reopen hands a second store the same one.
type storage struct {
	mu      sync.RWMutex // guards the maps, the indexes in them and every handle's closed
	indexes map[ident]*index
	lastIDs map[ident]uint64 // the last id of each deleted index, in the lastIDOutlivesDelete mutant

	rowMu sync.Mutex            // guards rows
	rows  map[ident]*sync.Mutex // each index's row lock, in the batchLocksInRequestOrder mutant
}

// ident is what the store compares to tell two indexes apart. The reference compares namespace and
// key byte for byte; the folding mutants canonicalise the key first, as a collation would.
type ident struct{ ns, key string }

type index struct {
	ns, key  string     // as first written: what scans hand back
	entries  []is.Entry // ascending ids; empty only in the emptied-index mutants
	appended uint64     // entries appended since the index was created (Length in one mutant)
	first    is.Entry   // the first entry since the index was last empty (First in one mutant)
	poisoned bool       // Harness.Poison made its storage unreadable
}

func newStore(b bug) *store {
	return &store{bug: b, storage: &storage{indexes: map[ident]*index{}, lastIDs: map[ident]uint64{}, rows: map[ident]*sync.Mutex{}}}
}

// reopen returns a second handle on s's storage, as a restarted process opens the same file.
func (s *store) reopen() *store {
	if s.bug == bugReopenLosesEntries {
		return newStore(s.bug) // the writes stayed in the first handle's buffer
	}
	return &store{bug: s.bug, storage: s.storage}
}

var _ is.Storage = (*store)(nil)

// Capabilities declares ordered scans, like the memory backend, except in the mutant that stands for a
// backend declaring nothing.
func (s *store) Capabilities() is.Capabilities {
	if s.bug == bugResumeInclusiveUnordered {
		return is.Capabilities{}
	}
	return is.Capabilities{OrderedScan: true, UniqueScan: true}
}

// composed maps a few decomposed (NFD) letters to their composed (NFC) form: the normalisation a
// folding collation applies, enough for the keys a check would use.
var composed = strings.NewReplacer(
	"e\u0301", "é", "e\u0300", "è", "a\u0300", "à", "u\u0308", "ü", "o\u0308", "ö", "i\u0308", "ï", "n\u0303", "ñ", "c\u0327", "ç",
)

func (s *store) ident(ns, key string) ident {
	switch s.bug {
	case bugCaseFold:
		key = strings.ToLower(key)
	case bugTrailingSpaceFold:
		key = strings.TrimRight(key, " ")
	case bugNormalisationFold:
		key = composed.Replace(key)
	case bugNamespaceJoinedBySlash:
		return ident{"", ns + "/" + key}
	}
	return ident{ns, key}
}

func (s *store) poisonErr(op, ns, key string) error {
	if s.bug == bugPoisonIsTransient {
		return fmt.Errorf("selftest %s %s %q: %w: index storage is corrupt", op, ns, key, is.ErrTransient)
	}
	return fmt.Errorf("selftest %s %s %q: index storage is corrupt", op, ns, key)
}

// poison makes the existing index (ns, key) unreadable, for Harness.Poison.
func (s *store) poison(tb testing.TB, ns, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.indexes[s.ident(ns, key)]
	if x == nil {
		tb.Fatalf("poison: no index %s %q", ns, key)
	}
	x.poisoned = true
}

func (s *store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// view runs fn under the read lock with the index (nil when missing), after validation.
func (s *store) view(op, ns, key string, fn func(x *index)) error {
	if err := is.ValidateIndex(ns, key); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return is.ErrClosed
	}
	x := s.indexes[s.ident(ns, key)]
	if x != nil && x.poisoned {
		return s.poisonErr(op, ns, key)
	}
	fn(x)
	return nil
}

// entries returns the entries of x, nil for a missing index.
func entriesOf(x *index) []is.Entry {
	if x == nil {
		return nil
	}
	return x.entries
}

// update runs fn under the write lock with the index's entries and stores what it returns: empty
// removes the index unless keepEmpty (the emptied-index mutants).
func (s *store) update(op, ns, key string, keepEmpty bool, fn func(old []is.Entry) ([]is.Entry, error)) error {
	if err := is.ValidateIndex(ns, key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return is.ErrClosed
	}
	return s.updateLocked(op, ns, key, keepEmpty, fn)
}

// updateLocked is update's work, under the write lock the caller holds, after validation.
func (s *store) updateLocked(op, ns, key string, keepEmpty bool, fn func(old []is.Entry) ([]is.Entry, error)) error {
	id := s.ident(ns, key)
	x := s.indexes[id]
	if x != nil && x.poisoned {
		return s.poisonErr(op, ns, key)
	}
	old := entriesOf(x)
	updated, err := fn(old)
	if err != nil {
		return err
	}
	switch {
	case len(updated) == 0 && x != nil && !keepEmpty:
		delete(s.indexes, id)
	case len(updated) == 0 && x == nil:
		// Nothing to store and nothing stored: a missing index stays missing.
	case x == nil:
		s.indexes[id] = &index{ns: ns, key: key, entries: updated, appended: uint64(len(updated)), first: updated[0]}
	default:
		if len(old) == 0 {
			x.appended = 0
			if len(updated) > 0 {
				x.first = updated[0]
			}
		}
		if grown := len(updated) - len(old); grown > 0 {
			x.appended += uint64(grown)
		}
		x.entries = updated
	}
	return nil
}

func (s *store) Exists(ctx context.Context, ns, key string) (exists bool, err error) {
	if s.bug == bugCancelIsTransient && ctx.Err() != nil {
		return false, fmt.Errorf("%w: exists: %w", is.ErrTransient, ctx.Err())
	}
	err = s.view("exists", ns, key, func(x *index) {
		exists = x != nil && (len(x.entries) > 0 || s.bug == bugEmptiedIndexExists || s.bug == bugEmptyBatchCreatesIndex ||
			s.bug == bugClosestCreatesIndex)
	})
	return exists, err
}

func (s *store) Length(_ context.Context, ns, key string) (n uint64, err error) {
	err = s.view("length", ns, key, func(x *index) {
		switch {
		case x == nil:
		case s.bug == bugLengthNotDecrementedByDrop:
			n = x.appended
		case s.bug == bugLengthFromIDSpan && len(x.entries) > 0:
			n = x.entries[len(x.entries)-1].ID - x.entries[0].ID + 1 // as if ids were dense
		default:
			n = uint64(len(x.entries))
		}
	})
	return n, err
}

// out hands an entry to the caller: a copy of its value, unless alias (the aliasing mutants).
func out(e is.Entry, alias bool) is.Entry {
	if alias {
		return e
	}
	return is.Entry{ID: e.ID, Value: slices.Clone(orEmpty(e.Value))}
}

func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func (s *store) Read(_ context.Context, ns, key string, from, to uint64) (got []is.Entry, err error) {
	lo, hi, ok := is.ClampRange(from, to)
	if s.bug == bugReadUnclamped && int64(to) < 0 {
		ok = false // to bound as a signed parameter: ^uint64(0) is -1, and nothing is ≤ -1
	}
	err = s.view("read", ns, key, func(x *index) {
		if !ok {
			return
		}
		entries := entriesOf(x)
		for _, e := range entries[search(entries, lo):] {
			if e.ID > hi || (s.bug == bugReadExcludesTo && e.ID == hi) {
				break
			}
			got = append(got, out(e, s.bug == bugAliasRead))
		}
	})
	return got, err
}

func (s *store) First(_ context.Context, ns, key string) (first is.Entry, found bool, err error) {
	err = s.view("first", ns, key, func(x *index) {
		if entries := entriesOf(x); len(entries) > 0 {
			first, found = out(entries[0], s.bug == bugAliasFirstLast), true
			if s.bug == bugFirstNotMovedByDrop {
				first = out(x.first, false) // a cached first entry that only appends to an empty index set
			}
		}
	})
	return first, found, err
}

func (s *store) Last(_ context.Context, ns, key string) (last is.Entry, found bool, err error) {
	err = s.view("last", ns, key, func(x *index) {
		if entries := entriesOf(x); len(entries) > 0 {
			last, found = out(entries[len(entries)-1], s.bug == bugAliasFirstLast), true
		}
	})
	return last, found, err
}

func (s *store) LastID(_ context.Context, ns, key string) (id uint64, found bool, err error) {
	err = s.view("last id", ns, key, func(x *index) {
		if entries := entriesOf(x); len(entries) > 0 {
			id, found = entries[len(entries)-1].ID, true
		}
	})
	return id, found, err
}

func (s *store) Closest(_ context.Context, ns, key string, id uint64) (closest is.Entry, found bool, err error) {
	if s.bug == bugClosestCreatesIndex {
		// get-or-create on the read path: the lookup that Append uses, reused
		if err := s.createIndex(ns, key); err != nil {
			return is.Entry{}, false, err
		}
	}
	err = s.view("closest", ns, key, func(x *index) {
		entries := entriesOf(x)
		i := search(entries, id)
		if s.bug == bugClosestStrictlyAbove {
			i = search(entries, id+1)
		}
		if i < len(entries) {
			closest, found = out(entries[i], s.bug == bugAliasFirstLast), true
		}
	})
	return closest, found, err
}

func (s *store) ClosestLast(ctx context.Context, ns, key string, id uint64) (closest is.Entry, found bool, last uint64, exists bool, err error) {
	if s.bug == bugClosestLastTwoInstants {
		// The fallback's two calls, behind a method that claims one instant.
		if last, exists, err = s.LastID(ctx, ns, key); err != nil {
			return is.Entry{}, false, 0, false, err
		}
		runtime.Gosched()
		closest, found, err = s.Closest(ctx, ns, key, id)
		return closest, found, last, exists, err
	}
	err = s.view("closest last", ns, key, func(x *index) {
		entries := entriesOf(x)
		if i := search(entries, id); i < len(entries) {
			closest, found = out(entries[i], false), true
		}
		if n := len(entries); n > 0 {
			last, exists = entries[n-1].ID, true
		}
		if s.bug == bugClosestLastIsClosest && found {
			last = closest.ID // the entry found taken for the last one
		}
	})
	return closest, found, last, exists, err
}

func (s *store) Append(ctx context.Context, ns, key string, id uint64, value []byte) error {
	err := s.appendMany(ns, key, []is.Entry{{ID: id, Value: value}}, 0, s.bug != bugAliasAppend)
	if err == nil && s.bug == bugCancelledWriteApplied {
		return ctx.Err() // checked after the commit, not before
	}
	return err
}

func (s *store) AppendMany(_ context.Context, ns, key string, batch []is.Entry) error {
	return s.appendKey(ns, is.KeyEntries{Key: key, Entries: batch})
}

// appendKey is AppendMany of r's entries with its Below: AppendMany itself, and each part of
// AppendKeys.
func (s *store) appendKey(ns string, r is.KeyEntries) error {
	if len(r.Entries) == 0 && s.bug == bugEmptyBatchShortCircuits {
		return nil // nothing to write, so nothing to check
	}
	return s.appendMany(ns, r.Key, r.Entries, r.Below, s.bug != bugAliasAppendMany)
}

// appendMany appends batch; below, where set, is an AppendKeys part's Below, checked with the ids.
func (s *store) appendMany(ns, key string, batch []is.Entry, below uint64, copyValues bool) error {
	rows := make([]is.Entry, len(batch))
	for i, e := range batch {
		rows[i] = e
		if copyValues {
			rows[i].Value = slices.Clone(orEmpty(e.Value))
		}
	}
	switch s.bug {
	case bugNonAtomicAppendMany, bugLazyIDValidation:
		return s.appendRowByRow(ns, key, rows)
	case bugLostRacingAppend:
		return s.appendCheckThenWrite(ns, key, rows)
	case bugConflictOnlyOnEqualID:
		return s.appendUniqueIDs(ns, key, rows)
	}
	if err := is.ValidateBatch(rows); err != nil {
		return err
	}
	if len(rows) == 0 && s.bug == bugEmptyBatchCreatesIndex {
		return s.createIndex(ns, key)
	}
	return s.update("append", ns, key, false, func(old []is.Entry) ([]is.Entry, error) {
		if len(rows) == 0 {
			return old, nil
		}
		if err := above(is.KeyEntries{Entries: rows, Below: below}.Bound(), old); err != nil {
			return nil, err
		}
		if last, ok := s.lastIDs[s.ident(ns, key)]; ok && len(old) == 0 && rows[0].ID <= last {
			// Only the lastIDOutlivesDelete mutant fills lastIDs: a "last id" record beside the entries
			// that Delete forgets, so a re-created index still conflicts with the deleted one.
			return nil, fmt.Errorf("%w: id %d is not above the index's last id %d", is.ErrConflict, rows[0].ID, last)
		}
		return append(old, rows...), nil
	})
}

// createIndex upserts the index's own row before (here: instead of) writing its entries, as a schema
// with a table of indexes beside the table of entries might: an empty batch leaves an index behind.
func (s *store) createIndex(ns, key string) error {
	if err := is.ValidateIndex(ns, key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return is.ErrClosed
	}
	if id := s.ident(ns, key); s.indexes[id] == nil {
		s.indexes[id] = &index{ns: ns, key: key, entries: []is.Entry{}}
	}
	return nil
}

// above checks id may follow the entries.
func above(id uint64, entries []is.Entry) error {
	if n := len(entries); n > 0 && id <= entries[n-1].ID {
		return fmt.Errorf("%w: id %d is not above the index's last id %d", is.ErrConflict, id, entries[n-1].ID)
	}
	return nil
}

// appendRowByRow is a batch written as one statement per row, each its own transaction: what is
// written before a failing row stays written. bugNonAtomicAppendMany leaves the conflict between rows
// to the per-row check; bugLazyIDValidation checks each id's range only when binding its row.
func (s *store) appendRowByRow(ns, key string, rows []is.Entry) error {
	for i, e := range rows {
		if s.bug == bugNonAtomicAppendMany {
			if err := is.ValidateID(e.ID); err != nil {
				return err
			}
		} else if i > 0 && e.ID <= rows[i-1].ID {
			return fmt.Errorf("%w: entry %d has id %d, not above %d", is.ErrConflict, i, e.ID, rows[i-1].ID)
		}
	}
	for _, e := range rows {
		if s.bug == bugLazyIDValidation {
			if err := is.ValidateID(e.ID); err != nil {
				return err
			}
		}
		err := s.update("append", ns, key, false, func(old []is.Entry) ([]is.Entry, error) {
			if err := above(e.ID, old); err != nil {
				return nil, err
			}
			return append(old, e), nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// appendCheckThenWrite reads the last id under the read lock, lets go, and writes under the write lock
// what it read plus the batch: a racing append that lands in between passes the same check, and one of
// the two is lost.
func (s *store) appendCheckThenWrite(ns, key string, rows []is.Entry) error {
	if err := is.ValidateBatch(rows); err != nil {
		return err
	}
	var snapshot []is.Entry
	var conflict error
	if err := s.view("append", ns, key, func(x *index) {
		snapshot = entriesOf(x)
		if len(rows) > 0 {
			conflict = above(rows[0].ID, snapshot)
		}
	}); err != nil {
		return err
	}
	if conflict != nil || len(rows) == 0 {
		return conflict
	}
	return s.update("append", ns, key, false, func([]is.Entry) ([]is.Entry, error) {
		return append(slices.Clip(snapshot), rows...), nil
	})
}

// appendUniqueIDs is a table whose only guard is a primary key on the id: an id already held
// conflicts, a lower one that is free is inserted in its place.
func (s *store) appendUniqueIDs(ns, key string, rows []is.Entry) error {
	for _, e := range rows {
		if err := is.ValidateID(e.ID); err != nil {
			return err
		}
	}
	return s.update("append", ns, key, false, func(old []is.Entry) ([]is.Entry, error) {
		seen := map[uint64]bool{}
		for _, e := range old {
			seen[e.ID] = true
		}
		for _, e := range rows {
			if seen[e.ID] {
				return nil, fmt.Errorf("%w: duplicate id %d", is.ErrConflict, e.ID)
			}
			seen[e.ID] = true
		}
		merged := append(slices.Clone(old), rows...)
		slices.SortFunc(merged, func(a, b is.Entry) int { return cmpID(a.ID, b.ID) })
		return merged, nil
	})
}

// cut is how many leading entries DropPrefix(upTo) removes.
func (s *store) cut(entries []is.Entry, upTo uint64) int {
	switch {
	case s.bug == bugDropPrefixExclusive:
		return search(entries, upTo)
	case upTo >= is.MaxID && s.bug != bugDropPrefixUpToOverflow:
		return len(entries)
	}
	return search(entries, upTo+1) // overflows to 0 for upTo = 2^64-1 without the guard above
}

func (s *store) DropPrefix(_ context.Context, ns, key string, upTo uint64) (dropped uint64, err error) {
	switch s.bug {
	case bugPartialDrop:
		return s.dropRowByRow(ns, key, upTo)
	case bugDoubleCountedDrops:
		return s.dropCountedFirst(ns, key, upTo)
	}
	err = s.update("drop", ns, key, s.keepsEmpty(), s.drop(upTo, &dropped))
	return dropped, err
}

// keepsEmpty reports whether an emptied index stays behind (the emptied-index mutants).
func (s *store) keepsEmpty() bool {
	return s.bug == bugEmptiedIndexExists || s.bug == bugEmptiedIndexScanned
}

// drop is the update of DropPrefix(upTo), which counts what it removes in dropped.
func (s *store) drop(upTo uint64, dropped *uint64) func(old []is.Entry) ([]is.Entry, error) {
	return func(old []is.Entry) ([]is.Entry, error) {
		c := s.cut(old, upTo)
		*dropped = uint64(c)
		if s.bug == bugDropCountsRange && c > 0 {
			*dropped = old[c-1].ID - old[0].ID + 1 // as if ids were dense
		}
		return slices.Clone(old[c:]), nil
	}
}

// dropRowByRow removes one entry per write lock, letting readers in between.
func (s *store) dropRowByRow(ns, key string, upTo uint64) (dropped uint64, err error) {
	for {
		more := false
		err = s.update("drop", ns, key, false, func(old []is.Entry) ([]is.Entry, error) {
			if len(old) == 0 || old[0].ID > upTo {
				return old, nil
			}
			more = true
			return old[1:], nil
		})
		if err != nil || !more {
			return dropped, err
		}
		dropped++
	}
}

// dropCountedFirst counts what it will drop under the read lock, then drops under the write lock and
// reports the count: two racing drops both count the same entries.
func (s *store) dropCountedFirst(ns, key string, upTo uint64) (dropped uint64, err error) {
	if err := s.view("drop", ns, key, func(x *index) { dropped = uint64(s.cut(entriesOf(x), upTo)) }); err != nil {
		return 0, err
	}
	err = s.update("drop", ns, key, false, func(old []is.Entry) ([]is.Entry, error) {
		return slices.Clone(old[s.cut(old, upTo):]), nil
	})
	return dropped, err
}

func (s *store) Delete(_ context.Context, ns, key string) error {
	if s.bug != bugDeleteSkipsValidation {
		if err := is.ValidateIndex(ns, key); err != nil {
			return err
		}
	}
	if s.bug == bugNonLinearizableDelete {
		return s.deleteSnapshot(ns, key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed && s.bug != bugDeleteIgnoresClose {
		return is.ErrClosed
	}
	id := s.ident(ns, key)
	if x := s.indexes[id]; x != nil && len(x.entries) > 0 && s.bug == bugLastIDOutlivesDelete {
		s.lastIDs[id] = x.entries[len(x.entries)-1].ID
	}
	delete(s.indexes, id) // poisoned or not: the index is gone
	return nil
}

// deleteSnapshot is PostgreSQL's DELETE under READ COMMITTED: it removes the rows it saw when it
// started, so an Append committed while it runs survives it.
func (s *store) deleteSnapshot(ns, key string) error {
	seen := map[uint64]bool{}
	if err := s.view("delete", ns, key, func(x *index) {
		for _, e := range entriesOf(x) {
			seen[e.ID] = true
		}
	}); err != nil {
		return err
	}
	return s.update("delete", ns, key, false, func(old []is.Entry) ([]is.Entry, error) {
		var kept []is.Entry
		for _, e := range old {
			if !seen[e.ID] {
				kept = append(kept, e)
			}
		}
		return kept, nil
	})
}

// listed is one key a scan sees.
type listed struct {
	key           string
	poisoned      bool
	first, lastID uint64 // of a healthy index
}

// keysLocked returns the keys of ns in r, ascending. The caller holds a lock.
func (s *store) keysLocked(ns string, r is.KeyRange) []listed {
	if !r.Bounded() && r.Start != "" && s.bug == bugPrefixEndUnbounded {
		// A range with no end (the range of a prefix made only of U+10FFFF, or one a caller left
		// open) is taken for an empty interval instead of [start, ∞).
		return nil
	}
	match := func(key string) bool {
		switch s.bug {
		case bugRangeEndInclusive:
			return key >= r.Start && (!r.Bounded() || key <= r.End)
		case bugRangeStartExclusive:
			return key > r.Start && (!r.Bounded() || key < r.End)
		case bugUnescapedPrefix:
			if r == is.PrefixRange(r.Start) {
				// A backend that recognises a prefix's range and matches it with LIKE.
				return like(key, r.Start+"%")
			}
		}
		return r.Contains(key)
	}
	var keys []listed
	for _, x := range s.indexes {
		key, inNS := x.key, x.ns == ns
		if s.bug == bugNamespaceJoinedBySlash {
			// One flat keyspace of ns + "/" + key, scanned by the prefix ns + "/": the keys of a
			// namespace that ns is a prefix of come back as keys of ns.
			flat := x.ns + "/" + x.key
			key, inNS = strings.TrimPrefix(flat, ns+"/"), strings.HasPrefix(flat, ns+"/")
		}
		if !inNS || (len(x.entries) == 0 && !x.poisoned && s.bug != bugEmptiedIndexScanned) {
			continue
		}
		if match(key) {
			l := listed{key: key, poisoned: x.poisoned}
			if entries := entriesOf(x); len(entries) > 0 {
				l.first, l.lastID = entries[0].ID, entries[len(entries)-1].ID
			}
			keys = append(keys, l)
		}
	}
	slices.SortFunc(keys, func(a, b listed) int { return strings.Compare(a.key, b.key) })
	return keys
}

func (s *store) Scan(_ context.Context, ns, prefix string, cursor uint64, count int) (next uint64, keys []string, err error) {
	if err := is.ValidateScan(ns, prefix, count); err != nil {
		return 0, nil, err
	}
	return s.positional(ns, is.PrefixRange(prefix), cursor, count)
}

// positional pages the keys of ns in r by position: cursor is how many keys earlier pages returned.
func (s *store) positional(ns string, r is.KeyRange, cursor uint64, count int) (next uint64, keys []string, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, nil, is.ErrClosed
	}
	all := s.keysLocked(ns, r)
	if cursor >= uint64(len(all)) {
		return 0, nil, nil
	}
	end := min(cursor+uint64(count), uint64(len(all)))
	for _, k := range all[cursor:end] {
		keys = append(keys, k.key)
	}
	if end < uint64(len(all)) {
		next = end
	}
	return next, keys, nil
}

func (s *store) ScanStable(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	page, err := s.scanStable(ns, r, from, count)
	if err == nil && s.bug == bugDeadContextPassesOver && ctx.Err() != nil {
		// Each index's read failed with the caller's context error, taken for the index's own fault.
		for _, k := range page.Keys {
			page.Unreadable = append(page.Unreadable, is.Unreadable{Key: k, Where: k, Err: ctx.Err()})
		}
		page.Keys, page.LastIDs = nil, nil
	}
	return page, err
}

func (s *store) scanStable(ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	if err := is.ValidateScanRange(ns, r, count); err != nil {
		return is.Page{}, err
	}
	if s.bug == bugPositionalResume {
		return s.scanByOffset(ns, r, from, count)
	}
	marker, start, err := from.Marker()
	if err != nil {
		if s.bug != bugForeignTokenRestarts {
			return is.Page{}, err
		}
		start = true // a token it cannot read starts the walk over
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return is.Page{}, is.ErrClosed
	}
	limit := count
	if s.bug == bugPageOverCount {
		limit = count + 1 // the look-ahead row that tells whether there is more, handed back with the page
	}
	keys := s.keysLocked(ns, r)
	if !start && s.bug == bugResumeLosesDeletedMarker && !slices.ContainsFunc(keys, func(k listed) bool { return k.key == marker }) {
		// The marker is looked up as a key to continue after; when the caller has deleted it, there is
		// nothing to continue after, and the walk ends.
		return is.Page{Done: true}, nil
	}
	var page is.Page
	more, last := false, marker
	for _, k := range keys {
		if !start && (k.key < marker || (k.key == marker && !s.resumesInclusive())) {
			continue
		}
		if len(page.Keys)+len(page.Unreadable) == limit {
			more = true
			break
		}
		if !k.poisoned || s.bug != bugUnreadableNotAdvanced {
			last = k.key // the mutant moves its marker past the keys it hands back only
		}
		if !k.poisoned {
			page.Keys = append(page.Keys, k.key)
			id := k.lastID
			if s.bug == bugPageFirstIDs {
				id = k.first // min(id) for max(id) in the page's GROUP BY
			}
			page.LastIDs = append(page.LastIDs, id)
			continue
		}
		err := s.poisonErr("scan", ns, k.key)
		if s.bug == bugPoisonFailsPage {
			return is.Page{}, err
		}
		page.Unreadable = append(page.Unreadable, is.Unreadable{Key: k.key, Where: "index " + k.key, Err: err})
	}
	if more {
		page.Next = is.MarkerResume(last)
	} else {
		page.Done = true
	}
	return page, nil
}

func (s *store) resumesInclusive() bool {
	return s.bug == bugResumeInclusive || s.bug == bugResumeInclusiveUnordered
}

// scanByOffset resumes at a position, as Scan does: a key deleted before the cursor shifts every later
// key one place back, and the next page starts one key too far.
func (s *store) scanByOffset(ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	offset, _, err := from.Cursor()
	if err != nil {
		return is.Page{}, err
	}
	next, keys, err := s.positional(ns, r, offset, count)
	if err != nil {
		return is.Page{}, err
	}
	if next == 0 {
		return is.Page{Keys: keys, Done: true}, nil
	}
	return is.Page{Keys: keys, Next: is.CursorResume(next)}, nil
}

// like reports whether s matches the SQL LIKE pattern p, in which '_' stands for any one character and
// '%' for any run of them; there is no escape character.
func like(s, p string) bool {
	for p != "" {
		switch p[0] {
		case '%':
			p = p[1:]
			for i := 0; ; {
				if like(s[i:], p) {
					return true
				}
				if i == len(s) {
					return false
				}
				_, n := utf8.DecodeRuneInString(s[i:])
				i += n
			}
		case '_':
			if s == "" {
				return false
			}
			_, n := utf8.DecodeRuneInString(s)
			s, p = s[n:], p[1:]
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
			s, p = s[1:], p[1:]
		}
	}
	return s == ""
}

// search returns the position of the first entry with an id ≥ id.
func search(entries []is.Entry, id uint64) int {
	i, _ := slices.BinarySearchFunc(entries, id, func(e is.Entry, id uint64) int { return cmpID(e.ID, id) })
	return i
}

func cmpID(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
