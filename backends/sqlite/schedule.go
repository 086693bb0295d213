package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/stratalog/strata/backends/internal/sqlitefile"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
)

// ScheduleStore is schedule.Store in a SQLite file: the table scheduled_actions, beside index_storage
// when both use one file. Every call goes through one connection whose transactions are BEGIN
// IMMEDIATE, so a claim's select and its update hold the write lock together: two claimers, in this
// process or another on the same file, never take the same row, nor two rows of one agent (the claim
// picks one row per subject and skips a subject with a running lease, under that lock). The unique
// index scheduled_actions_one_lease backs it: a second lease on an agent's rows cannot be stored.
// Register looks up and replaces a pending row of the same action under the same lock.
type ScheduleStore struct {
	path   string
	db     *sql.DB
	closed atomic.Bool
}

var _ schedule.Store = (*ScheduleStore)(nil)

// scheduleMigrations[v] takes the scheduled_actions schema from version v to v+1. The version lives in
// its own table, since user_version belongs to index_storage and the two may share a file.
var scheduleMigrations = []func(ctx context.Context, tx *sql.Tx) error{
	execMigration(scheduleTableDDL),
	migrateScheduleBuckets,
}

// scheduleTableDDL (version 1): times are Unix milliseconds; lease_owner is NULL while nobody holds
// the row. The index serves the claim: shard equality, then due_at_ms as range and order.
const scheduleTableDDL = `CREATE TABLE scheduled_actions (
		schedule_id     INTEGER PRIMARY KEY AUTOINCREMENT,
		due_at_ms       INTEGER NOT NULL,
		available_at_ms INTEGER NOT NULL,
		shard_id        INTEGER NOT NULL,
		action          TEXT    NOT NULL,
		lease_owner     TEXT CHECK (lease_owner <> ''),
		lease_until_ms  INTEGER,
		attempt_count   INTEGER NOT NULL DEFAULT 0,
		failed          INTEGER NOT NULL DEFAULT 0
	);
	CREATE INDEX scheduled_actions_claim ON scheduled_actions (shard_id, due_at_ms, available_at_ms) WHERE failed = 0;`

func execMigration(ddl string) func(ctx context.Context, tx *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, ddl)
		return err
	}
}

