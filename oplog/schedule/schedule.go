// Package schedule keeps the scheduled-row mechanism strata retains for durable agents, and for
// ephemeral agents while the sweep is disabled: an ArchiveOplog row registered when an agent becomes
// idle, failed or exited, claimed under a lease by the scheduler that owns its agent's bucket, and run by
// a handler that archives one hop and registers the next.
//
// The rows live in table scheduled_actions(schedule_id, due_at_ms, available_at_ms, bucket, subject,
// action, lease_owner, lease_until_ms, attempt_count, failed): stores exist for memory, SQLite and
// PostgreSQL (backends/memory, backends/sqlite, backends/postgres). As in seed 000's task runner, the
// agent is the row's subject and has one consumer at a time: at most one of its rows is leased at once,
// whoever claims, and a second registration of an agent's pending action replaces it.
//
// A row belongs to its agent, not to a shard count: it stores the agent's bucket (oplog.AgentID.Bucket),
// and a scheduler claims the bucket ranges of the shards it owns under the current shard count
// (oplog.ShardBuckets), so after a change of the shard count every row is claimable by exactly the
// scheduler that owns its agent now.
package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// ArchiveOplog asks for one archive hop of an agent's oplog, if the oplog still ends at LastIndex.
type ArchiveOplog struct {
	Agent     oplog.AgentID
	Mode      oplog.Mode
	LastIndex oplog.Index
}

// actionJSON is the stored form of an action, tagged with its kind so another kind can be added.
type actionJSON struct {
	Kind      string `json:"kind"`
	Component string `json:"component"`
	Name      string `json:"name"`
	Mode      string `json:"mode"`
	LastIndex uint64 `json:"last_index"`
}

const kindArchiveOplog = "archive_oplog"

// Kinds lists the label values of an action's kind (the failed-rows metric's action attribute).
var Kinds = []string{kindArchiveOplog}

// Kind is the action's kind as stored and as the metrics label it: "archive_oplog".
func (ArchiveOplog) Kind() string { return kindArchiveOplog }

// Subject is the key of the one consumer at a time: the agent's key. Stores keep it in the subject
// column.
func (a ArchiveOplog) Subject() string { return a.Agent.Key() }

// MarshalAction encodes an action for the action column.
func MarshalAction(a ArchiveOplog) ([]byte, error) {
	return json.Marshal(actionJSON{Kind: kindArchiveOplog, Component: a.Agent.Component, Name: a.Agent.Name,
		Mode: string(a.Mode), LastIndex: uint64(a.LastIndex)})
}

// UnmarshalAction decodes the action column; an unknown kind or a malformed agent is an error.
func UnmarshalAction(data []byte) (ArchiveOplog, error) {
	var j actionJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return ArchiveOplog{}, fmt.Errorf("scheduled action: %w", err)
	}
	if j.Kind != kindArchiveOplog {
		return ArchiveOplog{}, fmt.Errorf("scheduled action: unknown kind %q", j.Kind)
	}
	mode, err := oplog.ParseMode(j.Mode)
	if err != nil {
		return ArchiveOplog{}, fmt.Errorf("scheduled action: %w", err)
	}
	agent := oplog.AgentID{Component: j.Component, Name: j.Name}
	if err := agent.Validate(); err != nil {
		return ArchiveOplog{}, fmt.Errorf("scheduled action: %w", err)
	}
	return ArchiveOplog{Agent: agent, Mode: mode, LastIndex: oplog.Index(j.LastIndex)}, nil
}

// Row is one scheduled action.
type Row struct {
	ID          int64
	DueAt       time.Time // when the action becomes due
	AvailableAt time.Time // when it may next be claimed (later than DueAt after a failed attempt)
	Bucket      int       // the agent's bucket, Action.Agent.Bucket(): what Claim selects by
	Action      ArchiveOplog
	LeaseOwner  string    // who holds it; "" when nobody does (never claimed, or released)
	LeaseUntil  time.Time // the lease's expiry; zero when nobody holds it
	Attempts    int       // claims so far, the running one included
	Failed      bool      // out of attempts: never claimed again, kept for inspection
	// TakenOver is set on a row Claim returns when the row was still leased to a claimer whose lease
	// had expired (a lease takeover); false everywhere else.
	TakenOver bool
}

// NewRow is what Register needs. The row's bucket and subject come from its action's agent.
type NewRow struct {
	DueAt  time.Time
	Action ArchiveOplog
}

// Counts is how many rows a store holds at a time now, for metrics and tests.
type Counts struct {
	Pending int // not failed: waiting or running
	// Due is the pending rows claimable at now: due and available at now, and nobody's lease running.
	Due    int
	Failed int
	// OldestDue is the earliest DueAt among the Due rows; zero when there are none.
	OldestDue time.Time
}

