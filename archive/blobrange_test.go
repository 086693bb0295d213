package archive_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/archive/blobtest"
	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// getOnly is a blob store without GetRange (embedding the interface, not the type, hides the method),
// as a wrapper or a foreign store may be.
type getOnly struct{ archive.BlobStore }

func TestGetRange_FallbackPassesTheBlobContract(t *testing.T) {
	if _, ok := archive.BlobStore(getOnly{memory.NewBlobStore()}).(archive.RangeReader); ok {
		t.Fatal("getOnly still has GetRange: the suite would not reach the fallback")
	}
	blobtest.Run(t, func(testing.TB) archive.BlobStore { return getOnly{memory.NewBlobStore()} })
}

// TestGetRange_FallbackAnswersAsTheStoreDoes compares every range of a small blob, in bounds and out,
// read through the fallback and through the store's own GetRange: the same bytes, or errors of the
// same sentinel.
func TestGetRange_FallbackAnswersAsTheStoreDoes(t *testing.T) {
	ctx := t.Context()
	store := memory.NewBlobStore()
	if err := store.Put(ctx, "seg/a", []byte("0123456789abcdef")); err != nil {
		t.Fatal(err)
	}
	fallback := getOnly{store}
	sentinels := []error{archive.ErrBlobTooShort, archive.ErrBlobNotFound, is.ErrInvalidArgument, archive.ErrInvalidBlobPath}
	for _, path := range []string{"seg/a", "seg/missing", "bad//path"} {
		for offset := int64(-1); offset <= 18; offset++ {
			for length := int64(-1); length <= 18; length++ {
				want, wantErr := store.GetRange(ctx, path, offset, length)
				got, err := archive.GetRange(ctx, fallback, path, offset, length)
				if !bytes.Equal(got, want) || (err == nil) != (wantErr == nil) {
					t.Fatalf("GetRange(%q, %d, %d): fallback %q, %v; store %q, %v", path, offset, length, got, err, want, wantErr)
				}
				for _, s := range sentinels {
					if errors.Is(err, s) != errors.Is(wantErr, s) {
						t.Fatalf("GetRange(%q, %d, %d): fallback %v, store %v: they differ on %v", path, offset, length, err, wantErr, s)
					}
				}
			}
		}
	}
}

func TestErrBlobTooShort_IsAnIntegrityFailure(t *testing.T) {
	store := memory.NewBlobStore()
	if err := store.Put(t.Context(), "a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for _, s := range []archive.BlobStore{store, getOnly{store}} {
		if _, err := archive.GetRange(t.Context(), s, "a", 0, 2); !errors.Is(err, archive.ErrBlobTooShort) || !errors.Is(err, oplog.ErrIntegrity) {
			t.Fatalf("a range past the end: %v, want ErrBlobTooShort and oplog.ErrIntegrity", err)
		}
	}
}
