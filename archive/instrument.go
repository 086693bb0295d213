package archive

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/metric"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/latency"
)

const meterName = "github.com/stratalog/strata/archive"

// BlobOperations lists the operation label's values of the blob store's metrics.
var BlobOperations = []string{"put", "get", "get_range", "delete", "list"}

// BlobErrorKinds lists the kind label's values of strata_blob_operation_errors_total: not_found (a Get
// or GetRange of a missing blob, which readers expect and handle), then indexedstorage's kinds.
var BlobErrorKinds = append([]string{"not_found"}, is.ErrorKinds...)

// InstrumentedBlobs is a BlobStore that records the latency and the errors of every operation of its
// inner store.
type InstrumentedBlobs struct {
	inner BlobStore
	now   func() time.Time
	ops   *latency.Operations
}

var (
	_ BlobStore   = (*InstrumentedBlobs)(nil)
	_ RangeReader = (*InstrumentedBlobs)(nil)
)

// InstrumentBlobs wraps store and records, labelled operation = put, get, get_range, delete or list:
//   - strata_blob_operation_duration_seconds: a histogram in seconds, with the buckets of
//     internal/latency (0.5 ms to 60 s), the same as indexed storage's.
//   - strata_blob_operation_errors_total, further labelled kind = one of BlobErrorKinds; every
//     operation × kind is present at 0 from the start.
//
// A nil meterProvider records nothing. If the provider refuses an instrument, the error goes to
// otel.Handle and the wrapper records nothing.
func InstrumentBlobs(store BlobStore, mp metric.MeterProvider) *InstrumentedBlobs {
	return &InstrumentedBlobs{inner: store, now: time.Now, ops: latency.NewOperations(mp, meterName, "strata_blob_operation",
		"Latency of blob-store operations.",
		"Blob-store operations that returned an error, by kind (not_found is a read of a missing blob).",
		nil, BlobOperations, BlobErrorKinds)}
}

// Unwrap returns the store InstrumentBlobs wrapped.
func (in *InstrumentedBlobs) Unwrap() BlobStore { return in.inner }

func (in *InstrumentedBlobs) record(ctx context.Context, op string, start time.Time, err error) {
	in.ops.Record(ctx, op, in.now().Sub(start).Seconds(), BlobErrorKind(err))
}

// BlobErrorKind names the class of a blob-store error for the kind label: not_found for
// ErrBlobNotFound, else indexedstorage.ErrorKind's; "" for nil.
func BlobErrorKind(err error) string {
	if errors.Is(err, ErrBlobNotFound) {
		return "not_found"
	}
	return is.ErrorKind(err)
}

// Put stores data at path, timed.
func (in *InstrumentedBlobs) Put(ctx context.Context, path string, data []byte) error {
	start := in.now()
	err := in.inner.Put(ctx, path, data)
	in.record(ctx, "put", start, err)
	return err
}

// Get returns the blob at path, timed.
func (in *InstrumentedBlobs) Get(ctx context.Context, path string) ([]byte, error) {
	start := in.now()
	data, err := in.inner.Get(ctx, path)
	in.record(ctx, "get", start, err)
	return data, err
}

// GetRange reads a range of the blob at path, timed as get_range: by the inner store's GetRange, or
// by its Get when it has none (GetRange), so wrapping never hides a store's ranged reads.
func (in *InstrumentedBlobs) GetRange(ctx context.Context, path string, offset, length int64) ([]byte, error) {
	start := in.now()
	data, err := GetRange(ctx, in.inner, path, offset, length)
	in.record(ctx, "get_range", start, err)
	return data, err
}

// Delete removes the blob at path, timed.
func (in *InstrumentedBlobs) Delete(ctx context.Context, path string) error {
	start := in.now()
	err := in.inner.Delete(ctx, path)
	in.record(ctx, "delete", start, err)
	return err
}

// List returns the paths under prefix, timed.
func (in *InstrumentedBlobs) List(ctx context.Context, prefix string) ([]string, error) {
	start := in.now()
	paths, err := in.inner.List(ctx, prefix)
	in.record(ctx, "list", start, err)
	return paths, err
}

// Close closes the inner store.
func (in *InstrumentedBlobs) Close() error { return in.inner.Close() }
