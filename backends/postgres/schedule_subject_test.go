package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
	"github.com/stratalog/strata/oplog/schedule/scheduletest"
)

// holdSubjectLock takes, on a connection of its own, the advisory lock a claim or a registration of
// subject takes in schema ("strata.scheduled_actions:" + schema + ":" + subject, hashed), as a
// concurrent claimer in the middle of its claim holds it; the returned function releases it.
func holdSubjectLock(t *testing.T, schema, subject string) (release func()) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	key := "strata.scheduled_actions:" + schema + ":" + subject
	if _, err := conn.Exec(t.Context(), "SELECT pg_advisory_lock(hashtextextended($1, 0))", key); err != nil {
		t.Fatal(err)
	}
	// Unlocked before the connection closes: a closed connection's locks go when its server process
	// ends, which the client does not wait for, so a claim made right after could still find the lock
	// held (1 run in 10 did).
	return func() {
		defer conn.Close(context.Background())
		var unlocked bool
		if err := conn.QueryRow(context.Background(), "SELECT pg_advisory_unlock(hashtextextended($1, 0))", key).Scan(&unlocked); err != nil || !unlocked {
			t.Fatalf("releasing the advisory lock of %s: %v (held: %v)", subject, err, unlocked)
		}
	}
}

// The claim's per-agent serialization, forced: while another session holds agent x's lock (a claimer
// between its lock and its commit), a claim leases nothing of x, even though x's rows are the oldest
// and x holds no lease the claim's snapshot could see; it takes y's. Once the lock is gone, x's
// oldest row is claimed. This is what READ COMMITTED with SKIP LOCKED alone does not give: there the
// claim would lock another row of x and lease it beside the concurrent claimer's.
func TestScheduleClaim_SkipsAnAgentAnotherClaimerHolds(t *testing.T) {
	schema := testenv.PostgresSchema(t, testenv.PostgresURL(t))
	st := newScheduleStore(t, schema)
	ctx := t.Context()
	x1, _ := st.Register(ctx, schedule.NewRow{DueAt: scheduleT0.Add(-2 * time.Minute), Action: archiveAction("x")})
	x2 := archiveAction("x")
	x2.LastIndex = 8
	st.Register(ctx, schedule.NewRow{DueAt: scheduleT0.Add(-time.Minute), Action: x2})
	y, _ := st.Register(ctx, schedule.NewRow{DueAt: scheduleT0, Action: archiveAction("y")})

	release := holdSubjectLock(t, schema, "comp:x")
	got, err := st.Claim(ctx, "a", scheduletest.All, scheduleT0, time.Minute, 10)
	if err != nil || len(got) != 1 || got[0].ID != y {
		t.Fatalf("claim while x's lock is held: %+v, %v; want only y's row %d", got, err, y)
	}
	release()
	got, err = st.Claim(ctx, "b", scheduletest.All, scheduleT0, time.Minute, 10)
	if err != nil || len(got) != 1 || got[0].ID != x1 {
		t.Fatalf("claim once x's lock is free: %+v, %v; want x's oldest row %d", got, err, x1)
	}
}

// The table itself refuses a second lease on one agent's rows (the partial unique index), so a claim
// that went wrong would fail rather than hand an agent to two consumers.
func TestScheduleStore_TheTableRefusesASecondLeaseOnAnAgent(t *testing.T) {
	st := newScheduleStore(t, testenv.PostgresSchema(t, testenv.PostgresURL(t)))
	ctx := t.Context()
	first, _ := st.Register(ctx, schedule.NewRow{DueAt: scheduleT0, Action: archiveAction("x")})
	other := archiveAction("x")
	other.LastIndex = 9
	second, _ := st.Register(ctx, schedule.NewRow{DueAt: scheduleT0, Action: other})
	if got, err := st.Claim(ctx, "a", scheduletest.All, scheduleT0, time.Minute, 10); err != nil || len(got) != 1 || got[0].ID != first {
		t.Fatalf("claim: %+v, %v", got, err)
	}
	_, err := st.Pool().Exec(ctx, `UPDATE `+st.Table()+` SET lease_owner = 'b', lease_until_ms = $1 WHERE schedule_id = $2`,
		scheduleT0.Add(time.Minute).UnixMilli(), second)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" || pgErr.ConstraintName != "scheduled_actions_one_lease" {
		t.Fatalf("a second lease on x's rows written by hand: %v; want a unique violation of scheduled_actions_one_lease", err)
	}
}

