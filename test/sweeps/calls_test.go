package sweeps_test

import (
	"fmt"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
)

// What archiving a stranded agent costs in indexed-storage calls, every call of the whole drain
// (pages, gate, re-check, archive step), by operation. Per batch of agents: one read of their chunks
// with their last indices (the archive step's first read, which is the gate's re-check too), one append
// of the blob index rows, one drop, and nothing else, where the backend has the batch operations; else one of each per agent. The gate's
// two sightings come with the pages where the backend reads last ids with them (Page.LastIDs), else
// they are two last-id reads an agent, or one where the page's stamps (Page.Stamps) vouch for the first.
// The blob put is the blob store's, not counted here.
func TestSweep_StorageCallsPerArchivedAgent(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		cfg := oplogtest.SweepConfig()
		var calls oplogtest.CallCounter
		st := b.Open(t)
		r := oplogtest.NewSweepRig(t, calls.Wrap(st), cfg)
		const n = 300
		stranded := r.StrandAgents(t, "stranded", n, 3)
		calls.Reset()
		batches := 0 // the archive batches the ticks ran: each agent a tick tried is in one
		for tick := 0; r.Drained.Load() < n; tick++ {
			if tick > 100 {
				t.Fatalf("%d of %d drained after 100 ticks", r.Drained.Load(), n)
			}
			out := r.Sweeper.SweepOnce(t.Context()).Outcomes
			tried := out[sweeper.OutcomeArchived] + out[sweeper.OutcomeDeclined] + out[sweeper.OutcomeArchiveFailed]
			per := r.Sweeper.Config().ArchiveBatch
			batches += (tried + per - 1) / per
		}
		got := calls.Reset()
		if left := r.StrandedCount(t, stranded); left != 0 {
			t.Fatalf("%d agents left stranded", left)
		}
		// Whether this backend's pages carry last ids, asked of a key of its own after the count.
		r.StrandAgents(t, "probe", 1, 1)
		page, err := st.ScanStable(t.Context(), oplog.CompressedNamespace(oplog.Ephemeral, 1), is.AllKeys, is.Resume{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		gateReads := 2
		if page.LastIDs != nil {
			gateReads = 0
		}
		// A batch reads the source (its chunks and last ids), appends the index rows of its segment
		// (which refuse an overlap themselves: the blob index's last ids are not read first) and drops
		// the source: one read, one append, one drop. Without the batch append, each key's part reads
		// its index's last id just before its append.
		want := map[is.Operation]int{is.OpClosestLast: n, is.OpAppendMany: n, is.OpDropPrefix: n}
		if _, ok := st.(is.BatchReader); ok {
			delete(want, is.OpClosestLast)
			want[is.OpClosestLastMany] = batches
		}
		if _, ok := st.(is.BatchAppender); ok {
			delete(want, is.OpAppendMany)
			want[is.OpAppendKeys] = batches
		} else {
			want[is.OpLastID] += n
		}
		if _, ok := st.(is.BatchDropper); ok {
			delete(want, is.OpDropPrefix)
			want[is.OpDropPrefixMany] = batches
		}
		if gateReads > 0 {
			want[is.OpLastID] += gateReads * n
		}
		if page.LastIDs == nil && page.Stamps != nil {
			// A stamped page (multi-SQLite) spares the read of a first sighting whose file had settled
			// (changed over a second before the walk), which depends on this machine's pace: between one
			// read an agent (every file settled) and two (none).
			if reads := got[is.OpLastID]; reads < n || reads > 2*n {
				t.Fatalf("%d gate reads for %d agents of stamped pages, want between one and two an agent", reads, n)
			}
			want[is.OpLastID] = got[is.OpLastID]
		}
		pages := got[is.OpScanStable]
		delete(got, is.OpScanStable)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("storage calls %v besides %d pages, want %v", got, pages, want)
		}
		all := pages
		for _, c := range got {
			all += c
		}
		t.Logf("%.3f calls per archived agent (%d pages): %v", float64(all)/n, pages, got)
	})
}
