// Package blobtest is the conformance suite of archive.BlobStore. A blob store's _test.go hands Run a
// constructor of fresh, empty stores.
package blobtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stratalog/strata/archive"
	is "github.com/stratalog/strata/indexedstorage"
)

// Run checks the BlobStore contract on stores made by newStore, and RangeReader's: through
// archive.GetRange always (the store's own or the fallback on Get), and through the store's GetRange
// too when it has one, so that its own argument checks are held to the contract.
func Run(t *testing.T, newStore func(tb testing.TB) archive.BlobStore) {
	t.Run("GetRange", func(t *testing.T) { runGetRange(t, newStore) })
	t.Run("PutGetRoundTrip", func(t *testing.T) {
		s, ctx := newStore(t), t.Context()
		data := bytes.Repeat([]byte{0, 1, 0xff}, 10_000)
		if err := s.Put(ctx, "a/b/c", data); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, "a/b/c")
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get: %d bytes, %v", len(got), err)
		}
		if err := s.Put(ctx, "a/b/c", []byte("replaced")); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Get(ctx, "a/b/c"); string(got) != "replaced" {
			t.Fatalf("after overwrite: %q", got)
		}
		if err := s.Put(ctx, "empty", nil); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Get(ctx, "empty"); err != nil || len(got) != 0 {
			t.Fatalf("empty blob: %q %v", got, err)
		}
	})
	t.Run("MissingBlobIsNotFound", func(t *testing.T) {
		s, ctx := newStore(t), t.Context()
		if _, err := s.Get(ctx, "no/such"); !errors.Is(err, archive.ErrBlobNotFound) {
			t.Fatalf("Get of a missing blob: %v", err)
		}
	})
	t.Run("DeleteIsIdempotent", func(t *testing.T) {
		s, ctx := newStore(t), t.Context()
		if err := s.Delete(ctx, "no/such"); err != nil {
			t.Fatalf("Delete of a missing blob: %v", err)
		}
		if err := s.Put(ctx, "x/y", []byte("1")); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := s.Delete(ctx, "x/y"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Get(ctx, "x/y"); !errors.Is(err, archive.ErrBlobNotFound) {
			t.Fatalf("Get after Delete: %v", err)
		}
		if paths, err := s.List(ctx, ""); err != nil || len(paths) != 0 {
			t.Fatalf("List after Delete: %q %v", paths, err)
		}
	})
	t.Run("ListIsLiteralAndSorted", func(t *testing.T) {
		s, ctx := newStore(t), t.Context()
		paths := []string{"e/0/c/n/002", "e/0/c/n/001", "e/0/c/n2/001", "e/0/c%2F/n/1", "e/0/cc/n/1", "e/1/c/n/1", "e/0/c/n/sub/x"}
		for _, p := range paths {
			if err := s.Put(ctx, p, []byte(p)); err != nil {
				t.Fatal(err)
			}
		}
		for prefix, want := range map[string][]string{
			"e/0/c/n/": {"e/0/c/n/001", "e/0/c/n/002", "e/0/c/n/sub/x"},
			"e/0/c/n":  {"e/0/c/n/001", "e/0/c/n/002", "e/0/c/n/sub/x", "e/0/c/n2/001"},
			"e/0/c":    {"e/0/c%2F/n/1", "e/0/c/n/001", "e/0/c/n/002", "e/0/c/n/sub/x", "e/0/c/n2/001", "e/0/cc/n/1"},
			"e/0/c%":   {"e/0/c%2F/n/1"},
			"e/2/":     nil,
			"":         slices.Sorted(slices.Values(paths)),
		} {
			got, err := s.List(ctx, prefix)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("List(%q) = %q, want %q", prefix, got, want)
			}
		}
	})
	t.Run("UnsafePathsAreRejected", func(t *testing.T) {
		s, ctx := newStore(t), t.Context()
		for _, p := range []string{"", "..", "a/../b", "./a", "/abs", "a//b", "a/.hidden", `a\b`, "a/b\x00", "a b", "ü", "a/" + strings.Repeat("x", archive.MaxSegmentLen+1) + "/b"} {
			if err := s.Put(ctx, p, []byte("x")); !errors.Is(err, archive.ErrInvalidBlobPath) {
				t.Fatalf("Put(%q): %v, want ErrInvalidBlobPath", p, err)
			}
			if _, err := s.Get(ctx, p); !errors.Is(err, archive.ErrInvalidBlobPath) {
				t.Fatalf("Get(%q): %v, want ErrInvalidBlobPath", p, err)
			}
		}
		if paths, _ := s.List(ctx, ""); len(paths) != 0 {
			t.Fatalf("rejected puts left %q", paths)
		}
	})
	t.Run("SegmentsUpToTheLimitAreStored", func(t *testing.T) {
		s, ctx := newStore(t), t.Context()
		p := "a/" + strings.Repeat("x", archive.MaxSegmentLen) + "/" + strings.Repeat("y", archive.MaxSegmentLen)
		if err := s.Put(ctx, p, []byte("long")); err != nil {
			t.Fatalf("Put of %d-byte segments: %v", archive.MaxSegmentLen, err)
		}
		if got, err := s.Get(ctx, p); err != nil || string(got) != "long" {
			t.Fatalf("Get: %q %v", got, err)
		}
	})
	t.Run("ReaderNeverSeesAPartialPut", func(t *testing.T) {
		s, ctx := newStore(t), t.Context()
		versions := [][]byte{bytes.Repeat([]byte("a"), 1<<16), bytes.Repeat([]byte("b"), 1<<17)}
		if err := s.Put(ctx, "hot/blob", versions[0]); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		wg.Go(func() {
			for i := range 50 {
				if err := s.Put(ctx, "hot/blob", versions[i%2]); err != nil {
					errs <- err
					return
				}
			}
		})
		wg.Go(func() {
			// Both versions hold the range; its bytes must all come from one.
			for range 200 {
				got, err := archive.GetRange(ctx, s, "hot/blob", 1000, 4096)
				if err != nil {
					errs <- fmt.Errorf("GetRange: %w", err)
					return
				}
				if !bytes.Equal(got, versions[0][1000:1000+4096]) && !bytes.Equal(got, versions[1][1000:1000+4096]) {
					errs <- fmt.Errorf("GetRange read %d bytes that are neither version's", len(got))
					return
				}
			}
		})
		wg.Go(func() {
			for range 200 {
				got, err := s.Get(ctx, "hot/blob")
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, versions[0]) && !bytes.Equal(got, versions[1]) {
					errs <- fmt.Errorf("read %d bytes that are neither version", len(got))
					return
				}
			}
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	})
}

