package oplogtest

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/stratalog/strata/archive"
	is "github.com/stratalog/strata/indexedstorage"
)

// RawArchive is the benchmarks' baseline: the least an archiver of one namespace can do on the same
// engine, with none of the sweep's rules. One page query (its last ids from the page where the engine
// reads them with it, else one LastID a key), then per agent, concurrency at once: read its rows, put
// them to blobs as they are, one bounded delete. No quiet gate, no residency, no re-check, no comparison
// with what is below, no budgets: it would archive a live agent and double a raced one. It returns how
// many agents it archived.
func RawArchive(ctx context.Context, st is.Storage, blobs archive.BlobStore, ns string, concurrency, pageSize int) (int, error) {
	archived := 0
	for from := (is.Resume{}); ; {
		page, err := st.ScanStable(ctx, ns, is.AllKeys, from, pageSize)
		if err != nil {
			return archived, err
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(concurrency)
		for i, key := range page.Keys {
			g.Go(func() error {
				var last uint64
				if page.LastIDs != nil {
					last = page.LastIDs[i]
				} else {
					id, ok, err := st.LastID(gctx, ns, key)
					if err != nil || !ok {
						return err
					}
					last = id
				}
				rows, err := st.Read(gctx, ns, key, 0, last)
				if err != nil {
					return err
				}
				for _, r := range rows {
					if err := blobs.Put(gctx, fmt.Sprintf("raw/%s/%020d", archive.PathSegment(key), r.ID), r.Value); err != nil {
						return err
					}
				}
				_, err = st.DropPrefix(gctx, ns, key, last)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return archived, err
		}
		archived += len(page.Keys)
		if page.Done {
			return archived, nil
		}
		from = page.Next
	}
}
