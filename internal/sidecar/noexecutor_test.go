package sidecar

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stratalog/strata/config"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
)

// Issue 20, break 1: the sweep of a process beside no executor (strata sweep --once) never stands down
// for residency, however long after its start it ticks; the sidecar's own does once its feed is older
// than residency.ttl. Both archive an agent that stayed quiet across two passes.
func TestOpen_WithoutExecutorTheSweepNeverStandsDownForResidency(t *testing.T) {
	for _, c := range []struct {
		name      string
		opts      []Option
		standDown bool
	}{{"sidecar", nil, true}, {"without executor", []Option{WithoutExecutor()}, false}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := config.Default()
			cfg.Storage.URL = "sqlite://" + filepath.Join(dir, "strata.db")
			cfg.Schedule.URL = cfg.Storage.URL
			cfg.Blob.URL = "fs://" + filepath.Join(dir, "blobs")
			cfg.Residency.TTL = time.Second
			s, err := Open(t.Context(), cfg, nil, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			clk := &clock{now: time.Now()}
			s.now, s.feed.now = clk.Now, clk.Now
			a := oplog.AgentID{Component: "shop", Name: "cart"}
			if err := s.Stack().Append(t.Context(), a, oplog.Ephemeral, []oplog.Entry{{Index: 1, Payload: []byte("x")}}); err != nil {
				t.Fatal(err)
			}
			s.SetAssignment(sweeper.Assignment{ShardCount: 1, Shards: []int{0}})
			s.SetResident(nil)
			s.Sweeper().SweepOnce(t.Context())
			clk.Advance(time.Minute) // the one residency feed is a minute old, the TTL a second
			rep := s.Sweeper().SweepOnce(t.Context())
			if stood := rep.StandDownReason == StandDownResidencyStale; stood != c.standDown {
				t.Fatalf("second tick stood down %v (%q), want %v", stood, rep.StoodDown, c.standDown)
			}
			bottom := s.Stack().Layers()[len(s.Stack().Layers())-1]
			_, archived, err := bottom.LastIndex(t.Context(), a, oplog.Ephemeral)
			if err != nil || archived == c.standDown {
				t.Fatalf("agent in %s: %v (%v); want %v", bottom.Name(), archived, err, !c.standDown)
			}
		})
	}
}
