package latency

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Operations records the calls of a store's operations: NAME_duration_seconds, a histogram on the
// shared buckets labelled with the store's attributes and operation; NAME_errors_total, further
// labelled kind, with every operation × kind present at 0 from the start (so a rate() over the errors
// exists before the first one, and an alert on it is not blind until then). Indexed storage and the
// blob store share it, so their series have one shape.
type Operations struct {
	duration metric.Float64Histogram
	errs     metric.Int64Counter
	base     []attribute.KeyValue
	// attrs is built once per operation so that recording a success allocates nothing.
	attrs map[string]metric.MeasurementOption
}

// NewOperations creates the two instruments on mp's meter scope. A nil mp, or a provider that refuses
// an instrument (the error goes to otel.Handle), gives an Operations that records nothing.
func NewOperations(mp metric.MeterProvider, scope, name, durationDoc, errorsDoc string, base []attribute.KeyValue, ops, kinds []string) *Operations {
	o := &Operations{base: base, attrs: make(map[string]metric.MeasurementOption, len(ops))}
	if mp == nil {
		return o
	}
	meter := mp.Meter(scope)
	duration, err1 := meter.Float64Histogram(name+"_duration", Histogram(durationDoc)...)
	errs, err2 := meter.Int64Counter(name+"_errors", metric.WithDescription(errorsDoc))
	if err := errors.Join(err1, err2); err != nil {
		otel.Handle(err)
		return o
	}
	o.duration, o.errs = duration, errs
	ctx := context.Background()
	for _, op := range ops {
		o.attrs[op] = metric.WithAttributeSet(attribute.NewSet(o.labels(op)...))
		for _, kind := range kinds {
			errs.Add(ctx, 0, metric.WithAttributes(o.labels(op, attribute.String("kind", kind))...))
		}
	}
	return o
}

// Enabled reports whether o records anything.
func (o *Operations) Enabled() bool { return o.duration != nil }

// Record records one call of op that took seconds and failed with an error of kind ("" for none).
func (o *Operations) Record(ctx context.Context, op string, seconds float64, kind string) {
	if o.duration == nil {
		return
	}
	o.duration.Record(ctx, seconds, o.attrs[op])
	if kind != "" {
		o.errs.Add(ctx, 1, metric.WithAttributes(o.labels(op, attribute.String("kind", kind))...))
	}
}

// labels are the store's attributes, the operation, then extra.
func (o *Operations) labels(op string, extra ...attribute.KeyValue) []attribute.KeyValue {
	return append(append(append(make([]attribute.KeyValue, 0, len(o.base)+1+len(extra)), o.base...),
		attribute.String("operation", op)), extra...)
}
