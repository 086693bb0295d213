package oplogs_test

import (
	"sync"
	"testing"

	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
)

// Layer.DropPrefix returns what this call removed, in the layer's stored units: entries of the
// primary, chunks of compressed level 1. A drop that finds them gone returns 0, and two drops racing
// over the same units count each once between them: how a drain tells that another moved its entries.
func TestLayer_DropPrefixCountsWhatThisCallRemovedOnce(t *testing.T) {
	backendtest.Each(t, func(t *testing.T, b backendtest.Backend) {
		l := oplogtest.NewLayers(t, b.Open(t), nil)
		ctx := t.Context()
		layers := l.Stack.Layers()
		for _, c := range []struct {
			layer oplog.Layer
			mode  oplog.Mode
			units uint64 // what 1..30 is stored as, appended in pieces of 10
		}{{layers[0], oplog.Durable, 30}, {layers[1], oplog.Ephemeral, 3}} {
			for round := range 20 {
				agent := oplogtest.AgentNamed("dropped-" + c.layer.Name() + "-" + string(rune('a'+round)))
				for from := oplog.Index(1); from <= 30; from += 10 {
					if err := c.layer.Append(ctx, agent, c.mode, oplogtest.EntriesRange(from, 10)); err != nil {
						t.Fatal(err)
					}
				}
				if round == 0 {
					// One at a time: the second finds nothing.
					first, err := c.layer.DropPrefix(ctx, agent, c.mode, 30)
					if err != nil || first != c.units {
						t.Fatalf("%s: first drop removed %d (%v), want %d", c.layer.Name(), first, err, c.units)
					}
					if again, err := c.layer.DropPrefix(ctx, agent, c.mode, 30); err != nil || again != 0 {
						t.Fatalf("%s: a drop of what is gone removed %d (%v), want 0", c.layer.Name(), again, err)
					}
					continue
				}
				var wg sync.WaitGroup
				counts := make([]uint64, 2)
				errs := make([]error, 2)
				start := make(chan struct{})
				for j := range counts {
					wg.Go(func() {
						<-start
						counts[j], errs[j] = c.layer.DropPrefix(ctx, agent, c.mode, 30)
					})
				}
				close(start)
				wg.Wait()
				if errs[0] != nil || errs[1] != nil {
					t.Fatalf("%s: racing drops: %v, %v", c.layer.Name(), errs[0], errs[1])
				}
				if counts[0]+counts[1] != c.units {
					t.Fatalf("%s: racing drops counted %d + %d, want %d in all", c.layer.Name(), counts[0], counts[1], c.units)
				}
			}
		}
	})
}
