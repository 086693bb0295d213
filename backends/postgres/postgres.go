// Package postgres is the PostgreSQL indexedstorage.Storage, on a pgx/v5 connection pool.
//
// Every index lives in one table, index_storage(namespace, key, id, value), whose primary key
// (namespace, key, id) serves both the per-index reads and the key walks. The table is created by an
// embedded, versioned migration that New applies under an advisory lock, so any number of processes may
// start at once. Every statement names its schema: the package never relies on search_path.
//
// Mutations are serialized per index by a transaction-scoped advisory lock taken in the same
// transaction as the guarded INSERT or the DELETE, sent together in one round trip. ScanStable is
// keyset paging over the primary key, bounded by the byte interval of the prefix, so it seeks instead
// of skipping and is safe while the caller deletes the keys it walks; ScanDeep (is.DeepScanner) seeks
// from key to key within a page too (a loose index scan), so that a page of deep keys costs its keys,
// not their entries.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	is "github.com/stratalog/strata/indexedstorage"
)

// DefaultSchema is the schema used when neither Options nor the URL names one.
const DefaultSchema = "public"

// tableName is the table the migration creates in the schema.
const tableName = "index_storage"

// dropBatch is how many entries one DELETE statement of DropPrefix removes. The batches share one
// transaction, so the drop stays atomic; the bound keeps each statement's work, and the time between
// two checks of the caller's context, short when an oplog of millions of entries is dropped at once.
const dropBatch = 5000

// maxPage bounds the rows one key query asks for, whatever count a caller passes; a larger count gets
// pages of maxPage keys, which the contract allows.
const maxPage = 1 << 20

// Store is the Postgres backend: the engine under its own concurrency limit, max_concurrent_ops, on
// which every caller sharing the Store queues (first come, first served), so that no one of them (the
// invocation path, the archive layers, the sweep) takes the whole pool. LimiterStats reports the
// limit's counters (indexedstorage.Limited). It is safe for concurrent use.
type Store struct {
	engine  *engine
	limiter *is.Limiter // is.Limit(engine, max_concurrent_ops): every operation but Close goes through it
}

var (
	_ is.Storage           = (*Store)(nil)
	_ is.ClosestLastReader = (*Store)(nil)
	_ is.DeepScanner       = (*Store)(nil)
	_ is.BatchReader       = (*Store)(nil)
	_ is.BatchDropper      = (*Store)(nil)
	_ is.Limited           = (*Store)(nil)
)

// engine is the store itself, unlimited: the SQL of every operation.
type engine struct {
	pool   *pgxpool.Pool
	schema string
	table  string
	closed atomic.Bool
	// readOnly: made by OpenExisting, the Store refuses writes.
	readOnly bool

	sqlExists, sqlLength, sqlAppend, sqlRead, sqlFirstFrom, sqlClosestLast, sqlLast, sqlLastID, sqlDropBatch, sqlDropAll, sqlDelete string
	// sqlPage[strict][bounded] is ScanStable's page (see pageSQL), sqlWalk[strict][bounded] ScanDeep's
	// (see walkSQL), sqlScan[bounded] Scan's (see scanSQL).
	sqlPage, sqlWalk [2][2]string
	sqlScan          [2]string
	// The batch operations' statements (batch.go).
	sqlClosestLastMany, sqlLockMany, sqlDropMany, sqlDropManyWithin, sqlAppendKeys string
}

var (
	_ is.Storage       = (*engine)(nil)
	_ is.BatchReader   = (*engine)(nil)
	_ is.BatchDropper  = (*engine)(nil)
	_ is.BatchAppender = (*engine)(nil)
)

func newEngine(ctx context.Context, poolConfig *pgxpool.Config, schema string) (*engine, error) {
	pool, err := newPool(ctx, poolConfig)
	if err != nil {
		return nil, fmt.Errorf("postgres: open pool: %w", classify(err))
	}
	if err := migrate(ctx, pool, schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: migrate schema %q: %w", schema, classify(err))
	}
	s := &engine{pool: pool, schema: schema, table: pgx.Identifier{schema, tableName}.Sanitize()}
	s.prepareSQL()
	return s, nil
}

