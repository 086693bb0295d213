package sweeps_test

import (
	"testing"

	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
)

// The sweep's main scenarios on every backend: stranded agents are archived after the second pass,
// resident ones are left alone, and tight budgets only spread the work over more ticks.
func TestSweep_StrandedAgentsAreArchivedOnEveryBackend(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		cfg := oplogtest.SweepConfig()
		cfg.PageSize, cfg.MaxScannedPerTick, cfg.MaxArchivesPerTick = 4, 12, 5
		var calls oplogtest.CallCounter
		r := oplogtest.NewSweepRig(t, calls.Wrap(b.Open(t)), cfg)
		stranded := r.StrandAgents(t, "stranded", 30, 7)
		resident := r.StrandAgents(t, "resident", 3, 2)
		for _, a := range resident {
			r.Resident.Store(a, true)
		}
		calls.Reset()
		ticks, truncated := 0, false
		for ; ticks < 60 && r.StrandedCount(t, stranded) > 0; ticks++ {
			rep := r.Sweeper.SweepOnce(t.Context())
			truncated = truncated || len(rep.Truncated) > 0
			if rep.Outcomes[sweeper.OutcomeArchived] > cfg.MaxArchivesPerTick {
				t.Fatalf("tick %d archived %d, budget %d", ticks, rep.Outcomes[sweeper.OutcomeArchived], cfg.MaxArchivesPerTick)
			}
		}
		if n := r.StrandedCount(t, stranded); n > 0 {
			t.Fatalf("%d agents still stranded after %d ticks", n, ticks)
		}
		if !truncated {
			t.Fatal("budgets this tight never truncated a tick")
		}
		for _, a := range stranded {
			r.RequireExact(t, a, oplog.Ephemeral, 7)
			r.RequireDrained(t, a, oplog.Ephemeral, 7)
		}
		if r.StrandedCount(t, resident) != len(resident) {
			t.Fatal("a resident agent was archived")
		}
		if got := r.Drained.Load(); got != int64(len(stranded)) {
			t.Fatalf("OnDrained fired %d times for %d agents", got, len(stranded))
		}
		t.Logf("%d agents drained in %d ticks", len(stranded), ticks)
	})
}

// In steady state the sweep reads pages and nothing else: every agent in the layer is resident.
func TestSweep_ResidentAgentsCostOnlyPageReadsOnEveryBackend(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		cfg := oplogtest.SweepConfig()
		cfg.PageSize = 16
		var calls oplogtest.CallCounter
		r := oplogtest.NewSweepRig(t, calls.Wrap(b.Open(t)), cfg)
		for _, a := range r.StrandAgents(t, "busy", 100, 1) {
			r.Resident.Store(a, true)
		}
		calls.Reset()
		rep := r.Sweeper.SweepOnce(t.Context())
		got := calls.Reset()
		if rep.Outcomes[sweeper.OutcomeResident] < 100 {
			t.Fatalf("decided %d resident of 100", rep.Outcomes[sweeper.OutcomeResident])
		}
		pages := rep.Routes[0].Pages
		others := 0
		for op, n := range got {
			if op != "scan_stable" {
				others += n
			}
		}
		if got["scan_stable"] != pages || others != 0 {
			t.Fatalf("storage calls %v for %d pages: want page reads only", got, pages)
		}
	})
}

// Redis SCAN may hand a key back twice; with the keys of one pass spread over ticks, no duplicate
// ever passes the gate early. Checked on every backend, where declared order makes it moot.
func TestSweep_QuietGateHoldsAcrossTicksOfOnePass(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		cfg := oplogtest.SweepConfig()
		cfg.PageSize, cfg.MaxScannedPerTick = 1, 1
		r := oplogtest.NewSweepRig(t, b.Open(t), cfg)
		agents := r.StrandAgents(t, "slow-pass", 5, 2)
		var firstArchive int
		for tick := 1; tick <= 40 && r.StrandedCount(t, agents) > 0; tick++ {
			rep := r.Sweeper.SweepOnce(t.Context())
			if firstArchive == 0 && len(rep.Archived()) > 0 {
				firstArchive = tick
				if st := r.Sweeper.Status(); st.Passes["ephemeral-l1"] < 2 {
					t.Fatalf("archived during pass %d", st.Passes["ephemeral-l1"])
				}
			}
		}
		if firstArchive == 0 || r.StrandedCount(t, agents) > 0 {
			t.Fatalf("not drained (first archive at tick %d)", firstArchive)
		}
		if firstArchive <= 1 {
			t.Fatal("archived on the first tick")
		}
	})
}
