package scheduletest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
)

// runSubjects checks seed 000's first promise, one consumer per subject, and what makes it hold: a
// registration of a pending action replaces it, and a row belongs to its agent whatever the shard
// count.
func runSubjects(t *testing.T, h Harness) {
	newStore := h.New

	t.Run("DuplicateRegistrationLeavesOneRowTheOneThatRunsLater", func(t *testing.T) {
		s := newStore(t)
		idle := register(t, s, t0, action("x", 7))
		exited := register(t, s, t0.Add(time.Minute), action("x", 7)) // Idle then Exited, no entry between
		rows := rowsOf(t, s)
		if exited != idle || len(rows) != 1 || !rows[0].DueAt.Equal(t0.Add(time.Minute)) {
			t.Fatalf("ids %d, %d; rows %+v: want one row, due at the later registration", idle, exited, rows)
		}
		if id := register(t, s, t0.Add(-time.Hour), action("x", 7)); id != idle {
			t.Fatalf("an earlier registration returned row %d, want %d", id, idle)
		}
		if rows := rowsOf(t, s); len(rows) != 1 || !rows[0].DueAt.Equal(t0.Add(time.Minute)) {
			t.Fatalf("an earlier registration moved the row: %+v; the later one is kept", rows)
		}
		if id := register(t, s, t0, action("x", 8)); id == idle {
			t.Fatal("another last index replaced the row; it is another action")
		}
		otherMode := action("x", 7)
		otherMode.Mode = oplog.Ephemeral
		register(t, s, t0, otherMode)
		register(t, s, t0, action("y", 7))
		if rows := rowsOf(t, s); len(rows) != 4 {
			t.Fatalf("%d rows, want x@7, x@8, x@7 ephemeral and y@7", len(rows))
		}
	})

	t.Run("RegistrationBesideALeasedRowAddsOneAndReplacesARetryingOne", func(t *testing.T) {
		s := newStore(t)
		leased := register(t, s, t0, action("x", 7))
		claim(t, s, "a", All, t0, 1)
		beside := register(t, s, t0.Add(time.Second), action("x", 7))
		if beside == leased || len(rowsOf(t, s)) != 2 {
			t.Fatalf("a registration beside the running row: id %d (running %d), rows %+v; want a second row", beside, leased, rowsOf(t, s))
		}
		if id := register(t, s, t0.Add(2*time.Second), action("x", 7)); id != beside {
			t.Fatalf("third registration made row %d; want it to replace the pending row %d", id, beside)
		}
		// The running row fails and backs off to t0+1h; the pending one runs and succeeds.
		if err := s.Release(t.Context(), leased, "a", t0.Add(time.Hour), false); err != nil {
			t.Fatal(err)
		}
		if got := claim(t, s, "a", All, t0.Add(2*time.Second), 1); len(got) != 1 || got[0].ID != beside {
			t.Fatalf("claim: %+v, want row %d", got, beside)
		}
		if err := s.Ack(t.Context(), beside, "a"); err != nil {
			t.Fatal(err)
		}
		// A registration due inside the backoff leaves the retrying row as it is; one due after it
		// replaces it, as a fresh row.
		if id := register(t, s, t0.Add(time.Minute), action("x", 7)); id != leased {
			t.Fatalf("registration inside the backoff made row %d, want %d", id, leased)
		}
		if rows := rowsOf(t, s); len(rows) != 1 || rows[0].Attempts != 1 || !rows[0].AvailableAt.Equal(t0.Add(time.Hour)) {
			t.Fatalf("after a registration inside the backoff: %+v; want the retrying row unchanged", rows)
		}
		if id := register(t, s, t0.Add(2*time.Hour), action("x", 7)); id != leased {
			t.Fatalf("registration after the backoff made row %d, want %d", id, leased)
		}
		rows := rowsOf(t, s)
		if len(rows) != 1 || rows[0].Attempts != 0 || !rows[0].DueAt.Equal(t0.Add(2*time.Hour)) || !rows[0].AvailableAt.Equal(t0.Add(2*time.Hour)) {
			t.Fatalf("after a registration past the backoff: %+v; want the row replaced by it", rows)
		}
	})

	t.Run("ConcurrentRegistrationsOfOneActionLeaveOneRow", func(t *testing.T) {
		s := newStore(t)
		stores := []schedule.Store{s, h.reopen(t, s)}
		const each = 8
		ids := make(chan int64, 2*each*4)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range 2 * each {
			wg.Go(func() {
				<-start
				for i := range 4 {
					id, err := stores[g%2].Register(t.Context(), schedule.NewRow{DueAt: t0.Add(time.Duration(g*4+i) * time.Millisecond), Action: action("x", 7)})
					if err != nil {
						t.Error(err)
						return
					}
					ids <- id
				}
			})
		}
		close(start)
		wg.Wait()
		close(ids)
		first := <-ids
		for id := range ids {
			if id != first {
				t.Fatalf("registrations returned rows %d and %d", first, id)
			}
		}
		if rows := rowsOf(t, s); len(rows) != 1 || !rows[0].DueAt.Equal(t0.Add((2*each*4-1)*time.Millisecond)) {
			t.Fatalf("rows %+v; want one, due at the latest registration", rows)
		}
	})

	t.Run("OneRowOfAnAgentIsClaimedAtATime", func(t *testing.T) {
		s := newStore(t)
		first := register(t, s, t0.Add(-3*time.Second), action("x", 1))
		second := register(t, s, t0.Add(-2*time.Second), action("x", 2))
		register(t, s, t0.Add(-time.Second), action("x", 3))
		register(t, s, t0, action("y", 1))
		got := claim(t, s, "a", All, t0, 10)
		if len(got) != 2 || got[0].ID != first || got[1].Action.Agent.Name != "y" {
			t.Fatalf("claimed %+v; want x's oldest row and y's", got)
		}
		if got := claim(t, s, "b", All, t0, 10); len(got) != 0 {
			t.Fatalf("claimed %+v while x's and y's rows run", got)
		}
		// x's lease expires: its next claim takes over that row, not a sibling, so x never holds two
		// leases, and the old holder's acknowledgement fails.
		at := t0.Add(lease + time.Millisecond)
		xs := []oplog.BucketRange{{Lo: agent("x").Bucket(), Hi: agent("x").Bucket() + 1}}
		got = claim(t, s, "b", xs, at, 10)
		if len(got) != 1 || got[0].ID != first || !got[0].TakenOver || got[0].LeaseOwner != "b" {
			t.Fatalf("claim after x's lease expired: %+v; want row %d taken over", got, first)
		}
		requireLost(t, s.Ack(t.Context(), first, "a"), "Ack by the holder whose lease was taken over")
		if err := s.Ack(t.Context(), first, "b"); err != nil {
			t.Fatal(err)
		}
		got = claim(t, s, "b", xs, at, 10)
		if len(got) != 1 || got[0].ID != second || got[0].TakenOver {
			t.Fatalf("claim after x's first row was acknowledged: %+v; want x's next row, %d", got, second)
		}
		if err := s.Release(t.Context(), second, "b", at.Add(time.Hour), false); err != nil {
			t.Fatal(err)
		}
		if got := claim(t, s, "b", xs, at, 10); len(got) != 1 || got[0].Action.LastIndex != 3 {
			t.Fatalf("claim while x's second row backs off: %+v; want x's third row", got)
		}
	})

	t.Run("ReshardingLeavesNoRowUnclaimable", func(t *testing.T) {
		s := newStore(t)
		const agents = 60
		want := map[int64]oplog.AgentID{}
		for i := range agents {
			a := action(fmt.Sprint("agent-", i), 1)
			want[register(t, s, t0, a)] = a.Agent
		}
		// The rows were registered under whatever shard count; now claim them under 1, 7 and 100, each
		// shard claiming its own ranges, and release them for the next count.
		for round, count := range []int{1, 7, 100} {
			now := t0.Add(time.Duration(round) * time.Minute)
			var claimers []Claimer
			byOwner := map[string]int{}
			for shard := range count {
				owner := fmt.Sprintf("n%d-shard%d", count, shard)
				byOwner[owner] = shard
				claimers = append(claimers, Claimer{Owner: owner, Store: s})
			}
			owners := map[int64]string{}
			for _, c := range claimers {
				for _, r := range claim(t, s, c.Owner, []oplog.BucketRange{oplog.ShardBuckets(byOwner[c.Owner], count)}, now, agents) {
					if prev, dup := owners[r.ID]; dup {
						t.Fatalf("N=%d: row %d claimed by %s and %s", count, r.ID, prev, c.Owner)
					}
					owners[r.ID] = c.Owner
				}
			}
			if len(owners) != agents {
				t.Fatalf("N=%d: %d rows claimed, want all %d", count, len(owners), agents)
			}
			for id, owner := range owners {
				if got, owns := byOwner[owner], want[id].Shard(count); got != owns {
					t.Fatalf("N=%d: row %d of %s (shard %d) claimed by shard %d", count, id, want[id], owns, got)
				}
				if err := s.Release(t.Context(), id, owner, now, false); err != nil {
					t.Fatal(err)
				}
			}
		}
	})

	t.Run("ConcurrentClaimersNeverHoldTwoRowsOfOneAgent", func(t *testing.T) {
		s := newStore(t)
		const agents, perAgent = 40, 3
		byID := map[int64]string{}
		for a := range agents {
			for j := range perAgent {
				// An agent's rows are next to each other in due order, so a claim that ignored the
				// subject would take several of them together.
				due := t0.Add(-time.Duration(agents*perAgent-a*perAgent-j) * time.Millisecond)
				byID[register(t, s, due, action(fmt.Sprint("agent-", a), oplog.Index(j+1)))] = fmt.Sprint("agent-", a)
			}
		}
		other := h.reopen(t, s)
		var claimers []Claimer
		for c := range 6 {
			claimers = append(claimers, Claimer{Owner: fmt.Sprint("claimer-", c), Store: []schedule.Store{s, other}[c%2]})
		}
		owners, doubled := ClaimConcurrently(t, claimers, All, t0, lease, 4)
		if len(doubled) > 0 {
			t.Fatalf("%d rows claimed twice, first %s", len(doubled), doubled[0])
		}
		held := map[string][]int64{}
		for id := range owners {
			held[byID[id]] = append(held[byID[id]], id)
		}
		for a := range agents {
			if ids := held[fmt.Sprint("agent-", a)]; len(ids) != 1 {
				t.Errorf("agent-%d: rows %v held at once, want exactly one", a, ids)
			}
		}
		leased := map[string]int{}
		for _, r := range rowsOf(t, s) {
			if r.LeaseOwner != "" {
				leased[r.Action.Subject()]++
				if owners[r.ID] != r.LeaseOwner {
					t.Errorf("row %d leased to %q in the table, handed to %q by Claim", r.ID, r.LeaseOwner, owners[r.ID])
				}
			}
		}
		if len(leased) != agents {
			t.Errorf("%d agents hold a lease in the table, want %d", len(leased), agents)
		}
	})
}