func (s *engine) prepareSQL() {
	t := s.table
	s.sqlExists = `SELECT EXISTS (SELECT 1 FROM ` + t + ` WHERE namespace = $1 AND key = $2)`
	s.sqlLength = `SELECT count(*) FROM ` + t + ` WHERE namespace = $1 AND key = $2`
	// The last id is read and the batch inserted in one statement, after the caller's advisory lock:
	// nobody else can append to the index between the check and the write. The data-modifying CTE runs
	// to completion even though the outer query does not read it.
	s.sqlAppend = `WITH last AS (
		SELECT max(id) AS id FROM ` + t + ` WHERE namespace = $1::text AND key = $2::text
	), inserted AS (
		INSERT INTO ` + t + ` (namespace, key, id, value)
		SELECT $1::text, $2::text, batch.id, batch.value
		FROM unnest($3::bigint[], $4::bytea[]) AS batch(id, value), last
		WHERE last.id IS NULL OR last.id < $5::bigint
		RETURNING 1
	)
	SELECT id FROM last`
	s.sqlRead = `SELECT id, value FROM ` + t + ` WHERE namespace = $1 AND key = $2 AND id BETWEEN $3 AND $4 ORDER BY id`
	s.sqlFirstFrom = `SELECT id, value FROM ` + t + ` WHERE namespace = $1 AND key = $2 AND id >= $3 ORDER BY id LIMIT 1`
	// One statement, so one snapshot: the last id and the closest entry of one state of the index.
	s.sqlClosestLast = `SELECT (SELECT max(id) FROM ` + t + ` WHERE namespace = $1 AND key = $2), c.id, c.value
	FROM (VALUES (1)) AS one LEFT JOIN (` + s.sqlFirstFrom + `) AS c ON true`
	s.sqlLast = `SELECT id, value FROM ` + t + ` WHERE namespace = $1 AND key = $2 ORDER BY id DESC LIMIT 1`
	s.sqlLastID = `SELECT max(id) FROM ` + t + ` WHERE namespace = $1 AND key = $2`
	// One batch: the dropBatch smallest ids ≤ upTo, deleted as an id range so the delete walks the
	// primary key in order. selected tells the caller whether another batch may remain.
	s.sqlDropBatch = `WITH batch AS (
		SELECT id FROM ` + t + ` WHERE namespace = $1 AND key = $2 AND id <= $3 ORDER BY id LIMIT $4
	), dropped AS (
		DELETE FROM ` + t + ` WHERE namespace = $1 AND key = $2 AND id <= $3 AND id <= (SELECT max(id) FROM batch)
		RETURNING 1
	)
	SELECT (SELECT count(*) FROM batch), (SELECT count(*) FROM dropped)`
	// The common drop in one statement: everything ≤ upTo, unless more than $4 entries qualify, in
	// which case it deletes nothing and says so (the first count is then $4+1).
	s.sqlDropAll = `WITH batch AS (
		SELECT id FROM ` + t + ` WHERE namespace = $1 AND key = $2 AND id <= $3 ORDER BY id LIMIT $4 + 1
	), dropped AS (
		DELETE FROM ` + t + ` WHERE namespace = $1 AND key = $2 AND id <= $3 AND (SELECT count(*) FROM batch) <= $4
		RETURNING 1
	)
	SELECT (SELECT count(*) FROM batch), (SELECT count(*) FROM dropped)`
	s.sqlDelete = `DELETE FROM ` + t + ` WHERE namespace = $1 AND key = $2`
	s.prepareBatchSQL()
	for bounded := range 2 {
		s.sqlScan[bounded] = scanSQL(t, bounded == 1)
		for strict := range 2 {
			s.sqlPage[strict][bounded] = pageSQL(t, strict == 1, bounded == 1)
			s.sqlWalk[strict][bounded] = walkSQL(t, strict == 1, bounded == 1)
		}
	}
}

// pageSQL is ScanStable's page: $1 namespace, $2 the lower bound (exclusive after a marker, inclusive at
// the range's start), $3 how many keys, and $4 the range's end when it has one, each key with max(id):
// a GroupAggregate over an Index Only Scan of the primary key, which reads every row of the page's keys
// (one or a few a key in an archive layer, where it is the cheapest page there is).
func pageSQL(table string, strict, bounded bool) string {
	q := `SELECT key, max(id) FROM ` + table + ` WHERE namespace = $1 AND key `
	if strict {
		q += `> $2`
	} else {
		q += `>= $2`
	}
	if bounded {
		q += ` AND key < $4`
	}
	return q + ` GROUP BY key ORDER BY key LIMIT $3`
}

