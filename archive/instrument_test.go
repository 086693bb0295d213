package archive_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/archive/blobtest"
	"github.com/stratalog/strata/backends/memory"
)

func TestInstrumentBlobs_PassesTheBlobContract(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	blobtest.Run(t, func(testing.TB) archive.BlobStore { return archive.InstrumentBlobs(memory.NewBlobStore(), mp) })
}

// slowBlobs lasts step on the clock for every call.
type slowBlobs struct {
	archive.BlobStore
	clock *time.Time
	step  time.Duration
}

func (s slowBlobs) Put(ctx context.Context, path string, data []byte) error {
	*s.clock = s.clock.Add(s.step)
	return s.BlobStore.Put(ctx, path, data)
}

func collect(t *testing.T, reader *sdkmetric.ManualReader) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		out = append(out, sm.Metrics...)
	}
	return out
}

func TestInstrumentBlobs_TwoMillisecondPutLandsBelowTenMilliseconds(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	clock := time.Unix(1_000_000, 0)
	in := archive.InstrumentBlobs(slowBlobs{memory.NewBlobStore(), &clock, 2 * time.Millisecond},
		sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	archive.SetBlobClock(in, func() time.Time { return clock })
	if err := in.Put(t.Context(), "a/b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, m := range collect(t, reader) {
		h, ok := m.Data.(metricdata.Histogram[float64])
		if !ok || m.Name != "strata_blob_operation_duration" || m.Unit != "s" {
			continue
		}
		for _, p := range h.DataPoints {
			if op, _ := p.Attributes.Value("operation"); op.AsString() != "put" {
				continue
			}
			found = true
			var below uint64
			for i, b := range p.Bounds {
				if b < 0.01 {
					below += p.BucketCounts[i]
				}
			}
			if p.Count != 1 || below != 1 {
				t.Fatalf("count %d, %d below 0.01 s: bounds %v counts %v", p.Count, below, p.Bounds, p.BucketCounts)
			}
		}
	}
	if !found {
		t.Fatal("no put latency recorded")
	}
}

func TestInstrumentBlobs_ErrorsByOperationAndKindFromZero(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	in := archive.InstrumentBlobs(memory.NewBlobStore(), sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	errs := func() map[string]int64 {
		got := map[string]int64{}
		for _, m := range collect(t, reader) {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "strata_blob_operation_errors" {
				for _, p := range s.DataPoints {
					op, _ := p.Attributes.Value("operation")
					kind, _ := p.Attributes.Value("kind")
					got[op.AsString()+"/"+kind.AsString()] = p.Value
				}
			}
		}
		return got
	}
	got := errs()
	for _, op := range archive.BlobOperations {
		for _, kind := range archive.BlobErrorKinds {
			if v, ok := got[op+"/"+kind]; !ok || v != 0 {
				t.Errorf("errors{operation=%s,kind=%s} = %d (present %v), want 0 before any call", op, kind, v, ok)
			}
		}
	}
	if _, err := in.Get(t.Context(), "missing"); !errors.Is(err, archive.ErrBlobNotFound) {
		t.Fatalf("Get of a missing blob: %v", err)
	}
	if got := errs(); got["get/not_found"] != 1 || got["get/other"] != 0 {
		t.Fatalf("a missing Get counted as %v", got)
	}
	if _, err := archive.GetRange(t.Context(), in, "missing", 0, 1); !errors.Is(err, archive.ErrBlobNotFound) {
		t.Fatalf("GetRange of a missing blob: %v", err)
	}
	if got := errs(); got["get_range/not_found"] != 1 || got["get/not_found"] != 1 {
		t.Fatalf("a missing GetRange counted as %v", got)
	}
}

// rangeCounting counts the GetRange calls that reach the store under a wrapper.
type rangeCounting struct {
	*memory.BlobStore
	ranges int
}

func (r *rangeCounting) GetRange(ctx context.Context, path string, offset, length int64) ([]byte, error) {
	r.ranges++
	return r.BlobStore.GetRange(ctx, path, offset, length)
}

// TestInstrumentBlobs_ForwardsGetRange: the wrapper does not hide its store's ranged reads (a Get in
// their place would read a whole segment for one chunk).
func TestInstrumentBlobs_ForwardsGetRange(t *testing.T) {
	inner := &rangeCounting{BlobStore: memory.NewBlobStore()}
	in := archive.InstrumentBlobs(inner, nil)
	if err := in.Put(t.Context(), "seg/a", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	got, err := archive.GetRange(t.Context(), in, "seg/a", 2, 3)
	if err != nil || string(got) != "234" || inner.ranges != 1 {
		t.Fatalf("GetRange through the wrapper: %q, %v, %d ranged reads reached the store, want 1", got, err, inner.ranges)
	}
}
