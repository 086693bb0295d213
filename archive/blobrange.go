package archive

import (
	"context"
	"fmt"
	"math"
	"slices"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// RangeReader is the optional interface of a BlobStore that reads part of a blob without reading the
// rest: a pread on a file, a ranged GET on an object store. A packed segment's chunk is read this way
// (DESIGN §13). Callers go through GetRange, which falls back to Get on a store without it, so a
// wrapper or a foreign store still works; a wrapper should implement it by calling GetRange on the
// store it wraps, so that it does not hide the inner store's.
type RangeReader interface {
	// GetRange returns the length bytes of the blob at path that start at offset. It must return:
	//   - an error matching ErrBlobNotFound for a missing blob, whatever the range;
	//   - an error matching ErrBlobTooShort when offset+length is past the blob's end, never the
	//     bytes that are there: a reader must know its segment is shorter than its index says;
	//   - an error matching indexedstorage.ErrInvalidArgument for a negative offset or length, or
	//     one whose end overflows int64 (ValidateBlobRange), and ErrInvalidBlobPath for a bad path;
	//   - for length 0, an empty slice and no error when the blob exists and offset ≤ its size.
	// Like Get, it sees one blob whole: the old one or the new one across a concurrent Put, never
	// bytes of both.
	GetRange(ctx context.Context, path string, offset, length int64) ([]byte, error)
}

// ErrBlobTooShort is returned by GetRange for a range that ends past its blob's end: the blob was
// truncated or replaced, or the index that gave the range is wrong. It is an oplog.ErrIntegrity: no
// retry makes the blob longer.
var ErrBlobTooShort = oplog.NewIntegrityError("blob ends before the range read")

// ValidateBlobRange checks a range's arguments: offset and length at least 0, and offset+length
// within int64. Its error matches indexedstorage.ErrInvalidArgument.
func ValidateBlobRange(offset, length int64) error {
	if offset < 0 || length < 0 {
		return fmt.Errorf("%w: blob range offset %d, length %d: neither may be negative", is.ErrInvalidArgument, offset, length)
	}
	if offset > math.MaxInt64-length {
		return fmt.Errorf("%w: blob range offset %d, length %d: its end overflows int64", is.ErrInvalidArgument, offset, length)
	}
	return nil
}

// CheckBlobSize returns nil when a blob of size bytes holds the range [offset, offset+length) (whose
// arguments passed ValidateBlobRange), else an error matching ErrBlobTooShort. Stores use it so that
// the message is the same everywhere.
func CheckBlobSize(offset, length, size int64) error {
	if offset+length <= size {
		return nil
	}
	return fmt.Errorf("%w: range [%d, %d) of a %d-byte blob", ErrBlobTooShort, offset, offset+length, size)
}

// GetRange reads length bytes at offset of the blob at path from store, by its GetRange when it is a
// RangeReader, else by Get and a copy of the range (so the result never pins the whole blob). Either
// way the result and its errors are RangeReader.GetRange's. The path and then the range are checked
// before the store is called, in the stores' order.
func GetRange(ctx context.Context, store BlobStore, path string, offset, length int64) ([]byte, error) {
	if err := ValidateBlobPath(path, false); err != nil {
		return nil, fmt.Errorf("get range (path %q): %w", path, err)
	}
	if err := ValidateBlobRange(offset, length); err != nil {
		return nil, fmt.Errorf("get range (path %q): %w", path, err)
	}
	if rr, ok := store.(RangeReader); ok {
		return rr.GetRange(ctx, path, offset, length)
	}
	data, err := store.Get(ctx, path)
	if err != nil {
		return nil, err
	}
	if err := CheckBlobSize(offset, length, int64(len(data))); err != nil {
		return nil, fmt.Errorf("get range (path %q): %w", path, err)
	}
	return slices.Clone(data[offset : offset+length : offset+length]), nil
}
