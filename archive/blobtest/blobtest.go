// Package blobtest is the conformance suite of archive.BlobStore. A blob store's _test.go hands Run a
// constructor of fresh, empty stores.
package blobtest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stratalog/strata/archive"
)

// Run checks the BlobStore contract on stores made by newStore.
func Run(t *testing.T, newStore func(tb testing.TB) archive.BlobStore) {
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
		errs := make(chan error, 2)
		wg.Go(func() {
			for i := range 50 {
				if err := s.Put(ctx, "hot/blob", versions[i%2]); err != nil {
					errs <- err
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
