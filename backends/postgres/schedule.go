package postgres

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog/schedule"
)

// scheduleTable is the table the schedule migration creates.
const scheduleTable = "scheduled_actions"

// scheduleColumns is the order every query that reads whole rows returns them in; see scanScheduleRow.
const scheduleColumns = `schedule_id, due_at_ms, available_at_ms, shard_id, action, lease_owner, lease_until_ms, attempt_count, failed`

// ScheduleStore is the PostgreSQL schedule.Store: table scheduled_actions, created by its own embedded
// migration (recorded in scheduled_actions_migrations, apart from the index storage's) in the same
// schema rules as Store. It is safe for concurrent use, also by several processes on one table.
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

	sqlRegister, sqlClaim, sqlExtend, sqlAck, sqlRelease, sqlRows, sqlCounts string
}

var _ schedule.Store = (*ScheduleStore)(nil)

// NewScheduleStore opens a pool on cfg.ConnString, as New does, and brings the schedule table up to
// date. Close closes the pool.
func NewScheduleStore(ctx context.Context, cfg Config) (*ScheduleStore, error) {
	schema := cmp.Or(cfg.Schema, DefaultSchema)
	if err := validateSchema(schema); err != nil {
		return nil, fmt.Errorf("postgres schedule: %w", err)
	}
	poolConfig, err := pgxpool.ParseConfig(cfg.ConnString)
	if err != nil {
		return nil, fmt.Errorf("postgres schedule: %w: %v", is.ErrInvalidArgument, err)
	}
	if cfg.ConfigurePool != nil {
		cfg.ConfigurePool(poolConfig)
	}
	return openScheduleStore(ctx, poolConfig, schema)
}

// OpenSchedule opens the schedule store a postgres:// (or postgresql://) URL names: the same URL Open
// takes, schema parameter included. max_concurrent_ops is checked like Open checks it, so one URL can
// configure both stores, and otherwise ignored: the scheduler that uses this store already bounds its
// own work (one claim per tick, its handlers under their own limit), and pool_max_conns bounds the
// connections.
func OpenSchedule(ctx context.Context, rawURL string) (*ScheduleStore, error) {
	connString, schema, _, err := splitURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("postgres schedule: %w", err)
	}
	poolConfig, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("postgres schedule: %w: %v", is.ErrInvalidArgument, err)
	}
	return openScheduleStore(ctx, poolConfig, schema)
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
	s := &ScheduleStore{pool: pool, ownsPool: ownsPool, schema: schema, table: pgx.Identifier{schema, scheduleTable}.Sanitize()}
	s.prepareSQL()
	return s, nil
}

func (s *ScheduleStore) prepareSQL() {
	t := s.table
	s.sqlRegister = `INSERT INTO ` + t + ` (due_at_ms, available_at_ms, shard_id, action) VALUES ($1, $1, $2, $3) RETURNING schedule_id`
	// The candidates are picked in a MATERIALIZED CTE rather than an IN (subquery): a subquery may be
	// evaluated more than once by the plan of the UPDATE, and each evaluation locks further rows, so
	// LIMIT would not bound the claim. Under READ COMMITTED a candidate another claimer updated since the
	// snapshot is rechecked against its new version when locked, so a row just leased elsewhere drops out
	// instead of being taken twice; one still being claimed is skipped.
	s.sqlClaim = `WITH picked AS MATERIALIZED (
		SELECT schedule_id FROM ` + t + `
		WHERE shard_id = ANY($2::integer[]) AND NOT failed AND due_at_ms <= $3 AND available_at_ms <= $3
			AND (lease_owner IS NULL OR lease_until_ms < $3)
		ORDER BY due_at_ms, schedule_id
		LIMIT $5
		FOR UPDATE SKIP LOCKED
	)
	UPDATE ` + t + ` SET lease_owner = $1, lease_until_ms = $4, attempt_count = attempt_count + 1
	WHERE schedule_id IN (SELECT schedule_id FROM picked)
	RETURNING ` + scheduleColumns
	held := ` WHERE schedule_id = $1 AND lease_owner = $2 AND NOT failed`
	s.sqlExtend = `UPDATE ` + t + ` SET lease_until_ms = $3` + held
	s.sqlAck = `DELETE FROM ` + t + held
	s.sqlRelease = `UPDATE ` + t + ` SET lease_owner = NULL, lease_until_ms = NULL, available_at_ms = $3, failed = $4` + held
	s.sqlRows = `SELECT ` + scheduleColumns + ` FROM ` + t + ` ORDER BY due_at_ms, schedule_id`
	s.sqlCounts = `SELECT count(*) FILTER (WHERE NOT failed), count(*) FILTER (WHERE failed) FROM ` + t
}

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
// mode) and a shard outside the column's 32 bits: a stored row that cannot be read back would fail
// every claim that reaches it.
func (s *ScheduleStore) Register(ctx context.Context, row schedule.NewRow) (int64, error) {
	action, invalid := encodeAction(row.Action)
	if invalid == nil {
		invalid = checkShard(row.Shard)
	}
	if err := s.start("register", invalid); err != nil {
		return 0, err
	}
	var id int64
	if err := s.pool.QueryRow(ctx, s.sqlRegister, row.DueAt.UnixMilli(), int32(row.Shard), action).Scan(&id); err != nil {
		return 0, s.fail("register", err)
	}
	return id, nil
}

