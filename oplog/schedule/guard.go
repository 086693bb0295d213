package schedule

import (
	"context"
	"fmt"
	"time"

	"github.com/stratalog/strata/oplog"
)

// Status is an agent's state as the executor sees it. Registration happens on the transitions into
// Idle, Failed and Exited.
type Status string

const (
	StatusRunning   Status = "running"
	StatusSuspended Status = "suspended"
	StatusIdle      Status = "idle"
	StatusFailed    Status = "failed"
	StatusExited    Status = "exited"
)

// Registrar registers ArchiveOplog rows from the executor's commit path.
type Registrar struct {
	Store Store
	// SweepEnabled is the sweep's switch, read at every call. It is one switch with the sweep loop:
	// turning the sweep off brings the ephemeral rows back, so an ephemeral oplog never has no
	// mechanism behind it. nil reads as disabled.
	SweepEnabled func() bool
	// DurableSweepEnabled is the durable route's switch (sweeper.Sweeper.DurableRouteOn), read at every
	// call: while it is on, durable agents return early too, and turning it off brings their rows
	// back. nil reads as off, as it is for the sidecar, which keeps durable rows.
	DurableSweepEnabled func() bool
	// ArchiveInterval is how long after registration a row becomes due.
	ArchiveInterval time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// RegisterArchiveIfNeeded is the executor's hook when an agent's status changes: for Idle, Failed and
// Exited it registers an ArchiveOplog row due ArchiveInterval later, except for an ephemeral agent
// while the sweep is enabled, which returns early without touching the store — that early return is
// what takes the scheduler database off the ephemeral commit path. Durable agents register unless the
// durable route runs (DurableSweepEnabled).
// The row carries the agent's bucket, whatever the shard count. An agent that goes Idle and then
// Exited with no entry between registers one action twice: the store keeps one row (Store.Register).
// It reports whether it wrote a row.
func (r *Registrar) RegisterArchiveIfNeeded(ctx context.Context, agent oplog.AgentID, mode oplog.Mode, status Status, lastIndex oplog.Index) (bool, error) {
	switch status {
	case StatusIdle, StatusFailed, StatusExited:
	default:
		return false, nil
	}
	swept := r.SweepEnabled
	if mode == oplog.Durable {
		swept = r.DurableSweepEnabled
	}
	if swept != nil && swept() {
		return false, nil
	}
	if err := agent.Validate(); err != nil {
		return false, err
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	_, err := r.Store.Register(ctx, NewRow{
		DueAt:  now().Add(r.ArchiveInterval),
		Action: ArchiveOplog{Agent: agent, Mode: mode, LastIndex: lastIndex},
	})
	if err != nil {
		return false, fmt.Errorf("register archive of %s: %w", agent, err)
	}
	return true, nil
}
