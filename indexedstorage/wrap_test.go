package indexedstorage_test

import (
	"context"
	"errors"
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

// AppendKeys over a Storage without the batch method appends key by key and still refuses a part whose
// Below the index's last id reaches, as the batch method does.
func TestAppendKeys_PerKeyFallbackKeepsBelow(t *testing.T) {
	ctx := t.Context()
	st := bare{memory.New()}
	for _, k := range []string{"at", "over"} {
		if err := st.AppendMany(ctx, "ns", k, []is.Entry{{ID: 2}, {ID: 5}}); err != nil {
			t.Fatal(err)
		}
	}
	errs, err := is.AppendKeys(ctx, st, "ns", []is.KeyEntries{
		{Key: "at", Entries: []is.Entry{{ID: 8}}, Below: 5},
		{Key: "over", Entries: []is.Entry{{ID: 8}}, Below: 6},
	})
	if err != nil || len(errs) != 2 || !errors.Is(errs[0], is.ErrConflict) || errs[1] != nil {
		t.Fatalf("AppendKeys: %v, %v; want a conflict for Below 5 over last id 5, then nil", errs, err)
	}
	for k, want := range map[string]uint64{"at": 5, "over": 8} {
		if last, _, err := st.LastID(ctx, "ns", k); err != nil || last != want {
			t.Fatalf("%q: last id %d, %v; want %d", k, last, err, want)
		}
	}
	if _, err := is.AppendKeys(ctx, st, "ns", []is.KeyEntries{{Key: "new", Entries: []is.Entry{{ID: 3}}, Below: 4}}); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("AppendKeys with Below above the first id: %v, want ErrInvalidArgument", err)
	}
}
