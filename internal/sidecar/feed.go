package sidecar

import (
	"fmt"
	"sync"
	"time"

	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
)

// feed holds what the executor tells the sidecar: its shard assignment and the agents it runs. Both
// are replaced whole by each PUT; readers take a snapshot.
type feed struct {
	mu          sync.RWMutex
	assignment  sweeper.Assignment
	assigned    bool
	assignedAt  time.Time
	resident    map[oplog.AgentID]struct{}
	residencyAt time.Time // zero until the first residency PUT
	ttl         time.Duration
	now         func() time.Time
}

func newFeed(ttl time.Duration, now func() time.Time) *feed {
	return &feed{ttl: ttl, now: now, resident: map[oplog.AgentID]struct{}{}}
}

func (f *feed) setAssignment(a sweeper.Assignment) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.assignment, f.assigned, f.assignedAt = a, true, f.now()
}

func (f *feed) setResidency(agents map[oplog.AgentID]struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resident, f.residencyAt = agents, f.now()
}

// shards is the sweeper's Shards callback.
func (f *feed) shards() (sweeper.Assignment, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.assignment, f.assigned
}

// isResident is the sweeper's Residency callback: a lookup, extending nothing.
func (f *feed) isResident(a oplog.AgentID) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, ok := f.resident[a]
	return ok
}

// standDown is the sweeper's StandDown callback: without a residency feed younger than the TTL the
// sidecar cannot tell a running agent from a stranded one, so it archives nothing.
func (f *feed) standDown() (reason, detail string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	switch {
	case f.residencyAt.IsZero():
		return StandDownResidencyStale, "no residency feed yet (PUT /v1/residency)"
	case f.now().Sub(f.residencyAt) > f.ttl:
		return StandDownResidencyStale, fmt.Sprintf("residency feed is %s old, older than residency.ttl %s",
			f.now().Sub(f.residencyAt).Round(time.Second), f.ttl)
	}
	return "", ""
}

// StandDownResidencyStale is the sidecar's stand-down reason: no residency feed, or one older than
// residency.ttl.
const StandDownResidencyStale = "residency_stale"

// ownedShards is the assignment as the scheduler reads it at every claim (schedule.OwnedShards turns
// it into bucket ranges): the shards under their shard count, while the assignment is usable. Read at
// every claim, so a new shard count takes effect at the next claim and no row is stranded by it.
func (f *feed) ownedShards() (count int, shards []int, assigned bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	a := f.assignment
	if !f.assigned || a.ShardCount < 1 || (!a.LeaseUntil.IsZero() && !f.now().Before(a.LeaseUntil)) {
		return 0, nil, false
	}
	return a.ShardCount, a.Shards, true
}

// feedStatus is the feed as /v1/status shows it.
type feedStatus struct {
	Assignment *assignmentStatus `json:"assignment"`
	Residency  residencyStatus   `json:"residency"`
}

type assignmentStatus struct {
	ShardCount int       `json:"shard_count"`
	Shards     []int     `json:"shards"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	Lapsed     bool      `json:"lapsed"`
	ReceivedAt time.Time `json:"received_at"`
}

type residencyStatus struct {
	Agents     int       `json:"agents"`
	ReceivedAt time.Time `json:"received_at,omitzero"`
	Stale      bool      `json:"stale"`
}

func (f *feed) status() feedStatus {
	f.mu.RLock()
	defer f.mu.RUnlock()
	now := f.now()
	st := feedStatus{Residency: residencyStatus{Agents: len(f.resident), ReceivedAt: f.residencyAt,
		Stale: f.residencyAt.IsZero() || now.Sub(f.residencyAt) > f.ttl}}
	if f.assigned {
		a := f.assignment
		st.Assignment = &assignmentStatus{ShardCount: a.ShardCount, Shards: a.Shards, LeaseUntil: a.LeaseUntil,
			Lapsed: !a.LeaseUntil.IsZero() && !now.Before(a.LeaseUntil), ReceivedAt: f.assignedAt}
	}
	return st
}

// SetAssignment replaces the shard assignment, as PUT /v1/assignment does; for an executor that embeds
// the sidecar in-process (the demo).
func (s *Sidecar) SetAssignment(a sweeper.Assignment) { s.feed.setAssignment(a) }

// SetResident replaces the resident set, as PUT /v1/residency does.
func (s *Sidecar) SetResident(agents []oplog.AgentID) {
	set := make(map[oplog.AgentID]struct{}, len(agents))
	for _, a := range agents {
		set[a] = struct{}{}
	}
	s.feed.setResidency(set)
}

// Option changes what Open builds.
type Option func(*options)

type options struct {
	noExecutor bool
}

func built(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithoutExecutor builds the sweep for a process that runs beside no executor (strata sweep --once):
// no agent is resident, and the sweep never stands down for residency, since no feed exists to go
// stale. The quiet gate and the archive step's bounded drop are what keep a live agent's entries safe
// then. Without it, a run that outlasts residency.ttl after one SetResident would stand down and
// leave what it found stranded.
func WithoutExecutor() Option {
	return func(o *options) { o.noExecutor = true }
}