// A schema at schedule migration 1 (shard_id, rows of earlier versions) is brought to 2: each row's
// bucket is its agent's, computed in SQL exactly as oplog.AgentID.Bucket computes it (non-ASCII keys
// included), a garbled row is kept as the error it was, an agent's duplicate leases become one, and
// pending duplicates of one action become the one that runs latest.
func TestScheduleMigration_FromVersion1BackfillsBucketsAndOneLeasePerAgent(t *testing.T) {
	url := testenv.PostgresURL(t)
	schema := testenv.PostgresSchema(t, url)
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	ddl, err := os.ReadFile("migrations/schedule/0001_scheduled_actions.sql")
	if err != nil {
		t.Fatal(err)
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	table := pgx.Identifier{schema, "scheduled_actions"}.Sanitize()
	for _, stmt := range []string{
		strings.ReplaceAll(string(ddl), "{{schema}}", quoted),
		`CREATE TABLE ` + pgx.Identifier{schema, "scheduled_actions_migrations"}.Sanitize() + ` (
			version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
		`INSERT INTO ` + pgx.Identifier{schema, "scheduled_actions_migrations"}.Sanitize() + ` (version, name) VALUES (1, '0001_scheduled_actions')`,
	} {
		if _, err := conn.Exec(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	insert := func(due int64, shard int, action, owner string, until int64) int64 {
		t.Helper()
		var id int64
		var o, u any
		if owner != "" {
			o, u = owner, until
		}
		if err := conn.QueryRow(t.Context(), `INSERT INTO `+table+` (due_at_ms, available_at_ms, shard_id, action, lease_owner, lease_until_ms)
			VALUES ($1, $1, $2, $3, $4, $5) RETURNING schedule_id`, due, shard, action, o, u).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	marshal := func(a schedule.ArchiveOplog) string {
		data, err := schedule.MarshalAction(a)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	t0 := scheduleT0.UnixMilli()
	agents := []oplog.AgentID{
		{Component: "comp", Name: "日本語"}, {Component: "svc", Name: "Ünïcödé"}, {Component: "svc", Name: "U\u0308"},
		{Component: "emoji", Name: "🦀 \"quoted\" \\ back"}, {Component: "c", Name: strings.Repeat("n", 300)},
	}
	for i := range 40 {
		agents = append(agents, oplog.AgentID{Component: "comp", Name: fmt.Sprint("agent-", i)})
	}
	for i, a := range agents {
		insert(t0, i%3, marshal(schedule.ArchiveOplog{Agent: a, Mode: oplog.Durable, LastIndex: oplog.Index(i + 1)}), "", 0)
	}
	garbled := insert(t0, 0, `not json`, "", 0)
	// x: two rows leased at once (the bug this migration ends), the one leased longest keeps it.
	x := func(last oplog.Index) string {
		return marshal(schedule.ArchiveOplog{Agent: oplog.AgentID{Component: "x", Name: "x"}, Mode: oplog.Durable, LastIndex: last})
	}
	insert(t0, 0, x(1), "old", t0+1000)
	keeps := insert(t0, 1, x(2), "new", t0+5000)
	// y: three pending rows of one action; the one due latest stays.
	y := marshal(schedule.ArchiveOplog{Agent: oplog.AgentID{Component: "y", Name: "y"}, Mode: oplog.Durable, LastIndex: 4})
	insert(t0, 0, y, "", 0)
	latest := insert(t0+9000, 1, y, "", 0)
	insert(t0+2000, 2, y, "", 0)

	st := newScheduleStore(t, schema)
	var got []struct {
		id      int64
		bucket  int32
		subject string
		owner   *string
	}
	rows, _ := st.Pool().Query(t.Context(), `SELECT schedule_id, bucket, subject, lease_owner FROM `+st.Table()+` ORDER BY schedule_id`)
	for rows.Next() {
		var r struct {
			id      int64
			bucket  int32
			subject string
			owner   *string
		}
		if err := rows.Scan(&r.id, &r.bucket, &r.subject, &r.owner); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(agents)+1+2+1 {
		t.Fatalf("%d rows after the migration, want %d", len(got), len(agents)+4)
	}
	for i, a := range agents {
		if r := got[i]; r.subject != a.Key() || int(r.bucket) != a.Bucket() {
			t.Errorf("%q: bucket %d subject %q after the migration, want %d and its key", a.Key(), r.bucket, r.subject, a.Bucket())
		}
	}
	leases, ys := 0, 0
	for _, r := range got {
		switch {
		case r.id == garbled && (r.bucket != 0 || r.subject != ""):
			t.Errorf("garbled row: bucket %d subject %q, want 0 and ''", r.bucket, r.subject)
		case r.subject == "x:x" && r.owner != nil:
			leases++
			if r.id != keeps {
				t.Errorf("x's lease kept on row %d, want %d (leased longest)", r.id, keeps)
			}
		case r.subject == "y:y":
			ys++
			if r.id != latest {
				t.Errorf("y's pending row %d kept, want %d (due latest)", r.id, latest)
			}
		}
	}
	if leases != 1 || ys != 1 {
		t.Errorf("x holds %d leases, y %d pending rows; want one each", leases, ys)
	}
	vrows, _ := st.Pool().Query(t.Context(), "SELECT version FROM "+pgx.Identifier{schema, "scheduled_actions_migrations"}.Sanitize()+" ORDER BY version")
	versions, err := pgx.CollectRows(vrows, pgx.RowTo[int32])
	if err != nil || !slices.Equal(versions, []int32{1, 2}) {
		t.Fatalf("schedule migrations recorded: %v, %v; want [1 2]", versions, err)
	}
	// And the migrated table serves claims: every agent's row, one per agent.
	claimed, err := st.Claim(t.Context(), "after", scheduletest.All, scheduleT0.Add(time.Hour), time.Minute, 1000)
	if err == nil {
		t.Fatalf("claim over the garbled row succeeded with %d rows; want it named as an error", len(claimed))
	}
	if _, err := st.Pool().Exec(t.Context(), `DELETE FROM `+st.Table()+` WHERE schedule_id = $1`, garbled); err != nil {
		t.Fatal(err)
	}
	claimed, err = st.Claim(t.Context(), "after", scheduletest.All, scheduleT0.Add(time.Hour), time.Minute, 1000)
	// x still holds its (expired) lease from before: the claim takes it over, on the same row.
	if err != nil || len(claimed) != len(agents)+2 {
		t.Fatalf("claim after the migration: %d rows, %v; want %d (x's lease expired, y pending)", len(claimed), err, len(agents)+2)
	}
}