// walkSQL is ScanDeep's page, a loose index scan (skip scan) of the primary key: $1 namespace, $2
// the lower bound (exclusive after a marker, inclusive at the range's start), $3 how many keys, and $4
// the range's end when it has one. Bounding by [start, end) instead of LIKE keeps every character
// literal and lets the primary key seek.
//
// Each step of the recursive CTE seeks to the first key above the one before (ORDER BY key LIMIT 1),
// and each key's last id is max(id) of that key alone, a backward seek: a page costs two index descents
// a key, however many entries a key holds, where GROUP BY key read every row of every key in the page.
// The steps stop at $3 keys; the whole page is one statement, so one round trip and one snapshot, the
// keys and their last ids of one state of the table.
//
// EXPLAIN (ANALYZE, BUFFERS) on PostgreSQL 15.20, one table of 10,000 keys of 100 entries and 10,000
// of 1 (1,010,000 rows), a page of 129 keys from a marker, custom and generic plan alike: the anchor is
// a Limit over an Index Only Scan of index_storage_pkey (namespace = $1 AND key > $2 AND key < $4),
// each step a Nested Loop of the WorkTable Scan and a Limit over the same Index Only Scan (key >
// walk_1.key, loops=128), each last id a SubPlan of Limit over Index Only Scan Backward (key =
// walk.key, loops=129), and the one Sort is of the page's 129 rows (quicksort, 35kB). About 8 buffers
// a key on 100-entry keys (1,120 for the page) and on 1-entry keys (1,036), where GROUP BY read
// 12,901 index rows and 13,034 buffers for the 100-entry page. No Seq Scan and no aggregate over rows.
//
// The price is keys of one entry: two seeks a key where GROUP BY read one row, 4 to 5 times the
// time (BenchmarkWalkDepth flat-ns/key, 6 to 8 µs against 1.2 to 1.6), which is why ScanStable keeps
// pageSQL and only a walk of deep keys (the primary layer's) takes this one. A head of count+2 rows read in
// index order before the walk won most of that back, but on a table never analyzed (autovacuum off,
// or a bulk load before autoanalyze) the generic plan of its ORDER BY key, id LIMIT n was a Bitmap
// Heap Scan and a top-N sort of the rest of the range, 7 ms a page at 100,000 keys, where each
// LIMIT 1 seek here stays an index scan whatever the estimates.
func walkSQL(table string, strict, bounded bool) string {
	lower := `i.key >= $2`
	if strict {
		lower = `i.key > $2`
	}
	upper := ``
	if bounded {
		upper = ` AND i.key < $4`
	}
	return `WITH RECURSIVE walk (key, n) AS (
		(SELECT i.key, 1::bigint FROM ` + table + ` AS i WHERE i.namespace = $1 AND ` + lower + upper + ` ORDER BY i.key LIMIT 1)
		UNION ALL
		SELECT step.key, walk.n + 1 FROM walk CROSS JOIN LATERAL (
			SELECT i.key FROM ` + table + ` AS i WHERE i.namespace = $1 AND i.key > walk.key` + upper + ` ORDER BY i.key LIMIT 1
		) AS step
		WHERE walk.n < $3
	)
	SELECT walk.key, (SELECT max(i.id) FROM ` + table + ` AS i WHERE i.namespace = $1 AND i.key = walk.key)
	FROM walk ORDER BY walk.key`
}

// scanSQL is Scan's page, by position: $1 namespace, $2 the prefix, $3 the limit, then $4 the prefix's
// end when it has one, then the offset.
func scanSQL(table string, bounded bool) string {
	q := `SELECT key, max(id) FROM ` + table + ` WHERE namespace = $1 AND key >= $2`
	next := 4
	if bounded {
		q += ` AND key < $4`
		next++
	}
	return q + fmt.Sprintf(` GROUP BY key ORDER BY key LIMIT $3 OFFSET $%d`, next)
}

