package sqlitefile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"

	is "github.com/stratalog/strata/indexedstorage"
)

// The per-index operations. The caller has validated the index (and a batch, a range, a count) and
// checked that it is open; each method returns the engine's error as it is, for the caller's choke
// point to classify (Classify) and name. A read's error has been through settled.

const (
	qExists  = `SELECT 1 FROM index_storage WHERE namespace = ? AND key = ? LIMIT 1`
	qLastID  = `SELECT id FROM index_storage WHERE namespace = ? AND key = ? ORDER BY id DESC LIMIT 1`
	qInsert  = `INSERT INTO index_storage (namespace, key, id, value) VALUES (?, ?, ?, ?)`
	qLength  = `SELECT COUNT(*) FROM index_storage WHERE namespace = ? AND key = ?`
	qRead    = `SELECT id, value FROM index_storage WHERE namespace = ? AND key = ? AND id >= ? AND id <= ? ORDER BY id`
	qClosest = `SELECT id, value FROM index_storage WHERE namespace = ? AND key = ? AND id >= ? ORDER BY id LIMIT 1`
	qLast    = `SELECT id, value FROM index_storage WHERE namespace = ? AND key = ? ORDER BY id DESC LIMIT 1`
	// One statement, so one snapshot: the last id and the closest entry of one state of the index.
	qClosestLast = `SELECT (SELECT id FROM index_storage WHERE namespace = ?1 AND key = ?2 ORDER BY id DESC LIMIT 1), c.id, c.value
	FROM (SELECT 1) LEFT JOIN (SELECT id, value FROM index_storage WHERE namespace = ?1 AND key = ?2 AND id >= ?3 ORDER BY id LIMIT 1) AS c ON 1`
	qDrop   = `DELETE FROM index_storage WHERE namespace = ? AND key = ? AND id <= ?`
	qDelete = `DELETE FROM index_storage WHERE namespace = ? AND key = ?`
)

// write runs fn in a BEGIN IMMEDIATE transaction on the writer: the write lock is held from the first
// read, so what fn checks still holds when it writes.
func (e *Engine) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if e.readOnly {
		return errReadOnly
	}
	tx, err := e.writer.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Exists reports whether the index has an entry.
func (e *Engine) Exists(ctx context.Context, ns, key string) (bool, error) {
	var one int
	err := e.reader.QueryRowContext(ctx, qExists, ns, key).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	if err := e.settled(err); err != nil {
		return false, err
	}
	return one == 1, nil
}

// Append adds entries, a valid batch of at least one, to the index: all of them, or none and an
// ErrConflict when the first id is not above the index's last.
func (e *Engine) Append(ctx context.Context, ns, key string, entries []is.Entry) error {
	return e.AppendKey(ctx, ns, is.KeyEntries{Key: key, Entries: entries})
}

// AppendKey is Append of r's entries, with ErrConflict when its Bound (the first id, or Below) is not
// above the index's last: one AppendKeys part in a transaction of its own.
func (e *Engine) AppendKey(ctx context.Context, ns string, r is.KeyEntries) error {
	return e.write(ctx, func(tx *sql.Tx) error {
		if err := above(tx.QueryRowContext(ctx, qLastID, ns, r.Key), r.Bound()); err != nil {
			return err
		}
		return insert(ctx, tx, ns, r.Key, r.Entries)
	})
}

// above checks first is above the index's last id, read by lastID (qLastID): nil if it is or the index
// is empty, else ErrConflict naming the last id, or the read's own error.
func above(lastID *sql.Row, first uint64) error {
	var last int64
	switch err := lastID.Scan(&last); {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return err
	case first <= uint64(last):
		return conflict(first, last)
	}
	return nil
}

// conflict is an append's ErrConflict: its first id is not above the index's last.
func conflict(first uint64, last int64) error {
	return fmt.Errorf("%w: id %d is not above the index's last id %d", is.ErrConflict, first, last)
}

// insertChunk is how many rows one multi-row INSERT writes: a batch costs one statement per chunk
// rather than one per entry, and 4 parameters a row stays far below SQLite's variable limit.
const insertChunk = 64