// rangeGetter is one way to read a range: archive.GetRange, or the store's own GetRange.
type rangeGetter struct {
	name string
	get  func(ctx context.Context, s archive.BlobStore, path string, offset, length int64) ([]byte, error)
}

func rangeGetters(s archive.BlobStore) []rangeGetter {
	gs := []rangeGetter{{"archive.GetRange", archive.GetRange}}
	if _, ok := s.(archive.RangeReader); ok {
		gs = append(gs, rangeGetter{"store.GetRange", func(ctx context.Context, s archive.BlobStore, path string, offset, length int64) ([]byte, error) {
			return s.(archive.RangeReader).GetRange(ctx, path, offset, length)
		}})
	}
	return gs
}

func runGetRange(t *testing.T, newStore func(tb testing.TB) archive.BlobStore) {
	// forEach runs check once a way of reading a range, each on a fresh store.
	forEach := func(t *testing.T, check func(t *testing.T, s archive.BlobStore, get rangeGetter)) {
		for _, g := range rangeGetters(newStore(t)) {
			t.Run(g.name, func(t *testing.T) { check(t, newStore(t), g) })
		}
	}
	data := make([]byte, 1000)
	for i := range data {
		data[i] = byte(i*7 + i/256)
	}
	n := int64(len(data))
	put := func(t *testing.T, s archive.BlobStore, path string, b []byte) {
		t.Helper()
		if err := s.Put(t.Context(), path, b); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("RangesReadTheirBytes", func(t *testing.T) {
		forEach(t, func(t *testing.T, s archive.BlobStore, g rangeGetter) {
			put(t, s, "seg/a", data)
			for _, r := range [][2]int64{{0, n}, {0, 1}, {1, 10}, {100, 500}, {n - 1, 1}, {n - 300, 300}} {
				got, err := g.get(t.Context(), s, "seg/a", r[0], r[1])
				if err != nil || !bytes.Equal(got, data[r[0]:r[0]+r[1]]) {
					t.Fatalf("GetRange(%d, %d): %d bytes, %v; want data[%d:%d]", r[0], r[1], len(got), err, r[0], r[0]+r[1])
				}
			}
		})
	})
	t.Run("LengthZeroIsEmptyWhenTheBlobExists", func(t *testing.T) {
		forEach(t, func(t *testing.T, s archive.BlobStore, g rangeGetter) {
			put(t, s, "seg/a", data)
			put(t, s, "seg/empty", nil)
			for _, c := range []struct {
				path   string
				offset int64
			}{{"seg/a", 0}, {"seg/a", 500}, {"seg/a", n}, {"seg/empty", 0}} {
				if got, err := g.get(t.Context(), s, c.path, c.offset, 0); err != nil || len(got) != 0 {
					t.Fatalf("GetRange(%q, %d, 0): %q, %v; want empty, nil", c.path, c.offset, got, err)
				}
			}
			if _, err := g.get(t.Context(), s, "seg/missing", 0, 0); !errors.Is(err, archive.ErrBlobNotFound) {
				t.Fatalf("GetRange(missing, 0, 0): %v, want ErrBlobNotFound", err)
			}
		})
	})
	t.Run("PastTheEndIsTooShort", func(t *testing.T) {
		forEach(t, func(t *testing.T, s archive.BlobStore, g rangeGetter) {
			put(t, s, "seg/a", data)
			put(t, s, "seg/empty", nil)
			// The last one asks for more than memory holds: the store must fail, not allocate it.
			for _, r := range [][2]int64{{n - 1, 2}, {0, n + 1}, {n, 1}, {n + 1, 0}, {n + 100, 10}, {1 << 40, 1}, {0, 1 << 62}} {
				got, err := g.get(t.Context(), s, "seg/a", r[0], r[1])
				if !errors.Is(err, archive.ErrBlobTooShort) {
					t.Fatalf("GetRange(%d, %d) of a %d-byte blob: %d bytes, %v; want ErrBlobTooShort", r[0], r[1], n, len(got), err)
				}
			}
			if _, err := g.get(t.Context(), s, "seg/empty", 0, 1); !errors.Is(err, archive.ErrBlobTooShort) {
				t.Fatalf("GetRange(0, 1) of an empty blob: %v; want ErrBlobTooShort", err)
			}
		})
	})
	t.Run("MissingBlobIsNotFound", func(t *testing.T) {
		forEach(t, func(t *testing.T, s archive.BlobStore, g rangeGetter) {
			put(t, s, "seg/a", data)
			put(t, s, "dir/x", data)
			// "dir" is a prefix of a blob, not one: a directory on a file system.
			for _, p := range []string{"seg/b", "no/such/blob", "dir"} {
				for _, r := range [][2]int64{{0, 1}, {0, n}, {n + 1, 5}} {
					if _, err := g.get(t.Context(), s, p, r[0], r[1]); !errors.Is(err, archive.ErrBlobNotFound) {
						t.Fatalf("GetRange(%q, %d, %d): %v, want ErrBlobNotFound", p, r[0], r[1], err)
					}
				}
			}
			if err := s.Delete(t.Context(), "seg/a"); err != nil {
				t.Fatal(err)
			}
			if _, err := g.get(t.Context(), s, "seg/a", 0, 1); !errors.Is(err, archive.ErrBlobNotFound) {
				t.Fatalf("GetRange after Delete: %v, want ErrBlobNotFound", err)
			}
		})
	})
	t.Run("BadArgumentsAreRejected", func(t *testing.T) {
		forEach(t, func(t *testing.T, s archive.BlobStore, g rangeGetter) {
			put(t, s, "seg/a", data)
			for _, r := range [][2]int64{{-1, 1}, {0, -1}, {-5, -5}, {math.MinInt64, 1}, {math.MaxInt64, 1}, {1, math.MaxInt64}} {
				if _, err := g.get(t.Context(), s, "seg/a", r[0], r[1]); !errors.Is(err, is.ErrInvalidArgument) {
					t.Fatalf("GetRange(%d, %d): %v, want ErrInvalidArgument", r[0], r[1], err)
				}
			}
			for _, p := range []string{"", "..", "a/../b", "seg/a/", "a b"} {
				if _, err := g.get(t.Context(), s, p, 0, 1); !errors.Is(err, archive.ErrInvalidBlobPath) {
					t.Fatalf("GetRange(%q): %v, want ErrInvalidBlobPath", p, err)
				}
			}
		})
	})
	t.Run("ABlobReplacedByAShorterOneIsTooShort", func(t *testing.T) {
		forEach(t, func(t *testing.T, s archive.BlobStore, g rangeGetter) {
			put(t, s, "seg/a", data)
			if got, err := g.get(t.Context(), s, "seg/a", 500, 100); err != nil || !bytes.Equal(got, data[500:600]) {
				t.Fatalf("GetRange(500, 100): %d bytes, %v", len(got), err)
			}
			short := bytes.Repeat([]byte("s"), 520)
			put(t, s, "seg/a", short)
			if got, err := g.get(t.Context(), s, "seg/a", 500, 100); !errors.Is(err, archive.ErrBlobTooShort) {
				t.Fatalf("GetRange(500, 100) of the 520-byte replacement: %d bytes, %v; want ErrBlobTooShort", len(got), err)
			}
			if got, err := g.get(t.Context(), s, "seg/a", 500, 20); err != nil || !bytes.Equal(got, short[500:]) {
				t.Fatalf("GetRange(500, 20) of the replacement: %q, %v", got, err)
			}
		})
	})
	t.Run("TheResultIsTheCallers", func(t *testing.T) {
		forEach(t, func(t *testing.T, s archive.BlobStore, g rangeGetter) {
			put(t, s, "seg/a", data)
			got, err := g.get(t.Context(), s, "seg/a", 10, 10)
			if err != nil {
				t.Fatal(err)
			}
			clear(got)
			if again, err := g.get(t.Context(), s, "seg/a", 0, n); err != nil || !bytes.Equal(again, data) {
				t.Fatalf("writing to a returned range changed the blob: %v", err)
			}
		})
	})
}
