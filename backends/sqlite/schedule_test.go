package sqlite_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/sqlite"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
	"github.com/stratalog/strata/oplog/schedule/scheduletest"
)

func openSchedule(tb testing.TB, path string) *sqlite.ScheduleStore {
	tb.Helper()
	s, err := sqlite.NewScheduleStore(tb.Context(), path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestScheduleStoreConformance(t *testing.T) {
	scheduletest.Run(t, scheduletest.Harness{
		New: func(tb testing.TB) schedule.Store {
			return openSchedule(tb, filepath.Join(tb.TempDir(), "schedule.db"))
		},
		// Another store on the file stands for another process.
		Reopen: func(tb testing.TB, s schedule.Store) schedule.Store {
			return openSchedule(tb, s.(*sqlite.ScheduleStore).Path())
		},
	})
}

// Two stores on one file stand for two processes: their claims never share a row.
func TestScheduleClaim_TwoStoresOnOneFileNeverTakeTheSameRow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	a, b := openSchedule(t, path), openSchedule(t, path)
	t0 := time.UnixMilli(1_800_000_000_000)
	const rows = 200
	for i := range rows {
		act := schedule.ArchiveOplog{Agent: oplog.AgentID{Component: "c", Name: fmt.Sprint(i)}, Mode: oplog.Durable, LastIndex: 1}
		if _, err := a.Register(t.Context(), schedule.NewRow{DueAt: t0, Action: act}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	for w, store := range []*sqlite.ScheduleStore{a, b, a, b} {
		wg.Go(func() {
			for {
				got, err := store.Claim(t.Context(), fmt.Sprint("owner-", w), scheduletest.All, t0, time.Minute, 4)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, r := range got {
					seen[r.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != rows {
		t.Fatalf("%d rows claimed, want %d", len(seen), rows)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("row %d claimed %d times", id, n)
		}
	}
}

// The schedule table lives beside index_storage in one file without either's migration disturbing
// the other.
func TestSchedule_SharesAFileWithTheIndexStorage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "strata.db")
	st, err := sqlite.New(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Append(t.Context(), "ns", "k", 1, []byte("v")); err != nil {
		t.Fatal(err)
	}
	s := openSchedule(t, path)
	if _, err := s.Register(t.Context(), schedule.NewRow{DueAt: time.Now(), Action: schedule.ArchiveOplog{
		Agent: oplog.AgentID{Component: "c", Name: "n"}, Mode: oplog.Durable, LastIndex: 1}}); err != nil {
		t.Fatal(err)
	}
	openSchedule(t, path) // migrating again is harmless
	st2, err := sqlite.New(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	if n, err := st2.Length(t.Context(), "ns", "k"); n != 1 || err != nil {
		t.Fatalf("index storage after the schedule migration: %d %v", n, err)
	}
	if c, err := s.Counts(t.Context(), time.Now()); err != nil || c.Pending != 1 {
		t.Fatalf("schedule after reopening: %+v %v", c, err)
	}
}

func TestSchedule_GarbledActionIsAnErrorNotAPanic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "garbled.db")
	s := openSchedule(t, path)
	st, err := sqlite.New(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.DB().ExecContext(t.Context(), `INSERT INTO scheduled_actions (due_at_ms, available_at_ms, bucket, subject, action) VALUES (0, 0, 0, '', '{not json')`); err != nil {
		t.Fatal(err)
	}
	_, err = s.Claim(t.Context(), "me", scheduletest.All, time.Now(), time.Minute, 10)
	if err == nil || !strings.Contains(err.Error(), "scheduled row") {
		t.Fatalf("claim over a garbled row: %v", err)
	}
	rows, err := s.Rows(t.Context())
	if err == nil {
		t.Fatalf("Rows over a garbled row: %+v", rows)
	}
}

// A file at schedule migration 1 (shard_id) is brought to 2: buckets and subjects backfilled from the
// actions, one lease per agent, one pending row per action (the one that runs latest).
func TestSchedule_MigrationFromVersion1BackfillsBucketsAndOneLeasePerAgent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	st, err := sqlite.New(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	db := st.DB()
	for _, stmt := range []string{
		`CREATE TABLE scheduled_actions_migrations (version INTEGER PRIMARY KEY)`,
		`INSERT INTO scheduled_actions_migrations (version) VALUES (1)`,
		`CREATE TABLE scheduled_actions (
			schedule_id INTEGER PRIMARY KEY AUTOINCREMENT, due_at_ms INTEGER NOT NULL, available_at_ms INTEGER NOT NULL,
			shard_id INTEGER NOT NULL, action TEXT NOT NULL, lease_owner TEXT CHECK (lease_owner <> ''), lease_until_ms INTEGER,
			attempt_count INTEGER NOT NULL DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0)`,
		`CREATE INDEX scheduled_actions_claim ON scheduled_actions (shard_id, due_at_ms, available_at_ms) WHERE failed = 0`,
	} {
		if _, err := db.ExecContext(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	insert := func(due int64, a schedule.ArchiveOplog, owner string, until int64) int64 {
		t.Helper()
		data, _ := schedule.MarshalAction(a)
		var o, u any
		if owner != "" {
			o, u = owner, until
		}
		res, err := db.ExecContext(t.Context(), `INSERT INTO scheduled_actions (due_at_ms, available_at_ms, shard_id, action, lease_owner, lease_until_ms)
			VALUES (?, ?, 3, ?, ?, ?)`, due, due, string(data), o, u)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := res.LastInsertId()
		return id
	}
	act := func(name string, last oplog.Index) schedule.ArchiveOplog {
		return schedule.ArchiveOplog{Agent: oplog.AgentID{Component: "c", Name: name}, Mode: oplog.Durable, LastIndex: last}
	}
	t0 := time.UnixMilli(1_800_000_000_000).UnixMilli()
	insert(t0, act("日本語", 1), "", 0)
	insert(t0, act("x", 1), "old", t0+1000)
	keeps := insert(t0, act("x", 2), "new", t0+5000)
	insert(t0, act("y", 4), "", 0)
	latest := insert(t0+9000, act("y", 4), "", 0)

	s := openSchedule(t, path)
	rows, err := s.Rows(t.Context())
	if err != nil || len(rows) != 4 {
		t.Fatalf("rows after the migration: %+v, %v; want 4", rows, err)
	}
	var leased []int64
	for _, r := range rows {
		if r.Bucket != r.Action.Agent.Bucket() {
			t.Errorf("%s: bucket %d, want %d", r.Action.Agent, r.Bucket, r.Action.Agent.Bucket())
		}
		if r.LeaseOwner != "" {
			leased = append(leased, r.ID)
		}
		if r.Action.Agent.Name == "y" && r.ID != latest {
			t.Errorf("y's row %d kept, want %d", r.ID, latest)
		}
	}
	if len(leased) != 1 || leased[0] != keeps {
		t.Errorf("leased rows %v, want only %d", leased, keeps)
	}
}
