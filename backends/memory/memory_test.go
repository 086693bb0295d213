package memory_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/indexedstorage/storagetest"
)

func harness() storagetest.Harness {
	return storagetest.Harness{
		New: func(tb testing.TB) is.Storage {
			st := memory.New()
			tb.Cleanup(func() { st.Close() })
			return st
		},
		ModelSinglePages:      200_000,
		ModelWalks:            20_000,
		LinearizableHistories: 5000,
		RaceRounds:            5000,
		RawWalk:               rawWalk,
		// No Poison: nothing outside the Store reaches its indexes.
	}
}

func TestConformance(t *testing.T) { storagetest.Run(t, harness()) }

func BenchmarkStorage(b *testing.B) { storagetest.Bench(b, harness(), 0) }

// rawWalk is the loop a sorted slice allows: binary search past the last key, take a page. The slice is
// built once from the store, outside the walk, so the row measures the walk alone.
func rawWalk(ctx context.Context, st is.Storage, ns string, pageSize int) (int, error) {
	keys, err := sortedKeys(ctx, st, ns)
	if err != nil {
		return 0, err
	}
	n, last := 0, ""
	for {
		i, found := slices.BinarySearch(keys, last)
		if found {
			i++
		}
		page := keys[i:min(i+pageSize, len(keys))]
		n += len(page)
		if len(page) < pageSize {
			return n, nil
		}
		last = page[len(page)-1]
	}
}

var cache = map[cacheKey][]string{}

type cacheKey struct {
	st is.Storage
	ns string
}

func sortedKeys(ctx context.Context, st is.Storage, ns string) ([]string, error) {
	if keys, ok := cache[cacheKey{st, ns}]; ok {
		return keys, nil
	}
	var keys []string
	for cursor := uint64(0); ; {
		next, page, err := st.Scan(ctx, ns, "", cursor, 1<<20)
		if err != nil {
			return nil, err
		}
		keys = append(keys, page...)
		if next == 0 {
			break
		}
		cursor = next
	}
	cache[cacheKey{st, ns}] = keys
	return keys, nil
}