// Capabilities: ScanStable hands back each key once, in ascending byte order.
func (s *engine) Capabilities() is.Capabilities {
	return is.Capabilities{OrderedScan: true, UniqueScan: true}
}

// Close closes the pool, waiting for operations under way to release their connections. Later calls
// return ErrClosed; Close itself is idempotent.
func (s *engine) Close() error {
	if !s.closed.Swap(true) {
		s.pool.Close()
	}
	return nil
}

// backendName names this backend in its errors.
const backendName = "postgres"

// start checks what every operation checks before touching the database: its arguments, then Close.
// Its error has been through fail.
func (s *engine) start(op is.Operation, ns, key string, invalid error) error {
	if invalid != nil {
		return s.fail(op, ns, key, invalid)
	}
	if s.closed.Load() {
		return s.fail(op, ns, key, is.ErrClosed)
	}
	return nil
}

// startWrite is start for a write, which a Store from OpenExisting refuses.
func (s *engine) startWrite(op is.Operation, ns, key string, invalid error) error {
	if err := s.start(op, ns, key, invalid); err != nil {
		return err
	}
	if s.readOnly {
		return s.fail(op, ns, key, fmt.Errorf("%w: the store was opened read-only", is.ErrInvalidArgument))
	}
	return nil
}

// fail is the one place an operation's error takes its shape: classified, and named by the operation
// (as metrics name it) and the index (a scan passes an empty key), in an is.OpError. A store closed
// under a running operation fails with ErrClosed, whatever the pool made of it. A nil err returns nil.
func (s *engine) fail(op is.Operation, ns, key string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, is.ErrInvalidArgument), errors.Is(err, is.ErrConflict),
		errors.Is(err, is.ErrClosed), errors.Is(err, is.ErrTransient):
		// Refused before or after the database answered: already of its kind.
	case s.closed.Load():
		err = is.Classify(is.ErrClosed, err)
	default:
		err = classify(err)
	}
	return is.NewOpError(backendName, op, ns, key, err)
}

func (s *engine) Exists(ctx context.Context, ns, key string) (bool, error) {
	if err := s.start(is.OpExists, ns, key, is.ValidateIndex(ns, key)); err != nil {
		return false, err
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, s.sqlExists, ns, key).Scan(&exists); err != nil {
		return false, s.fail(is.OpExists, ns, key, err)
	}
	return exists, nil
}

func (s *engine) Append(ctx context.Context, ns, key string, id uint64, value []byte) error {
	return s.appendEntries(ctx, is.OpAppend, ns, key, []is.Entry{{ID: id, Value: value}})
}

func (s *engine) AppendMany(ctx context.Context, ns, key string, entries []is.Entry) error {
	return s.appendEntries(ctx, is.OpAppendMany, ns, key, entries)
}

// appendEntries takes the index's advisory lock and runs the guarded insert in one implicit
// transaction, sent as one batch: one round trip. The lock is what makes the check atomic under READ
// COMMITTED, where a guard alone (INSERT … WHERE NOT EXISTS) lets two appends of 5 and 4 both see 3 as
// the last id and both succeed. Each statement after the lock takes a fresh snapshot, so the guard
// sees every append that held the lock before.
func (s *engine) appendEntries(ctx context.Context, op is.Operation, ns, key string, entries []is.Entry) error {
	invalid := is.ValidateIndex(ns, key)
	if invalid == nil {
		invalid = is.ValidateBatch(entries)
	}
	if err := s.startWrite(op, ns, key, invalid); err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	ids := make([]int64, len(entries))
	values := make([][]byte, len(entries))
	for i, e := range entries {
		ids[i] = int64(e.ID)
		values[i] = e.Value
		if values[i] == nil {
			values[i] = []byte{} // the column is NOT NULL: a nil value is stored empty
		}
	}
	var b pgx.Batch
	s.queueLock(&b, ns, key)
	b.Queue(s.sqlAppend, ns, key, ids, values, ids[0])
	br := s.pool.SendBatch(ctx, &b)
	var last *int64
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&last)
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return s.fail(op, ns, key, err)
	}
	if last != nil && *last >= ids[0] {
		return s.fail(op, ns, key, fmt.Errorf("%w: id %d is not above the index's last id %d", is.ErrConflict, ids[0], *last))
	}
	return nil
}

