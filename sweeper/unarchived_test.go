package sweeper_test

import (
	"testing"

	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
)

// A route's Unarchived counts what it found and left in the layer: waiting agents and agents through
// the gate that a budget put off, never an agent it archived or one whose key left the layer.
func TestSweep_UnarchivedCountsWhatTheRouteFoundAndLeftInTheLayer(t *testing.T) {
	e := newEnv(t, config())
	quiet, busy, drained := agent("quiet"), agent("busy"), agent("drained")
	for _, a := range []oplog.AgentID{quiet, busy, drained} {
		e.strand(a, 1, 3)
	}
	if rep := e.tick(); rep.Routes[0].Unarchived != 3 {
		t.Fatalf("first pass: unarchived %d, want the 3 agents it sighted", rep.Routes[0].Unarchived)
	}
	e.strand(busy, 4, 2) // still written between the passes
	if _, err := e.stack.Drain(t.Context(), drained, oplog.Ephemeral); err != nil {
		t.Fatal(err) // its own teardown drain, between the passes
	}
	rep := e.tick()
	if rep.Outcomes[sweeper.OutcomeArchived] != 1 || rep.Routes[0].Unarchived != 1 {
		t.Fatalf("second pass: outcomes %v, unarchived %d; want quiet archived and busy alone left", rep.Outcomes, rep.Routes[0].Unarchived)
	}
	e.requireArchived(quiet, 3)
	e.requireStranded(busy, 5)
}

func TestSweep_UnarchivedCountsAgentsThroughTheGateABudgetPutOff(t *testing.T) {
	cfg := config()
	cfg.MaxArchivesPerTick = 1
	e := newEnv(t, cfg)
	agents := strandMany(e, 3)
	e.tick()
	rep := e.tick()
	if rep.Outcomes[sweeper.OutcomeArchived] != 1 || rep.Routes[0].Unarchived != 2 {
		t.Fatalf("second pass with a budget of one archive: outcomes %v, unarchived %d; want 1 archived, 2 left",
			rep.Outcomes, rep.Routes[0].Unarchived)
	}
	stranded := 0
	for _, a := range agents {
		if e.inLayer(a) {
			stranded++
		}
	}
	if stranded != 2 {
		t.Fatalf("%d agents in the layer, want the 2 the report counts", stranded)
	}
	e.tick()
	if rep := e.tick(); rep.Routes[0].Unarchived != 0 {
		t.Fatalf("after the budget let the rest through: unarchived %d", rep.Routes[0].Unarchived)
	}
	for _, a := range agents {
		e.requireArchived(a, 2)
	}
}
