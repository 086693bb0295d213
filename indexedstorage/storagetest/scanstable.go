package storagetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
)

func numberedKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return keys
}

func testScanStable(t *testing.T, h Harness) {
	t.Run("EmptyNamespaceIsDone", func(t *testing.T) {
		f := newFixture(t, h)
		page, err := f.st.ScanStable(f.ctx, ns, is.AllKeys, is.Resume{}, 10)
		if err != nil {
			t.Fatal(err)
		}
		if !page.Done || len(page.Keys) != 0 {
			t.Fatalf("empty namespace: %d keys, done %v", len(page.Keys), page.Done)
		}
		if got := f.walk(ns, "", 1, nil); len(got) != 0 {
			t.Fatalf("walk of an empty namespace returned %q", got)
		}
	})

	t.Run("FullWalkReturnsEveryKey", func(t *testing.T) {
		f := newFixture(t, h)
		keys := numberedKeys("agent:", 300)
		for _, k := range keys {
			f.append(ns, k, 1)
		}
		f.append("test/elsewhere", "agent:9999", 1)
		for _, count := range []int{1, 7, 128, 1000} {
			got := f.walk(ns, "", count, nil)
			if gotSet := keySet(got); !slices.Equal(gotSet, keys) {
				t.Fatalf("pages of %d: %d distinct keys, want %d", count, len(gotSet), len(keys))
			}
			if f.caps.OrderedScan && !slices.Equal(got, keys) {
				t.Fatalf("pages of %d: an ordered backend must return each key once, ascending", count)
			}
		}
	})

	t.Run("PageSizeOne", func(t *testing.T) {
		f := newFixture(t, h)
		keys := numberedKeys("k", 20)
		for _, k := range keys {
			f.append(ns, k, 1)
		}
		got := f.walk(ns, "", 1, func(page []string) {
			if len(page) > 1 && f.caps.OrderedScan {
				t.Fatalf("page of %d keys for count 1", len(page))
			}
		})
		if !slices.Equal(keySet(got), keys) {
			t.Fatalf("walk with pages of one returned %q", keySet(got))
		}
	})

	// The reason ScanStable exists: an archive step deletes the key the walk just returned. A cursor
	// that counts positions steps over as many keys as were deleted behind it.
	t.Run("KeyDeletedBehindCursorIsNotSkipped", func(t *testing.T) {
		for _, how := range []string{"Delete", "DropPrefix"} {
			t.Run(how, func(t *testing.T) {
				f := newFixture(t, h)
				keys := numberedKeys("agent:", 100)
				for _, k := range keys {
					f.append(ns, k, 1, 2)
				}
				got := f.walk(ns, "", 10, func(page []string) {
					for _, k := range page {
						if how == "Delete" {
							f.delete(ns, k)
						} else if f.exists(ns, k) {
							f.dropPrefix(ns, k, 2)
						}
					}
				})
				if missing := difference(keys, got); len(missing) > 0 {
					t.Fatalf("deleting behind the cursor skipped %d keys, first %q", len(missing), missing[0])
				}
			})
		}
	})

	t.Run("SurvivorsAreReturnedWhenHalfIsDeletedMidWalk", func(t *testing.T) {
		f := newFixture(t, h)
		keys := numberedKeys("agent:", 200)
		for _, k := range keys {
			f.append(ns, k, 1)
		}
		deleted := map[string]bool{}
		got := f.walk(ns, "", 16, func(page []string) {
			// Delete every other key seen so far, and a few not seen yet: survivors must still come back.
			for i, k := range page {
				if i%2 == 0 && !deleted[k] {
					f.delete(ns, k)
					deleted[k] = true
				}
			}
			for i := len(deleted) * 3 % 200; i < 200 && len(deleted)%5 == 0; i += 37 {
				if !deleted[keys[i]] {
					f.delete(ns, keys[i])
					deleted[keys[i]] = true
				}
			}
		})
		var survivors []string
		for _, k := range keys {
			if !deleted[k] {
				survivors = append(survivors, k)
			}
		}
		if missing := difference(survivors, got); len(missing) > 0 {
			t.Fatalf("%d surviving keys never returned, first %q", len(missing), missing[0])
		}
	})

	t.Run("StableKeysReturnedWhileOthersChurnConcurrently", func(t *testing.T) {
		f := newFixture(t, h)
		stable := numberedKeys("agent:s", 150)
		for _, k := range stable {
			f.append(ns, k, 1)
		}
		churn := numberedKeys("agent:c", 150)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var churnErr error
		wg.Go(func() {
			// Add and remove churn keys until the walk is over; ids only grow, so appends never conflict.
			for id := uint64(1); ; id++ {
				for i, k := range churn {
					select {
					case <-stop:
						return
					default:
					}
					var err error
					if (int(id)+i)%2 == 0 {
						err = f.st.Append(f.ctx, ns, k, id, value(k, id))
					} else {
						_, err = f.st.DropPrefix(f.ctx, ns, k, id)
					}
					if err != nil {
						churnErr = err
						return
					}
				}
			}
		})
		var walks [][]string
		for range 3 {
			walks = append(walks, f.walk(ns, "agent:", 9, nil))
		}
		close(stop)
		wg.Wait()
		if churnErr != nil {
			t.Fatalf("churn: %v", churnErr)
		}
		var got []string
		for i, walk := range walks {
			if missing := difference(stable, walk); len(missing) > 0 {
				t.Fatalf("walk %d: %d stable keys never returned while others churned, first %q", i, len(missing), missing[0])
			}
			got = append(got, walk...)
		}
		universe := append(slices.Clone(stable), churn...)
		if extra := difference(keySet(got), keySet(universe)); len(extra) > 0 {
			t.Fatalf("walk returned keys never written: %q", extra)
		}
	})

	t.Run("WalkUnderPrefixSeesOnlyPrefix", func(t *testing.T) {
		f := newFixture(t, h)
		inside := numberedKeys("ephemeral-agent:", 40)
		for _, k := range append(numberedKeys("ephemeral-agen", 40), inside...) {
			f.append(ns, k, 1)
		}
		for _, count := range []int{1, 6, 100} {
			if got := keySet(f.walk(ns, "ephemeral-agent:", count, nil)); !slices.Equal(got, inside) {
				t.Fatalf("pages of %d: got %d keys, want %d", count, len(got), len(inside))
			}
		}
	})

	t.Run("KeyCreatedAfterWalkIsSeenByNextWalk", func(t *testing.T) {
		f := newFixture(t, h)
		for _, k := range numberedKeys("k", 10) {
			f.append(ns, k, 1)
		}
		f.walk(ns, "", 3, nil)
		f.append(ns, "k0004a", 1)
		f.append(ns, "a-first", 1)
		got := keySet(f.walk(ns, "", 3, nil))
		for _, k := range []string{"k0004a", "a-first"} {
			if !slices.Contains(got, k) {
				t.Fatalf("a walk started after %q was created did not return it", k)
			}
		}
	})
}

// difference returns the elements of want missing from got.
func difference(want, got []string) []string {
	have := make(map[string]bool, len(got))
	for _, k := range got {
		have[k] = true
	}
	var missing []string
	for _, k := range want {
		if !have[k] {
			missing = append(missing, k)
		}
	}
	return missing
}