// queueLock queues the index's transaction-scoped advisory lock. Every mutation of an index takes it
// first, in the transaction that mutates: Append and AppendMany so that the conflict check and the
// insert are one step, DropPrefix and Delete so that they are linearizable against Append. Without it a
// DELETE under READ COMMITTED works from the snapshot its statement started with, and leaves behind an
// Append that committed while it ran, though a reader saw that entry before the delete returned.
// Advisory locks are database-wide, so the schema is part of the name; a hash collision only serializes
// two unrelated indexes.
func (s *engine) queueLock(b *pgx.Batch, ns, key string) {
	b.Queue(`SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended($1, 0))`, s.lockPrefix(ns)+key)
}

// lockPrefix is what the name of the advisory lock of each index of ns begins with; the key follows.
func (s *engine) lockPrefix(ns string) string { return s.schema + "." + ns + ":" }

func (s *engine) Length(ctx context.Context, ns, key string) (uint64, error) {
	if err := s.start(is.OpLength, ns, key, is.ValidateIndex(ns, key)); err != nil {
		return 0, err
	}
	var n int64
	if err := s.pool.QueryRow(ctx, s.sqlLength, ns, key).Scan(&n); err != nil {
		return 0, s.fail(is.OpLength, ns, key, err)
	}
	return uint64(n), nil
}

func (s *engine) Read(ctx context.Context, ns, key string, from, to uint64) ([]is.Entry, error) {
	if err := s.start(is.OpRead, ns, key, is.ValidateIndex(ns, key)); err != nil {
		return nil, err
	}
	lo, hi, ok := is.ClampRange(from, to)
	if !ok {
		return nil, nil
	}
	rows, _ := s.pool.Query(ctx, s.sqlRead, ns, key, int64(lo), int64(hi))
	entries, err := pgx.CollectRows(rows, scanEntry)
	if err != nil {
		return nil, s.fail(is.OpRead, ns, key, err)
	}
	return entries, nil
}

func (s *engine) First(ctx context.Context, ns, key string) (is.Entry, bool, error) {
	return s.entry(ctx, is.OpFirst, ns, key, s.sqlFirstFrom, int64(1))
}

func (s *engine) Last(ctx context.Context, ns, key string) (is.Entry, bool, error) {
	return s.entry(ctx, is.OpLast, ns, key, s.sqlLast)
}

// LastID is max(id) over the primary key: an index-only read that never touches the value.
func (s *engine) LastID(ctx context.Context, ns, key string) (uint64, bool, error) {
	if err := s.start(is.OpLastID, ns, key, is.ValidateIndex(ns, key)); err != nil {
		return 0, false, err
	}
	var id *int64
	if err := s.pool.QueryRow(ctx, s.sqlLastID, ns, key).Scan(&id); err != nil {
		return 0, false, s.fail(is.OpLastID, ns, key, err)
	}
	if id == nil {
		return 0, false, nil
	}
	return uint64(*id), true, nil
}

func (s *engine) Closest(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, error) {
	if id > is.MaxID {
		// No entry can be at or above it; still validate and honour Close.
		return is.Entry{}, false, s.start(is.OpClosest, ns, key, is.ValidateIndex(ns, key))
	}
	return s.entry(ctx, is.OpClosest, ns, key, s.sqlFirstFrom, int64(id))
}

// ClosestLast is one statement (is.ClosestLastReader).
func (s *engine) ClosestLast(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, uint64, bool, error) {
	if id > is.MaxID {
		last, exists, err := s.LastID(ctx, ns, key) // no entry can be at or above id
		return is.Entry{}, false, last, exists, s.fail(is.OpClosestLast, ns, key, err)
	}
	if err := s.start(is.OpClosestLast, ns, key, is.ValidateIndex(ns, key)); err != nil {
		return is.Entry{}, false, 0, false, err
	}
	var last, found *int64
	var value []byte
	if err := s.pool.QueryRow(ctx, s.sqlClosestLast, ns, key, int64(id)).Scan(&last, &found, &value); err != nil {
		return is.Entry{}, false, 0, false, s.fail(is.OpClosestLast, ns, key, err)
	}
	var e is.Entry
	if found != nil {
		if value == nil {
			value = []byte{}
		}
		e = is.Entry{ID: uint64(*found), Value: value}
	}
	if last == nil {
		return e, found != nil, 0, false, nil
	}
	return e, found != nil, uint64(*last), true, nil
}

