package archive

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/latency"
)

const meterName = "github.com/stratalog/strata/archive"

// BlobOperations lists the operation label's values of the blob store's metrics.
var BlobOperations = []string{"put", "get", "delete", "list"}

// BlobErrorKinds lists the kind label's values of strata_blob_operation_errors_total: not_found (a Get
// of a missing blob, which readers expect and handle), then indexedstorage's kinds.
var BlobErrorKinds = append([]string{"not_found"}, is.ErrorKinds...)

// InstrumentedBlobs is a BlobStore that records the latency and the errors of every operation of its
// inner store.
type InstrumentedBlobs struct {
	inner    BlobStore
	now      func() time.Time
	duration metric.Float64Histogram
	errs     metric.Int64Counter
	attrs    map[string]metric.MeasurementOption
}

var _ BlobStore = (*InstrumentedBlobs)(nil)

// InstrumentBlobs wraps store and records, labelled operation = put, get, delete or list:
//   - strata_blob_operation_duration_seconds: a histogram in seconds, with the buckets of
//     internal/latency (0.5 ms to 60 s), the same as indexed storage's.
//   - strata_blob_operation_errors_total, further labelled kind = one of BlobErrorKinds; every
//     operation × kind is present at 0 from the start.
//
// A nil meterProvider records nothing. If the provider refuses an instrument, the error goes to
// otel.Handle and the wrapper records nothing.
func InstrumentBlobs(store BlobStore, mp metric.MeterProvider) *InstrumentedBlobs {
	in := &InstrumentedBlobs{inner: store, now: time.Now, attrs: make(map[string]metric.MeasurementOption, len(BlobOperations))}
	if mp == nil {
		return in
	}
	meter := mp.Meter(meterName)
	duration, err1 := meter.Float64Histogram("strata_blob_operation_duration",
		latency.Histogram("Latency of blob-store operations.")...)
	errs, err2 := meter.Int64Counter("strata_blob_operation_errors",
		metric.WithDescription("Blob-store operations that returned an error, by kind (not_found is a Get of a missing blob)."))
	if err := errors.Join(err1, err2); err != nil {
		otel.Handle(err)
		return in
	}
	in.duration, in.errs = duration, errs
	ctx := context.Background()
	for _, op := range BlobOperations {
		in.attrs[op] = metric.WithAttributeSet(attribute.NewSet(attribute.String("operation", op)))
		for _, kind := range BlobErrorKinds {
			errs.Add(ctx, 0, metric.WithAttributes(attribute.String("operation", op), attribute.String("kind", kind)))
		}
	}
	return in
}

// Unwrap returns the store InstrumentBlobs wrapped.
func (in *InstrumentedBlobs) Unwrap() BlobStore { return in.inner }

func (in *InstrumentedBlobs) record(ctx context.Context, op string, start time.Time, err error) {
	if in.duration == nil {
		return
	}
	in.duration.Record(ctx, in.now().Sub(start).Seconds(), in.attrs[op])
	if err != nil {
		in.errs.Add(ctx, 1, metric.WithAttributes(attribute.String("operation", op), attribute.String("kind", BlobErrorKind(err))))
	}
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
