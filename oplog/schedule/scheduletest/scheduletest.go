// Package scheduletest is the conformance suite of schedule.Store: every store's _test.go hands Run a
// constructor of fresh, empty stores.
package scheduletest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
)

const lease = 30 * time.Second

var t0 = time.UnixMilli(1_800_000_000_000)

func action(name string, last oplog.Index) schedule.ArchiveOplog {
	return schedule.ArchiveOplog{Agent: oplog.AgentID{Component: "comp", Name: name}, Mode: oplog.Durable, LastIndex: last}
}

// Run checks the Store contract on stores made by newStore.
func Run(t *testing.T, newStore func(tb testing.TB) schedule.Store) {
	register := func(t *testing.T, s schedule.Store, due time.Time, shard int, name string) int64 {
		t.Helper()
		id, err := s.Register(t.Context(), schedule.NewRow{DueAt: due, Shard: shard, Action: action(name, 7)})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	claim := func(t *testing.T, s schedule.Store, owner string, shards []int, now time.Time, limit int) []schedule.Row {
		t.Helper()
		rows, err := s.Claim(t.Context(), owner, shards, now, lease, limit)
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	names := func(rows []schedule.Row) []string {
		var out []string
		for _, r := range rows {
			out = append(out, r.Action.Agent.Name)
		}
		return out
	}

	t.Run("ClaimTakesDueRowsOfOwnShardsOldestFirst", func(t *testing.T) {
		s := newStore(t)
		register(t, s, t0.Add(time.Second), 0, "later")
		register(t, s, t0.Add(-time.Minute), 0, "old")
		register(t, s, t0, 0, "now")
		register(t, s, t0.Add(-time.Hour), 1, "other-shard")
		register(t, s, t0.Add(-2*time.Minute), 0, "oldest")
		got := claim(t, s, "a", []int{0}, t0, 2)
		if !slices.Equal(names(got), []string{"oldest", "old"}) {
			t.Fatalf("claimed %q, want the two oldest due rows of shard 0", names(got))
		}
		got = claim(t, s, "a", []int{0}, t0, 10)
		if !slices.Equal(names(got), []string{"now"}) {
			t.Fatalf("second claim %q, want [now]", names(got))
		}
		if got := claim(t, s, "b", []int{1}, t0, 10); !slices.Equal(names(got), []string{"other-shard"}) {
			t.Fatalf("shard 1 claim %q", names(got))
		}
	})

	t.Run("RowRoundTripsWithMillisecondTimes", func(t *testing.T) {
		s := newStore(t)
		a := schedule.ArchiveOplog{Agent: oplog.AgentID{Component: "c", Name: "a/b:c %_ ..日本"}, Mode: oplog.Ephemeral, LastIndex: 1 << 62}
		due := t0.Add(1234567 * time.Microsecond)
		if _, err := s.Register(t.Context(), schedule.NewRow{DueAt: due, Shard: 3, Action: a}); err != nil {
			t.Fatal(err)
		}
		rows := claim(t, s, "owner-1", []int{3}, due.Add(time.Millisecond), 1)
		if len(rows) != 1 {
			t.Fatalf("claimed %d rows", len(rows))
		}
		r := rows[0]
		if r.Action != a || r.Shard != 3 || r.LeaseOwner != "owner-1" || r.Attempts != 1 || r.Failed ||
			!r.DueAt.Equal(time.UnixMilli(due.UnixMilli())) || !r.LeaseUntil.Equal(time.UnixMilli(due.Add(time.Millisecond).Add(lease).UnixMilli())) {
			t.Fatalf("row read back as %+v", r)
		}
	})

	t.Run("LeasedRowIsReclaimedOnlyAfterExpiry", func(t *testing.T) {
		s := newStore(t)
		id := register(t, s, t0, 0, "x")
		if got := claim(t, s, "a", []int{0}, t0, 1); len(got) != 1 {
			t.Fatal("first claim got nothing")
		}
		if got := claim(t, s, "b", []int{0}, t0.Add(lease), 1); len(got) != 0 {
			t.Fatalf("claimed a row whose lease runs to exactly now: %v", got)
		}
		got := claim(t, s, "b", []int{0}, t0.Add(lease+time.Millisecond), 1)
		if len(got) != 1 || got[0].ID != id || got[0].Attempts != 2 || got[0].LeaseOwner != "b" {
			t.Fatalf("after expiry: %+v", got)
		}
		requireLost(t, s.Ack(t.Context(), id, "a"), "Ack by the owner whose lease was taken over")
		requireLost(t, s.Extend(t.Context(), id, "a", t0.Add(time.Hour)), "Extend by the old owner")
		requireLost(t, s.Release(t.Context(), id, "a", t0, false), "Release by the old owner")
		if err := s.Ack(t.Context(), id, "b"); err != nil {
			t.Fatalf("Ack by the owner: %v", err)
		}
		if rows, _ := s.Rows(t.Context()); len(rows) != 0 {
			t.Fatalf("acknowledged row still there: %+v", rows)
		}
		requireLost(t, s.Ack(t.Context(), id, "b"), "second Ack")
	})

	t.Run("ExtendKeepsTheLease", func(t *testing.T) {
		s := newStore(t)
		id := register(t, s, t0, 0, "x")
		claim(t, s, "a", []int{0}, t0, 1)
		if err := s.Extend(t.Context(), id, "a", t0.Add(2*lease)); err != nil {
			t.Fatal(err)
		}
		if got := claim(t, s, "b", []int{0}, t0.Add(lease+time.Second), 1); len(got) != 0 {
			t.Fatalf("an extended lease was taken: %+v", got)
		}
		requireLost(t, s.Extend(t.Context(), id, "b", t0.Add(3*lease)), "Extend by a non-owner")
	})

	t.Run("ReleaseBacksOffAndFailedRowsStay", func(t *testing.T) {
		s := newStore(t)
		id := register(t, s, t0, 0, "x")
		claim(t, s, "a", []int{0}, t0, 1)
		if err := s.Release(t.Context(), id, "a", t0.Add(10*time.Second), false); err != nil {
			t.Fatal(err)
		}
		requireLost(t, s.Ack(t.Context(), id, "a"), "Ack after Release")
		if rows, _ := s.Rows(t.Context()); rows[0].LeaseOwner != "" || !rows[0].LeaseUntil.IsZero() {
			t.Fatalf("released row still held: %+v", rows[0])
		}
		if got := claim(t, s, "a", []int{0}, t0.Add(9*time.Second), 1); len(got) != 0 {
			t.Fatal("claimed during its backoff")
		}
		got := claim(t, s, "b", []int{0}, t0.Add(10*time.Second), 1)
		if len(got) != 1 || got[0].Attempts != 2 {
			t.Fatalf("after backoff: %+v", got)
		}
		if err := s.Release(t.Context(), id, "b", t0.Add(20*time.Second), true); err != nil {
			t.Fatal(err)
		}
		if got := claim(t, s, "b", []int{0}, t0.Add(time.Hour), 1); len(got) != 0 {
			t.Fatal("a failed row was claimed again")
		}
		c, err := s.Counts(t.Context())
		if err != nil || c != (schedule.Counts{Pending: 0, Failed: 1}) {
			t.Fatalf("Counts = %+v, %v", c, err)
		}
		rows, _ := s.Rows(t.Context())
		if len(rows) != 1 || !rows[0].Failed || rows[0].Attempts != 2 {
			t.Fatalf("failed row: %+v", rows)
		}
	})

	t.Run("BadArgumentsAreRefusedAndChangeNothing", func(t *testing.T) {
		s := newStore(t)
		bad := schedule.ArchiveOplog{Agent: oplog.AgentID{Component: "a:b", Name: "n"}, Mode: oplog.Durable, LastIndex: 1}
		if _, err := s.Register(t.Context(), schedule.NewRow{DueAt: t0, Action: bad}); !errors.Is(err, is.ErrInvalidArgument) {
			t.Fatalf("Register of an invalid agent: %v", err)
		}
		badMode := action("x", 1)
		badMode.Mode = "bogus"
		if _, err := s.Register(t.Context(), schedule.NewRow{DueAt: t0, Action: badMode}); !errors.Is(err, is.ErrInvalidArgument) {
			t.Fatalf("Register of an invalid mode: %v", err)
		}
		register(t, s, t0, 0, "x")
		if _, err := s.Claim(t.Context(), "", []int{0}, t0, lease, 1); !errors.Is(err, is.ErrInvalidArgument) {
			t.Fatalf("Claim with an empty owner: %v", err)
		}
		for _, limit := range []int{0, -1} {
			if got, err := s.Claim(t.Context(), "a", []int{0}, t0, lease, limit); err != nil || len(got) != 0 {
				t.Fatalf("Claim with limit %d: %v %v", limit, got, err)
			}
		}
		rows, err := s.Rows(t.Context())
		if err != nil || len(rows) != 1 || rows[0].LeaseOwner != "" || !rows[0].LeaseUntil.IsZero() || rows[0].Attempts != 0 {
			t.Fatalf("rows after refused calls: %+v %v", rows, err)
		}
	})

	t.Run("ConcurrentClaimersNeverShareARow", func(t *testing.T) {
		s := newStore(t)
		const rows, nClaimers = 120, 6
		for i := range rows {
			register(t, s, t0.Add(-time.Duration(i)*time.Millisecond), i%2, fmt.Sprint(i))
		}
		claimers := make([]Claimer, nClaimers)
		for c := range claimers {
			claimers[c] = Claimer{Owner: fmt.Sprint("claimer-", c), Store: s}
		}
		seen, doubled := ClaimConcurrently(t, claimers, []int{0, 1}, t0, lease, 3)
		if len(doubled) > 0 {
			t.Fatalf("%d rows claimed twice, first %s", len(doubled), doubled[0])
		}
		if len(seen) != rows {
			t.Fatalf("%d rows claimed, want %d", len(seen), rows)
		}
	})
}

// Claimer is one of ClaimConcurrently's claimers: the owner it claims as and the store it claims from.
type Claimer struct {
	Owner string
	Store schedule.Store
}

// ClaimConcurrently starts every claimer at once, each claiming up to limit rows of shards due at at
// until a claim comes back empty, and returns the owner each row was handed to and a line for every
// row handed out a second time. A failed claim fails the test.
func ClaimConcurrently(t *testing.T, claimers []Claimer, shards []int, at time.Time, lease time.Duration, limit int) (owners map[int64]string, doubled []string) {
	t.Helper()
	var mu sync.Mutex
	owners = map[int64]string{}
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, len(claimers))
	for _, c := range claimers {
		wg.Go(func() {
			<-start
			for {
				got, err := c.Store.Claim(t.Context(), c.Owner, shards, at, lease, limit)
				if err != nil {
					errs <- fmt.Errorf("%s: %w", c.Owner, err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, r := range got {
					if prev, dup := owners[r.ID]; dup {
						doubled = append(doubled, fmt.Sprintf("row %d claimed by %s and %s", r.ID, prev, c.Owner))
					}
					owners[r.ID] = c.Owner
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	return owners, doubled
}

func requireLost(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, schedule.ErrLeaseLost) {
		t.Fatalf("%s: %v, want ErrLeaseLost", what, err)
	}
}