// Claim runs its one UPDATE in a transaction that it commits only once every returned row has
// decoded: a row with a garbled action makes the claim an error that changes nothing (no lease taken,
// no attempt counted), rather than leasing rows nobody will run.
func (s *ScheduleStore) Claim(ctx context.Context, owner string, shards []int, now time.Time, lease time.Duration, limit int) ([]schedule.Row, error) {
	shardIDs, invalid := claimArgs(owner, shards, lease, limit)
	if err := s.start("claim", invalid); err != nil {
		return nil, err
	}
	if len(shardIDs) == 0 || limit < 1 { // the contract: nothing to claim
		return nil, nil
	}
	nowMs := now.UnixMilli()
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	b.Queue(s.sqlClaim, owner, shardIDs, nowMs, nowMs+lease.Milliseconds(), limit)
	br := s.pool.SendBatch(ctx, &b)
	tx := br.Tx()
	// A no-op after Commit. When ctx is already done the rollback fails and pgx closes the connection
	// rather than return it to the pool inside a transaction.
	defer tx.Rollback(ctx)

	var stored []storedRow
	_, err := br.Exec()
	if err == nil {
		rows, _ := br.Query()
		stored, err = pgx.CollectRows(rows, scanStoredRow)
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
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

func (s *ScheduleStore) Counts(ctx context.Context) (schedule.Counts, error) {
	if err := s.start("counts", nil); err != nil {
		return schedule.Counts{}, err
	}
	var pending, failed int64
	if err := s.pool.QueryRow(ctx, s.sqlCounts).Scan(&pending, &failed); err != nil {
		return schedule.Counts{}, s.fail("counts", err)
	}
	return schedule.Counts{Pending: int(pending), Failed: int(failed)}, nil
}

// storedRow is a row as the table holds it, before its action is decoded: decoding apart from scanning
// keeps a garbled action out of classify, which is for the database's errors.
type storedRow struct {
	id, dueAt, availableAt int64
	shard, attempts        int32
	action                 string
	leaseOwner             *string
	leaseUntil             *int64
	failed                 bool
}

// scanStoredRow reads the columns of scheduleColumns.
func scanStoredRow(row pgx.CollectableRow) (storedRow, error) {
	var r storedRow
	err := row.Scan(&r.id, &r.dueAt, &r.availableAt, &r.shard, &r.action, &r.leaseOwner, &r.leaseUntil, &r.attempts, &r.failed)
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
			Shard:       int(r.shard),
			Action:      action,
			Attempts:    int(r.attempts),
			Failed:      r.failed,
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

// checkShard refuses a shard the integer column cannot hold, rather than let pgx fail to encode it.
func checkShard(shard int) error {
	if shard < math.MinInt32 || shard > math.MaxInt32 {
		return fmt.Errorf("%w: shard %d does not fit in 32 bits", is.ErrInvalidArgument, shard)
	}
	return nil
}

// claimArgs checks Claim's arguments and returns the shards as the column's type. An empty owner is
// refused because a row leased to it would read back as leased to nobody.
func claimArgs(owner string, shards []int, lease time.Duration, limit int) ([]int32, error) {
	switch {
	case owner == "":
		return nil, fmt.Errorf("%w: empty lease owner", is.ErrInvalidArgument)
	case lease <= 0:
		return nil, fmt.Errorf("%w: lease %v, want > 0", is.ErrInvalidArgument, lease)
	}
	ids := make([]int32, len(shards))
	for i, shard := range shards {
		if err := checkShard(shard); err != nil {
			return nil, err
		}
		ids[i] = int32(shard)
	}
	return ids, nil
}
