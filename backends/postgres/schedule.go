package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
)

// scheduleTable is the table the schedule migration creates.
const scheduleTable = "scheduled_actions"

// scheduleColumns is the order every query that reads whole rows returns them in; see scanScheduleRow.
const scheduleColumns = `schedule_id, due_at_ms, available_at_ms, bucket, action, lease_owner, lease_until_ms, attempt_count, failed`

// subjectLockPrefix begins the key of the advisory lock a Register or a Claim takes on an agent: the
// prefix, the schema, ':' and the agent's key, hashed (hashtextextended). Keying by schema keeps two
// tables apart; two agents whose keys collide only serialize their claims.
const subjectLockPrefix = "strata.scheduled_actions:"

// ScheduleStore is the PostgreSQL schedule.Store: table scheduled_actions, created by its own embedded
// migration (recorded in scheduled_actions_migrations, apart from the index storage's) in the same
// schema rules as Store. It is safe for concurrent use, also by several processes on one table.
//
// One consumer per subject. Under READ COMMITTED, FOR UPDATE SKIP LOCKED alone would let two claimers
// lease two different rows of one agent, each deciding from a snapshot that shows neither lease. So
// every Claim and Register serializes per agent on a transaction-scoped advisory lock (subjectLockKey):
// a claim first try-locks the agents of its candidate rows, skipping any another claimer holds, then,
// in a new statement whose snapshot sees every lease committed before it took the locks, leases one row
// per locked agent that has no lease running, its expired-leased row first. Register takes the same
// lock (waiting for it) to look up the pending row it may replace, so two registrations of one action
// leave one row. The partial unique index scheduled_actions_one_lease backs the claim: a second leased
// row of an agent cannot be stored at all.
//
// Errors carry the indexedstorage sentinels (ErrTransient, ErrInvalidArgument, ErrClosed), plus
// schedule.ErrLeaseLost. A row whose action column does not decode is an error naming its schedule_id,
// with no sentinel: it is neither transient nor the caller's fault.
type ScheduleStore struct {
	pool     *pgxpool.Pool
	ownsPool bool
	schema   string
	table    string
	closed   atomic.Bool

	lockPrefix string // subjectLockPrefix + schema + ":"

	sqlLock, sqlRegister, sqlClaimLock, sqlClaim, sqlExtend, sqlAck, sqlRelease, sqlRows, sqlCounts string
}

var _ schedule.Store = (*ScheduleStore)(nil)

// ScheduleOptions configures NewScheduleStore. A nil *ScheduleOptions is the zero ScheduleOptions, and
// a zero field means its default.
type ScheduleOptions struct {
	// Schema holds the table, as Options.Schema does for the Store; DefaultSchema when empty. A URL's
	// schema parameter wins over it.
	Schema string
	// ConfigurePool, when set, adjusts the pool configuration parsed from the connection string before
	// the pool opens.
	ConfigurePool func(*pgxpool.Config)
}

// NewScheduleStore opens a pool on connString, as New does, and brings the schedule table up to date.
// Close closes the pool. A postgres:// URL may carry this package's parameters, as New's does:
// schema wins over opts, and max_concurrent_ops is checked like New checks it, so one URL can configure
// both stores, and otherwise ignored: the scheduler that uses this store already bounds its own work
// (one claim per tick, its handlers under their own limit), and pool_max_conns bounds the connections.
func NewScheduleStore(ctx context.Context, connString string, opts *ScheduleOptions) (*ScheduleStore, error) {
	var o ScheduleOptions
	if opts != nil {
		o = *opts
	}
	connString, urlSchema, _, err := urlParams(connString)
	if err != nil {
		return nil, fmt.Errorf("postgres schedule: %w", err)
	}
	o.Schema = cmp.Or(urlSchema, o.Schema)
	schema := cmp.Or(o.Schema, DefaultSchema)
	if err := validateSchema(schema); err != nil {
		return nil, fmt.Errorf("postgres schedule: %w", err)
	}
	poolConfig, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("postgres schedule: %w: %v", is.ErrInvalidArgument, err)
	}
	if o.ConfigurePool != nil {
		o.ConfigurePool(poolConfig)
	}
	return openScheduleStore(ctx, poolConfig, schema)
}

