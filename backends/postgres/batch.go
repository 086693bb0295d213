package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	is "github.com/stratalog/strata/indexedstorage"
)

// dropManyRows bounds how many entries one round of DropPrefixMany deletes in all, as dropBatch bounds
// each of DropPrefix's statements: keys past the bound (in the order of the request) wait for the next
// round, so a batch of many keys of many entries holds neither one huge statement's row locks nor its
// time. A round always takes its first key that fits dropBatch, so every round makes progress.
const dropManyRows = 4 * dropBatch

// prepareBatchSQL writes the statements of ClosestLastMany, DropPrefixMany and AppendKeys.
func (s *engine) prepareBatchSQL() {
	t := s.table
	// $1 namespace, $2 the keys, $3 the ids (NULL: above is.MaxID, where no entry can be). One statement,
	// so one snapshot: each key's closest entry and last id come from one state of its index. Each key
	// is two seeks of the primary key, as in sqlClosestLast: the LATERAL Limit over an Index Scan
	// (key = r.key AND id >= r.id) and the backward Index Only Scan of max(id). WITH ORDINALITY hands
	// the rows back in the request's order without a sort.
	s.sqlClosestLastMany = `SELECT r.ord, (SELECT max(i.id) FROM ` + t + ` AS i WHERE i.namespace = $1 AND i.key = r.key), c.id, c.value
	FROM unnest($2::text[], $3::bigint[]) WITH ORDINALITY AS r(key, id, ord)
	LEFT JOIN LATERAL (
		SELECT i.id, i.value FROM ` + t + ` AS i WHERE i.namespace = $1 AND i.key = r.key AND i.id >= r.id ORDER BY i.id LIMIT 1
	) AS c ON true
	ORDER BY r.ord`
	// $1 the lock prefix of the namespace (lockPrefix), $2 the keys: each key's lock, the very lock
	// queueLock takes for it, taken in ascending order of the lock's id. The Aggregate evaluates the
	// lock calls over the Sort, one at a time in its order (EXPLAIN VERBOSE: Aggregate, Output:
	// count(pg_advisory_xact_lock(...)), over Sort, Sort Key: hashtextextended(...)). A key's lock is
	// the hash of its name, so the order that makes two batches unable to deadlock is the order of the
	// hashes, not of the keys: two keys whose hashes collide share one lock, and in key order a batch
	// of a < m could wait for m while holding z's (= a's) lock that a batch of m < z waits for.
	s.sqlLockMany = `SELECT count(pg_catalog.pg_advisory_xact_lock(l.id)) FROM (
		SELECT pg_catalog.hashtextextended($1::text || u.key, 0) AS id FROM unnest($2::text[]) AS u(key) ORDER BY 1
	) AS l`
	// $1 namespace, $2 the keys, $3 their upTo (≤ is.MaxID, > 0), $4 dropBatch, $5 dropManyRows. Run
	// after sqlLockMany in the same transaction, so its snapshot is taken with every lock held: it sees
	// every Append that held a lock before. req counts each key's entries ≤ upTo, up to $4+1 (an
	// index-only seek); chosen is the keys of at most $4 entries, in request order while their running
	// total stays within $5; the DELETE removes every entry ≤ upTo of the chosen keys, each a range of
	// the primary key (Nested Loop over chosen, Index Scan with key = c.key AND id <= c.upto). A row
	// per key, in request order: ord, its count (n > $4: too many for one statement), whether it was
	// chosen, how many entries it lost.
	s.sqlDropMany = `WITH req AS MATERIALIZED (
		SELECT r.ord, r.key, r.upto, c.n FROM unnest($2::text[], $3::bigint[]) WITH ORDINALITY AS r(key, upto, ord)
		CROSS JOIN LATERAL (
			SELECT count(*) AS n FROM (
				SELECT 1 FROM ` + t + ` AS i WHERE i.namespace = $1 AND i.key = r.key AND i.id <= r.upto LIMIT $4 + 1
			) AS b
		) AS c
	), chosen AS MATERIALIZED (
		SELECT w.ord, w.key, w.upto FROM (
			SELECT req.ord, req.key, req.upto, req.n, sum(req.n) FILTER (WHERE req.n <= $4) OVER (ORDER BY req.ord) AS running FROM req
		) AS w WHERE w.n <= $4 AND w.running <= $5
	), dropped AS (
		DELETE FROM ` + t + ` AS i USING chosen AS c
		WHERE i.namespace = $1 AND i.key = c.key AND i.id <= c.upto
		RETURNING c.ord
	)
	SELECT req.ord, req.n, chosen.ord IS NOT NULL, coalesce(d.n, 0)
	FROM req LEFT JOIN chosen ON chosen.ord = req.ord
	LEFT JOIN (SELECT dropped.ord, count(*) AS n FROM dropped GROUP BY dropped.ord) AS d ON d.ord = req.ord
	ORDER BY req.ord`
	// $1 namespace, $2 the keys, $3 their upTo, each at most dropBatch and dropManyRows in all: then the
	// ids alone bound the entries (distinct and positive, a key has at most upTo of them ≤ upTo), so
	// none is counted and every key is dropped at once; this is the usual batch, an archive's page of
	// tiny oplogs. Run after sqlLockMany as sqlDropMany is. A row per key that lost entries: its ord
	// and how many.
	s.sqlDropManyWithin = `WITH dropped AS (
		DELETE FROM ` + t + ` AS i USING unnest($2::text[], $3::bigint[]) WITH ORDINALITY AS c(key, upto, ord)
		WHERE i.namespace = $1 AND i.key = c.key AND i.id <= c.upto
		RETURNING c.ord
	)
	SELECT dropped.ord, count(*) FROM dropped GROUP BY dropped.ord`
	// $1 namespace, $2 the keys, $3 each key's bound (its first id, or Below), $4 the entries' ids, $5
	// their values, $6 the ordinal (1-based, into $2) of the key each entry belongs to. Run after
	// sqlLockMany in the same transaction, so its snapshot is taken with every key's lock held: req
	// reads each key's last id (a backward seek of the primary key) as sqlAppend does, and the INSERT
	// writes the entries of the keys whose bound is above it, each key's all or none. A row per key, in
	// request order: ord, its last id before the batch (NULL: none); the caller calls a key whose last
	// id is not below its bound a conflict, as AppendMany does.
	s.sqlAppendKeys = `WITH req AS MATERIALIZED (
		SELECT r.ord, r.key, r.first, (SELECT max(i.id) FROM ` + t + ` AS i WHERE i.namespace = $1 AND i.key = r.key) AS last
		FROM unnest($2::text[], $3::bigint[]) WITH ORDINALITY AS r(key, first, ord)
	), inserted AS (
		INSERT INTO ` + t + ` (namespace, key, id, value)
		SELECT $1, req.key, e.id, e.value
		FROM unnest($4::bigint[], $5::bytea[], $6::bigint[]) AS e(id, value, ord)
		JOIN req ON req.ord = e.ord
		WHERE req.last IS NULL OR req.last < req.first
		RETURNING 1
	)
	SELECT req.ord, req.last FROM req ORDER BY req.ord`
}