var qInsertChunk = func() string {
	var b strings.Builder
	b.WriteString(`INSERT INTO index_storage (namespace, key, id, value) VALUES (?, ?, ?, ?)`)
	for range insertChunk - 1 {
		b.WriteString(`, (?, ?, ?, ?)`)
	}
	return b.String()
}()

// insert writes one key's entries (insertParts of that key alone).
func insert(ctx context.Context, tx *sql.Tx, ns, key string, entries []is.Entry) error {
	return insertParts(ctx, tx, ns, []is.KeyEntries{{Key: key, Entries: entries}})
}

// insertParts writes the entries of parts, in order, in multi-row INSERTs of insertChunk rows that run
// across keys, then the remainder row by row, so that only two statement texts exist and both stay in
// the connection's statement cache.
func insertParts(ctx context.Context, tx *sql.Tx, ns string, parts []is.KeyEntries) error {
	args := make([]any, 0, 4*insertChunk)
	for _, p := range parts {
		for _, e := range p.Entries {
			args = append(args, ns, p.Key, int64(e.ID), orEmpty(e.Value))
			if len(args) == cap(args) {
				if err := insertRows(ctx, tx, qInsertChunk, args); err != nil {
					return err
				}
				args = args[:0]
			}
		}
	}
	for ; len(args) > 0; args = args[4:] {
		if err := insertRows(ctx, tx, qInsert, args[:4]); err != nil {
			return err
		}
	}
	return nil
}

// insertRows runs an INSERT of len(args)/4 rows and fails unless it wrote every one of them: a foreign
// trigger's RAISE(IGNORE) skips a row without an error, which would leave a key's part half written
// while it reports success.
func insertRows(ctx context.Context, tx *sql.Tx, query string, args []any) error {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err == nil && n != int64(len(args)/4) {
		err = fmt.Errorf("the insert wrote %d of %d rows (a trigger skipped some)", n, len(args)/4)
	}
	return err
}

// Length is how many entries the index holds.
func (e *Engine) Length(ctx context.Context, ns, key string) (uint64, error) {
	var n int64
	if err := e.settled(e.reader.QueryRowContext(ctx, qLength, ns, key).Scan(&n)); err != nil {
		return 0, err
	}
	return uint64(n), nil
}

// Read returns the entries with ids in [from, to], ascending.
func (e *Engine) Read(ctx context.Context, ns, key string, from, to uint64) ([]is.Entry, error) {
	lo, hi, ok := is.ClampRange(from, to)
	if !ok {
		return nil, nil
	}
	rows, err := e.reader.QueryContext(ctx, qRead, ns, key, int64(lo), int64(hi))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []is.Entry
	for rows.Next() {
		entry, err := scanEntry(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, entry)
	}
	if err := e.settled(rows.Err()); err != nil {
		return nil, err
	}
	return out, nil
}

// First returns the entry of the lowest id.
func (e *Engine) First(ctx context.Context, ns, key string) (is.Entry, bool, error) {
	return e.one(ctx, ns, key, qClosest, int64(0))
}

// Last returns the entry of the greatest id.
func (e *Engine) Last(ctx context.Context, ns, key string) (is.Entry, bool, error) {
	return e.one(ctx, ns, key, qLast)
}

// LastID reads the greatest id from the primary key's B-tree alone (one seek); the value is never read.
func (e *Engine) LastID(ctx context.Context, ns, key string) (uint64, bool, error) {
	var id int64
	err := e.reader.QueryRowContext(ctx, qLastID, ns, key).Scan(&id)
	found := err == nil
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	if err := e.settled(err); err != nil {
		return 0, false, err
	}
	return uint64(id), found, nil
}

// Closest returns the entry of the lowest id at or above id.
func (e *Engine) Closest(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, error) {
	if id > is.MaxID {
		return is.Entry{}, false, nil
	}
	return e.one(ctx, ns, key, qClosest, int64(id))
}