// OpenSchedule opens the schedule store a postgres:// (or postgresql://) URL names: NewScheduleStore
// with default options, on the same URL Open takes.
func OpenSchedule(ctx context.Context, rawURL string) (*ScheduleStore, error) {
	if !isURL(rawURL) {
		return nil, fmt.Errorf("postgres schedule: %w", errNotURL)
	}
	return NewScheduleStore(ctx, rawURL, nil)
}

// NewScheduleStoreOnPool brings the schedule table in schema (DefaultSchema when empty) up to date and
// returns a store on pool, so that an application shares one pool between its stores (Store.Pool).
// Close leaves the pool open: its owner closes it.
func NewScheduleStoreOnPool(ctx context.Context, pool *pgxpool.Pool, schema string) (*ScheduleStore, error) {
	schema = cmp.Or(schema, DefaultSchema)
	if err := validateSchema(schema); err != nil {
		return nil, fmt.Errorf("postgres schedule: %w", err)
	}
	return newScheduleStore(ctx, pool, schema, false)
}

func openScheduleStore(ctx context.Context, poolConfig *pgxpool.Config, schema string) (*ScheduleStore, error) {
	pool, err := newPool(ctx, poolConfig)
	if err != nil {
		return nil, fmt.Errorf("postgres schedule: open pool: %w", classify(err))
	}
	s, err := newScheduleStore(ctx, pool, schema, true)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

func newScheduleStore(ctx context.Context, pool *pgxpool.Pool, schema string, ownsPool bool) (*ScheduleStore, error) {
	if err := migrateTrack(ctx, pool, schema, scheduleTrack); err != nil {
		return nil, fmt.Errorf("postgres schedule: migrate schema %q: %w", schema, classify(err))
	}
	s := &ScheduleStore{pool: pool, ownsPool: ownsPool, schema: schema, table: pgx.Identifier{schema, scheduleTable}.Sanitize(),
		lockPrefix: subjectLockPrefix + schema + ":"}
	s.prepareSQL()
	return s, nil
}

func (s *ScheduleStore) prepareSQL() {
	t := s.table
	s.sqlLock = `SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended($1, 0))`
	// Run under the subject's lock: the pending, unleased row of the same action, replaced by the
	// registration if that runs later (schedule.Replaces), or else a new row.
	s.sqlRegister = `WITH existing AS (
		SELECT schedule_id, due_at_ms, available_at_ms FROM ` + t + `
		WHERE subject = $1 AND action = $2 AND lease_owner IS NULL AND NOT failed
		ORDER BY schedule_id LIMIT 1
	), replaced AS (
		UPDATE ` + t + ` AS r SET due_at_ms = $3, available_at_ms = $3, attempt_count = 0
		FROM existing e WHERE r.schedule_id = e.schedule_id AND GREATEST(e.due_at_ms, e.available_at_ms) < $3
	), inserted AS (
		INSERT INTO ` + t + ` (due_at_ms, available_at_ms, bucket, subject, action)
		SELECT $3, $3, $4, $1, $2 WHERE NOT EXISTS (SELECT 1 FROM existing)
		RETURNING schedule_id
	)
	SELECT schedule_id FROM existing UNION ALL SELECT schedule_id FROM inserted`
	// eligible is what a claim may lease at $1: due, available, not failed, its own lease (if any)
	// expired, its bucket in one of the ranges ($2 lows, $3 highs), and no lease running on another row
	// of its subject.
	eligible := `NOT t.failed AND t.due_at_ms <= $1 AND t.available_at_ms <= $1
		AND (t.lease_owner IS NULL OR t.lease_until_ms < $1)
		AND EXISTS (SELECT 1 FROM unnest($2::integer[], $3::integer[]) AS b(lo, hi) WHERE t.bucket >= b.lo AND t.bucket < b.hi)
		AND NOT EXISTS (SELECT 1 FROM ` + t + ` AS l
			WHERE l.subject = t.subject AND l.lease_owner IS NOT NULL AND l.lease_until_ms >= $1)`
	// The first statement of a claim: the subjects of the oldest eligible rows, one row per subject,
	// each try-locked in that order until $5 are held; a subject another claimer holds is skipped.
	// The candidates are MATERIALIZED so that the lock function runs only over them, in order, and
	// stops at the limit.
	s.sqlClaimLock = `WITH candidates AS MATERIALIZED (
		SELECT subject, due_at_ms, schedule_id,
			row_number() OVER (PARTITION BY subject ORDER BY lease_owner IS NULL, due_at_ms, schedule_id) AS nth
		FROM ` + t + ` AS t WHERE ` + eligible + `
	), ordered AS MATERIALIZED (
		SELECT subject FROM candidates WHERE nth = 1 ORDER BY due_at_ms, schedule_id
	)
	SELECT subject FROM ordered
	WHERE pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtextextended($4 || subject, 0))
	LIMIT $5`
	// The second: under the subjects' locks ($4), and in a snapshot that sees every lease committed
	// before they were taken, each subject's row to lease (its expired-leased row if it has one, since
	// a subject never holds two leases, else its oldest due), leased. A row changed since the snapshot
	// by its old holder (an Extend, Ack or Release) is rechecked against its new version when the UPDATE
	// reaches it, and dropped if no longer eligible. taken_over is read before the update.
	s.sqlClaim = `WITH picked AS MATERIALIZED (
		SELECT DISTINCT ON (t.subject) t.schedule_id, t.lease_owner IS NOT NULL AS taken_over
		FROM ` + t + ` AS t WHERE t.subject = ANY($4::text[]) AND ` + eligible + `
		ORDER BY t.subject, t.lease_owner IS NULL, t.due_at_ms, t.schedule_id
	)
	UPDATE ` + t + ` AS t SET lease_owner = $5, lease_until_ms = $6, attempt_count = t.attempt_count + 1
	FROM picked p
	WHERE t.schedule_id = p.schedule_id AND NOT t.failed AND t.due_at_ms <= $1 AND t.available_at_ms <= $1
		AND (t.lease_owner IS NULL OR t.lease_until_ms < $1)
	RETURNING t.schedule_id, t.due_at_ms, t.available_at_ms, t.bucket, t.action, t.lease_owner, t.lease_until_ms,
		t.attempt_count, t.failed, p.taken_over`
	held := ` WHERE schedule_id = $1 AND lease_owner = $2 AND NOT failed`
	s.sqlExtend = `UPDATE ` + t + ` SET lease_until_ms = $3` + held
	s.sqlAck = `DELETE FROM ` + t + held
	s.sqlRelease = `UPDATE ` + t + ` SET lease_owner = NULL, lease_until_ms = NULL, available_at_ms = $3, failed = $4` + held
	s.sqlRows = `SELECT ` + scheduleColumns + `, false FROM ` + t + ` ORDER BY due_at_ms, schedule_id`
	s.sqlCounts = `SELECT count(*) FILTER (WHERE NOT failed), count(*) FILTER (WHERE failed),
		count(*) FILTER (WHERE due), min(due_at_ms) FILTER (WHERE due)
	FROM (SELECT failed, due_at_ms, NOT failed AND due_at_ms <= $1 AND available_at_ms <= $1
		AND (lease_owner IS NULL OR lease_until_ms < $1) AS due FROM ` + t + `) AS r`
}

// subjectLockKey is the string whose hash keys the advisory lock on subject in this store's table.
func (s *ScheduleStore) subjectLockKey(subject string) string { return s.lockPrefix + subject }

// Pool returns the store's connection pool.
func (s *ScheduleStore) Pool() *pgxpool.Pool { return s.pool }

// Table returns the quoted, schema-qualified name of the table.
func (s *ScheduleStore) Table() string { return s.table }

// Schema returns the schema the store works in.
func (s *ScheduleStore) Schema() string { return s.schema }

// Close ends the store, and closes the pool if the store opened it. Later calls return ErrClosed;
// Close itself is idempotent.
func (s *ScheduleStore) Close() error {
	if !s.closed.Swap(true) && s.ownsPool {
		s.pool.Close()
	}
	return nil
}

// start checks what every operation checks before touching the database: its arguments, then Close.
func (s *ScheduleStore) start(op string, invalid error) error {
	if invalid != nil {
		return fmt.Errorf("postgres schedule %s: %w", op, invalid)
	}
	if s.closed.Load() {
		return fmt.Errorf("postgres schedule %s: %w", op, is.ErrClosed)
	}
	return nil
}

// fail classifies a native error. A store closed under a running operation fails with ErrClosed,
// whatever the pool made of it.
func (s *ScheduleStore) fail(op string, err error) error {
	if s.closed.Load() {
		err = is.Classify(is.ErrClosed, err)
	} else {
		err = classify(err)
	}
	return fmt.Errorf("postgres schedule %s: %w", op, err)
}

// Register refuses, as ErrInvalidArgument, an action that would not decode again (an invalid agent or
// mode): a stored row that cannot be read back would fail every claim that reaches it. It takes the
// agent's advisory lock, then replaces or inserts in one statement, in one transaction.
func (s *ScheduleStore) Register(ctx context.Context, row schedule.NewRow) (int64, error) {
	action, invalid := encodeAction(row.Action)
	if err := s.start("register", invalid); err != nil {
		return 0, err
	}
	subject := row.Action.Subject()
	var id int64
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	b.Queue(s.sqlLock, s.subjectLockKey(subject))
	b.Queue(s.sqlRegister, subject, action, row.DueAt.UnixMilli(), int32(row.Action.Agent.Bucket()))
	br := s.pool.SendBatch(ctx, &b)
	tx := br.Tx()
	defer tx.Rollback(ctx) // a no-op once committed
	_, err := br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&id)
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return 0, s.fail("register", err)
	}
	return id, nil
}

