package indexedstorage_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
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
				if m.Name != "strata.storage.operation.duration" || m.Unit != "s" {
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
					if m.Name == "strata.storage.operation.errors" && kind.AsString() == "conflict" && op.AsString() == "append" {
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