// ClosestLast is Closest and LastID in one statement, so of one state of the index
// (is.ClosestLastReader).
func (e *Engine) ClosestLast(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, uint64, bool, error) {
	if id > is.MaxID {
		last, exists, err := e.LastID(ctx, ns, key) // no entry can be at or above id
		return is.Entry{}, false, last, exists, err
	}
	var last, found sql.NullInt64
	var value []byte
	if err := e.settled(e.reader.QueryRowContext(ctx, qClosestLast, ns, key, int64(id)).Scan(&last, &found, &value)); err != nil {
		return is.Entry{}, false, 0, false, err
	}
	var entry is.Entry
	if found.Valid {
		entry = is.Entry{ID: uint64(found.Int64), Value: orEmpty(value)}
	}
	return entry, found.Valid, uint64(last.Int64), last.Valid, nil
}

// one runs a query for at most one entry of (ns, key); extra are the query's arguments after those two.
func (e *Engine) one(ctx context.Context, ns, key, query string, extra ...any) (is.Entry, bool, error) {
	entry, err := scanEntry(e.reader.QueryRowContext(ctx, query, append([]any{ns, key}, extra...)...))
	found := err == nil
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	if err := e.settled(err); err != nil {
		return is.Entry{}, false, err
	}
	return entry, found, nil
}

func scanEntry(row interface{ Scan(...any) error }) (is.Entry, error) {
	var id int64
	var value []byte
	if err := row.Scan(&id, &value); err != nil {
		return is.Entry{}, err
	}
	return is.Entry{ID: uint64(id), Value: orEmpty(value)}, nil
}

// DropPrefix removes the entries with ids up to upTo and returns how many it removed.
func (e *Engine) DropPrefix(ctx context.Context, ns, key string, upTo uint64) (uint64, error) {
	if upTo == 0 {
		return 0, nil
	}
	var dropped int64
	err := e.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, qDrop, ns, key, int64(min(upTo, is.MaxID)))
		if err != nil {
			return err
		}
		dropped, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	return uint64(dropped), nil
}

// Delete removes the index's entries.
func (e *Engine) Delete(ctx context.Context, ns, key string) error {
	return e.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, qDelete, ns, key)
		return err
	})
}

// qOnlyPrefix is true when the file's rows are all the index's with ids up to a bound, and it has one:
// the index's greatest id is at most the bound (a text or blob id sorts above every integer, so it
// is not), and no row of another index lies on either side of it in the primary key. Three seeks.
const qOnlyPrefix = `SELECT coalesce((SELECT max(id) FROM index_storage WHERE namespace = ? AND key = ?) <= ?, 0)
	AND NOT EXISTS (SELECT 1 FROM index_storage WHERE (namespace, key) < (?, ?))
	AND NOT EXISTS (SELECT 1 FROM index_storage WHERE (namespace, key) > (?, ?))`

// OnlyPrefix reports whether every row of the file is the index's, with an id up to upTo, and it has at
// least one: a drop up to upTo would leave the file without rows (multi-SQLite then removes the file
// with its rows rather than delete them first).
func (e *Engine) OnlyPrefix(ctx context.Context, ns, key string, upTo uint64) (only bool, err error) {
	bound := int64(min(upTo, is.MaxID))
	err = e.reader.QueryRowContext(ctx, qOnlyPrefix, ns, key, bound, ns, key, ns, key).Scan(&only)
	return only, err
}

// Empty reports whether the file holds no row at all, of any index (multi-SQLite removes a file only
// when it holds nothing).
func (e *Engine) Empty(ctx context.Context) (bool, error) {
	var one int
	switch err := e.reader.QueryRowContext(ctx, `SELECT 1 FROM index_storage LIMIT 1`).Scan(&one); {
	case errors.Is(err, sql.ErrNoRows):
		return true, nil
	case err != nil:
		return false, err
	}
	return false, nil
}

