package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
)

// ScheduleStore is an in-process schedule.Store. One mutex serializes every call, so a claim sees and
// leases in one step: one consumer per agent holds by construction.
type ScheduleStore struct {
	mu     sync.Mutex
	rows   map[int64]*schedule.Row
	nextID int64
	closed bool
}

// NewScheduleStore returns an empty ScheduleStore.
func NewScheduleStore() *ScheduleStore { return &ScheduleStore{rows: map[int64]*schedule.Row{}} }

var _ schedule.Store = (*ScheduleStore)(nil)

var errScheduleClosed = fmt.Errorf("memory schedule store: %w", is.ErrClosed)

// ms keeps times at the millisecond precision every store shares.
func ms(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()) }

func compareRows(a, b *schedule.Row) int {
	return cmp.Or(a.DueAt.Compare(b.DueAt), cmp.Compare(a.ID, b.ID))
}

func (s *ScheduleStore) Register(_ context.Context, r schedule.NewRow) (int64, error) {
	if err := schedule.ValidateNewRow(r); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errScheduleClosed
	}
	due := ms(r.DueAt)
	var pending *schedule.Row
	for _, old := range s.rows {
		if old.Action == r.Action && old.LeaseOwner == "" && !old.Failed && (pending == nil || old.ID < pending.ID) {
			pending = old
		}
	}
	if pending != nil {
		if schedule.Replaces(pending.DueAt, pending.AvailableAt, due) {
			pending.DueAt, pending.AvailableAt, pending.Attempts = due, due, 0
		}
		return pending.ID, nil
	}
	s.nextID++
	s.rows[s.nextID] = &schedule.Row{ID: s.nextID, DueAt: due, AvailableAt: due, Bucket: r.Action.Agent.Bucket(), Action: r.Action}
	return s.nextID, nil
}

func (s *ScheduleStore) Claim(_ context.Context, owner string, buckets []oplog.BucketRange, now time.Time, lease time.Duration, limit int) ([]schedule.Row, error) {
	if err := schedule.ValidateClaim(owner, buckets, lease); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errScheduleClosed
	}
	now = ms(now)
	ready := s.claimable(buckets, now)
	var claimed []schedule.Row
	for _, r := range ready[:min(max(limit, 0), len(ready))] {
		takenOver := r.LeaseOwner != ""
		r.LeaseOwner, r.LeaseUntil = owner, ms(now.Add(lease))
		r.Attempts++
		c := *r
		c.TakenOver = takenOver
		claimed = append(claimed, c)
	}
	return claimed, nil
}

// claimable returns, oldest first, the row Claim would take of each agent that has one in buckets,
// due and available at now: its expired-leased row if it has one (never two leased rows of an agent),
// else its oldest. An agent one of whose rows is leased on a running lease has none. The caller holds
// the lock.
func (s *ScheduleStore) claimable(buckets []oplog.BucketRange, now time.Time) []*schedule.Row {
	busy := map[string]bool{}
	for _, r := range s.rows {
		if leaseRunning(r, now) {
			busy[r.Action.Subject()] = true
		}
	}
	pick := map[string]*schedule.Row{}
	for _, r := range s.rows {
		subject := r.Action.Subject()
		if r.Failed || leaseRunning(r, now) || busy[subject] || !schedule.InBuckets(r.Bucket, buckets) || r.DueAt.After(now) || r.AvailableAt.After(now) {
			continue
		}
		if p := pick[subject]; p == nil || preferredClaim(r, p) {
			pick[subject] = r
		}
	}
	return slices.SortedFunc(func(yield func(*schedule.Row) bool) {
		for _, r := range pick {
			if !yield(r) {
				return
			}
		}
	}, compareRows)
}

// leaseRunning reports whether r is leased on a lease that has not run out at now.
func leaseRunning(r *schedule.Row, now time.Time) bool {
	return r.LeaseOwner != "" && !r.LeaseUntil.Before(now)
}

// preferredClaim reports whether Claim takes r rather than p, both claimable rows of one agent: an
// expired-leased row before an unleased one, else the older.
func preferredClaim(r, p *schedule.Row) bool {
	if p.LeaseOwner == "" && r.LeaseOwner != "" {
		return true
	}
	return (p.LeaseOwner == "") == (r.LeaseOwner == "") && compareRows(r, p) < 0
}

// held returns the row if owner holds its lease.
func (s *ScheduleStore) held(id int64, owner string) (*schedule.Row, error) {
	if s.closed {
		return nil, errScheduleClosed
	}
	r, ok := s.rows[id]
	if !ok || r.LeaseOwner != owner || r.Failed {
		return nil, fmt.Errorf("memory schedule: row %d: %w", id, schedule.ErrLeaseLost)
	}
	return r, nil
}

func (s *ScheduleStore) Extend(_ context.Context, id int64, owner string, until time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.held(id, owner)
	if err == nil {
		r.LeaseUntil = ms(until)
	}
	return err
}

func (s *ScheduleStore) Ack(_ context.Context, id int64, owner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.held(id, owner); err != nil {
		return err
	}
	delete(s.rows, id)
	return nil
}

func (s *ScheduleStore) Release(_ context.Context, id int64, owner string, retryAt time.Time, failed bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.held(id, owner)
	if err != nil {
		return err
	}
	r.AvailableAt, r.LeaseOwner, r.LeaseUntil, r.Failed = ms(retryAt), "", time.Time{}, failed
	return nil
}

func (s *ScheduleStore) Rows(context.Context) ([]schedule.Row, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errScheduleClosed
	}
	out := make([]schedule.Row, 0, len(s.rows))
	for _, r := range s.rows {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b schedule.Row) int { return compareRows(&a, &b) })
	return out, nil
}

func (s *ScheduleStore) Counts(_ context.Context, now time.Time) (schedule.Counts, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return schedule.Counts{}, errScheduleClosed
	}
	now = ms(now)
	var c schedule.Counts
	for _, r := range s.rows {
		switch {
		case r.Failed:
			c.Failed++
			continue
		case !r.DueAt.After(now) && !r.AvailableAt.After(now) && (r.LeaseOwner == "" || r.LeaseUntil.Before(now)):
			c.Due++
			if c.OldestDue.IsZero() || r.DueAt.Before(c.OldestDue) {
				c.OldestDue = r.DueAt
			}
		}
		c.Pending++
	}
	return c, nil
}

// Close ends the store; later calls return an error matching indexedstorage.ErrClosed.
func (s *ScheduleStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed, s.rows = true, nil
	return nil
}
