package sqlitefile

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	sqlite3 "github.com/mattn/go-sqlite3"

	is "github.com/stratalog/strata/indexedstorage"
)

// The batch operations (is.BatchReader, is.BatchDropper, is.BatchAppender) of one file: every key of a batch in one
// transaction, each statement prepared once for the batch. The caller has validated the batch
// (is.ValidateBatchKeys) and checked the engine is open. A key's own failure (a row the engine
// refuses to decode, a statement refused for that key's rows) is that key's Err, unshaped, for the
// caller's choke point; a failure that is not the key's own (KeyFault) fails the call, and nothing
// of a drop's transaction is committed.

// KeyFault reports whether err, met on one key of a batch, is that key's own: not the caller's
// cancellation or deadline, not a closed engine, not a busy or locked file, not the engine or the
// machine out of memory, space or descriptors, and not an I/O error. Those would fail every key alike.
func KeyFault(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, is.ErrClosed) || errors.Is(err, is.ErrTransient) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, driver.ErrBadConn) {
		return false
	}
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrBusy, sqlite3.ErrLocked, sqlite3.ErrNomem, sqlite3.ErrFull, sqlite3.ErrIoErr,
			sqlite3.ErrInterrupt, sqlite3.ErrCantOpen, sqlite3.ErrReadonly, sqlite3.ErrNotADB, sqlite3.ErrProtocol:
			return false
		}
	}
	return true
}

// ClosestLastMany reads ClosestLast of each key of reqs (the id being Closest's) in one read
// transaction: every key's part is of one snapshot of the file, so each key's entry and last id are
// of one state of its index. Results are in the order of reqs.
func (e *Engine) ClosestLastMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.ClosestLastResult, error) {
	out := make([]is.ClosestLastResult, len(reqs))
	if len(reqs) == 0 {
		return out, e.settled(nil)
	}
	c, err := e.reader.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// BEGIN by hand: a read transaction is deferred (the reader pool's own BEGIN is IMMEDIATE, the
	// write lock), and in WAL mode its first read fixes the snapshot every later one reads.
	if _, err := c.ExecContext(ctx, `BEGIN`); err != nil {
		return nil, err
	}
	open := true
	defer func() {
		if open {
			endRead(c)
		}
	}()
	// One statement reads every key (a statement costs the driver far more than the seeks it makes);
	// the keys it could not read as the contract's types, or all of them where the statement itself
	// failed for one key's rows, are read again one statement a key, each failing alone.
	again, err := readClosestLastAll(ctx, c, ns, reqs, out)
	switch {
	case err != nil && !KeyFault(ctx, err):
		return nil, err
	case err != nil:
		again = make([]int, len(reqs))
		for i := range again {
			again[i] = i
		}
	}
	if len(again) > 0 {
		if err := readEach(ctx, c, ns, reqs, again, out); err != nil {
			return nil, err
		}
	}
	open = false
	if _, err := c.ExecContext(ctx, `COMMIT`); err != nil {
		endRead(c)
		return nil, err
	}
	// A file read as immutable that a writer touched meanwhile: no part can be trusted.
	if err := e.settled(nil); err != nil {
		return nil, err
	}
	return out, nil
}