// Replaces reports whether a registration due at newDue replaces a pending, unleased row of the same
// action that is due at dueAt and available from availableAt. As seed 000's runner does with a
// replacement, whichever would run later is kept and the other dropped: the registration wins when it
// is due after the row would next run (max(dueAt, availableAt)), and then the row becomes the new
// registration (due and available at newDue, no attempts); otherwise the row stays as it was, its
// backoff and attempts included. Times compare at the stores' millisecond precision.
func Replaces(dueAt, availableAt, newDue time.Time) bool {
	next := max(dueAt.UnixMilli(), availableAt.UnixMilli())
	return newDue.UnixMilli() > next
}

// ValidateNewRow checks a row can be stored and read back: a valid agent and mode.
func ValidateNewRow(r NewRow) error {
	if _, err := oplog.ParseMode(string(r.Action.Mode)); err != nil {
		return fmt.Errorf("%w: %v", is.ErrInvalidArgument, err)
	}
	if err := r.Action.Agent.Validate(); err != nil {
		return fmt.Errorf("%w: %v", is.ErrInvalidArgument, err)
	}
	return nil
}

// ValidateClaim checks Claim's arguments: an owner, a lease of at least a millisecond (the stores'
// precision: a shorter one would expire as it is taken), and bucket ranges within [0, oplog.Buckets]
// with Lo ≤ Hi.
func ValidateClaim(owner string, buckets []oplog.BucketRange, lease time.Duration) error {
	switch {
	case owner == "":
		return fmt.Errorf("%w: claim with an empty owner", is.ErrInvalidArgument)
	case lease < time.Millisecond:
		return fmt.Errorf("%w: claim with a lease of %v, want at least 1ms", is.ErrInvalidArgument, lease)
	}
	for _, r := range buckets {
		if !r.Valid() {
			return fmt.Errorf("%w: bucket range [%d, %d) is not within [0, %d)", is.ErrInvalidArgument, r.Lo, r.Hi, oplog.Buckets)
		}
	}
	return nil
}

// InBuckets reports whether bucket is in one of the ranges.
func InBuckets(bucket int, ranges []oplog.BucketRange) bool {
	for _, r := range ranges {
		if r.Contains(bucket) {
			return true
		}
	}
	return false
}

// ErrLeaseLost is returned by Extend, Ack and Release when owner does not hold the row's lease (another
// claimer took it over after it expired, or the row is gone).
var ErrLeaseLost = errors.New("lease lost")

// Store is the contract of a scheduled_actions table. Every method is safe for concurrent use, also
// across processes sharing the table. Times are stored with millisecond precision.
type Store interface {
	// Register stores a pending row for its action, due at row.DueAt, and returns the id of the row
	// that holds it. If a pending row of the same action (agent, mode and last index) exists that
	// nobody holds (never claimed, or released to retry), no row is added: of that row and the
	// registration, the one that would run later is kept (Replaces), and its id is returned. A row
	// that is leased, even on an expired lease, has started and is left alone: the registration is
	// added beside it. Concurrent registrations of one action leave one row. An action that would not
	// decode again (an invalid agent or mode) is refused with indexedstorage.ErrInvalidArgument:
	// stored, it would fail every claim that reached it.
	Register(ctx context.Context, row NewRow) (int64, error)

	// Claim leases to owner, until now+lease, up to limit pending rows whose bucket is in one of the
	// ranges, that are due and available at now and not leased by anyone at now (never claimed, or
	// lease expired), oldest due first, incrementing each row's attempt count.
	//
	// One consumer per subject: at most one row of an agent is leased at a time, across every
	// claimer of the table. A claim takes at most one row per agent, and none of an agent one of
	// whose rows is leased on a lease running at now; a row whose lease expired is the one its agent's
	// next claim takes over (TakenOver set), so an agent's rows never hold two leases, expired or not.
	// Two concurrent claimers never get the same row, nor two rows of one agent.
	//
	// A limit below 1 or no ranges claims nothing. An empty owner (it would read back as "nobody holds
	// it"), a lease under a millisecond, or a range outside [0, oplog.Buckets] is ErrInvalidArgument.
	Claim(ctx context.Context, owner string, buckets []oplog.BucketRange, now time.Time, lease time.Duration, limit int) ([]Row, error)

	// Extend renews owner's lease on the row until until, or returns ErrLeaseLost.
	Extend(ctx context.Context, id int64, owner string, until time.Time) error

	// Ack deletes the row after its action succeeded, or returns ErrLeaseLost: only the lease owner
	// can acknowledge.
	Ack(ctx context.Context, id int64, owner string) error

	// Release ends owner's lease after a failed attempt: the row may be claimed again from retryAt, or,
	// if failed, never again. ErrLeaseLost if owner does not hold it.
	Release(ctx context.Context, id int64, owner string, retryAt time.Time, failed bool) error

	// Rows returns every row, oldest due first (inspection and tests; not for hot paths).
	Rows(ctx context.Context) ([]Row, error)

	// Counts returns how many rows are pending, due at now and failed, and the oldest due row's due
	// time.
	Counts(ctx context.Context, now time.Time) (Counts, error)

	// Close ends the store. Every later call of any method returns an error matching
	// indexedstorage.ErrClosed; Close itself is idempotent.
	Close() error
}
