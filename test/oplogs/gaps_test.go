package oplogs_test

import (
	"slices"
	"testing"

	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
)

// indices returns the indices of entries.
func indices(entries []oplog.Entry) []oplog.Index {
	out := make([]oplog.Index, len(entries))
	for i, e := range entries {
		out[i] = e.Index
	}
	return out
}

// docs/storage-format.md: nothing checks that an append starts right after the oplog's last index, so
// a writer that leaves a gap (1–10, then 12–20; or starts at 5) gets an oplog with that gap, and strata
// keeps it: the archive moves every run down as it is, neither filling the gap nor failing; a read stops
// at the gap, and reading on from the next index returns the run after it.
func TestOplog_AGappedOplogIsArchivedWithItsGap(t *testing.T) {
	runs := [][2]oplog.Index{{5, 10}, {12, 20}, {40, 40}} // 1–4, 11 and 21–39 missing
	var want []oplog.Index
	for _, r := range runs {
		want = append(want, oplogtest.SpanIndexes(int(r[0]), int(r[1]))...)
	}
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		l := oplogtest.NewLayers(t, b.Open(t), nil)
		ctx := t.Context()
		write := func(agent oplog.AgentID, mode oplog.Mode) {
			for _, r := range runs {
				if err := l.Stack.Append(ctx, agent, mode, oplogtest.EntriesRange(r[0], int(r[1]-r[0]+1))); err != nil {
					t.Fatalf("append %d–%d: %v", r[0], r[1], err)
				}
			}
		}
		// requireRuns reads the oplog from 1, and on from the index after each gap, and gets each run.
		requireRuns := func(agent oplog.AgentID, mode oplog.Mode) {
			t.Helper()
			for _, r := range runs {
				for _, from := range []oplog.Index{1, r[0]} {
					if from == 1 && r != runs[0] {
						continue
					}
					got, err := l.Stack.Read(ctx, agent, mode, from, 100)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(indices(got), oplogtest.SpanIndexes(int(r[0]), int(r[1]))) {
						t.Fatalf("%s: read from %d returned %v, want the run %d–%d", agent, from, indices(got), r[0], r[1])
					}
				}
			}
			// From inside a gap, the read returns the run after it.
			got, err := l.Stack.Read(ctx, agent, mode, 11, 100)
			if err != nil || !slices.Equal(indices(got), oplogtest.SpanIndexes(12, 20)) {
				t.Fatalf("%s: read from 11 (the gap) returned %v, %v; want 12–20", agent, indices(got), err)
			}
		}
		for _, mode := range oplog.Modes {
			agent := oplogtest.AgentNamed("gapped-" + string(mode))
			write(agent, mode)
			requireRuns(agent, mode)
			if _, err := l.Stack.Drain(ctx, agent, mode); err != nil {
				t.Fatalf("%s: drain: %v", agent, err)
			}
			requireRuns(agent, mode)
			if covered := l.BlobCoverage(t, agent, mode); !slices.Equal(covered, want) {
				t.Fatalf("%s: the blob layer holds %v, want the runs %v with their gaps", agent, covered, want)
			}
			for _, layer := range l.Stack.Layers()[:2] {
				if _, ok, err := layer.LastIndex(ctx, agent, mode); ok || err != nil {
					t.Fatalf("%s: %s still holds entries after the drain (%v)", agent, layer.Name(), err)
				}
			}
		}
		// The sweep archives a stranded gapped oplog like any other: archived, not failed.
		r := oplogtest.NewSweepRigOn(t, l, oplogtest.SweepConfig())
		agent := oplogtest.AgentNamed("gapped-stranded")
		write(agent, oplog.Ephemeral)
		archived := 0
		for range 2 {
			rep := r.Sweeper.SweepOnce(ctx)
			archived += rep.Outcomes[sweeper.OutcomeArchived]
			if n := rep.Outcomes[sweeper.OutcomeArchiveFailed]; n > 0 {
				t.Fatalf("%d archives failed", n)
			}
		}
		if archived != 1 {
			t.Fatalf("the sweep archived %d agents, want the gapped one", archived)
		}
		requireRuns(agent, oplog.Ephemeral)
		if covered := l.BlobCoverage(t, agent, oplog.Ephemeral); !slices.Equal(covered, want) {
			t.Fatalf("the blob layer holds %v, want %v", covered, want)
		}
	})
}