// endRead ends a read transaction that did not commit; a connection still in one afterwards is
// dropped from the pool rather than handed to the next caller.
func endRead(c *sql.Conn) {
	if _, err := c.ExecContext(context.Background(), `ROLLBACK`); err != nil {
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// qClosestLastAll is ClosestLast of every key of a JSON array of [key, id] pairs (a null id: above
// MaxID, no closest entry), in one statement: per key, one seek for its last id and one for its
// closest entry, both on the primary key. The first column is the pair's position.
const qClosestLastAll = `SELECT j.key,
	(SELECT id FROM index_storage WHERE namespace = ?1 AND key = j.value ->> 0 ORDER BY id DESC LIMIT 1),
	c.id, c.value
FROM json_each(?2) AS j
LEFT JOIN index_storage AS c ON c.namespace = ?1 AND c.key = j.value ->> 0 AND c.id = (
	SELECT id FROM index_storage WHERE namespace = ?1 AND key = j.value ->> 0 AND id >= j.value ->> 1 ORDER BY id LIMIT 1)`

// readClosestLastAll reads every key of reqs into out with qClosestLastAll, and returns the positions
// of the keys whose row it could not take as the contract's types (a foreign writer's row of another
// type), to be read again one by one.
func readClosestLastAll(ctx context.Context, c *sql.Conn, ns string, reqs []is.KeyID, out []is.ClosestLastResult) (again []int, err error) {
	pairs := make([][2]any, len(reqs))
	for i, r := range reqs {
		pairs[i][0] = r.Key
		if r.ID <= is.MaxID {
			pairs[i][1] = int64(r.ID)
		}
	}
	arg, err := json.Marshal(pairs)
	if err != nil {
		return nil, err
	}
	rows, err := c.QueryContext(ctx, qClosestLastAll, ns, string(arg))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var at int
		var last, found, value any
		if err := rows.Scan(&at, &last, &found, &value); err != nil {
			return nil, err
		}
		if at < 0 || at >= len(reqs) {
			return nil, fmt.Errorf("batch read: row for position %d of %d", at, len(reqs))
		}
		seen++
		lastID, okLast := last.(int64)
		foundID, okFound := found.(int64)
		blob, okValue := value.([]byte)
		switch {
		case last != nil && (!okLast || lastID <= 0), found != nil && (!okFound || foundID <= 0 || !okValue):
			again = append(again, at)
			continue
		}
		var res is.ClosestLastResult
		if found != nil {
			res.Entry, res.Found = is.Entry{ID: uint64(foundID), Value: orEmpty(blob)}, true
		}
		res.Last, res.Exists = uint64(lastID), last != nil
		out[at] = res
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if seen != len(reqs) {
		return nil, fmt.Errorf("batch read: %d rows for %d keys", seen, len(reqs))
	}
	return again, nil
}

// readEach reads the keys of reqs at the positions at one statement a key, into out: a key's own
// failure is its Err.
func readEach(ctx context.Context, c *sql.Conn, ns string, reqs []is.KeyID, at []int, out []is.ClosestLastResult) error {
	closestLast, err := c.PrepareContext(ctx, qClosestLast)
	if err != nil {
		return err
	}
	defer closestLast.Close()
	lastID, err := c.PrepareContext(ctx, qLastID)
	if err != nil {
		return err
	}
	defer lastID.Close()
	for _, i := range at {
		res, err := readClosestLast(ctx, closestLast, lastID, ns, reqs[i].Key, reqs[i].ID)
		if err != nil {
			if !KeyFault(ctx, err) {
				return err
			}
			res = is.ClosestLastResult{Err: err}
		}
		out[i] = res
	}
	return nil
}

// readClosestLast is ClosestLast of one key through the batch's prepared statements.
func readClosestLast(ctx context.Context, closestLast, lastID *sql.Stmt, ns, key string, id uint64) (is.ClosestLastResult, error) {
	var res is.ClosestLastResult
	if id > is.MaxID {
		var last int64
		switch err := lastID.QueryRowContext(ctx, ns, key).Scan(&last); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return is.ClosestLastResult{}, err
		default:
			res.Last, res.Exists = uint64(last), true
		}
		return res, nil
	}
	var last, found sql.NullInt64
	var value []byte
	if err := closestLast.QueryRowContext(ctx, ns, key, int64(id)).Scan(&last, &found, &value); err != nil {
		return is.ClosestLastResult{}, err
	}
	if found.Valid {
		res.Entry, res.Found = is.Entry{ID: uint64(found.Int64), Value: orEmpty(value)}, true
	}
	res.Last, res.Exists = uint64(last.Int64), last.Valid
	return res, nil
}

// DropPrefixMany runs DropPrefix of each key of reqs (the id being its upTo) in one write transaction
// on the writer, BEGIN IMMEDIATE and one commit: each key's drop is one statement, atomic on its
// index, and its count is what that statement removed. A key whose statement fails for its own rows
// (KeyFault, with the transaction still open: a statement's error undoes that statement only) has
// its Err and the others go on; any other failure rolls the whole transaction back and fails the
// call. Results are in the order of reqs.
func (e *Engine) DropPrefixMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.DropResult, error) {
	if e.readOnly {
		return nil, errReadOnly
	}
	out := make([]is.DropResult, len(reqs))
	work := false
	for _, r := range reqs {
		work = work || r.ID > 0
	}
	if !work {
		return out, nil // DropPrefix(0) of every key: nothing to remove, nothing to lock
	}
	err := e.inWriteTx(ctx, qDrop, func(c *sql.Conn, _ *sql.Tx, drop *sql.Stmt) error {
		for i, r := range reqs {
			if r.ID == 0 {
				continue
			}
			n, err := execCount(ctx, drop, ns, r.Key, int64(min(r.ID, is.MaxID)))
			if err != nil {
				if !KeyFault(ctx, err) || !inTransaction(c) {
					return err
				}
				out[i].Err = err
				continue
			}
			out[i].Dropped = uint64(n)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AppendKeys runs Append of each key of reqs that has entries in one write transaction on the writer,
// BEGIN IMMEDIATE and one commit: each key's part is Append's check and insert under the file's write
// lock, all of its entries or none. A key whose first id is not above its last id fails with
// ErrConflict and writes nothing (so does one whose Below is not above it); a key whose last id cannot
// be read, or whose insert the engine refuses for its own rows (KeyFault), fails alone, its rows undone
// to the savepoint taken before them, and the others go on. Any other failure rolls the whole
// transaction back and fails the call. Results are in the order of reqs.
func (e *Engine) AppendKeys(ctx context.Context, ns string, reqs []is.KeyEntries) ([]error, error) {
	if e.readOnly {
		return nil, errReadOnly
	}
	out := make([]error, len(reqs))
	if !slices.ContainsFunc(reqs, func(r is.KeyEntries) bool { return len(r.Entries) > 0 }) {
		return out, nil // AppendMany of nothing for every key: nothing to write, nothing to lock
	}
	err := e.inWriteTx(ctx, qLastID, func(c *sql.Conn, tx *sql.Tx, lastID *sql.Stmt) error {
		each, err := appendAll(ctx, c, tx, ns, reqs, out)
		if err != nil {
			return err
		}
		for _, i := range each {
			r := reqs[i]
			keyErr, err := appendPart(ctx, tx, lastID, ns, r)
			if err == nil && keyErr != nil && (!KeyFault(ctx, keyErr) || !inTransaction(c)) {
				err = keyErr
			}
			if err != nil {
				return err
			}
			out[i] = keyErr
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// qLastAll is the last id of every key of a JSON array of keys, in one statement: one seek a key on
// the primary key. The first column is the key's position, the second the key as the statement read it.
const qLastAll = `SELECT j.key, j.value,
	(SELECT id FROM index_storage WHERE namespace = ?1 AND key = j.value ORDER BY id DESC LIMIT 1)
FROM json_each(?2) AS j`

// appendAll is AppendKeys of every key of reqs with entries in a few statements, inside the caller's
// write transaction: one reads every key's last id, and multi-row INSERTs write the rows of the keys
// whose first id is above it, across keys (a statement costs the driver far more than the rows it
// writes: four statements a key made most of a batch's time). A key whose first id is not above its
// last id gets its ErrConflict in out. It returns the positions left to the per-key path (appendPart):
// every key with entries when the batch is of one key, a key whose last id is not the contract's type
// (a foreign writer's row), and every key it meant to insert when an insert is refused for some row
// (a foreign trigger, a constraint): its inserts are undone to a savepoint, and each key then fails
// alone. err is a failure that is not a key's own (KeyFault), or one that left the transaction.
func appendAll(ctx context.Context, c *sql.Conn, tx *sql.Tx, ns string, reqs []is.KeyEntries, out []error) (each []int, err error) {
	var at []int
	for i, r := range reqs {
		if len(r.Entries) > 0 {
			at = append(at, i)
		}
	}
	if len(at) < 2 {
		return at, nil
	}
	keys := make([]string, len(at))
	for j, i := range at {
		keys[j] = reqs[i].Key
	}
	arg, err := json.Marshal(keys)
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, qLastAll, ns, string(arg))
	if err != nil {
		if KeyFault(ctx, err) && inTransaction(c) {
			return at, nil
		}
		return nil, err
	}
	var insert []int
	seen := 0
	for rows.Next() {
		var pos int
		var key string
		var last any
		if err := rows.Scan(&pos, &key, &last); err != nil {
			rows.Close()
			return nil, err
		}
		if pos < 0 || pos >= len(at) {
			rows.Close()
			return nil, fmt.Errorf("batch append: row for position %d of %d", pos, len(at))
		}
		seen++
		i := at[pos]
		lastID, ok := last.(int64)
		switch {
		case key != reqs[i].Key || (last != nil && (!ok || lastID <= 0)):
			each = append(each, i) // read back otherwise, or a row of another type: the per-key path says
		case last != nil && reqs[i].Bound() <= uint64(lastID):
			out[i] = conflict(reqs[i].Bound(), lastID)
		default:
			insert = append(insert, i)
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	if seen != len(at) {
		return nil, fmt.Errorf("batch append: %d rows for %d keys", seen, len(at))
	}
	if len(insert) == 0 {
		return each, nil
	}
	if _, err := tx.ExecContext(ctx, `SAVEPOINT append_all`); err != nil {
		return nil, err
	}
	parts := make([]is.KeyEntries, len(insert))
	for j, i := range insert {
		parts[j] = reqs[i]
	}
	if err := insertParts(ctx, tx, ns, parts); err != nil {
		if !KeyFault(ctx, err) || !inTransaction(c) {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `ROLLBACK TO append_all`); err != nil {
			return nil, err
		}
		each = append(each, insert...)
		slices.Sort(each)
	}
	if _, err := tx.ExecContext(ctx, `RELEASE append_all`); err != nil {
		return nil, err
	}
	return each, nil
}

// inWriteTx runs fn in one write transaction on the writer (BEGIN IMMEDIATE: the write lock from the
// start) with query prepared in it, and commits when fn returns nil; an error of fn or of the commit
// rolls the whole transaction back.
func (e *Engine) inWriteTx(ctx context.Context, query string, fn func(c *sql.Conn, tx *sql.Tx, stmt *sql.Stmt) error) error {
	c, err := e.writer.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op once committed
	stmt, err := tx.PrepareContext(ctx, query)
	if err != nil {
		return err
	}
	defer stmt.Close()
	if err := fn(c, tx, stmt); err != nil {
		return err
	}
	return tx.Commit()
}

// appendPart is one key's part of AppendKeys: the conflict check, then the insert inside a savepoint,
// so that an insert refused midway leaves none of the key's rows. keyErr is the part's own failure;
// err is one that leaves the transaction in no known state (the savepoint could not be taken, undone
// or released), which fails the batch.
func appendPart(ctx context.Context, tx *sql.Tx, lastID *sql.Stmt, ns string, r is.KeyEntries) (keyErr, err error) {
	if err := above(lastID.QueryRowContext(ctx, ns, r.Key), r.Bound()); err != nil {
		return err, nil // nothing of the key's was written
	}
	if _, err := tx.ExecContext(ctx, `SAVEPOINT append_part`); err != nil {
		return nil, err
	}
	if keyErr = insert(ctx, tx, ns, r.Key, r.Entries); keyErr != nil {
		if _, err := tx.ExecContext(ctx, `ROLLBACK TO append_part`); err != nil {
			return nil, errors.Join(keyErr, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `RELEASE append_part`); err != nil {
		return nil, errors.Join(keyErr, err)
	}
	return keyErr, nil
}

func execCount(ctx context.Context, stmt *sql.Stmt, args ...any) (int64, error) {
	res, err := stmt.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// inTransaction reports whether c is still in its transaction: an error SQLite answers by rolling
// the whole transaction back (RAISE(ROLLBACK) in a trigger, some I/O errors) leaves it in autocommit.
func inTransaction(c *sql.Conn) bool {
	in := false
	_ = c.Raw(func(dc any) error {
		if sc, ok := dc.(*sqlite3.SQLiteConn); ok {
			in = !sc.AutoCommit()
		}
		return nil
	})
	return in
}