// entry runs a query for at most one entry of the index.
func (s *engine) entry(ctx context.Context, op is.Operation, ns, key, sql string, extra ...any) (is.Entry, bool, error) {
	if err := s.start(op, ns, key, is.ValidateIndex(ns, key)); err != nil {
		return is.Entry{}, false, err
	}
	rows, _ := s.pool.Query(ctx, sql, append([]any{ns, key}, extra...)...)
	e, err := pgx.CollectExactlyOneRow(rows, scanEntry)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return is.Entry{}, false, nil
	case err != nil:
		return is.Entry{}, false, s.fail(op, ns, key, err)
	}
	return e, true, nil
}

func scanEntry(row pgx.CollectableRow) (is.Entry, error) {
	var id int64
	var value []byte
	err := row.Scan(&id, &value)
	if value == nil {
		value = []byte{}
	}
	return is.Entry{ID: uint64(id), Value: value}, err
}

// DropPrefix deletes under the index's lock, in one transaction: the drop is atomic, and an Append waits
// for it, so none is lost or left behind.
func (s *engine) DropPrefix(ctx context.Context, ns, key string, upTo uint64) (uint64, error) {
	if err := s.startWrite(is.OpDropPrefix, ns, key, is.ValidateIndex(ns, key)); err != nil {
		return 0, err
	}
	if upTo == 0 {
		return 0, nil
	}
	bound := int64(min(upTo, is.MaxID))
	// The usual drop (an archive step drops a chunk or a few) is the lock and one DELETE in one implicit
	// transaction: one round trip, as Delete. Only a drop of more than dropBatch entries takes the
	// batched transaction of dropInBatches.
	if dropped, done, err := s.dropAll(ctx, ns, key, bound); err != nil || done {
		return dropped, err
	}
	total, err := s.dropInBatches(ctx, ns, key, bound)
	if err != nil {
		return 0, s.fail(is.OpDropPrefix, ns, key, err)
	}
	return total, nil
}

// dropInBatches is the drop of more than dropBatch entries: batches of dropBatch in one transaction,
// under the index's lock. The lock and the first batch ride in the same round trip as BEGIN. Its error
// has not been through fail.
func (s *engine) dropInBatches(ctx context.Context, ns, key string, bound int64) (uint64, error) {
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	s.queueLock(&b, ns, key)
	b.Queue(s.sqlDropBatch, ns, key, bound, dropBatch)
	br := s.pool.SendBatch(ctx, &b)
	tx := br.Tx()
	// A no-op after Commit. When ctx is already done the rollback fails and pgx closes the connection
	// rather than return it to the pool inside a transaction.
	defer tx.Rollback(ctx)

	var selected, dropped, total int64
	_, err := br.Exec() // BEGIN
	if err == nil {
		_, err = br.Exec() // the lock
	}
	if err == nil {
		err = br.QueryRow().Scan(&selected, &dropped)
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	for total = dropped; err == nil && selected == dropBatch; total += dropped {
		err = tx.QueryRow(ctx, s.sqlDropBatch, ns, key, bound, dropBatch).Scan(&selected, &dropped)
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return 0, err
	}
	return uint64(total), nil
}

// dropAll runs the one-statement drop; done is false when more than dropBatch entries qualify, and then
// nothing was dropped.
func (s *engine) dropAll(ctx context.Context, ns, key string, bound int64) (dropped uint64, done bool, err error) {
	var b pgx.Batch
	s.queueLock(&b, ns, key)
	b.Queue(s.sqlDropAll, ns, key, bound, dropBatch)
	br := s.pool.SendBatch(ctx, &b)
	var selected, n int64
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&selected, &n)
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return 0, false, s.fail(is.OpDropPrefix, ns, key, err)
	}
	return uint64(n), selected <= dropBatch, nil
}