// Claim runs in one transaction: the statement that try-locks the candidates' subjects, then the
// UPDATE that leases one row of each (see ScheduleStore), committed only once every returned row has
// decoded: a row with a garbled action makes the claim an error that changes nothing (no lease taken,
// no attempt counted), rather than leasing rows nobody will run. The subject locks end with it.
func (s *ScheduleStore) Claim(ctx context.Context, owner string, buckets []oplog.BucketRange, now time.Time, lease time.Duration, limit int) ([]schedule.Row, error) {
	if err := s.start("claim", schedule.ValidateClaim(owner, buckets, lease)); err != nil {
		return nil, err
	}
	if len(buckets) == 0 || limit < 1 { // the contract: nothing to claim
		return nil, nil
	}
	los, his := make([]int32, len(buckets)), make([]int32, len(buckets))
	for i, r := range buckets {
		los[i], his[i] = int32(r.Lo), int32(r.Hi)
	}
	nowMs := now.UnixMilli()
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	b.Queue(s.sqlClaimLock, nowMs, los, his, s.lockPrefix, limit)
	br := s.pool.SendBatch(ctx, &b)
	tx := br.Tx()
	// A no-op after Commit. When ctx is already done the rollback fails and pgx closes the connection
	// rather than return it to the pool inside a transaction.
	defer tx.Rollback(ctx)

	var subjects []string
	_, err := br.Exec()
	if err == nil {
		rows, _ := br.Query()
		subjects, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	var stored []storedRow
	if err == nil && len(subjects) > 0 {
		rows, _ := tx.Query(ctx, s.sqlClaim, nowMs, los, his, subjects, owner, nowMs+lease.Milliseconds())
		stored, err = pgx.CollectRows(rows, scanStoredRow)
	}
	if err != nil {
		return nil, s.fail("claim", err)
	}
	claimed, err := decodeRows(stored)
	if err != nil {
		return nil, fmt.Errorf("postgres schedule claim: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, s.fail("claim", err)
	}
	// RETURNING follows no ORDER BY; the contract wants the oldest due first.
	slices.SortFunc(claimed, compareRows)
	return claimed, nil
}

func (s *ScheduleStore) Extend(ctx context.Context, id int64, owner string, until time.Time) error {
	return s.held(ctx, "extend", id, s.sqlExtend, id, owner, until.UnixMilli())
}

func (s *ScheduleStore) Ack(ctx context.Context, id int64, owner string) error {
	return s.held(ctx, "ack", id, s.sqlAck, id, owner)
}

func (s *ScheduleStore) Release(ctx context.Context, id int64, owner string, retryAt time.Time, failed bool) error {
	return s.held(ctx, "release", id, s.sqlRelease, id, owner, retryAt.UnixMilli(), failed)
}

// held runs a statement guarded by the lease (sql ends in WHERE schedule_id = $1 AND lease_owner = $2
// AND NOT failed): no row changed means owner does not hold the lease. An empty owner never does, as
// Claim refuses it.
func (s *ScheduleStore) held(ctx context.Context, op string, id int64, sql string, args ...any) error {
	if err := s.start(op, nil); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, sql, args...)
	if err != nil {
		return s.fail(op, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres schedule %s: row %d: %w", op, id, schedule.ErrLeaseLost)
	}
	return nil
}

func (s *ScheduleStore) Rows(ctx context.Context) ([]schedule.Row, error) {
	if err := s.start("rows", nil); err != nil {
		return nil, err
	}
	rows, _ := s.pool.Query(ctx, s.sqlRows)
	stored, err := pgx.CollectRows(rows, scanStoredRow)
	if err != nil {
		return nil, s.fail("rows", err)
	}
	out, err := decodeRows(stored)
	if err != nil {
		return nil, fmt.Errorf("postgres schedule rows: %w", err)
	}
	return out, nil
}

func (s *ScheduleStore) Counts(ctx context.Context, now time.Time) (schedule.Counts, error) {
	if err := s.start("counts", nil); err != nil {
		return schedule.Counts{}, err
	}
	var (
		pending, failed, due int64
		oldest               *int64
	)
	if err := s.pool.QueryRow(ctx, s.sqlCounts, now.UnixMilli()).Scan(&pending, &failed, &due, &oldest); err != nil {
		return schedule.Counts{}, s.fail("counts", err)
	}
	c := schedule.Counts{Pending: int(pending), Failed: int(failed), Due: int(due)}
	if oldest != nil {
		c.OldestDue = time.UnixMilli(*oldest)
	}
	return c, nil
}

// storedRow is a row as the table holds it, before its action is decoded: decoding apart from scanning
// keeps a garbled action out of classify, which is for the database's errors.
type storedRow struct {
	id, dueAt, availableAt int64
	bucket, attempts       int32
	action                 string
	leaseOwner             *string
	leaseUntil             *int64
	failed, takenOver      bool
}

// scanStoredRow reads the columns of scheduleColumns, then whether the claim took the row over.
func scanStoredRow(row pgx.CollectableRow) (storedRow, error) {
	var r storedRow
	err := row.Scan(&r.id, &r.dueAt, &r.availableAt, &r.bucket, &r.action, &r.leaseOwner, &r.leaseUntil, &r.attempts, &r.failed, &r.takenOver)
	return r, err
}

// decodeRows turns stored rows into schedule rows; the first action that does not decode is an error
// naming its row. A row nobody holds reads back with LeaseOwner "" and a zero LeaseUntil.
func decodeRows(stored []storedRow) ([]schedule.Row, error) {
	out := make([]schedule.Row, 0, len(stored))
	for _, r := range stored {
		action, err := schedule.UnmarshalAction([]byte(r.action))
		if err != nil {
			return nil, fmt.Errorf("scheduled row %d: %w", r.id, err)
		}
		row := schedule.Row{
			ID:          r.id,
			DueAt:       time.UnixMilli(r.dueAt),
			AvailableAt: time.UnixMilli(r.availableAt),
			Bucket:      int(r.bucket),
			Action:      action,
			Attempts:    int(r.attempts),
			Failed:      r.failed,
			TakenOver:   r.takenOver,
		}
		if r.leaseOwner != nil {
			row.LeaseOwner = *r.leaseOwner
		}
		if r.leaseUntil != nil {
			row.LeaseUntil = time.UnixMilli(*r.leaseUntil)
		}
		out = append(out, row)
	}
	return out, nil
}

// compareRows orders rows oldest due first, then by id.
func compareRows(a, b schedule.Row) int {
	return cmp.Or(a.DueAt.Compare(b.DueAt), cmp.Compare(a.ID, b.ID))
}

// encodeAction marshals an action and checks that it decodes again.
func encodeAction(a schedule.ArchiveOplog) (string, error) {
	data, err := schedule.MarshalAction(a)
	if err == nil {
		_, err = schedule.UnmarshalAction(data)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %w", is.ErrInvalidArgument, err)
	}
	return string(data), nil
}
