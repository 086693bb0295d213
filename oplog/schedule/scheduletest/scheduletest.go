// Package scheduletest is the conformance suite of schedule.Store, the only home of its contract
// checks: every store's _test.go hands Run a Harness that makes fresh, empty stores (and, for a store
// shared across processes, opens a second handle on the same table), and needs no check of its own for
// the contract.
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

// Harness is what Run needs of a store.
type Harness struct {
	// New returns a fresh, empty store, closed when the test ends.
	New func(tb testing.TB) schedule.Store
	// Reopen returns a second store on the table s works on, as another process would open it, closed
	// when the test ends. nil means s itself is shared (an in-process store).
	Reopen func(tb testing.TB, s schedule.Store) schedule.Store
}

func (h Harness) reopen(tb testing.TB, s schedule.Store) schedule.Store {
	if h.Reopen == nil {
		return s
	}
	return h.Reopen(tb, s)
}

const lease = 30 * time.Second

var t0 = time.UnixMilli(1_800_000_000_000)

// All is every bucket: the range of the one shard among one.
var All = []oplog.BucketRange{oplog.ShardBuckets(0, 1)}

func agent(name string) oplog.AgentID { return oplog.AgentID{Component: "comp", Name: name} }

func action(name string, last oplog.Index) schedule.ArchiveOplog {
	return schedule.ArchiveOplog{Agent: agent(name), Mode: oplog.Durable, LastIndex: last}
}

// nameInShard returns the first name prefix-i whose agent is in shard among count.
func nameInShard(prefix string, shard, count int) string {
	for i := 0; ; i++ {
		if n := fmt.Sprint(prefix, i); agent(n).Shard(count) == shard {
			return n
		}
	}
}

