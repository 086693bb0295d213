package indexedstorage

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/stratalog/strata/internal/latency"
)

const meterName = "github.com/stratalog/strata/indexedstorage"

// Instrumented is a Storage that records the latency and the errors of every operation of its inner
// Storage.
type Instrumented struct {
	around
	duration metric.Float64Histogram
	errs     metric.Int64Counter
	name     string
	now      func() time.Time
	// attrs is built once per operation so that recording allocates nothing per call.
	attrs map[Operation]metric.MeasurementOption
}

// Instrument wraps st and records, labelled storage=name and operation=<Operation>:
//   - strata_storage_operation_duration_seconds: a histogram in seconds, with the buckets of
//     internal/latency (0.5 ms to 60 s).
//   - strata_storage_operation_errors_total, further labelled kind = one of ErrorKinds; every
//     operation × kind is present at 0 from the start.
//
// A nil meterProvider records nothing. Instrument creation cannot fail for these constant names; if a
// provider refuses one anyway, the error goes to otel.Handle and that instrument records nothing.
func Instrument(st Storage, mp metric.MeterProvider, name string) *Instrumented {
	in := &Instrumented{name: name, now: time.Now, attrs: make(map[Operation]metric.MeasurementOption, len(Operations))}
	in.around = around{inner: st, call: in.call}
	if mp == nil {
		return in
	}
	meter := mp.Meter(meterName)
	duration, err1 := meter.Float64Histogram("strata_storage_operation_duration",
		latency.Histogram("Latency of indexed-storage operations.")...)
	errs, err2 := meter.Int64Counter("strata_storage_operation_errors",
		metric.WithDescription("Indexed-storage operations that returned an error, by kind."))
	if err := errors.Join(err1, err2); err != nil {
		otel.Handle(err)
		return in
	}
	in.duration, in.errs = duration, errs
	ctx := context.Background()
	for _, op := range Operations {
		in.attrs[op] = metric.WithAttributeSet(attribute.NewSet(
			attribute.String("storage", name), attribute.String("operation", string(op))))
		// Every operation × kind at 0 from the start, so a rate() over the errors exists before the
		// first one and an alert on it is not blind until then.
		for _, kind := range ErrorKinds {
			errs.Add(ctx, 0, metric.WithAttributes(attribute.String("storage", name),
				attribute.String("operation", string(op)), attribute.String("kind", kind)))
		}
	}
	return in
}

func (in *Instrumented) call(ctx context.Context, op Operation, do func(context.Context) error) error {
	if in.duration == nil {
		return do(ctx)
	}
	start := in.now()
	err := do(ctx)
	in.duration.Record(ctx, in.now().Sub(start).Seconds(), in.attrs[op])
	if err != nil {
		in.errs.Add(ctx, 1, metric.WithAttributes(
			attribute.String("storage", in.name), attribute.String("operation", string(op)),
			attribute.String("kind", ErrorKind(err))))
	}
	return err
}

// ErrorKinds lists every value ErrorKind returns for an error: the kind label's values.
var ErrorKinds = []string{"transient", "conflict", "invalid_argument", "closed", "canceled", "other"}

// ErrorKind names the class of err for a metric label: transient, conflict, invalid_argument, closed,
// canceled or other; "" for nil.
func ErrorKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrTransient):
		return "transient"
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, ErrInvalidArgument):
		return "invalid_argument"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "other"
}
