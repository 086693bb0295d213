package indexedstorage

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/stratalog/strata/internal/latency"
)

const meterName = "github.com/stratalog/strata/indexedstorage"

// Instrumented is a Storage that records the latency and the errors of every operation of its inner
// Storage.
type Instrumented struct {
	around
	now func() time.Time
	ops *latency.Operations
}

// Instrument wraps st and records, labelled storage=name and operation=<Operation>:
//   - strata_storage_operation_duration_seconds: a histogram in seconds, with the buckets of
//     internal/latency (0.5 ms to 60 s).
//   - strata_storage_operation_errors_total, further labelled kind = one of ErrorKinds; every
//     operation × kind is present at 0 from the start.
//
// A nil meterProvider records nothing. Instrument creation cannot fail for these constant names; if a
// provider refuses one anyway, the error goes to otel.Handle and the wrapper records nothing.
func Instrument(st Storage, mp metric.MeterProvider, name string) *Instrumented {
	ops := make([]string, len(Operations))
	for i, op := range Operations {
		ops[i] = string(op)
	}
	in := &Instrumented{now: time.Now, ops: latency.NewOperations(mp, meterName, "strata_storage_operation",
		"Latency of indexed-storage operations.", "Indexed-storage operations that returned an error, by kind.",
		[]attribute.KeyValue{attribute.String("storage", name)}, ops, ErrorKinds)}
	in.around = around{inner: st, call: in.call}
	return in
}

func (in *Instrumented) call(ctx context.Context, op Operation, do func(context.Context) error) error {
	if !in.ops.Enabled() {
		return do(ctx)
	}
	start := in.now()
	err := do(ctx)
	in.ops.Record(ctx, string(op), in.now().Sub(start).Seconds(), ErrorKind(err))
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
