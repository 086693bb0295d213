// Package telemetry is the sidecar's metrics plumbing: one Prometheus registry that carries the
// OpenTelemetry instruments of every strata package (through the OTel Prometheus exporter), the Go
// runtime and process collectors, and strata_build_info; and the /metrics handler that serves it.
//
// Libraries never import it: indexedstorage, archive, sweeper and oplog/schedule take a
// metric.MeterProvider, and set their own bucket bounds (internal/latency), so an embedder's provider
// gets the same series.
package telemetry

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/stratalog/strata/internal/version"
)

// New returns a meter provider whose instruments are exported on a fresh registry, and the handler
// that serves that registry in the Prometheus exposition format. The registry also holds go_*
// (runtime), process_* (resident memory, CPU, open files) and strata_build_info{version,commit,go_version}
// = 1, so a scrape right after start-up already shows which build runs and how it is doing.
func New() (*sdkmetric.MeterProvider, http.Handler, error) {
	registry := prometheus.NewRegistry()
	if err := register(registry); err != nil {
		return nil, nil, err
	}
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	return provider, promhttp.HandlerFor(registry, promhttp.HandlerOpts{}), nil
}

func register(registry *prometheus.Registry) error {
	info := version.Get()
	commit := info.Commit
	if commit != "" && info.Modified {
		commit += "-modified"
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "strata_build_info",
		Help:        "Always 1; its labels name the running build: module version, VCS commit (-modified for a dirty tree), Go version.",
		ConstLabels: prometheus.Labels{"version": info.Version, "commit": commit, "go_version": info.GoVersion},
	})
	build.Set(1)
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		build,
	} {
		if err := registry.Register(c); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}
