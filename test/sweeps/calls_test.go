package sweeps_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/multisqlite"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
)

// What archiving a stranded agent costs in indexed-storage calls, every call of the whole drain
// (pages, gate, re-check, archive step), by operation. Per batch of agents: one read of their chunks
// with their last indices (the archive step's first read, which is the gate's re-check too), one append
// of the blob index rows, one drop, and nothing else, where the backend has the batch operations; else
// one of each per agent. The gate's two sightings come with the pages where the backend reads last ids
// with them (Page.LastIDs) or stamps its keys (Page.Stamps: the second sighting passes on an unchanged
// stamp, and the archive's read takes the index), else they are two last-id reads an agent. The blob
// put is the blob store's, not counted here.
func TestSweep_StorageCallsPerArchivedAgent(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		cfg := oplogtest.SweepConfig()
		var calls oplogtest.CallCounter
		st := b.Open(t)
		r := oplogtest.NewSweepRig(t, calls.Wrap(st), cfg)
		const n = 300
		stranded := r.StrandAgents(t, "stranded", n, 3)
		if _, ok := st.(*multisqlite.Store); ok {
			// Its walk stamps only the files that settled (multisqlite.StampSettle) before it:
			// let every stranded agent's, so that the gate reads none.
			time.Sleep(multisqlite.StampSettle + 100*time.Millisecond)
		}
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
		if page.LastIDs != nil || page.Stamps != nil {
			// Pages with last ids spare the gate its reads; so do stamped ones (multi-SQLite): the
			// first sighting is the stamp, and the second passes on an unchanged stamp, the archive's
			// read taking the index.
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
		want[is.OpLastID] += gateReads * n
		if want[is.OpLastID] == 0 {
			delete(want, is.OpLastID)
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
