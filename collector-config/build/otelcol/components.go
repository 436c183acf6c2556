package main

import (
	"github.com/open-telemetry/opentelemetry-collector-contrib/connector/spanmetricsconnector"
	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/prometheusexporter"
	"github.com/open-telemetry/opentelemetry-collector-contrib/extension/healthcheckextension"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/batchprocessor"
	"go.opentelemetry.io/collector/processor/memorylimiterprocessor"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

const (
	coreModules    = "go.opentelemetry.io/collector/"
	coreVersion    = " v0.165.0"
	contribModules = "github.com/open-telemetry/opentelemetry-collector-contrib/"
	contribVersion = " v0.165.1"
)

// components returns the factories of every component the project's Collector config names,
// and the Go module each comes from (shown by `components`).
func components() (otelcol.Factories, error) {
	var err error
	factories := otelcol.Factories{Telemetry: otelconftelemetry.NewFactory()}

	factories.Extensions, err = otelcol.MakeFactoryMap[extension.Factory](
		healthcheckextension.NewFactory(),
	)
	if err != nil {
		return otelcol.Factories{}, err
	}
	factories.ExtensionModules = map[component.Type]string{
		healthcheckextension.NewFactory().Type(): contribModules + "extension/healthcheckextension" + contribVersion,
	}

	factories.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](
		otlpreceiver.NewFactory(),
	)
	if err != nil {
		return otelcol.Factories{}, err
	}
	factories.ReceiverModules = map[component.Type]string{
		otlpreceiver.NewFactory().Type(): coreModules + "receiver/otlpreceiver" + coreVersion,
	}

	factories.Processors, err = otelcol.MakeFactoryMap[processor.Factory](
		batchprocessor.NewFactory(),
		memorylimiterprocessor.NewFactory(),
	)
	if err != nil {
		return otelcol.Factories{}, err
	}
	factories.ProcessorModules = map[component.Type]string{
		batchprocessor.NewFactory().Type():         coreModules + "processor/batchprocessor" + coreVersion,
		memorylimiterprocessor.NewFactory().Type(): coreModules + "processor/memorylimiterprocessor" + coreVersion,
	}

	factories.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](
		otlpexporter.NewFactory(),
		prometheusexporter.NewFactory(),
	)
	if err != nil {
		return otelcol.Factories{}, err
	}
	factories.ExporterModules = map[component.Type]string{
		otlpexporter.NewFactory().Type():       coreModules + "exporter/otlpexporter" + coreVersion,
		prometheusexporter.NewFactory().Type(): contribModules + "exporter/prometheusexporter" + contribVersion,
	}

	factories.Connectors, err = otelcol.MakeFactoryMap[connector.Factory](
		spanmetricsconnector.NewFactory(),
	)
	if err != nil {
		return otelcol.Factories{}, err
	}
	factories.ConnectorModules = map[component.Type]string{
		spanmetricsconnector.NewFactory().Type(): contribModules + "connector/spanmetricsconnector" + contribVersion,
	}

	return factories, nil
}
