// The OpenTelemetry Collector for otel-compaction: the core of the upstream distribution with
// exactly the components that collector-config/otel-collector.yaml uses (components.go), in the
// shape the OpenTelemetry Collector Builder generates.
package main

import (
	"log"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/confmap/provider/yamlprovider"
	"go.opentelemetry.io/collector/otelcol"
)

func main() {
	info := component.BuildInfo{
		Command:     "otelcol-compaction",
		Description: "OpenTelemetry Collector for otel-compaction",
		Version:     "0.165.0",
	}

	settings := otelcol.CollectorSettings{
		BuildInfo: info,
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{
					envprovider.NewFactory(),
					fileprovider.NewFactory(),
					yamlprovider.NewFactory(),
				},
			},
		},
	}

	if err := otelcol.NewCommand(settings).Execute(); err != nil {
		log.Fatalf("collector server run finished with error: %v", err)
	}
}
