package archive_test

import (
	"reflect"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

func layerNames(s *oplog.Stack) []string {
	var names []string
	for _, l := range s.Layers() {
		names = append(names, l.Name())
	}
	return names
}

func TestDefaultStack_LayersByCompressedLevels(t *testing.T) {
	for _, c := range []struct {
		opts *archive.StackOptions
		want []string
	}{
		{nil, []string{"primary", "compressed-1", "blob-0"}},
		{&archive.StackOptions{}, []string{"primary", "compressed-1", "blob-0"}},
		{&archive.StackOptions{CompressedLevels: 3}, []string{"primary", "compressed-1", "compressed-2", "compressed-3", "blob-0"}},
	} {
		stack, err := archive.DefaultStack(memory.New(), memory.NewBlobStore(), c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := layerNames(stack); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v: layers %q, want %q", c.opts, got, c.want)
		}
	}
	if _, err := archive.DefaultStack(memory.New(), memory.NewBlobStore(), &archive.StackOptions{CompressedLevels: -1}); err == nil {
		t.Fatal("-1 compressed levels built a stack")
	}
}

func TestDefaultStack_RecordsEveryOperationOfItsLayers(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	stack, err := archive.DefaultStack(memory.New(), memory.NewBlobStore(),
		&archive.StackOptions{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	agent := oplog.AgentID{Component: "c", Name: "a"}
	if err := stack.Append(t.Context(), agent, oplog.Durable, []oplog.Entry{{Index: 1, Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stack.Drain(t.Context(), agent, oplog.Durable); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range collect(t, reader) {
		seen[m.Name] = true
	}
	for _, name := range []string{"strata_storage_operation_duration", "strata_blob_operation_duration"} {
		if !seen[name] {
			t.Errorf("no %s recorded; recorded %v", name, seen)
		}
	}
}

func TestStackOptions_StoresLimitsThenInstruments(t *testing.T) {
	st, blobs := (&archive.StackOptions{MaxConcurrentOps: 2}).Stores(memory.New(), memory.NewBlobStore())
	if lim, ok := st.(*is.Limiter); !ok || lim.Stats().Limit != 2 {
		t.Fatalf("storage %T, want a limiter of 2", st)
	}
	if _, ok := blobs.(*memory.BlobStore); !ok {
		t.Fatalf("blobs %T: wrapped with no meter provider", blobs)
	}
	mp := sdkmetric.NewMeterProvider()
	st, _ = (&archive.StackOptions{MaxConcurrentOps: 2, MeterProvider: mp}).Stores(memory.New(), memory.NewBlobStore())
	w, ok := st.(*is.Instrumented)
	if !ok {
		t.Fatalf("storage %T, want instrumented", st)
	}
	if _, ok := w.Unwrap().(*is.Limiter); !ok {
		t.Fatalf("instrumented storage wraps %T, want the limiter", w.Unwrap())
	}
}