// The scans bound a literal prefix by the byte interval [prefix, PrefixEnd(prefix)) so that the
// primary key seeks; LIKE would treat '%' and '_' as patterns and GLOB '*', '?' and '['. The lower
// bound is a single term (the resume marker or the prefix, whichever is greater), so the planner
// cannot start the range at the prefix and filter its way up to the marker.
var (
	// scanStableQuery[strict][bounded]: strict is key > marker rather than key >= prefix; bounded adds
	// the prefix's end. GROUP BY key: one range read of the page's rows, the cheapest page where a key
	// holds one entry or a few (an archive layer's chunks). scanDeepQuery is ScanDeep's (walkQuery).
	scanStableQuery = [2][2]string{}
	scanDeepQuery   = [2][2]string{}
	// scanQuery[bounded] is the native, positional Scan.
	scanQuery = [2]string{}
)

// walkQuery is ScanDeep's page, a loose index scan (skip scan) of the primary key: ?1 namespace, ?2
// the lower bound, ?3 how many keys, ?4 the range's end when upper names it.
//
// Each step of the recursive CTE seeks to the first key above the one before (ORDER BY key LIMIT 1,
// NULL past the last), and each key's last id is the same seek as qLastID: a page costs two B-tree
// descents a key, however many entries a key holds, where GROUP BY key read every row of every key in
// the page. ORDER BY id DESC LIMIT 1 yields what max(id) did, a broken id included (a text id sorts
// above every integer in both), so keysWithLastIDs still drops the page's ids on it. One statement:
// the keys and their last ids are of one snapshot.
//
// EXPLAIN QUERY PLAN through this driver (SQLite 3.54.1): CO-ROUTINE walk, whose SETUP (the anchor)
// and RECURSIVE STEP (over SCAN walk) each run a scalar subquery that is SEARCH i USING PRIMARY KEY
// (namespace=? AND key>? AND key<?); each last id a CORRELATED SCALAR SUBQUERY, SEARCH i USING PRIMARY
// KEY (namespace=? AND key=?) with no sort (the B-tree read backward); and USE TEMP B-TREE FOR ORDER BY
// over the page's own rows only. No SCAN of index_storage.
//
// On keys of one entry this costs more than GROUP BY did (about 1.4 µs a key against 0.6 µs, walking
// 100,000 such keys in pages of 129 through this driver): two seeks a key instead of one row. A head
// of ?3+1 rows read in B-tree order before the walk, serving such pages from one range read, cost as
// much as it saved or more through the materialized CTEs it takes (1.5 to 2.5 µs a key), so the page
// is the walk alone, and ScanStable keeps GROUP BY: only a walk of deep keys (the primary layer's)
// takes this one.
func walkQuery(lower, upper string) string {
	return `WITH RECURSIVE walk (key, n) AS (
		SELECT (SELECT i.key FROM index_storage AS i WHERE i.namespace = ?1 AND ` + lower + upper + ` ORDER BY i.key LIMIT 1), 1
		UNION ALL
		SELECT (SELECT i.key FROM index_storage AS i WHERE i.namespace = ?1 AND i.key > walk.key` + upper + ` ORDER BY i.key LIMIT 1), walk.n + 1
		FROM walk WHERE walk.key IS NOT NULL AND walk.n < ?3
	)
	SELECT walk.key, (SELECT i.id FROM index_storage AS i WHERE i.namespace = ?1 AND i.key = walk.key ORDER BY i.id DESC LIMIT 1)
	FROM walk WHERE walk.key IS NOT NULL ORDER BY walk.key`
}

func init() {
	for strict, lower := range []string{"i.key >= ?2", "i.key > ?2"} {
		for bounded, upper := range []string{"", " AND i.key < ?4"} {
			scanStableQuery[strict][bounded] = `SELECT i.key, max(i.id) FROM index_storage AS i WHERE i.namespace = ?1 AND ` +
				lower + upper + ` GROUP BY i.key ORDER BY i.key LIMIT ?3`
			scanDeepQuery[strict][bounded] = walkQuery(lower, upper)
		}
	}
	for bounded, upper := range []string{"", " AND key < ?"} {
		scanQuery[bounded] = `SELECT DISTINCT key FROM index_storage WHERE namespace = ? AND key >= ?` +
			upper + ` ORDER BY key LIMIT ? OFFSET ?`
	}
}

