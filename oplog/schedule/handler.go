package schedule

import (
	"context"
	"fmt"

	"github.com/stratalog/strata/oplog"
)

// Outcome is what the ArchiveOplog handler did with a row.
type Outcome string

const (
	OutcomeGone     Outcome = "gone"     // the oplog holds nothing: done
	OutcomeMovedOn  Outcome = "moved_on" // its last index changed since registration: a newer row will come
	OutcomeArchived Outcome = "archived" // one hop moved, none remains
	OutcomeNextHop  Outcome = "next_hop" // one hop moved and the next row is registered
)

// ArchiveHandler runs ArchiveOplog rows against a stack.
type ArchiveHandler struct {
	Stack *oplog.Stack
	Store Store // where the next hop's row is registered
}

// Handle archives one hop of the row's oplog if it still ends at the row's last index, and registers a
// row for the next hop (due when this row was) if one remains. A gone or moved-on oplog is done: the row
// is acknowledged without touching anything.
func (h *ArchiveHandler) Handle(ctx context.Context, row Row) (Outcome, error) {
	a := row.Action
	last, ok, err := h.Stack.LastIndex(ctx, a.Agent, a.Mode)
	switch {
	case err != nil:
		return "", err
	case !ok:
		return OutcomeGone, nil
	case last != a.LastIndex:
		return OutcomeMovedOn, nil
	}
	step, err := h.Stack.ArchiveStep(ctx, a.Agent, a.Mode)
	if err != nil {
		return "", err
	}
	if !step.More {
		return OutcomeArchived, nil
	}
	if _, err := h.Store.Register(ctx, NewRow{DueAt: row.DueAt, Action: a}); err != nil {
		return "", fmt.Errorf("register next hop of %s: %w", a.Agent, err)
	}
	return OutcomeNextHop, nil
}

// Run is Handle as a scheduler Handler.
func (h *ArchiveHandler) Run(ctx context.Context, row Row) error {
	_, err := h.Handle(ctx, row)
	return err
}
