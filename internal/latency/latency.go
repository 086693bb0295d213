// Package latency holds the bucket bounds every duration histogram of strata shares, so that a
// histogram's buckets are set where it is created (embedders get them too, not only the sidecar) and
// are the same for storage, blob and sweep latencies.
package latency

import "go.opentelemetry.io/otel/metric"

// bounds are in seconds: from half a millisecond (a local SQLite call) to a minute (a cut tick).
// OpenTelemetry's default bounds (0, 5, 10, 25, … 10000) are meant for milliseconds; on a seconds unit
// they put every call in le="5".
var bounds = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Buckets returns the shared bucket bounds, in seconds, as a fresh slice.
func Buckets() []float64 { return append([]float64(nil), bounds...) }

// Histogram returns the options that give a Float64Histogram its description, the shared buckets and
// the unit "s" (so the Prometheus exporter names it *_seconds).
func Histogram(description string) []metric.Float64HistogramOption {
	return []metric.Float64HistogramOption{
		metric.WithUnit("s"),
		metric.WithDescription(description),
		metric.WithExplicitBucketBoundaries(bounds...),
	}
}
