package sweeper_test

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/latency"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
)

func TestMetrics_NamesLabelsAndCountsReadBack(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	cfg := config()
	cfg.MaxArchivesPerTick = 2
	e := newEnv(t, cfg, withOptions(func(o *sweeper.Options) {
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	}))
	agents := strandMany(e, 3)
	e.setResident(agents[0], true)
	if err := e.st.Storage.Append(t.Context(), oplog.CompressedNamespace(oplog.Ephemeral, 1), is.BucketPrefix(0)+"no-colon-key", 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		e.tick()
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]int64{}
	truncated := map[string]int64{}
	var ticks uint64
	gauges := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range data.DataPoints {
					switch m.Name {
					case "oplog_sweep_outcome":
						route, _ := p.Attributes.Value(attribute.Key("route"))
						outcome, _ := p.Attributes.Value(attribute.Key("outcome"))
						outcomes[route.AsString()+"/"+outcome.AsString()] += p.Value
					case "oplog_sweep_truncated":
						reason, _ := p.Attributes.Value(attribute.Key("reason"))
						truncated[reason.AsString()] += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				if m.Name == "oplog_sweep_tick" && m.Unit == "s" {
					for _, p := range data.DataPoints {
						ticks += p.Count
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range data.DataPoints {
					gauges[m.Name] = p.Value
				}
			}
		}
	}
	// Tick 1: two agents waiting; tick 2: both pass the gate and are archived; tick 3: nothing left
	// but the resident agent and the unparseable key, seen once a tick.
	want := map[string]int64{
		"ephemeral-l1/archived":    2,
		"ephemeral-l1/resident":    3,
		"ephemeral-l1/unparseable": 3,
		"ephemeral-l1/waiting":     2,
	}
	for k, v := range want {
		if outcomes[k] != v {
			t.Fatalf("oplog_sweep_outcome{%s} = %d, want %d (all: %v)", k, outcomes[k], v, outcomes)
		}
	}
	if ticks != 3 {
		t.Fatalf("oplog_sweep_tick recorded %d ticks", ticks)
	}
	if _, ok := gauges["oplog_sweep_tracked_agents"]; !ok {
		t.Fatalf("no oplog_sweep_tracked_agents gauge: %v", gauges)
	}
	for reason, n := range truncated {
		if n != 0 {
			t.Fatalf("untruncated ticks counted as truncated: %s = %d (all: %v)", reason, n, truncated)
		}
	}
}

// gaugePoints collects every int64 and float64 gauge point, keyed "name{label=value}" (or the name alone).
func gaugePoints(t *testing.T, reader *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	key := func(name string, attrs attribute.Set) string {
		if reason, ok := attrs.Value("reason"); ok {
			return name + "{reason=" + reason.AsString() + "}"
		}
		if route, ok := attrs.Value("route"); ok {
			return name + "{route=" + route.AsString() + "}"
		}
		return name
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range data.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range data.DataPoints {
					out[key(m.Name, p.Attributes)] = p.Value
				}
			}
		}
	}
	return out
}

func TestMetrics_StandingDownShowsItsReasonAndTheTickAge(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	reason := "residency_stale"
	e := newEnv(t, config(), withOptions(func(o *sweeper.Options) {
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		o.StandDown = func() (string, string) { return reason, "stale" }
	}))
	g := gaugePoints(t, reader)
	for _, r := range []string{sweeper.StandDownNoAssignment, sweeper.StandDownNoShards, sweeper.StandDownLeaseLapsed} {
		if v, ok := g["oplog_sweep_standing_down{reason="+r+"}"]; !ok || v != 0 {
			t.Fatalf("before any tick, standing_down{%s} = %v (present %v), want 0: %v", r, v, ok, g)
		}
	}
	e.tick()
	g = gaugePoints(t, reader)
	if g["oplog_sweep_standing_down{reason=residency_stale}"] != 1 || g["oplog_sweep_standing_down{reason=no_assignment}"] != 0 {
		t.Fatalf("stood down for residency_stale: %v", g)
	}
	reason = ""
	e.setAssignment(sweeper.Assignment{}, false)
	e.tick()
	g = gaugePoints(t, reader)
	if g["oplog_sweep_standing_down{reason=residency_stale}"] != 0 || g["oplog_sweep_standing_down{reason=no_assignment}"] != 1 {
		t.Fatalf("stood down for no_assignment: %v", g)
	}
	if age, ok := g["oplog_sweep_tick_age"]; !ok || age != 0 {
		t.Fatalf("tick age between ticks = %v (present %v), want 0", age, ok)
	}
	// During a tick the age is the time since it began.
	e.setAssignment(sweeper.Assignment{ShardCount: 1, Shards: []int{0}}, true)
	strandMany(e, 1)
	var during float64
	e.st.set(func(p *probe) {
		p.onPage = func(int) {
			time.Sleep(time.Millisecond)
			during = gaugePoints(t, reader)["oplog_sweep_tick_age"]
		}
	})
	e.tick()
	if during <= 0 {
		t.Fatalf("tick age during a tick = %v, want it above 0", during)
	}
}

// The sweep decides and moves through the oplog contract alone: it never imports a storage backend.
func TestSweeperImportsNoBackend(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/stratalog/strata/sweeper").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/stratalog/strata/backends") || strings.HasPrefix(dep, "github.com/stratalog/strata/archive") {
			t.Fatalf("sweeper depends on %s", dep)
		}
	}
}

func TestMetrics_CountersAtZeroBeforeAnyTick(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	e := newEnv(t, config(), withOptions(func(o *sweeper.Options) {
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	}))
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range s.DataPoints {
					k := m.Name
					for _, kv := range p.Attributes.ToSlice() {
						k += " " + string(kv.Key) + "=" + kv.Value.AsString()
					}
					got[k] = p.Value
				}
			}
		}
	}
	var want []string
	if len(e.sw.Routes()) == 0 {
		t.Fatal("no routes")
	}
	for _, r := range e.sw.Routes() {
		for _, o := range sweeper.Outcomes {
			want = append(want, "oplog_sweep_outcome outcome="+string(o)+" route="+r.Name)
		}
		want = append(want, "oplog_sweep_moved_entries route="+r.Name)
	}
	for _, reason := range sweeper.Reasons {
		want = append(want, "oplog_sweep_truncated reason="+string(reason))
	}
	for _, k := range want {
		if v, ok := got[k]; !ok || v != 0 {
			t.Errorf("%s = %d (present %v), want 0 before any tick", k, v, ok)
		}
	}
}

func TestMetrics_TickHistogramHasSecondBuckets(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	e := newEnv(t, config(), withOptions(func(o *sweeper.Options) {
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	}))
	e.tick()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "oplog_sweep_tick" {
				for _, p := range h.DataPoints {
					if !slices.Equal(p.Bounds, latency.Buckets()) {
						t.Fatalf("tick bounds %v, want the shared second buckets %v", p.Bounds, latency.Buckets())
					}
				}
				return
			}
		}
	}
	t.Fatal("no oplog_sweep_tick histogram")
}