// migrateScheduleBuckets (version 2) makes rows belong to their agent rather than to the shard count
// they were registered under: shard_id gives way to the agent's bucket (oplog.AgentID.Bucket) and its
// key as the subject, both backfilled by decoding each row's action here (SQLite has no FNV-1a). A
// row whose action does not decode keeps bucket 0 and subject "" and stays the error it was for the
// claim that reaches it. Then it enforces one consumer per subject on what is stored: of an agent's
// leased rows only the one leased longest keeps its lease (the others' holders lose it, and the rows
// run again), and of pending, unleased duplicates of one action only the one that would run latest
// stays (schedule.Replaces). The unique index scheduled_actions_one_lease keeps it so: a second lease
// on an agent's rows is a constraint error, never two consumers.
func migrateScheduleBuckets(ctx context.Context, tx *sql.Tx) error {
	for _, ddl := range []string{
		fmt.Sprintf(`ALTER TABLE scheduled_actions ADD COLUMN bucket INTEGER NOT NULL DEFAULT 0 CHECK (bucket BETWEEN 0 AND %d)`, oplog.Buckets-1),
		`ALTER TABLE scheduled_actions ADD COLUMN subject TEXT NOT NULL DEFAULT ''`,
	} {
		if _, err := tx.ExecContext(ctx, ddl); err != nil {
			return err
		}
	}
	rows, err := tx.QueryContext(ctx, `SELECT schedule_id, action FROM scheduled_actions`)
	if err != nil {
		return err
	}
	type backfill struct {
		id      int64
		bucket  int
		subject string
	}
	var fills []backfill
	for rows.Next() {
		var (
			id     int64
			action string
		)
		if err := rows.Scan(&id, &action); err != nil {
			rows.Close()
			return err
		}
		if a, err := schedule.UnmarshalAction([]byte(action)); err == nil {
			fills = append(fills, backfill{id, a.Agent.Bucket(), a.Subject()})
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	for _, f := range fills {
		if _, err := tx.ExecContext(ctx, `UPDATE scheduled_actions SET bucket = ?, subject = ? WHERE schedule_id = ?`, f.bucket, f.subject, f.id); err != nil {
			return err
		}
	}
	for _, stmt := range []string{
		`DROP INDEX scheduled_actions_claim`,
		`ALTER TABLE scheduled_actions DROP COLUMN shard_id`,
		`UPDATE scheduled_actions SET lease_owner = NULL, lease_until_ms = NULL
		WHERE lease_owner IS NOT NULL AND EXISTS (SELECT 1 FROM scheduled_actions o
			WHERE o.subject = scheduled_actions.subject AND o.lease_owner IS NOT NULL AND o.schedule_id <> scheduled_actions.schedule_id
			  AND (o.lease_until_ms > scheduled_actions.lease_until_ms
			    OR (o.lease_until_ms = scheduled_actions.lease_until_ms AND o.schedule_id < scheduled_actions.schedule_id)))`,
		`DELETE FROM scheduled_actions
		WHERE lease_owner IS NULL AND failed = 0 AND EXISTS (SELECT 1 FROM scheduled_actions o
			WHERE o.action = scheduled_actions.action AND o.lease_owner IS NULL AND o.failed = 0 AND o.schedule_id <> scheduled_actions.schedule_id
			  AND (MAX(o.due_at_ms, o.available_at_ms) > MAX(scheduled_actions.due_at_ms, scheduled_actions.available_at_ms)
			    OR (MAX(o.due_at_ms, o.available_at_ms) = MAX(scheduled_actions.due_at_ms, scheduled_actions.available_at_ms)
			      AND o.schedule_id < scheduled_actions.schedule_id)))`,
		// The claim: bucket ranges, then due_at_ms as range and order.
		`CREATE INDEX scheduled_actions_claim ON scheduled_actions (bucket, due_at_ms, available_at_ms) WHERE failed = 0`,
		// Register's lookup of a pending row of the same action, and the claim's check of a subject's lease.
		`CREATE INDEX scheduled_actions_subject ON scheduled_actions (subject, action)`,
		`CREATE UNIQUE INDEX scheduled_actions_one_lease ON scheduled_actions (subject) WHERE lease_owner IS NOT NULL`,
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// NewScheduleStore opens (creating it if needed) the scheduled_actions table in the SQLite file at
// path. The file may be the one a Store uses. opts (nil is the zero Options) is read as New reads it,
// but ReadOnly is refused: the schedule store has no read-only mode.
func NewScheduleStore(ctx context.Context, path string, options *Options) (*ScheduleStore, error) {
	var opts Options
	if options != nil {
		opts = *options
	}
	if path == "" {
		return nil, fmt.Errorf("sqlite schedule: open: %w: empty path", is.ErrInvalidArgument)
	}
	if opts.ReadOnly {
		return nil, fmt.Errorf("sqlite schedule: open %s: %w: the schedule store has no read-only mode", path, is.ErrInvalidArgument)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite schedule: open %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return nil, fmt.Errorf("sqlite schedule: open %s: %w", path, err)
	}
	db, err := sqlitefile.OpenWriter(abs, opts.engineOptions())
	if err != nil {
		return nil, fmt.Errorf("sqlite schedule: open %s: %w", path, err)
	}
	if err := migrateSchedule(ctx, db); err != nil {
		db.Close()
		err, _ := sqlitefile.ExplainOpenFailure(abs, false, sqlitefile.Classify(err, false))
		return nil, fmt.Errorf("sqlite schedule: open %s: %w", path, err)
	}
	return &ScheduleStore{path: abs, db: db}, nil
}

func migrateSchedule(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: two openers apply each migration once
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS scheduled_actions_migrations (version INTEGER PRIMARY KEY)`); err != nil {
		return err
	}
	var version int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM scheduled_actions_migrations`).Scan(&version); err != nil {
		return err
	}
	if version > len(scheduleMigrations) {
		return fmt.Errorf("scheduled_actions schema version %d is newer than this build supports (%d)", version, len(scheduleMigrations))
	}
	for v := version; v < len(scheduleMigrations); v++ {
		if err := scheduleMigrations[v](ctx, tx); err != nil {
			return fmt.Errorf("scheduled_actions migration %d: %w", v+1, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO scheduled_actions_migrations (version) VALUES (?)`, v+1); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func (s *ScheduleStore) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlite schedule %s: %w", op, sqlitefile.Classify(err, s.closed.Load()))
}

func (s *ScheduleStore) open() error {
	if s.closed.Load() {
		return is.ErrClosed
	}
	return nil
}

// write runs fn in a BEGIN IMMEDIATE transaction.
func (s *ScheduleStore) write(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	if err := s.open(); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.fail(op, err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		if errors.Is(err, schedule.ErrLeaseLost) || errors.Is(err, is.ErrInvalidArgument) {
			return err
		}
		return s.fail(op, err)
	}
	return s.fail(op, tx.Commit())
}

// Path returns the absolute path of the store's file.
func (s *ScheduleStore) Path() string { return s.path }

func (s *ScheduleStore) Register(ctx context.Context, r schedule.NewRow) (int64, error) {
	if err := schedule.ValidateNewRow(r); err != nil {
		return 0, err
	}
	action, err := schedule.MarshalAction(r.Action)
	if err != nil {
		return 0, err
	}
	var id int64
	err = s.write(ctx, "register", func(tx *sql.Tx) error {
		due := r.DueAt.UnixMilli()
		var dueAt, availableAt int64
		err := tx.QueryRowContext(ctx, `SELECT schedule_id, due_at_ms, available_at_ms FROM scheduled_actions
			WHERE subject = ? AND action = ? AND lease_owner IS NULL AND failed = 0
			ORDER BY schedule_id LIMIT 1`, r.Action.Subject(), string(action)).Scan(&id, &dueAt, &availableAt)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return tx.QueryRowContext(ctx, `INSERT INTO scheduled_actions (due_at_ms, available_at_ms, bucket, subject, action)
				VALUES (?, ?, ?, ?, ?) RETURNING schedule_id`, due, due, r.Action.Agent.Bucket(), r.Action.Subject(), string(action)).Scan(&id)
		case err != nil:
			return err
		case schedule.Replaces(time.UnixMilli(dueAt), time.UnixMilli(availableAt), r.DueAt):
			_, err = tx.ExecContext(ctx, `UPDATE scheduled_actions SET due_at_ms = ?, available_at_ms = ?, attempt_count = 0
				WHERE schedule_id = ?`, due, due, id)
			return err
		}
		return nil
	})
	return id, err
}

const rowColumns = `schedule_id, due_at_ms, available_at_ms, bucket, action, lease_owner, lease_until_ms, attempt_count, failed`

// Claim picks, under the write lock, each eligible subject's row (its expired-leased row if it has
// one, else its oldest due), leaving out subjects with a running lease, and leases the oldest limit of
// them.
func (s *ScheduleStore) Claim(ctx context.Context, owner string, buckets []oplog.BucketRange, now time.Time, lease time.Duration, limit int) ([]schedule.Row, error) {
	if err := schedule.ValidateClaim(owner, buckets, lease); err != nil {
		return nil, err
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	if limit < 1 || len(buckets) == 0 {
		return nil, nil
	}
	ranges := make([][2]int, len(buckets))
	for i, r := range buckets {
		ranges[i] = [2]int{r.Lo, r.Hi}
	}
	rangeList, err := json.Marshal(ranges)
	if err != nil {
		return nil, err
	}
	nowMs, until := now.UnixMilli(), now.Add(lease).UnixMilli()
	var claimed []schedule.Row
	err = s.write(ctx, "claim", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `WITH eligible AS (
				SELECT `+rowColumns+`, ROW_NUMBER() OVER (PARTITION BY subject ORDER BY lease_owner IS NULL, due_at_ms, schedule_id) AS rn
				FROM scheduled_actions t
				WHERE failed = 0 AND due_at_ms <= ?1 AND available_at_ms <= ?1 AND (lease_owner IS NULL OR lease_until_ms < ?1)
				  AND EXISTS (SELECT 1 FROM json_each(?2) r WHERE t.bucket >= r.value->>0 AND t.bucket < r.value->>1)
				  AND NOT EXISTS (SELECT 1 FROM scheduled_actions l
					WHERE l.subject = t.subject AND l.lease_owner IS NOT NULL AND l.lease_until_ms >= ?1))
			SELECT `+rowColumns+` FROM eligible WHERE rn = 1 ORDER BY due_at_ms, schedule_id LIMIT ?3`,
			nowMs, string(rangeList), limit)
		if err != nil {
			return err
		}
		claimed, err = scanRows(rows)
		if err != nil {
			return err
		}
		for i := range claimed {
			r := &claimed[i]
			if _, err := tx.ExecContext(ctx, `UPDATE scheduled_actions SET lease_owner = ?, lease_until_ms = ?,
				attempt_count = attempt_count + 1 WHERE schedule_id = ?`, owner, until, r.ID); err != nil {
				return err
			}
			r.TakenOver = r.LeaseOwner != ""
			r.LeaseOwner, r.LeaseUntil = owner, time.UnixMilli(until)
			r.Attempts++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return claimed, nil
}

// byOwner runs an update on the row owner holds, or returns ErrLeaseLost when it holds none.
func (s *ScheduleStore) byOwner(ctx context.Context, op string, id int64, owner, query string, args ...any) error {
	return s.write(ctx, op, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query+` WHERE schedule_id = ? AND lease_owner = ? AND failed = 0`, append(args, id, owner)...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, fmt.Errorf("row %d: %w", id, schedule.ErrLeaseLost))
		}
		return nil
	})
}

func (s *ScheduleStore) Extend(ctx context.Context, id int64, owner string, until time.Time) error {
	return s.byOwner(ctx, "extend", id, owner, `UPDATE scheduled_actions SET lease_until_ms = ?`, until.UnixMilli())
}

func (s *ScheduleStore) Ack(ctx context.Context, id int64, owner string) error {
	return s.byOwner(ctx, "ack", id, owner, `DELETE FROM scheduled_actions`)
}

func (s *ScheduleStore) Release(ctx context.Context, id int64, owner string, retryAt time.Time, failed bool) error {
	return s.byOwner(ctx, "release", id, owner,
		`UPDATE scheduled_actions SET available_at_ms = ?, lease_owner = NULL, lease_until_ms = NULL, failed = ?`,
		retryAt.UnixMilli(), b2i(failed))
}

func (s *ScheduleStore) Rows(ctx context.Context) ([]schedule.Row, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+rowColumns+` FROM scheduled_actions ORDER BY due_at_ms, schedule_id`)
	if err != nil {
		return nil, s.fail("rows", err)
	}
	out, err := scanRows(rows)
	if err != nil {
		return nil, s.fail("rows", err)
	}
	return out, nil
}

func (s *ScheduleStore) Counts(ctx context.Context, now time.Time) (schedule.Counts, error) {
	if err := s.open(); err != nil {
		return schedule.Counts{}, err
	}
	var (
		c      schedule.Counts
		oldest sql.NullInt64
	)
	err := s.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(failed = 0), 0), COALESCE(SUM(failed = 1), 0),
			COALESCE(SUM(due), 0), MIN(CASE WHEN due THEN due_at_ms END)
		FROM (SELECT failed, due_at_ms, failed = 0 AND due_at_ms <= ?1 AND available_at_ms <= ?1
			AND (lease_owner IS NULL OR lease_until_ms < ?1) AS due FROM scheduled_actions)`, now.UnixMilli()).
		Scan(&c.Pending, &c.Failed, &c.Due, &oldest)
	if oldest.Valid {
		c.OldestDue = time.UnixMilli(oldest.Int64)
	}
	return c, s.fail("counts", err)
}

// Close closes the connection; later calls return ErrClosed.
func (s *ScheduleStore) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.db.Close()
}

// scanRows reads rows of rowColumns and closes them. An action that does not decode is an error naming
// its row, never a panic or a silently dropped row.
func scanRows(rows *sql.Rows) ([]schedule.Row, error) {
	defer rows.Close()
	var out []schedule.Row
	for rows.Next() {
		var (
			r          schedule.Row
			due, avail int64
			action     string
			owner      sql.NullString
			until      sql.NullInt64
			failed     int
		)
		if err := rows.Scan(&r.ID, &due, &avail, &r.Bucket, &action, &owner, &until, &r.Attempts, &failed); err != nil {
			return nil, err
		}
		a, err := schedule.UnmarshalAction([]byte(action))
		if err != nil {
			return nil, fmt.Errorf("scheduled row %d: %w", r.ID, err)
		}
		r.Action, r.DueAt, r.AvailableAt, r.LeaseOwner, r.Failed = a, time.UnixMilli(due), time.UnixMilli(avail), owner.String, failed != 0
		if until.Valid {
			r.LeaseUntil = time.UnixMilli(until.Int64)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
