package postgres_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stratalog/strata/backends/postgres"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
	"github.com/stratalog/strata/oplog/schedule/scheduletest"
)

func TestScheduleStoreConformance(t *testing.T) {
	scheduletest.Run(t, scheduletest.Harness{
		New: func(tb testing.TB) schedule.Store {
			return newScheduleStore(tb, testenv.PostgresSchema(tb, testenv.PostgresURL(tb)))
		},
		// A store with a pool of its own on the same schema stands for another process.
		Reopen: func(tb testing.TB, s schedule.Store) schedule.Store {
			return newScheduleStore(tb, s.(*postgres.ScheduleStore).Schema())
		},
	})
}

// newScheduleStore opens a ScheduleStore with a pool of its own on the test server in schema, closed
// when the test ends. Its connections run with an empty search_path, so a query that does not name the
// schema fails.
func newScheduleStore(tb testing.TB, schema string) *postgres.ScheduleStore {
	tb.Helper()
	st, err := postgres.NewScheduleStore(tb.Context(), testenv.PostgresURL(tb), &postgres.ScheduleOptions{
		Schema:        schema,
		ConfigurePool: emptySearchPath,
	})
	if err != nil {
		tb.Fatalf("postgres.NewScheduleStore: %v", err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

var scheduleT0 = time.UnixMilli(1_800_000_000_000)

func archiveAction(name string) schedule.ArchiveOplog {
	return schedule.ArchiveOplog{Agent: oplog.AgentID{Component: "comp", Name: name}, Mode: oplog.Durable, LastIndex: 7}
}

// Two pools stand for two processes: the rows each claimer gets must be disjoint across both, and the
// table must agree about who holds each row.
func TestScheduleClaim_TwoPoolsNeverTakeTheSameRow(t *testing.T) {
	schema := testenv.PostgresSchema(t, testenv.PostgresURL(t))
	stores := []*postgres.ScheduleStore{newScheduleStore(t, schema), newScheduleStore(t, schema)}
	const rows, perStore, limit = 400, 4, 3
	for i := range rows {
		// Few distinct due times, so that many claimers contend for the same oldest rows.
		row := schedule.NewRow{DueAt: scheduleT0.Add(-time.Duration(i%5) * time.Second), Action: archiveAction(fmt.Sprint(i))}
		if _, err := stores[i%2].Register(t.Context(), row); err != nil {
			t.Fatal(err)
		}
	}

	var claimers []scheduletest.Claimer
	for si, st := range stores {
		for g := range perStore {
			claimers = append(claimers, scheduletest.Claimer{Owner: fmt.Sprintf("store%d-claimer%d", si, g), Store: st})
		}
	}
	owners, dups := scheduletest.ClaimConcurrently(t, claimers, scheduletest.All, scheduleT0, time.Minute, limit)
	if len(dups) > 0 {
		t.Fatalf("%d rows claimed twice: %s", len(dups), strings.Join(dups[:min(len(dups), 5)], "; "))
	}
	if len(owners) != rows {
		t.Fatalf("%d rows claimed, want each of %d once", len(owners), rows)
	}
	all, err := stores[0].Rows(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if r.LeaseOwner != owners[r.ID] || r.Attempts != 1 {
			t.Fatalf("row %d held by %q after %d attempts, but %q was handed it by Claim", r.ID, r.LeaseOwner, r.Attempts, owners[r.ID])
		}
	}
}

// The schedule migration keeps its own record next to the index storage's: running it again, or
// running both in either order on one schema, applies each migration once and keeps the data.
func TestScheduleMigration_RunsTwiceBesideTheIndexStorage(t *testing.T) {
	schema := testenv.PostgresSchema(t, testenv.PostgresURL(t))
	first := newScheduleStore(t, schema)
	id, err := first.Register(t.Context(), schedule.NewRow{DueAt: scheduleT0, Action: archiveAction("kept")})
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	index := newStore(t, schema)
	if err := index.Append(t.Context(), testNS, "k", 1, []byte("v")); err != nil {
		t.Fatal(err)
	}
	second := newScheduleStore(t, schema)

	rows, err := second.Rows(t.Context())
	if err != nil || len(rows) != 1 || rows[0].ID != id || rows[0].Action.Agent.Name != "kept" {
		t.Fatalf("after a second migration: rows %+v, %v; want the registered row", rows, err)
	}
	if got := readIDs(t, index, "k"); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("index storage after the schedule migration: ids %v", got)
	}
	requireMigrations(t, second.Pool(), schema)
}

// Processes of both kinds starting together on a missing schema: the tracks share one advisory lock,
// so they do not race on CREATE SCHEMA, and each applies its migrations once.
func TestScheduleMigration_ConcurrentWithIndexStorageOnAMissingSchema(t *testing.T) {
	url := testenv.PostgresURL(t)
	schema := testenv.UniqueName("strata_test_")
	t.Cleanup(func() { dropSchema(t, url, schema) })

	const each = 3
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	start := make(chan struct{})
	for range each {
		wg.Go(func() {
			<-start
			st, err := postgres.NewScheduleStore(t.Context(), url, &postgres.ScheduleOptions{Schema: schema, ConfigurePool: emptySearchPath})
			if err == nil {
				st.Close()
			}
			errs <- err
		})
		wg.Go(func() {
			<-start
			st, err := postgres.New(t.Context(), url, &postgres.Options{Schema: schema, ConfigurePool: emptySearchPath})
			if err == nil {
				st.Close()
			}
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("started together: %v", err)
		}
	}
	st := newScheduleStore(t, schema)
	requireMigrations(t, st.Pool(), schema)
}

// requireMigrations checks both tracks' records hold each version from 1 once, the schedule's up to
// 2, and that the schedule's indexes exist.
func requireMigrations(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	for _, record := range []string{"index_storage_migrations", "scheduled_actions_migrations"} {
		rows, _ := pool.Query(t.Context(), "SELECT version FROM "+pgx.Identifier{schema, record}.Sanitize()+" ORDER BY version")
		versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range versions {
			if v != int32(i+1) {
				t.Fatalf("%s: versions %v, want 1, 2, … each once", record, versions)
			}
		}
		if record == "scheduled_actions_migrations" && !slices.Equal(versions, []int32{1, 2}) {
			t.Fatalf("%s: versions %v, want [1 2]", record, versions)
		}
	}
	for _, index := range []string{"scheduled_actions_claim", "scheduled_actions_subject", "scheduled_actions_one_lease"} {
		var indexed bool
		err := pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_indexes
			WHERE schemaname = $1 AND tablename = 'scheduled_actions' AND indexname = $2)`, schema, index).Scan(&indexed)
		if err != nil || !indexed {
			t.Fatalf("index %s present: %v, %v", index, indexed, err)
		}
	}
}

// A row whose action was written by hand (or by a version that knows another kind) is an error naming
// it from Claim and Rows. The failed claim changes nothing, so the row is left for whoever can read it
// and its neighbours are not leased to a claimer that never saw them.
func TestScheduleClaim_GarbledActionIsAnErrorThatChangesNothing(t *testing.T) {
	for _, garbled := range []string{`not json`, `{"kind":"reboot_agent","component":"c","name":"n"}`, `{"kind":"archive_oplog","component":"","name":"n","mode":"durable"}`} {
		t.Run(garbled, func(t *testing.T) {
			st := newScheduleStore(t, testenv.PostgresSchema(t, testenv.PostgresURL(t)))
			ctx := t.Context()
			good, err := st.Register(ctx, schedule.NewRow{DueAt: scheduleT0.Add(-time.Minute), Action: archiveAction("good")})
			if err != nil {
				t.Fatal(err)
			}
			var bad int64
			err = st.Pool().QueryRow(ctx, `INSERT INTO `+st.Table()+` (due_at_ms, available_at_ms, bucket, subject, action)
				VALUES ($1, $1, $2, 'garbled', $3) RETURNING schedule_id`, scheduleT0.UnixMilli(), archiveAction("good").Agent.Bucket(), garbled).Scan(&bad)
			if err != nil {
				t.Fatal(err)
			}

			claimed, err := st.Claim(ctx, "a", scheduletest.All, scheduleT0, time.Minute, 10)
			requireNamesRow(t, "Claim", err, bad)
			if claimed != nil {
				t.Fatalf("Claim returned rows %+v with its error", claimed)
			}
			_, err = st.Rows(ctx)
			requireNamesRow(t, "Rows", err, bad)

			var leased, attempts int
			err = st.Pool().QueryRow(ctx, `SELECT count(lease_owner), COALESCE(sum(attempt_count), 0) FROM `+st.Table()).Scan(&leased, &attempts)
			if err != nil || leased != 0 || attempts != 0 {
				t.Fatalf("after the failed claim: %d rows leased, %d attempts (%v); want none", leased, attempts, err)
			}
			if _, err := st.Pool().Exec(ctx, `DELETE FROM `+st.Table()+` WHERE schedule_id = $1`, bad); err != nil {
				t.Fatal(err)
			}
			claimed, err = st.Claim(ctx, "a", scheduletest.All, scheduleT0, time.Minute, 10)
			if err != nil || len(claimed) != 1 || claimed[0].ID != good {
				t.Fatalf("claim once the garbled row is gone: %+v, %v", claimed, err)
			}
		})
	}
}

func requireNamesRow(t *testing.T, op string, err error, id int64) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("scheduled row %d:", id)) {
		t.Fatalf("%s over a garbled action: %v, want an error naming row %d", op, err, id)
	}
	if errors.Is(err, is.ErrTransient) || errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("%s over a garbled action is classified as retryable or the caller's fault: %v", op, err)
	}
}

// A store on a pool it was handed leaves the pool to its owner: closing the store must not break the
// index storage sharing the pool.
func TestScheduleStore_OnASharedPoolLeavesThePoolOpen(t *testing.T) {
	schema := testenv.PostgresSchema(t, testenv.PostgresURL(t))
	index := newStore(t, schema)
	st, err := postgres.NewScheduleStoreOnPool(t.Context(), index.Pool(), schema)
	if err != nil {
		t.Fatal(err)
	}
	id, err := st.Register(t.Context(), schedule.NewRow{DueAt: scheduleT0, Action: archiveAction("x")})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	scheduletest.RequireClosed(t, st, id)
	if err := index.Append(t.Context(), testNS, "k", 1, nil); err != nil {
		t.Fatalf("index storage on the pool after the schedule store closed: %v", err)
	}
	again, err := postgres.NewScheduleStoreOnPool(t.Context(), index.Pool(), schema)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if rows, err := again.Rows(t.Context()); err != nil || len(rows) != 1 || rows[0].ID != id {
		t.Fatalf("rows through a second store on the pool: %+v, %v", rows, err)
	}
}

// OpenSchedule reads the URL Open reads: schema goes to the store, max_concurrent_ops is accepted, the
// rest goes to pgx.
func TestOpenSchedule_TakesTheURLOpenTakes(t *testing.T) {
	url := testenv.PostgresURL(t)
	schema := testenv.PostgresSchema(t, url)
	st, err := postgres.OpenSchedule(t.Context(), withParams(url, "schema="+schema, "max_concurrent_ops=3", "search_path=", "application_name=strata-schedule-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.Schema() != schema {
		t.Fatalf("schema %q, want %q", st.Schema(), schema)
	}
	if _, err := st.Register(t.Context(), schedule.NewRow{DueAt: scheduleT0, Action: archiveAction("x")}); err != nil {
		t.Fatal(err)
	}
	var app string
	if err := st.Pool().QueryRow(t.Context(), "SELECT current_setting('application_name')").Scan(&app); err != nil || app != "strata-schedule-test" {
		t.Fatalf("application_name %q (%v): pgx did not get the other parameters", app, err)
	}

	const base = "postgres://postgres@127.0.0.1:1/test?sslmode=disable"
	for _, bad := range []string{base + "&max_concurrent_ops=0", base + "&schema=1digit", "mysql://x"} {
		if _, err := postgres.OpenSchedule(t.Context(), bad); !errors.Is(err, is.ErrInvalidArgument) {
			t.Errorf("OpenSchedule(%q): %v, want ErrInvalidArgument", bad, err)
		}
	}
}
