package indexedstorage_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/latency"
)

func TestInstrument_RecordsLatencyAndErrorsPerOperation(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	st := is.Instrument(memory.New(), sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), "oplog")
	ctx := t.Context()
	for id := uint64(1); id <= 3; id++ {
		if err := st.Append(ctx, "ns", "k", id, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Append(ctx, "ns", "k", 2, nil); !errors.Is(err, is.ErrConflict) {
		t.Fatalf("conflicting append: %v", err)
	}
	if _, err := st.Read(ctx, "ns", "k", 1, 3); err != nil {
		t.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	var conflicts int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Histogram[float64]:
				if m.Name != "strata_storage_operation_duration" || m.Unit != "s" {
					t.Fatalf("unexpected histogram %s (%s)", m.Name, m.Unit)
				}
				for _, p := range data.DataPoints {
					storage, _ := p.Attributes.Value(attribute.Key("storage"))
					op, _ := p.Attributes.Value(attribute.Key("operation"))
					if storage.AsString() != "oplog" {
						t.Fatalf("storage label %q", storage.AsString())
					}
					counts[op.AsString()] += p.Count
				}
			case metricdata.Sum[int64]:
				for _, p := range data.DataPoints {
					kind, _ := p.Attributes.Value(attribute.Key("kind"))
					op, _ := p.Attributes.Value(attribute.Key("operation"))
					if m.Name == "strata_storage_operation_errors" && kind.AsString() == "conflict" && op.AsString() == "append" {
						conflicts += p.Value
					}
				}
			}
		}
	}
	if counts["append"] != 4 || counts["read"] != 1 || conflicts != 1 {
		t.Fatalf("recorded %v and %d conflicts; want 4 appends, 1 read, 1 conflict", counts, conflicts)
	}
}

func TestInstrument_WithoutProviderStillWorks(t *testing.T) {
	st := is.Instrument(memory.New(), nil, "x")
	if err := st.Append(t.Context(), "ns", "k", 1, nil); err != nil {
		t.Fatal(err)
	}
	if n, err := st.Length(t.Context(), "ns", "k"); n != 1 || err != nil {
		t.Fatalf("Length through the wrapper: %d %v", n, err)
	}
}

// clockStorage advances the clock by step during every call, so each call lasts exactly step.
func clockStorage(st is.Storage, clock *time.Time, step time.Duration) is.Storage {
	return is.Intercept(st, func(ctx context.Context, _ is.Operation, do func(context.Context) error) error {
		*clock = clock.Add(step)
		return do(ctx)
	})
}

func TestInstrument_TwoMillisecondCallLandsBelowTenMilliseconds(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	clock := time.Unix(1_000_000, 0)
	st := is.Instrument(clockStorage(memory.New(), &clock, 2*time.Millisecond),
		sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), "indexed")
	is.SetClock(st, func() time.Time { return clock })
	if err := st.Append(t.Context(), "ns", "k", 1, nil); err != nil {
		t.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok || m.Name != "strata_storage_operation_duration" {
				continue
			}
			for _, p := range h.DataPoints {
				if op, _ := p.Attributes.Value("operation"); op.AsString() != "append" {
					continue
				}
				found = true
				if p.Count != 1 || p.Sum != 0.002 {
					t.Fatalf("count %d sum %v, want one call of 0.002 s", p.Count, p.Sum)
				}
				// BucketCounts[i] counts values in (Bounds[i-1], Bounds[i]]; the last, above every bound.
				var below uint64
				for i, b := range p.Bounds {
					if b < 0.01 {
						below += p.BucketCounts[i]
					}
				}
				if below != 1 {
					t.Fatalf("a 2 ms call is in no bucket below 0.01 s: bounds %v counts %v", p.Bounds, p.BucketCounts)
				}
				if len(p.Bounds) == 0 || p.Bounds[0] > 0.001 || p.Bounds[len(p.Bounds)-1] < 30 {
					t.Fatalf("bounds %v do not span 1 ms to 30 s", p.Bounds)
				}
			}
		}
	}
	if !found {
		t.Fatal("no append latency recorded")
	}
}

func TestInstrument_ErrorSeriesAtZeroBeforeAnyCall(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	is.Instrument(memory.New(), sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), "indexed")

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "strata_storage_operation_errors" {
				for _, p := range s.DataPoints {
					op, _ := p.Attributes.Value("operation")
					kind, _ := p.Attributes.Value("kind")
					got[op.AsString()+"/"+kind.AsString()] = p.Value
				}
			}
		}
	}
	for _, op := range is.Operations {
		for _, kind := range is.ErrorKinds {
			if v, ok := got[string(op)+"/"+kind]; !ok || v != 0 {
				t.Errorf("errors{operation=%s,kind=%s} = %d (present %v), want 0 before any call", op, kind, v, ok)
			}
		}
	}
}

func TestErrorKinds_ListsEveryKindErrorKindReturns(t *testing.T) {
	for _, err := range []error{is.ErrTransient, is.ErrConflict, is.ErrInvalidArgument, is.ErrClosed, context.Canceled, errors.New("x")} {
		if k := is.ErrorKind(err); !slices.Contains(is.ErrorKinds, k) {
			t.Errorf("ErrorKind(%v) = %q, not in ErrorKinds %v", err, k, is.ErrorKinds)
		}
	}
}

func TestWithLimiterMetrics_WaitsInSecondBuckets(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	st := is.Limit(memory.New(), 1, is.WithLimiterMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), "indexed"))
	if err := st.Append(t.Context(), "ns", "k", 1, nil); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "strata_storage_limiter_wait_duration" && m.Unit == "s" {
				if len(h.DataPoints) != 1 || !slices.Equal(h.DataPoints[0].Bounds, latency.Buckets()) {
					t.Fatalf("limiter wait points %+v, want one on the shared second buckets", h.DataPoints)
				}
				return
			}
		}
	}
	t.Fatal("no strata_storage_limiter_wait_duration histogram in seconds")
}
