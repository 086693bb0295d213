package memory

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/stratalog/strata/oplog/schedule"
)

// ScheduleStore is an in-process schedule.Store.
type ScheduleStore struct {
	mu     sync.Mutex
	rows   map[int64]*schedule.Row
	nextID int64
	closed bool
}

// NewScheduleStore returns an empty ScheduleStore.
func NewScheduleStore() *ScheduleStore { return &ScheduleStore{rows: map[int64]*schedule.Row{}} }

var _ schedule.Store = (*ScheduleStore)(nil)

var errScheduleClosed = errors.New("memory schedule store is closed")

// ms keeps times at the millisecond precision every store shares.
func ms(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()) }

func (s *ScheduleStore) Register(_ context.Context, r schedule.NewRow) (int64, error) {
	if err := schedule.ValidateNewRow(r); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errScheduleClosed
	}
	s.nextID++
	due := ms(r.DueAt)
	s.rows[s.nextID] = &schedule.Row{ID: s.nextID, DueAt: due, AvailableAt: due, Shard: r.Shard, Action: r.Action}
	return s.nextID, nil
}

func (s *ScheduleStore) Claim(_ context.Context, owner string, shards []int, now time.Time, lease time.Duration, limit int) ([]schedule.Row, error) {
	if err := schedule.ValidateClaim(owner); err != nil {
		return nil, err
	}
	limit = max(limit, 0)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errScheduleClosed
	}
	now = ms(now)
	var ready []*schedule.Row
	for _, r := range s.rows {
		if !r.Failed && slices.Contains(shards, r.Shard) && !r.DueAt.After(now) && !r.AvailableAt.After(now) &&
			(r.LeaseOwner == "" || r.LeaseUntil.Before(now)) {
			ready = append(ready, r)
		}
	}
	slices.SortFunc(ready, func(a, b *schedule.Row) int { return cmp.Or(a.DueAt.Compare(b.DueAt), cmp.Compare(a.ID, b.ID)) })
	var claimed []schedule.Row
	for _, r := range ready[:min(limit, len(ready))] {
		r.LeaseOwner, r.LeaseUntil = owner, ms(now.Add(lease))
		r.Attempts++
		claimed = append(claimed, *r)
	}
	return claimed, nil
}

// held returns the row if owner holds its lease.
func (s *ScheduleStore) held(id int64, owner string) (*schedule.Row, error) {
	if s.closed {
		return nil, errScheduleClosed
	}
	r, ok := s.rows[id]
	if !ok || r.LeaseOwner != owner || r.Failed {
		return nil, schedule.ErrLeaseLost
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
	slices.SortFunc(out, func(a, b schedule.Row) int { return cmp.Or(a.DueAt.Compare(b.DueAt), cmp.Compare(a.ID, b.ID)) })
	return out, nil
}

func (s *ScheduleStore) Counts(context.Context) (schedule.Counts, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return schedule.Counts{}, errScheduleClosed
	}
	var c schedule.Counts
	for _, r := range s.rows {
		if r.Failed {
			c.Failed++
		} else {
			c.Pending++
		}
	}
	return c, nil
}

func (s *ScheduleStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed, s.rows = true, nil
	return nil
}