// ClosestLastMany is one statement for the whole batch (is.BatchReader): one round trip, one snapshot.
// Its parts cannot fail one by one (the table's schema refuses what could make one row unreadable), so
// a failure is the call's.
func (s *engine) ClosestLastMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.ClosestLastResult, error) {
	const op = is.OpClosestLastMany
	if err := s.start(op, ns, "", is.ValidateBatchKeys(ns, reqs)); err != nil {
		return nil, err
	}
	out := make([]is.ClosestLastResult, len(reqs))
	if len(reqs) == 0 {
		return out, nil
	}
	keys := make([]string, len(reqs))
	ids := make([]*int64, len(reqs))
	for i, r := range reqs {
		keys[i] = r.Key
		if r.ID <= is.MaxID {
			id := int64(r.ID)
			ids[i] = &id
		}
	}
	rows, _ := s.pool.Query(ctx, s.sqlClosestLastMany, ns, keys, ids)
	var ord int64
	var last, found *int64
	var value []byte
	n := 0
	_, err := pgx.ForEachRow(rows, []any{&ord, &last, &found, &value}, func() error {
		if ord < 1 || ord > int64(len(out)) {
			return fmt.Errorf("row of request %d in a batch of %d", ord, len(out))
		}
		r := &out[ord-1]
		if found != nil {
			if value == nil {
				value = []byte{}
			}
			r.Entry, r.Found = is.Entry{ID: uint64(*found), Value: value}, true
		}
		if last != nil {
			r.Last, r.Exists = uint64(*last), true
		}
		n++
		return nil
	})
	if err == nil && n != len(out) {
		err = fmt.Errorf("%d rows for a batch of %d", n, len(out))
	}
	if err != nil {
		return nil, s.fail(op, ns, "", err)
	}
	return out, nil
}

