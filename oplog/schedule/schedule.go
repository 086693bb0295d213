// Package schedule keeps the scheduled-row mechanism strata retains for durable agents, and for
// ephemeral agents while the sweep is disabled: an ArchiveOplog row registered when an agent becomes
// idle, failed or exited, claimed under a lease by the scheduler that owns its shard, and run by a
// handler that archives one hop and registers the next.
//
// The rows live in table scheduled_actions(schedule_id, due_at_ms, available_at_ms, shard_id, action,
// lease_owner, lease_until_ms, attempt_count, failed): stores exist for memory, SQLite and PostgreSQL
// (backends/memory, backends/sqlite, backends/postgres).
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
	Shard       int
	Action      ArchiveOplog
	LeaseOwner  string    // who holds it; "" when nobody does (never claimed, or released)
	LeaseUntil  time.Time // the lease's expiry; zero when nobody holds it
	Attempts    int       // claims so far, the running one included
	Failed      bool      // out of attempts: never claimed again, kept for inspection
}

// NewRow is what Register needs.
type NewRow struct {
	DueAt  time.Time
	Shard  int
	Action ArchiveOplog
}

// Counts is how many rows a store holds, for metrics and tests.
type Counts struct {
	Pending int // waiting or running
	Failed  int
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

// ValidateClaim checks Claim's owner.
func ValidateClaim(owner string) error {
	if owner == "" {
		return fmt.Errorf("%w: claim with an empty owner", is.ErrInvalidArgument)
	}
	return nil
}

// ErrLeaseLost is returned by Extend, Ack and Release when owner does not hold the row's lease (another
// claimer took it over after it expired, or the row is gone).
var ErrLeaseLost = errors.New("lease lost")

// Store is the contract of a scheduled_actions table. Every method is safe for concurrent use, also
// across processes sharing the table. Times are stored with millisecond precision.
type Store interface {
	// Register inserts a pending row and returns its id. An action that would not decode again (an
	// invalid agent or mode) is refused with indexedstorage.ErrInvalidArgument: stored, it would fail
	// every claim that reached it.
	Register(ctx context.Context, row NewRow) (int64, error)

	// Claim leases to owner, until now+lease, up to limit pending rows of the given shards that are
	// due and available at now and not leased by anyone at now (never claimed, or lease expired),
	// oldest due first, incrementing each row's attempt count. Two concurrent claimers never get the
	// same row. A limit below 1 or no shards claims nothing; an empty owner is ErrInvalidArgument (it
	// would read back as "nobody holds it").
	Claim(ctx context.Context, owner string, shards []int, now time.Time, lease time.Duration, limit int) ([]Row, error)

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

	// Counts returns how many rows are pending and failed.
	Counts(ctx context.Context) (Counts, error)

	Close() error
}
