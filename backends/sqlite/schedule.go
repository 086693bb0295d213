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

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog/schedule"
)

// ScheduleStore is schedule.Store in a SQLite file: the table scheduled_actions, beside index_storage
// when both use one file. Every call goes through one connection whose transactions are BEGIN
// IMMEDIATE, so a claim's select and its update hold the write lock together: two claimers, in this
// process or another on the same file, never take the same row.
type ScheduleStore struct {
	path   string
	db     *sql.DB
	closed atomic.Bool
}

var _ schedule.Store = (*ScheduleStore)(nil)

// scheduleMigrations[v] takes the scheduled_actions schema from version v to v+1. The version lives in
// its own table, since user_version belongs to index_storage and the two may share a file.
var scheduleMigrations = []string{
	// Times are Unix milliseconds; lease_owner is NULL while nobody holds the row. The index serves the
	// claim: shard equality, then due_at_ms as range and order.
	`CREATE TABLE scheduled_actions (
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
	CREATE INDEX scheduled_actions_claim ON scheduled_actions (shard_id, due_at_ms, available_at_ms) WHERE failed = 0;`,
}

// OpenSchedule opens (creating it if needed) the scheduled_actions table in the SQLite file at path.
// The file may be the one a Store uses.
func OpenSchedule(ctx context.Context, path string, opts Options) (*ScheduleStore, error) {
	if path == "" {
		return nil, fmt.Errorf("sqlite schedule: open: %w: empty path", is.ErrInvalidArgument)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite schedule: open %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return nil, fmt.Errorf("sqlite schedule: open %s: %w", path, err)
	}
	db, err := sql.Open("sqlite3", dsn(abs, opts))
	if err != nil {
		return nil, fmt.Errorf("sqlite schedule: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := migrateSchedule(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite schedule: open %s: %w", path, classify(err, false))
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
		if _, err := tx.ExecContext(ctx, scheduleMigrations[v]); err != nil {
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
	return fmt.Errorf("sqlite schedule %s: %w", op, classify(err, s.closed.Load()))
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
		return tx.QueryRowContext(ctx, `INSERT INTO scheduled_actions (due_at_ms, available_at_ms, shard_id, action)
			VALUES (?, ?, ?, ?) RETURNING schedule_id`, due, due, r.Shard, string(action)).Scan(&id)
	})
	return id, err
}

const rowColumns = `schedule_id, due_at_ms, available_at_ms, shard_id, action, lease_owner, lease_until_ms, attempt_count, failed`

func (s *ScheduleStore) Claim(ctx context.Context, owner string, shards []int, now time.Time, lease time.Duration, limit int) ([]schedule.Row, error) {
	if err := schedule.ValidateClaim(owner); err != nil {
		return nil, err
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	if limit < 1 || len(shards) == 0 {
		return nil, nil
	}
	shardList, err := json.Marshal(shards)
	if err != nil {
		return nil, err
	}
	nowMs, until := now.UnixMilli(), now.Add(lease).UnixMilli()
	var claimed []schedule.Row
	err = s.write(ctx, "claim", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+rowColumns+` FROM scheduled_actions
			WHERE shard_id IN (SELECT value FROM json_each(?)) AND failed = 0
			  AND due_at_ms <= ? AND available_at_ms <= ? AND (lease_owner IS NULL OR lease_until_ms < ?)
			ORDER BY due_at_ms, schedule_id LIMIT ?`, string(shardList), nowMs, nowMs, nowMs, limit)
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

func (s *ScheduleStore) Counts(ctx context.Context) (schedule.Counts, error) {
	if err := s.open(); err != nil {
		return schedule.Counts{}, err
	}
	var c schedule.Counts
	err := s.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(failed = 0), 0), COALESCE(SUM(failed = 1), 0) FROM scheduled_actions`).
		Scan(&c.Pending, &c.Failed)
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
		if err := rows.Scan(&r.ID, &due, &avail, &r.Shard, &action, &owner, &until, &r.Attempts, &failed); err != nil {
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