// DropPrefixMany drops the prefixes of a batch in one round trip and one transaction
// (is.BatchDropper): sqlLockMany takes every key's lock, in the order of the locks' ids, then
// sqlDropMany deletes, with a snapshot taken under the locks. Each key's part is DropPrefix's: atomic
// (all of a key's entries ≤ upTo go in one statement), linearizable against Append, Delete and
// DropPrefix of that key (the same per-index lock), and of two racing drops each entry is counted
// once (the second waits for the first's commit, and its snapshot no longer holds what the first
// deleted). It cannot be one statement: a statement's snapshot is taken before the locks it waits for,
// and would miss an Append committed meanwhile (DESIGN §10).
//
// The work is bounded as DropPrefix's: a key with more than dropBatch entries ≤ upTo is dropped on its
// own afterwards, by DropPrefix's batched transaction (dropInBatches); keys past dropManyRows entries in
// all go to a further round of the same kind. The usual batch (an archive page of agents, each a chunk
// or a few) is one round. The call fails only when its first round does, and then no key's drop took
// effect; a failure after that is the parts' own, each key not yet dropped failing with it.
func (s *engine) DropPrefixMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.DropResult, error) {
	const op = is.OpDropPrefixMany
	if err := s.startWrite(op, ns, "", is.ValidateBatchKeys(ns, reqs)); err != nil {
		return nil, err
	}
	out := make([]is.DropResult, len(reqs))
	var pending []int // indexes of reqs still to drop, in request order
	for i, r := range reqs {
		if r.ID > 0 { // DropPrefix(0) drops nothing
			pending = append(pending, i)
		}
	}
	var big []int // keys of more than dropBatch entries: dropInBatches each
	for round := 0; len(pending) > 0; round++ {
		deferred, large, err := s.dropRound(ctx, ns, reqs, pending, out)
		if err != nil {
			if round == 0 {
				return nil, s.fail(op, ns, "", err)
			}
			for _, i := range append(pending, big...) {
				out[i] = is.DropResult{Err: s.fail(op, ns, reqs[i].Key, err)}
			}
			return out, nil
		}
		pending, big = deferred, append(big, large...)
	}
	for _, i := range big {
		n, err := s.dropInBatches(ctx, ns, reqs[i].Key, int64(min(reqs[i].ID, is.MaxID)))
		out[i] = is.DropResult{Dropped: n, Err: s.fail(op, ns, reqs[i].Key, err)}
	}
	return out, nil
}