// ScanStable is keyset paging: a page of the keys of ns in r after the key after (from r's start when
// after is ""), each page seeking past the last key of the one before, so keys deleted behind the walk
// shift nothing. Next is a MarkerResume of the page's last key. The caller has validated r and count,
// and after as a key.
func (e *Engine) ScanStable(ctx context.Context, ns string, r is.KeyRange, after string, count int) (is.Page, error) {
	return e.scanStable(ctx, &scanStableQuery, ns, r, after, count)
}

// ScanDeep is ScanStable with a loose index scan for a page (walkQuery): a page of deep keys costs
// its keys, not their entries (is.DeepScanner).
func (e *Engine) ScanDeep(ctx context.Context, ns string, r is.KeyRange, after string, count int) (is.Page, error) {
	return e.scanStable(ctx, &scanDeepQuery, ns, r, after, count)
}

// scanStable pages with queries[strict][bounded].
func (e *Engine) scanStable(ctx context.Context, queries *[2][2]string, ns string, r is.KeyRange, after string, count int) (is.Page, error) {
	lower, strict := r.Start, false
	if after != "" {
		lower, strict = r.After(after)
	}
	if r.Bounded() && lower >= r.End {
		return is.Page{Done: true}, nil
	}
	// One key more than the page tells whether the walk is done without another round trip (short of
	// the largest count, which no table can fill).
	args := []any{ns, lower, int64(min(count, math.MaxInt-1)) + 1}
	if r.Bounded() {
		args = append(args, r.End)
	}
	keys, ids, err := e.keysWithLastIDs(ctx, queries[b2i(strict)][b2i(r.Bounded())], count, args...)
	if err := e.settled(err); err != nil {
		return is.Page{}, err
	}
	if len(keys) <= count {
		return is.Page{Keys: keys, LastIDs: ids, Done: true}, nil
	}
	keys = keys[:count]
	if ids != nil {
		ids = ids[:count]
	}
	return is.Page{Keys: keys, LastIDs: ids, Next: is.MarkerResume(keys[count-1])}, nil
}

// Scan pages by position (LIMIT … OFFSET): cursor is how many matching keys earlier calls returned.
// The caller has validated ns, prefix and count.
func (e *Engine) Scan(ctx context.Context, ns, prefix string, cursor uint64, count int) (uint64, []string, error) {
	if cursor > is.MaxID-uint64(count) {
		return 0, nil, nil // past any table this engine can hold
	}
	end, bounded := is.PrefixEnd(prefix)
	args := []any{ns, prefix}
	if bounded {
		args = append(args, end)
	}
	args = append(args, int64(count)+1, int64(cursor))
	keys, err := e.keys(ctx, scanQuery[b2i(bounded)], count, args...)
	if err := e.settled(err); err != nil {
		return 0, nil, err
	}
	if len(keys) <= count {
		return 0, keys, nil
	}
	return cursor + uint64(count), keys[:count], nil
}

// keys runs a query for keys; count is the page size, to size the slice.
func (e *Engine) keys(ctx context.Context, query string, count int, args ...any) ([]string, error) {
	rows, err := e.reader.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	keys := make([]string, 0, min(count, 1024)+1)
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// keysWithLastIDs runs a query of (key, max(id)) rows. A max(id) that is no positive integer (a row a
// foreign writer broke, in a file from before the schema's CHECKs) drops the page's ids, not the page:
// the caller then reads each key's LastID, and that read fails for the broken index alone.
func (e *Engine) keysWithLastIDs(ctx context.Context, query string, count int, args ...any) ([]string, []uint64, error) {
	rows, err := e.reader.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	keys, ids := make([]string, 0, min(count, 1024)+1), make([]uint64, 0, min(count, 1024)+1)
	for rows.Next() {
		var k string
		var id any
		if err := rows.Scan(&k, &id); err != nil {
			return nil, nil, err
		}
		keys = append(keys, k)
		if n, ok := id.(int64); ok && n > 0 && ids != nil {
			ids = append(ids, uint64(n))
		} else {
			ids = nil
		}
	}
	return keys, ids, rows.Err()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// orEmpty stores a nil value as an empty blob (the column is NOT NULL) and hands an empty value back
// as a non-nil empty slice, as the memory backend does.
func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
