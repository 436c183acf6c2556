"""Configuring twice against the same provider and ledger never counts a span twice."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from otel_compaction import configure
from otel_compaction.ledger import ObligationLedger


def test_second_configure_with_the_same_ledger_adds_no_second_processor() -> None:
    provider = TracerProvider()
    ledger = ObligationLedger()
    meters = MeterProvider()
    configure(tracer_provider=provider, meter_provider=meters, ledger=ledger, set_global=False)
    configure(tracer_provider=provider, meter_provider=meters, ledger=ledger, set_global=False)
    tracer = provider.get_tracer("another.instrumentation")
    with tracer.start_as_current_span(
        "execute_tool lookup",
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.id": "c1"},
    ):
        assert [o.id for o in ledger.open_obligations()] == ["c1"]
    assert ledger.open_obligations() == ()
    assert [(o.id, o.status) for o in ledger.snapshot(None).obligations] == [("c1", "result")]
