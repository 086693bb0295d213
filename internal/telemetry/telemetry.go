// Package telemetry is the sidecar's metrics plumbing: one Prometheus registry that carries the
// OpenTelemetry instruments of every strata package (through the OTel Prometheus exporter), the Go
// runtime and process collectors, and strata_build_info; and the /metrics handler that serves it.
//
// Libraries never import it: indexedstorage, archive, sweeper and oplog/schedule take a
// metric.MeterProvider, and set their own bucket bounds (internal/latency), so an embedder's provider
// gets the same series.
package telemetry

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	promversion "github.com/prometheus/common/version"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/stratalog/strata/internal/latency"
	"github.com/stratalog/strata/internal/version"
)

// New returns a meter provider whose instruments are exported on a fresh registry, and the handler
// that serves that registry in the Prometheus exposition format. The registry also holds go_*
// (runtime), process_* (resident memory, CPU, open files) and strata_build_info = 1 with the labels
// every Prometheus project's build_info has (buildInfo), so a scrape right after start-up already
// shows which build runs and how it is doing; and the
// histograms of zeroUntilObserved are shown at zero from their creation (startupHistograms).
func New() (*sdkmetric.MeterProvider, http.Handler, error) {
	registry := prometheus.NewRegistry()
	if err := register(registry); err != nil {
		return nil, nil, err
	}
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	startup := &startupHistograms{Gatherer: registry, zero: prometheus.NewRegistry()}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithView(startup.noteInstrument))
	return provider, promhttp.HandlerFor(startup, promhttp.HandlerOpts{}), nil
}

// zeroUntilObserved names the histograms, recorded without attributes, whose series must be there from
// start-up although nothing has been observed yet. The OpenTelemetry SDK exports no data point for an
// aggregation with no measurement (opentelemetry-go #3436), so the Prometheus exporter shows nothing
// until the first one, and it has no way to declare a series ahead of it: WithProducer adds data, but
// cannot see whether the SDK has the point in the same collection, and both at once would be a
// duplicate series (a failed scrape). Recording a fake observation would count a tick that never ran.
var zeroUntilObserved = map[string]bool{
	"oplog_sweep_tick": true, // the tick histogram: absent until the first tick that ran (not stood down)
}

// startupHistograms is the registry's Gatherer with, for each histogram of zeroUntilObserved that has
// been created (noteInstrument sees it) but has no data point yet, the same family at zero: what
// client_golang shows for a histogram before its first Observe. It decides on the gathered families,
// so a series is never there twice: once the exporter has the real one, the zero one is left out.
type startupHistograms struct {
	prometheus.Gatherer
	zero *prometheus.Registry // the zero families, by their Prometheus names
}

// noteInstrument is a View that changes nothing: it registers a zero family for each instrument of
// zeroUntilObserved as it is created, with the instrument's description and the shared second buckets
// that every strata duration histogram is created with (internal/latency), named as the exporter
// names it (the unit s adds _seconds).
func (g *startupHistograms) noteInstrument(i sdkmetric.Instrument) (sdkmetric.Stream, bool) {
	if zeroUntilObserved[i.Name] && i.Kind == sdkmetric.InstrumentKindHistogram && i.Unit == "s" {
		err := g.zero.Register(prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: i.Name + "_seconds", Help: i.Description, Buckets: latency.Buckets()}))
		if are := (prometheus.AlreadyRegisteredError{}); err != nil && !errors.As(err, &are) {
			otel.Handle(fmt.Errorf("metrics: the zero histogram of %s: %w", i.Name, err))
		}
	}
	return sdkmetric.Stream{}, false
}

// Gather is the registry's families, plus the zero family of each histogram the registry does not
// have (yet), in name order.
func (g *startupHistograms) Gather() ([]*dto.MetricFamily, error) {
	families, err := g.Gatherer.Gather()
	if err != nil {
		return families, err
	}
	zeros, err := g.zero.Gather()
	if err != nil {
		return nil, err
	}
	have := make(map[string]bool, len(families))
	for _, f := range families {
		have[f.GetName()] = true
	}
	for _, z := range zeros {
		if !have[z.GetName()] {
			families = append(families, z)
		}
	}
	slices.SortFunc(families, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return families, nil
}

func register(registry *prometheus.Registry) error {
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(),
	} {
		if err := registry.Register(c); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// buildInfo is strata_build_info from client_golang's version collector, so its labels are the
// standard ones (version, revision, branch, goversion, goos, goarch, tags) with that collector's
// HELP. The collector reads prometheus/common/version's variables, which Prometheus' own builds set at
// link time; strata's come from internal/version (the module version or the release's, the commit
// with -modified for a dirty tree, the branch deploy/build.sh names), set once here. A value the
// build did not record reads "unknown", as the collector's own revision and tags do.
func buildInfo() prometheus.Collector {
	setBuildVariables()
	return versioncollector.NewCollector("strata")
}

var setBuildVariables = sync.OnceFunc(func() {
	info := version.Get()
	promversion.Version = info.Version
	promversion.Revision = orUnknown(info.Revision())
	promversion.Branch = orUnknown(info.Branch)
	if info.GoVersion != "" {
		promversion.GoVersion = info.GoVersion
	}
})

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
