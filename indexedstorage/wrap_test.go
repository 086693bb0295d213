package indexedstorage_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
)

// bare is a Storage with only the interface's methods: no ClosestLast of its own.
type bare struct{ is.Storage }

// A wrapper's ClosestLast is one operation over a backend that has the method and the two it falls
// back on over one that has not; either way it answers the same.
func TestIntercept_ClosestLastIsOneCallOnlyWhereTheInnerStorageHasIt(t *testing.T) {
	for _, c := range []struct {
		name  string
		inner is.Storage
		want  string
	}{
		{"reader", memory.New(), "map[closest_last:1]"},
		{"bare", bare{memory.New()}, "map[closest:1 last_id:1]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			for id := uint64(1); id <= 3; id++ {
				if err := c.inner.Append(ctx, "ns", "k", id, []byte{byte(id)}); err != nil {
					t.Fatal(err)
				}
			}
			calls := map[is.Operation]int{}
			st := is.Intercept(c.inner, func(ctx context.Context, op is.Operation, do func(context.Context) error) error {
				calls[op]++
				return do(ctx)
			})
			e, found, last, exists, err := is.ClosestLast(ctx, st, "ns", "k", 2)
			if err != nil || !found || e.ID != 2 || e.Value[0] != 2 || last != 3 || !exists {
				t.Fatalf("ClosestLast: %+v %v %d %v %v", e, found, last, exists, err)
			}
			if got := fmt.Sprint(calls); got != c.want {
				t.Fatalf("calls %s, want %s", got, c.want)
			}
		})
	}
}
