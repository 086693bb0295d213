package multisqlite

import (
	"fmt"
	"hash/fnv"
	"sync"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
)

// agentKey is an agent's stored key as the oplog layers make it: its bucket (fnv1a64 mod Buckets,
// DESIGN §11) as a prefix, then its name.
func agentKey(name string) string {
	h := fnv.New64a()
	h.Write([]byte(name))
	return is.BucketPrefix(int(h.Sum64()%is.Buckets)) + name
}

// BenchmarkPass_DrainedBesideLive times one whole ScanStable pass over every bucket (pages of 128) of
// a namespace holding 500 live agents beside 0, 2,000 and 8,000 agents that were created and then
// drained (DropPrefix to the end), as a sweep meets them in steady state. The time should not grow
// with the drained agents: their files are gone. opens/pass is how many files a pass opens (0: every
// key is read from its file's name).
func BenchmarkPass_DrainedBesideLive(b *testing.B) {
	const live = 500
	for _, drained := range []int{0, 2_000, 8_000} {
		b.Run(fmt.Sprintf("drained=%d", drained), func(b *testing.B) {
			ctx := b.Context()
			st := open(b, b.TempDir(), Options{})
			var liveKeys, drainedKeys []string
			for i := range live {
				liveKeys = append(liveKeys, agentKey(fmt.Sprintf("c:live-%05d", i)))
			}
			for i := range drained {
				drainedKeys = append(drainedKeys, agentKey(fmt.Sprintf("c:drained-%05d", i)))
			}
			parallel(b, liveKeys, func(k string) error { return st.Append(ctx, testNS, k, 1, []byte("entry")) })
			parallel(b, drainedKeys, func(k string) error {
				if err := st.AppendMany(ctx, testNS, k, []is.Entry{{ID: 1, Value: []byte("a")}, {ID: 2, Value: []byte("b")}}); err != nil {
					return err
				}
				_, err := st.DropPrefix(ctx, testNS, k, 2)
				return err
			})
			r := is.BucketsRange(0, is.Buckets)
			pass := func() {
				n := 0
				for from := (is.Resume{}); ; {
					page, err := st.ScanStable(ctx, testNS, r, from, 128)
					if err != nil {
						b.Fatal(err)
					}
					n += len(page.Keys)
					if page.Done {
						break
					}
					from = page.Next
				}
				if n != live {
					b.Fatalf("pass: %d keys, want %d", n, live)
				}
			}
			pass() // the steady state: listings cached, what a previous pass opened is open
			start := st.Stats()
			for b.Loop() {
				pass()
			}
			end := st.Stats()
			b.ReportMetric(float64(end.FilesOpened-start.FilesOpened)/float64(b.N), "opens/pass")
		})
	}
}

// parallel runs fn on every key, four at a time.
func parallel(b *testing.B, keys []string, fn func(string) error) {
	b.Helper()
	var wg sync.WaitGroup
	ch := make(chan string)
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for k := range ch {
				if err := fn(k); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for _, k := range keys {
		ch <- k
	}
	close(ch)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