func (s *engine) Delete(ctx context.Context, ns, key string) error {
	if err := s.startWrite(is.OpDelete, ns, key, is.ValidateIndex(ns, key)); err != nil {
		return err
	}
	// The lock and the DELETE share one implicit transaction, in one round trip.
	var b pgx.Batch
	s.queueLock(&b, ns, key)
	b.Queue(s.sqlDelete, ns, key)
	br := s.pool.SendBatch(ctx, &b)
	_, err := br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return s.fail(is.OpDelete, ns, key, err)
	}
	return nil
}

// Scan pages by position (OFFSET): cursor is how many matching keys earlier calls walked past.
func (s *engine) Scan(ctx context.Context, ns, prefix string, cursor uint64, count int) (uint64, []string, error) {
	invalid := is.ValidateScan(ns, prefix, count)
	if invalid == nil && cursor > is.MaxID {
		invalid = fmt.Errorf("%w: cursor %d was not returned by Scan", is.ErrInvalidArgument, cursor)
	}
	if err := s.start(is.OpScan, ns, "", invalid); err != nil {
		return 0, nil, err
	}
	end := is.PrefixRange(prefix).End
	keys, _, more, err := s.keys(ctx, s.sqlScan[b2i(end != "")], ns, prefix, end, count, int64(cursor))
	if err != nil {
		return 0, nil, s.fail(is.OpScan, ns, "", err)
	}
	if !more {
		return 0, keys, nil
	}
	return cursor + uint64(len(keys)), keys, nil
}

// ScanStable seeks past the last key of the previous page: keyset paging, never OFFSET.
func (s *engine) ScanStable(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	return s.scanStable(ctx, &s.sqlPage, ns, r, from, count)
}

// ScanDeep is ScanStable with a loose index scan for a page (walkSQL): a page of deep keys costs its
// keys, not their entries (is.DeepScanner).
func (s *engine) ScanDeep(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	return s.scanStable(ctx, &s.sqlWalk, ns, r, from, count)
}

// scanStable pages with queries[strict][bounded].
func (s *engine) scanStable(ctx context.Context, queries *[2][2]string, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	invalid := is.ValidateScanRange(ns, r, count)
	marker, start, err := from.Marker()
	if invalid == nil {
		invalid = err
	}
	if err := s.start(is.OpScanStable, ns, "", invalid); err != nil {
		return is.Page{}, err
	}
	// Past a marker inside the range, the walk continues strictly above the marker; a walk from the
	// start (or from a marker before the range) starts at the range's start itself.
	lower, strict := r.Start, false
	if !start {
		lower, strict = r.After(marker)
	}
	if r.Bounded() && lower >= r.End {
		return is.Page{Done: true}, nil
	}
	keys, ids, more, err := s.keys(ctx, queries[b2i(strict)][b2i(r.Bounded())], ns, lower, r.End, count, -1)
	if err != nil {
		return is.Page{}, s.fail(is.OpScanStable, ns, "", err)
	}
	if !more {
		return is.Page{Keys: keys, LastIDs: ids, Done: true}, nil
	}
	return is.Page{Keys: keys, LastIDs: ids, Next: is.MarkerResume(keys[len(keys)-1])}, nil
}

// keys runs query (a pageSQL, walkSQL or scanSQL, matching end and offset) for up to count keys of ns from
// lower on and below end (no bound when end is ""), each with its last id, skipping offset keys unless
// offset is negative, and says whether more follow. It asks for one key more than it returns, so that
// the last page says it is done without a trailing empty call.
func (s *engine) keys(ctx context.Context, query, ns, lower, end string, count int, offset int64) ([]string, []uint64, bool, error) {
	fetch := min(count, maxPage)
	args := []any{ns, lower, int64(fetch) + 1}
	if end != "" {
		args = append(args, end)
	}
	if offset >= 0 {
		args = append(args, offset)
	}
	rows, _ := s.pool.Query(ctx, query, args...)
	var keys []string
	var ids []uint64
	var key string
	var id int64
	if _, err := pgx.ForEachRow(rows, []any{&key, &id}, func() error {
		keys, ids = append(keys, key), append(ids, uint64(id))
		return nil
	}); err != nil {
		return nil, nil, false, err
	}
	if len(keys) > fetch {
		return keys[:fetch], ids[:fetch], true, nil
	}
	return keys, ids, false, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