// dropRound is one round trip of DropPrefixMany over reqs[pending]: the locks, then the drop of the
// keys that fit (every key, with no count first, where their upTo alone bound them within dropBatch
// each and dropManyRows in all: sqlDropManyWithin), their counts written to out. It returns the keys
// left for a later round and those too large for one statement. Its error has not been through fail;
// on error nothing was dropped.
func (s *engine) dropRound(ctx context.Context, ns string, reqs []is.KeyID, pending []int, out []is.DropResult) (deferred, large []int, err error) {
	keys := make([]string, len(pending))
	upTo := make([]int64, len(pending))
	within, total := true, int64(0)
	for j, i := range pending {
		keys[j], upTo[j] = reqs[i].Key, int64(min(reqs[i].ID, is.MaxID))
		within, total = within && upTo[j] <= dropBatch, total+upTo[j]
	}
	within = within && total <= dropManyRows
	// One implicit transaction: the batch's statements share one Sync.
	var b pgx.Batch
	b.Queue(s.sqlLockMany, s.lockPrefix(ns), keys)
	if within {
		b.Queue(s.sqlDropManyWithin, ns, keys, upTo)
	} else {
		b.Queue(s.sqlDropMany, ns, keys, upTo, dropBatch, dropManyRows)
	}
	br := s.pool.SendBatch(ctx, &b)
	var locked int64
	err = br.QueryRow().Scan(&locked)
	if err == nil && locked != int64(len(keys)) {
		err = fmt.Errorf("took %d locks for a batch of %d", locked, len(keys))
	}
	type row struct {
		n, dropped int64
		chosen     bool
	}
	got := make([]row, 0, len(pending))
	switch {
	case err != nil:
	case within:
		got = got[:len(pending)]
		for j := range got {
			got[j].chosen = true
		}
		var ord, dropped int64
		rows, _ := br.Query()
		_, err = pgx.ForEachRow(rows, []any{&ord, &dropped}, func() error {
			if ord < 1 || ord > int64(len(got)) || got[ord-1].dropped != 0 {
				return fmt.Errorf("row of request %d in a batch of %d", ord, len(got))
			}
			got[ord-1].dropped = dropped
			return nil
		})
	default:
		var ord int64
		var r row
		rows, _ := br.Query()
		_, err = pgx.ForEachRow(rows, []any{&ord, &r.n, &r.chosen, &r.dropped}, func() error {
			if ord != int64(len(got)+1) {
				return fmt.Errorf("row of request %d where %d was next", ord, len(got)+1)
			}
			got = append(got, r)
			return nil
		})
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err == nil && len(got) != len(pending) {
		err = fmt.Errorf("%d rows for a batch of %d", len(got), len(pending))
	}
	if err != nil {
		return nil, nil, err
	}
	for j, i := range pending {
		switch r := got[j]; {
		case r.chosen:
			out[i].Dropped = uint64(r.dropped)
		case r.n > dropBatch:
			large = append(large, i)
		default:
			deferred = append(deferred, i)
		}
	}
	return deferred, large, nil
}

// AppendKeys appends the entries of a batch of keys in one round trip and one transaction
// (is.BatchAppender): sqlLockMany takes the lock of every key with entries, in the order of the locks'
// ids as DropPrefixMany does (two batches never deadlock, nor a batch and a drop), then sqlAppendKeys
// reads each key's last id and inserts, with a snapshot taken under the locks. Each key's part is
// AppendMany's: its conflict check and insert are one step under the index's lock, all of its entries
// or none, and a key whose first id is not above its last id fails alone with ErrConflict naming that
// id. The call's error means the transaction failed: no key's entries were written.
func (s *engine) AppendKeys(ctx context.Context, ns string, reqs []is.KeyEntries) ([]error, error) {
	const op = is.OpAppendKeys
	if err := s.startWrite(op, ns, "", is.ValidateAppendKeys(ns, reqs)); err != nil {
		return nil, err
	}
	out := make([]error, len(reqs))
	var keys []string
	var firsts []int64
	var parts []int // the index into reqs of each key sent, in the order sent
	var ids, ords []int64
	var values [][]byte
	for i, r := range reqs {
		if len(r.Entries) == 0 {
			continue // AppendMany of nothing touches nothing
		}
		parts = append(parts, i)
		keys = append(keys, r.Key)
		firsts = append(firsts, int64(r.Bound()))
		for _, e := range r.Entries {
			ids = append(ids, int64(e.ID))
			values = append(values, orEmpty(e.Value))
			ords = append(ords, int64(len(parts)))
		}
	}
	if len(parts) == 0 {
		return out, nil
	}
	// One implicit transaction: the batch's statements share one Sync, so one commit.
	var b pgx.Batch
	b.Queue(s.sqlLockMany, s.lockPrefix(ns), keys)
	b.Queue(s.sqlAppendKeys, ns, keys, firsts, ids, values, ords)
	br := s.pool.SendBatch(ctx, &b)
	var locked int64
	err := br.QueryRow().Scan(&locked)
	if err == nil && locked != int64(len(keys)) {
		err = fmt.Errorf("took %d locks for a batch of %d", locked, len(keys))
	}
	lasts := make([]*int64, 0, len(parts))
	if err == nil {
		var ord int64
		var last *int64
		rows, _ := br.Query()
		_, err = pgx.ForEachRow(rows, []any{&ord, &last}, func() error {
			if ord != int64(len(lasts)+1) {
				return fmt.Errorf("row of request %d where %d was next", ord, len(lasts)+1)
			}
			lasts = append(lasts, last)
			return nil
		})
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err == nil && len(lasts) != len(parts) {
		err = fmt.Errorf("%d rows for a batch of %d", len(lasts), len(parts))
	}
	if err != nil {
		return nil, s.fail(op, ns, "", err)
	}
	for j, i := range parts {
		if last := lasts[j]; last != nil && *last >= firsts[j] {
			out[i] = s.fail(op, ns, reqs[i].Key, fmt.Errorf("%w: id %d is not above the index's last id %d", is.ErrConflict, firsts[j], *last))
		}
	}
	return out, nil
}

// orEmpty is a value as the table stores it: the column is NOT NULL, so a nil value is stored empty.
func orEmpty(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return v
}
