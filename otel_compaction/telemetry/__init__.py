"""The package's telemetry, one job a module.

* `configuration`: `configure()` and `Telemetry`: providers from the standard ``OTEL_*``
  environment, the ledger, the recorder, the Prometheus endpoint, bounded shutdown.
* `decisions`: the gate's decisions as span events and metrics; the severed-obligations counter.
* `compactions`: the ``compaction.apply`` span of each compaction, and compactions noted per
  conversation for ``gen_ai.conversation.compacted`` on the next inference span.
* `processor`: `LedgerSpanProcessor`, the ledger fed from other instrumentations'
  ``execute_tool`` spans.
* `sampler`: `ObligationSampler`, which keeps obligation spans recorded when a sampler drops them.
* `metrics`: the instruments and observable gauges.
* `semconv`: every span, event, attribute and metric name, GenAI conventions first.
* `scope`: this package's tracer and the content-capture switch.

Importing this package imports none of them, and none of the OpenTelemetry SDK.
"""