func register(t *testing.T, s schedule.Store, due time.Time, a schedule.ArchiveOplog) int64 {
	t.Helper()
	id, err := s.Register(t.Context(), schedule.NewRow{DueAt: due, Action: a})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func claim(t *testing.T, s schedule.Store, owner string, buckets []oplog.BucketRange, now time.Time, limit int) []schedule.Row {
	t.Helper()
	rows, err := s.Claim(t.Context(), owner, buckets, now, lease, limit)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func rowsOf(t *testing.T, s schedule.Store) []schedule.Row {
	t.Helper()
	rows, err := s.Rows(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func names(rows []schedule.Row) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.Action.Agent.Name)
	}
	return out
}

// Run checks the Store contract on the stores h makes.
func Run(t *testing.T, h Harness) {
	newStore := h.New

	t.Run("ClaimTakesDueRowsOfItsBucketsOldestFirst", func(t *testing.T) {
		s := newStore(t)
		mine, theirs := oplog.ShardBuckets(0, 2), oplog.ShardBuckets(1, 2)
		n := func(i int) string { return nameInShard(fmt.Sprint("a", i, "-"), 0, 2) }
		register(t, s, t0.Add(time.Second), action(n(0), 7))
		register(t, s, t0.Add(-time.Minute), action(n(1), 7))
		register(t, s, t0, action(n(2), 7))
		other := nameInShard("b-", 1, 2)
		register(t, s, t0.Add(-time.Hour), action(other, 7))
		register(t, s, t0.Add(-2*time.Minute), action(n(3), 7))
		got := claim(t, s, "a", []oplog.BucketRange{mine}, t0, 2)
		if !slices.Equal(names(got), []string{n(3), n(1)}) {
			t.Fatalf("claimed %q, want the two oldest due rows of shard 0 of 2, [%s %s]", names(got), n(3), n(1))
		}
		got = claim(t, s, "a", []oplog.BucketRange{mine}, t0, 10)
		if !slices.Equal(names(got), []string{n(2)}) {
			t.Fatalf("second claim %q, want [%s]", names(got), n(2))
		}
		if got := claim(t, s, "b", []oplog.BucketRange{theirs}, t0, 10); !slices.Equal(names(got), []string{other}) {
			t.Fatalf("shard 1 claim %q, want [%s]", names(got), other)
		}
		if got := claim(t, s, "c", []oplog.BucketRange{{Lo: 5, Hi: 5}}, t0.Add(time.Hour), 10); len(got) != 0 {
			t.Fatalf("an empty range claimed %q", names(got))
		}
	})

	t.Run("RowRoundTripsWithMillisecondTimesAndItsAgentsBucket", func(t *testing.T) {
		s := newStore(t)
		a := schedule.ArchiveOplog{Agent: oplog.AgentID{Component: "c", Name: "a/b:c %_ ..日本"}, Mode: oplog.Ephemeral, LastIndex: 1 << 62}
		due := t0.Add(1234567 * time.Microsecond)
		if _, err := s.Register(t.Context(), schedule.NewRow{DueAt: due, Action: a}); err != nil {
			t.Fatal(err)
		}
		b := a.Agent.Bucket()
		if got := claim(t, s, "x", []oplog.BucketRange{{Lo: 0, Hi: b}, {Lo: b + 1, Hi: oplog.Buckets}}, due.Add(time.Hour), 1); len(got) != 0 {
			t.Fatalf("claimed by ranges around its bucket %d: %+v", b, got)
		}
		rows := claim(t, s, "owner-1", []oplog.BucketRange{{Lo: b, Hi: b + 1}}, due.Add(time.Millisecond), 1)
		if len(rows) != 1 {
			t.Fatalf("claimed %d rows by its bucket's range", len(rows))
		}
		r := rows[0]
		if r.Action != a || r.Bucket != b || r.LeaseOwner != "owner-1" || r.Attempts != 1 || r.Failed || r.TakenOver ||
			!r.DueAt.Equal(time.UnixMilli(due.UnixMilli())) || !r.LeaseUntil.Equal(time.UnixMilli(due.Add(time.Millisecond).Add(lease).UnixMilli())) {
			t.Fatalf("row read back as %+v", r)
		}
		if stored := rowsOf(t, s); len(stored) != 1 || stored[0].Bucket != b || stored[0].TakenOver {
			t.Fatalf("Rows: %+v", stored)
		}
	})

	t.Run("LeasedRowIsTakenOverOnlyAfterExpiry", func(t *testing.T) {
		s := newStore(t)
		id := register(t, s, t0, action("x", 7))
		if got := claim(t, s, "a", All, t0, 1); len(got) != 1 || got[0].TakenOver {
			t.Fatalf("first claim: %+v", got)
		}
		if got := claim(t, s, "b", All, t0.Add(lease), 1); len(got) != 0 {
			t.Fatalf("claimed a row whose lease runs to exactly now: %v", got)
		}
		got := claim(t, s, "b", All, t0.Add(lease+time.Millisecond), 1)
		if len(got) != 1 || got[0].ID != id || got[0].Attempts != 2 || got[0].LeaseOwner != "b" || !got[0].TakenOver {
			t.Fatalf("after expiry: %+v, want the row taken over by b", got)
		}
		requireLost(t, s.Ack(t.Context(), id, "a"), "Ack by the owner whose lease was taken over")
		requireLost(t, s.Extend(t.Context(), id, "a", t0.Add(time.Hour)), "Extend by the old owner")
		requireLost(t, s.Release(t.Context(), id, "a", t0, false), "Release by the old owner")
		if err := s.Ack(t.Context(), id, "b"); err != nil {
			t.Fatalf("Ack by the owner: %v", err)
		}
		if rows := rowsOf(t, s); len(rows) != 0 {
			t.Fatalf("acknowledged row still there: %+v", rows)
		}
		requireLost(t, s.Ack(t.Context(), id, "b"), "second Ack")
	})

	t.Run("ExtendKeepsTheLease", func(t *testing.T) {
		s := newStore(t)
		id := register(t, s, t0, action("x", 7))
		claim(t, s, "a", All, t0, 1)
		if err := s.Extend(t.Context(), id, "a", t0.Add(2*lease)); err != nil {
			t.Fatal(err)
		}
		if got := claim(t, s, "b", All, t0.Add(lease+time.Second), 1); len(got) != 0 {
			t.Fatalf("an extended lease was taken: %+v", got)
		}
		requireLost(t, s.Extend(t.Context(), id, "b", t0.Add(3*lease)), "Extend by a non-owner")
	})

	t.Run("ReleaseBacksOffAndFailedRowsStay", func(t *testing.T) {
		s := newStore(t)
		id := register(t, s, t0, action("x", 7))
		claim(t, s, "a", All, t0, 1)
		if err := s.Release(t.Context(), id, "a", t0.Add(10*time.Second), false); err != nil {
			t.Fatal(err)
		}
		requireLost(t, s.Ack(t.Context(), id, "a"), "Ack after Release")
		if rows := rowsOf(t, s); rows[0].LeaseOwner != "" || !rows[0].LeaseUntil.IsZero() {
			t.Fatalf("released row still held: %+v", rows[0])
		}
		if got := claim(t, s, "a", All, t0.Add(9*time.Second), 1); len(got) != 0 {
			t.Fatal("claimed during its backoff")
		}
		got := claim(t, s, "b", All, t0.Add(10*time.Second), 1)
		if len(got) != 1 || got[0].Attempts != 2 || got[0].TakenOver {
			t.Fatalf("after backoff: %+v", got)
		}
		if err := s.Release(t.Context(), id, "b", t0.Add(20*time.Second), true); err != nil {
			t.Fatal(err)
		}
		if got := claim(t, s, "b", All, t0.Add(time.Hour), 1); len(got) != 0 {
			t.Fatal("a failed row was claimed again")
		}
		c, err := s.Counts(t.Context(), t0.Add(time.Hour))
		if err != nil || c != (schedule.Counts{Pending: 0, Failed: 1}) {
			t.Fatalf("Counts = %+v, %v", c, err)
		}
		rows := rowsOf(t, s)
		if len(rows) != 1 || !rows[0].Failed || rows[0].Attempts != 2 {
			t.Fatalf("failed row: %+v", rows)
		}
	})

	t.Run("CountsSeeWhatIsDueAtNow", func(t *testing.T) {
		s := newStore(t)
		register(t, s, t0.Add(-time.Minute), action("oldest", 1))
		register(t, s, t0, action("now", 1))
		register(t, s, t0.Add(time.Second), action("later", 1))
		if c, err := s.Counts(t.Context(), t0); err != nil || c != (schedule.Counts{Pending: 3, Due: 2, OldestDue: t0.Add(-time.Minute)}) {
			t.Fatalf("Counts at t0 = %+v, %v", c, err)
		}
		claim(t, s, "a", All, t0, 1) // the oldest, leased until t0+lease
		if c, err := s.Counts(t.Context(), t0); err != nil || c != (schedule.Counts{Pending: 3, Due: 1, OldestDue: t0}) {
			t.Fatalf("Counts with the oldest leased = %+v, %v", c, err)
		}
		at := t0.Add(lease + time.Millisecond) // its lease expired: due again
		if c, err := s.Counts(t.Context(), at); err != nil || c != (schedule.Counts{Pending: 3, Due: 3, OldestDue: t0.Add(-time.Minute)}) {
			t.Fatalf("Counts after the lease expired = %+v, %v", c, err)
		}
	})

	t.Run("BadArgumentsAreRefusedAndChangeNothing", func(t *testing.T) {
		s := newStore(t)
		bad := schedule.ArchiveOplog{Agent: oplog.AgentID{Component: "a:b", Name: "n"}, Mode: oplog.Durable, LastIndex: 1}
		if _, err := s.Register(t.Context(), schedule.NewRow{DueAt: t0, Action: bad}); !errors.Is(err, is.ErrInvalidArgument) {
			t.Fatalf("Register of an invalid agent: %v", err)
		}
		if _, err := s.Register(t.Context(), schedule.NewRow{DueAt: t0, Action: schedule.ArchiveOplog{Mode: oplog.Durable}}); !errors.Is(err, is.ErrInvalidArgument) {
			t.Fatalf("Register of an empty agent: %v", err)
		}
		badMode := action("x", 1)
		badMode.Mode = "bogus"
		if _, err := s.Register(t.Context(), schedule.NewRow{DueAt: t0, Action: badMode}); !errors.Is(err, is.ErrInvalidArgument) {
			t.Fatalf("Register of an invalid mode: %v", err)
		}
		register(t, s, t0, action("x", 7))
		for name, c := range map[string]struct {
			owner   string
			buckets []oplog.BucketRange
			lease   time.Duration
		}{
			"an empty owner":          {"", All, lease},
			"a zero lease":            {"a", All, 0},
			"a negative lease":        {"a", All, -time.Second},
			"a sub-millisecond lease": {"a", All, time.Microsecond},
			"a range past the end":    {"a", []oplog.BucketRange{{Lo: 0, Hi: oplog.Buckets + 1}}, lease},
			"a negative range":        {"a", []oplog.BucketRange{{Lo: -1, Hi: 3}}, lease},
			"an inverted range":       {"a", []oplog.BucketRange{{Lo: 9, Hi: 3}}, lease},
		} {
			if _, err := s.Claim(t.Context(), c.owner, c.buckets, t0, c.lease, 1); !errors.Is(err, is.ErrInvalidArgument) {
				t.Errorf("Claim with %s: %v, want ErrInvalidArgument", name, err)
			}
		}
		for _, limit := range []int{0, -1} {
			if got, err := s.Claim(t.Context(), "a", All, t0, lease, limit); err != nil || len(got) != 0 {
				t.Fatalf("Claim with limit %d: %v %v", limit, got, err)
			}
		}
		if got, err := s.Claim(t.Context(), "a", nil, t0, lease, 1); err != nil || len(got) != 0 {
			t.Fatalf("Claim of no ranges: %v %v", got, err)
		}
		rows := rowsOf(t, s)
		if len(rows) != 1 || rows[0].LeaseOwner != "" || !rows[0].LeaseUntil.IsZero() || rows[0].Attempts != 0 {
			t.Fatalf("rows after refused calls: %+v", rows)
		}
	})

	t.Run("ClosedStoreReturnsErrClosed", func(t *testing.T) {
		s := newStore(t)
		id := register(t, s, t0, action("x", 7))
		claim(t, s, "a", All, t0, 1)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		RequireClosed(t, s, id)
	})

	t.Run("ConcurrentClaimersNeverShareARow", func(t *testing.T) {
		s := newStore(t)
		const rows, nClaimers = 120, 6
		for i := range rows {
			register(t, s, t0.Add(-time.Duration(i)*time.Millisecond), action(fmt.Sprint(i), 7))
		}
		other := h.reopen(t, s)
		claimers := make([]Claimer, nClaimers)
		for c := range claimers {
			claimers[c] = Claimer{Owner: fmt.Sprint("claimer-", c), Store: []schedule.Store{s, other}[c%2]}
		}
		seen, doubled := ClaimConcurrently(t, claimers, All, t0, lease, 3)
		if len(doubled) > 0 {
			t.Fatalf("%d rows claimed twice, first %s", len(doubled), doubled[0])
		}
		if len(seen) != rows {
			t.Fatalf("%d rows claimed, want %d", len(seen), rows)
		}
	})

	runSubjects(t, h)
	runSchedulers(t, h)
}

// RequireClosed checks that every method of a closed store returns an error matching
// indexedstorage.ErrClosed; id is a row the store held.
func RequireClosed(t *testing.T, s schedule.Store, id int64) {
	t.Helper()
	ctx := t.Context()
	for name, call := range map[string]func() error{
		"Register": func() error {
			_, err := s.Register(ctx, schedule.NewRow{DueAt: t0, Action: action("y", 1)})
			return err
		},
		"Claim":   func() error { _, err := s.Claim(ctx, "a", All, t0, lease, 1); return err },
		"Extend":  func() error { return s.Extend(ctx, id, "a", t0) },
		"Ack":     func() error { return s.Ack(ctx, id, "a") },
		"Release": func() error { return s.Release(ctx, id, "a", t0, false) },
		"Rows":    func() error { _, err := s.Rows(ctx); return err },
		"Counts":  func() error { _, err := s.Counts(ctx, t0); return err },
	} {
		if err := call(); !errors.Is(err, is.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

// Claimer is one of ClaimConcurrently's claimers: the owner it claims as and the store it claims from.
type Claimer struct {
	Owner string
	Store schedule.Store
}

// ClaimConcurrently starts every claimer at once, each claiming up to limit rows of buckets due at at
// until a claim comes back empty, and returns the owner each row was handed to and a line for every
// row handed out a second time. Nothing is acknowledged, so every lease handed out is still held when
// it returns. A failed claim fails the test.
func ClaimConcurrently(t *testing.T, claimers []Claimer, buckets []oplog.BucketRange, at time.Time, lease time.Duration, limit int) (owners map[int64]string, doubled []string) {
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
				got, err := c.Store.Claim(t.Context(), c.Owner, buckets, at, lease, limit)
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
