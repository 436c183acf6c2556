"""The stores behind the ledger and the archive: selection by URL, clear errors for a bad one,
the default path unchanged, and the PostgreSQL store's keys, idempotency, owners, orphans and
content-addressed spans, against a real server on loopback."""

from __future__ import annotations

import dataclasses
import http.client
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_harness import run_cli
from e2e_servers import free_port
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from postgres_server import PostgresServer
from prometheus_client.parser import text_string_to_metric_families
from workers import run_in_threads

from otel_compaction import configure
from otel_compaction.archive import Archive
from otel_compaction.compactor import GuardedCompactor
from otel_compaction.errors import ArchiveError, LedgerUnavailableError, OpenObligationError
from otel_compaction.gate import CompactionGate
from otel_compaction.ledger import Obligation, ObligationLedger, default_ledger
from otel_compaction.stores import StoreError, redact, worker_identity
from otel_compaction.stores.postgres import PostgresArchive, PostgresLedger
from otel_compaction.telemetry import configuration as telemetry_module
from otel_compaction.telemetry.metrics import CompactionMetrics

FAST: dict[str, Any] = {"heartbeat_interval": 0.1, "heartbeat_timeout": 0.5}


@pytest.fixture(name="ledgers")
def ledgers_fixture(postgres_url: str) -> Iterator[list[PostgresLedger]]:
    """Two workers' ledgers on one database, owners ``worker-a`` and ``worker-b``."""
    made: list[PostgresLedger] = []
    try:
        for owner in ("worker-a", "worker-b"):
            ledger = ObligationLedger.from_url(postgres_url, owner=owner, **FAST)
            assert isinstance(ledger, PostgresLedger)
            made.append(ledger)
        yield made
    finally:
        for ledger in made:
            ledger.close()


def _rows(url: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as connection:
        return connection.execute(query).fetchall()


# -- the default path ---------------------------------------------------------------------


def test_without_a_url_the_ledger_is_in_memory_and_the_archive_sqlite(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("OTEL_COMPACTION_LEDGER_URL", raising=False)
    monkeypatch.delenv("OTEL_COMPACTION_ARCHIVE_URL", raising=False)
    monkeypatch.setenv("OTEL_COMPACTION_ARCHIVE", str(tmp_path / "a.sqlite3"))
    for ledger in (
        ObligationLedger.from_url(),
        default_ledger(),
        ObligationLedger.from_url("memory:"),
    ):
        assert type(ledger) is ObligationLedger
        assert ledger.owner is None
        with ledger.decision_lock("c") as turn:
            assert (turn.shared, turn.compacted("x")) == (False, False)
    assert type(GuardedCompactor(budget=100).ledger) is ObligationLedger
    with Archive.from_url() as archive:
        assert type(archive) is Archive
        assert archive.path == tmp_path / "a.sqlite3"
    with Archive.from_url(f"sqlite://{tmp_path / 'b.sqlite3'}") as archive:
        assert archive.path == tmp_path / "b.sqlite3"
        assert archive.location == str(tmp_path / "b.sqlite3")


def test_the_memory_decision_lock_is_per_conversation() -> None:
    ledger = ObligationLedger()
    holding = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with ledger.decision_lock("busy"):
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    holding.wait(10)
    with ledger.decision_lock("other"), ledger.decision_lock("other"):  # re-entrant
        pass  # another conversation is not held up
    acquired = threading.Event()

    def wait_for_busy() -> None:
        with ledger.decision_lock("busy"):
            acquired.set()

    waiter = threading.Thread(target=wait_for_busy)
    waiter.start()
    assert not acquired.wait(0.3)
    release.set()
    assert acquired.wait(10)
    thread.join(10)
    waiter.join(10)


# -- bad URLs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mysql://db/agents", "OTEL_COMPACTION_LEDGER_URL='mysql://db/agents': the ledger has "
         "no store 'mysql' (expected memory: or postgresql://USER@HOST:PORT/DATABASE)"),
        ("just-a-path", "OTEL_COMPACTION_LEDGER_URL='just-a-path' is not a URL (expected "
         "memory: or postgresql://USER@HOST:PORT/DATABASE)"),
        ("postgresql://", "OTEL_COMPACTION_LEDGER_URL='postgresql://' names no server or "
         "database (expected postgresql://USER@HOST:PORT/DATABASE)"),
        ("postgresql://u:hunter2@db:99999/x", "OTEL_COMPACTION_LEDGER_URL="
         "'postgresql://u:***@db:99999/x': Port out of range 0-65535"),
    ],
)  # fmt: skip
def test_a_bad_ledger_url_names_the_variable_and_what_is_wrong(
    monkeypatch: pytest.MonkeyPatch, url: str, expected: str
) -> None:
    monkeypatch.setenv("OTEL_COMPACTION_LEDGER_URL", url)
    with pytest.raises(StoreError) as raised:
        default_ledger()
    assert str(raised.value) == expected
    assert "hunter2" not in str(raised.value)


def test_a_bad_archive_url_names_the_variable_and_what_is_wrong(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_COMPACTION_ARCHIVE_URL", "redis://cache/0")
    with pytest.raises(StoreError) as raised:
        Archive.from_url()
    assert str(raised.value) == (
        "OTEL_COMPACTION_ARCHIVE_URL='redis://cache/0': the archive has no store 'redis' "
        "(expected sqlite:PATH or postgresql://USER@HOST:PORT/DATABASE)"
    )
    with pytest.raises(StoreError, match=r"^the URL given='sqlite:' names no file"):
        Archive.from_url("sqlite:")


def test_an_unreachable_server_is_named_with_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"postgresql://agent:s3cret@127.0.0.1:{free_port()}/agents"
    monkeypatch.setenv("OTEL_COMPACTION_LEDGER_URL", url)
    with pytest.raises(StoreError) as raised:
        default_ledger()
    message = str(raised.value)
    assert message.startswith("OTEL_COMPACTION_LEDGER_URL='postgresql://agent:***@127.0.0.1:"), (
        message
    )
    assert "PostgreSQL failed while creating its tables (connecting)" in message
    assert "s3cret" not in message


def test_without_psycopg_the_error_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # the import fails
    with pytest.raises(StoreError) as raised:
        ObligationLedger.from_url("postgresql://agent@db/agents")
    assert str(raised.value) == (
        "the URL given='postgresql://agent@db/agents' names PostgreSQL, but psycopg is not "
        "installed: pip install 'otel-compaction[postgres]'"
    )


def test_worker_identity_is_host_pid_and_an_instance_unless_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_COMPACTION_WORKER_ID", raising=False)
    first, second = worker_identity(), worker_identity()
    assert first != second
    host, pid, instance = first.split(":")
    assert (pid, len(instance)) == (str(__import__("os").getpid()), 8)
    assert host
    monkeypatch.setenv("OTEL_COMPACTION_WORKER_ID", "pod-7")
    assert worker_identity() == "pod-7"
    assert worker_identity("explicit") == "explicit"
    assert redact("postgresql://u:p@h/d") == "postgresql://u:***@h/d"


# -- the PostgreSQL ledger -----------------------------------------------------------------


def test_a_retried_open_or_close_is_a_no_op(
    ledgers: list[PostgresLedger], postgres_url: str
) -> None:
    a, b = ledgers
    changes: list[tuple[Obligation, Obligation | None]] = []
    a.subscribe(on_change=lambda new, old: changes.append((new, old)))
    first = a.open("conv", "tool_call", "call_1", name="search")
    assert a.open("conv", "tool_call", "call_1", name="search") == first
    assert b.open("conv", "tool_call", "call_1", name="search") == first  # owner stays a
    assert len(changes) == 1
    resolved = b.resolve("conv", "call_1", "result")
    assert resolved is not None
    assert (resolved.status, resolved.sequence) == ("result", first.sequence)
    assert b.resolve("conv", "call_1", "result") is None
    assert a.resolve("conv", "call_1", "error") is None
    rows = _rows(
        postgres_url,
        "SELECT owner, status, resolved_by FROM otel_compaction_obligations",
    )
    assert rows == [("worker-a", "result", "worker-b")]
    # Once resolved, the id may be opened again: a new record.
    again = b.open("conv", "tool_call", "call_1", name="search")
    assert again.sequence > first.sequence
    assert [o.status for o in a.snapshot("conv").obligations] == ["result", None]


def test_records_are_keyed_by_conversation_kind_and_id(ledgers: list[PostgresLedger]) -> None:
    a, _ = ledgers
    a.open("c1", "tool_call", "x")
    a.open("c2", "tool_call", "x")
    a.open("c1", "transaction", "x")
    assert [(o.conversation_id, o.kind) for o in a.open_obligations()] == [
        ("c1", "tool_call"),
        ("c2", "tool_call"),
        ("c1", "transaction"),
    ]
    assert a.resolve("c1", "x", "rolled_back", kind="transaction") is not None
    assert [o.kind for o in a.open_obligations("c1")] == ["tool_call"]
    assert a.conversations() == ("c1", "c2")
    a.forget("c2")
    assert a.conversations() == ("c1",)


def test_concurrent_closes_resolve_exactly_once(ledgers: list[PostgresLedger]) -> None:
    a, b = ledgers
    for n in range(20):
        a.open("conv", "tool_call", f"call_{n}")
    won: list[Obligation] = []
    lock = threading.Lock()

    def close(worker: int) -> None:
        ledger = ledgers[worker % 2]
        for n in range(20):
            record = ledger.resolve("conv", f"call_{n}", "result")
            if record is not None:
                with lock:
                    won.append(record)

    run_in_threads(close, 6)
    assert sorted(o.id for o in won) == sorted(f"call_{n}" for n in range(20))
    assert b.open_obligations("conv") == ()


def test_counts_are_each_workers_own_and_orphans_the_fleets(
    ledgers: list[PostgresLedger],
) -> None:
    a, b = ledgers
    a.open("conv", "tool_call", "a1")
    a.open("conv", "tool_call", "a2")
    b.open("conv", "retry", "b1")
    assert a.open_counts() == {"tool_call": 2}
    assert b.open_counts() == {"retry": 1}
    oldest = a.oldest_open()
    assert oldest is not None
    assert oldest.id == "a1"
    b.resolve("conv", "a1")  # another worker resolves a's call: a's count drops
    assert a.open_counts() == {"tool_call": 1}
    assert a.orphaned_counts() == b.orphaned_counts() == {}
    a.close()  # shut down: what it still owns is orphaned at once
    assert b.orphaned_counts() == {"tool_call": 1}
    [orphan] = b.snapshot("conv").orphaned
    assert (orphan.obligation.id, orphan.owner, orphan.silent_seconds) == ("a2", "worker-a", None)


def test_a_worker_that_stops_heartbeating_orphans_what_it_owns(postgres_url: str) -> None:
    owner = PostgresLedger(postgres_url, owner="stalls", **FAST)
    observer = PostgresLedger(postgres_url, owner="observer", **FAST)
    try:
        owner.open("conv", "tool_call", "call_1", name="deploy")
        assert observer.snapshot("conv").orphaned == ()
        owner._stopped.set()  # the heartbeat thread stops, as in a hung or frozen process
        owner._heartbeat.join(5)
        with psycopg.connect(postgres_url) as connection:
            connection.execute(
                "UPDATE otel_compaction_workers SET heartbeat_at = now() - interval '2 s' "
                "WHERE owner = 'stalls'"
            )
        [orphan] = observer.snapshot("conv").orphaned
        assert orphan.owner == "stalls"
        assert orphan.silent_seconds is not None
        assert 1.9 < orphan.silent_seconds < 30
        assert orphan.describe().startswith(
            "tool_call call_1 orphaned (owner stalls last heartbeat 2 s ago): resolve it from "
            "any worker: ledger.resolve('conv', 'call_1', 'abandoned', kind='tool_call')"
        )
        owner.heartbeat()  # it comes back: no longer orphaned
        assert observer.snapshot("conv").orphaned == ()
    finally:
        observer.close()
        owner._stopped.clear()
        owner.close()


def test_the_gate_refuses_over_an_orphan_and_force_terminal_discharges_it(
    ledgers: list[PostgresLedger],
) -> None:
    a, b = ledgers
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Restart the api. " * 20},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_r",
                    "type": "function",
                    "function": {"name": "restart", "arguments": '{"service": "api"}'},
                }
            ],
        },
    ]
    a.open("conv", "tool_call", "call_r", name="restart")
    gate = CompactionGate("default", ledger=b)
    assert (
        gate.evaluate(messages, 0, 2, conversation_id="conv", raise_on_refuse=False).orphaned == ()
    )
    a.close()
    with pytest.raises(OpenObligationError) as refused:
        gate.evaluate(messages, 0, 2, conversation_id="conv")
    decision = refused.value.decision
    assert [o.obligation.id for o in decision.orphaned] == ["call_r"]
    assert "tool_call call_r orphaned (owner worker-a has shut down)" in str(refused.value)
    compactor = GuardedCompactor(budget=10_000, ledger=b)
    assert compactor.force_terminal(refused.value) == 1
    record = b.snapshot("conv").obligations[0]
    assert (record.status, b.snapshot("conv").orphaned) == ("abandoned", ())


def test_the_decision_lock_is_reentrant_and_excludes_other_workers(
    ledgers: list[PostgresLedger],
) -> None:
    a, b = ledgers
    inside = threading.Event()
    release = threading.Event()
    got: list[bool] = []

    def hold() -> None:
        with a.decision_lock("conv") as turn, a.decision_lock("conv") as again:
            assert again is turn
            turn.record("state-1")
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    assert inside.wait(10)

    def other() -> None:
        with b.decision_lock("conv") as turn:
            got.append(turn.compacted("state-1"))

    waiter = threading.Thread(target=other)
    waiter.start()
    waiter.join(0.5)
    assert got == []  # b waits for a's turn to end
    with b.decision_lock("another conversation"):
        pass
    release.set()
    thread.join(10)
    waiter.join(10)
    assert got == [True]  # and then sees what it recorded


def test_what_a_failed_turn_recorded_is_rolled_back(ledgers: list[PostgresLedger]) -> None:
    a, b = ledgers
    with pytest.raises(RuntimeError), a.decision_lock("conv") as turn:
        turn.record("state-x")
        raise RuntimeError("the summarizer failed")
    with b.decision_lock("conv") as turn:
        assert not turn.compacted("state-x")


def test_a_snapshot_holds_every_open_record_and_the_newest_resolved(postgres_url: str) -> None:
    ledger = PostgresLedger(postgres_url, owner="w", max_records_per_conversation=3, **FAST)
    try:
        ledger.open("conv", "tool_call", "kept-open")
        for n in range(5):
            ledger.open("conv", "tool_call", f"done-{n}")
            ledger.resolve("conv", f"done-{n}")
        assert [o.id for o in ledger.snapshot("conv").obligations] == [
            "kept-open",
            "done-2",
            "done-3",
            "done-4",
        ]
    finally:
        ledger.close()


# -- the PostgreSQL archive ----------------------------------------------------------------


def test_the_archive_is_content_addressed_and_a_reinsert_is_idempotent(
    postgres_url: str, tmp_path: Path
) -> None:
    span: list[dict[str, Any]] = [
        {"role": "user", "content": "héllo", "n": 0.1},
        {"role": "assistant", "content": ""},
    ]
    with Archive.from_url(postgres_url) as first, Archive.from_url(postgres_url) as second:
        assert isinstance(first, PostgresArchive)
        stored = first.put(span, start=4, conversation_id="conv", policy="default")
        again = second.put(span, start=9, conversation_id="elsewhere")
        assert again == stored  # the first store's metadata
        assert (stored.start, stored.end, stored.count) == (4, 6, 2)
        with Archive(tmp_path / "local.sqlite3") as local:
            assert local.put(span, start=4).handle == stored.handle  # the same address
            assert local.recall_bytes(stored.handle) == second.recall_bytes(stored.handle)
        assert second.recall(stored.handle) == span
        assert len(second) == 1
        assert stored.handle in second
        assert second.attach_summary(stored.handle, "a greeting").summary == "a greeting"
        assert [s.handle for s in first.spans("conv")] == [stored.handle]
        assert first.spans("elsewhere") == []
        assert first.put(b'[{"role":"user","content":"raw"}]').count == 1
        assert len(first) == 2


def test_the_side_effect_ledger_is_shared_by_every_worker(postgres_url: str) -> None:
    """A side effect one worker recorded before a compaction is the one another worker sees
    re-issued; recording it again updates it in place."""
    from otel_compaction.reissue import SideEffectRecord

    push = SideEffectRecord(
        "conv", 7, "toolu_1", "f" * 32, "shell:vcs", "vcs", "Bash", "git push origin main",
        "success", "main -> main", 1_770_000_000.0, True,
    )  # fmt: skip
    with Archive.from_url(postgres_url) as first, Archive.from_url(postgres_url) as second:
        first.record_side_effects([push])
        second.record_side_effects([dataclasses.replace(push, in_context=False)])
        [stored] = first.side_effects("conv")
        assert stored == dataclasses.replace(push, in_context=False)
        second.mark_asked(stored)
        assert [r.asked for r in first.side_effects("conv")] == [True]
        assert first.side_effects("elsewhere") == []


def test_archive_errors_name_the_store_and_the_handle(postgres_url: str) -> None:
    with Archive.from_url(postgres_url) as archive:
        location = archive.location
        with pytest.raises(ArchiveError) as unknown:
            archive.recall("arc_" + "0" * 24)
        assert str(unknown.value) == (
            f"no archived span with handle arc_{'0' * 24} in archive {location}"
        )
        handle = archive.put([{"role": "user", "content": "x"}]).handle
        with psycopg.connect(postgres_url) as connection:
            connection.execute(
                "UPDATE otel_compaction_archived_spans SET data = %s", (b'[{"role":"user"}]',)
            )
        with pytest.raises(ArchiveError, match="is corrupt: its bytes no longer match"):
            archive.recall_bytes(handle)
        with pytest.raises(ArchiveError, match="is in PostgreSQL and has no file"):
            _ = archive.path
    with pytest.raises(ArchiveError, match="is closed"):
        archive.recall(handle)
    with (
        PostgresArchive(postgres_url, readonly=True) as readonly,
        pytest.raises(ArchiveError, match="opened read-only"),
    ):
        readonly.put([{"role": "user", "content": "y"}])


# -- telemetry across workers --------------------------------------------------------------


def _gauges(reader: InMemoryMetricReader) -> dict[str, dict[str, float]]:
    """Each gauge-like metric's value by obligation kind."""
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[str, dict[str, float]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points = out.setdefault(metric.name, {})
                for point in metric.data.data_points:
                    kind = str(dict(point.attributes or {}).get("compaction.obligation.kind"))
                    points[kind] = float(getattr(point, "value", 0))
    return out


def test_open_obligations_sum_over_workers_and_orphans_are_the_fleets_in_each(
    ledgers: list[PostgresLedger], postgres_url: str
) -> None:
    a, b = ledgers
    c = PostgresLedger(postgres_url, owner="worker-c", **FAST)
    readers = []
    for ledger in (a, b, c):
        reader = InMemoryMetricReader()
        CompactionMetrics(MeterProvider(metric_readers=[reader])).watch(ledger)
        readers.append(reader)
    a.open("conv-1", "tool_call", "a1")
    a.open("conv-2", "tool_call", "a2")
    b.open("conv-1", "tool_call", "b1")
    c.open("conv-3", "tool_call", "c1")
    c.open("conv-3", "tool_call", "c2")
    opened = [_gauges(r)["compaction.obligations.open"].get("tool_call", 0) for r in readers]
    assert opened == [2, 1, 2]
    assert sum(opened) == len(a.open_obligations())  # the fleet's, counted once
    c.close()  # c goes away: its own series would go stale; the living count its orphans
    live = [_gauges(r) for r in readers[:2]]
    assert [g["compaction.obligations.orphaned"] for g in live] == [{"tool_call": 2.0}] * 2
    assert [g["compaction.obligations.open"]["tool_call"] for g in live] == [2, 1]
    b.resolve("conv-3", "c1", "abandoned")
    b.resolve("conv-3", "c2", "abandoned")
    assert _gauges(readers[0]).get("compaction.obligations.orphaned", {}) == {}


def test_an_in_memory_ledger_reports_no_orphan_series() -> None:
    reader = InMemoryMetricReader()
    CompactionMetrics(MeterProvider(metric_readers=[reader])).watch(ObligationLedger())
    assert "compaction.obligations.orphaned" not in _gauges(reader)


def test_configure_takes_the_ledger_from_its_url_and_closes_it_on_shutdown(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_COMPACTION_LEDGER_URL", postgres_url)
    monkeypatch.setenv("OTEL_COMPACTION_WORKER_ID", "configured-worker")
    telemetry = configure(
        tracer_provider=TracerProvider(),
        meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
        set_global=False,
    )
    assert isinstance(telemetry.ledger, PostgresLedger)
    assert telemetry.ledger.owner == "configured-worker"
    telemetry.recorder.call("restart", "call_1", conversation_id="conv")
    [record] = telemetry.ledger.open_obligations("conv")
    assert (record.id, record.name) == ("call_1", "restart")
    telemetry.shutdown()  # its providers were the application's: only the ledger is closed
    rows = _rows(
        postgres_url,
        "SELECT owner, heartbeat_at IS NULL FROM otel_compaction_workers ORDER BY owner",
    )
    assert rows == [("configured-worker", True)]


def test_the_prometheus_endpoint_serves_the_fleets_orphans(
    ledgers: list[PostgresLedger], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = ledgers
    monkeypatch.setattr(telemetry_module, "_installed_meter_provider", lambda: None)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    telemetry = configure(ledger=b, prometheus_port=0, set_global=False)
    try:
        assert telemetry.prometheus_address is not None
        a.open("conv", "tool_call", "call_1", name="restart")
        a.close()
        host, port = telemetry.prometheus_address
        connection = http.client.HTTPConnection(host, port, timeout=5)
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode("utf-8")
        connection.close()
    finally:
        telemetry.shutdown()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    [orphaned] = families["compaction_obligations_orphaned"].samples
    assert (orphaned.labels["compaction_obligation_kind"], orphaned.value) == ("tool_call", 1)
    assert families["compaction_obligations_orphaned"].type == "gauge"


def test_a_database_outage_never_breaks_the_host_agent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The recorder keeps working (logging what failed) and the heartbeat waits it out; the
    gate, a decision, says the store is unreachable instead of guessing."""
    server = PostgresServer().start()
    try:
        url = server.create_database("outage")
        ledger = PostgresLedger(url, owner="during-outage", **FAST)
        telemetry = configure(
            ledger=ledger,
            tracer_provider=TracerProvider(),
            meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
            set_global=False,
        )
        telemetry.recorder.call("restart", "call_1", conversation_id="conv").result("done")
        assert ledger.open_obligations("conv") == ()
        server.stop()
        time.sleep(3 * FAST["heartbeat_interval"])  # a heartbeat or two fail meanwhile
        call = telemetry.recorder.call("restart", "call_2", conversation_id="conv")
        call.result("done")  # no exception reaches the agent
        assert any("PostgreSQL failed" in r.getMessage() for r in caplog.records)
        assert any("heartbeat failed (will retry)" in r.getMessage() for r in caplog.records)
        gate = CompactionGate("default", ledger=ledger)
        with pytest.raises(LedgerUnavailableError, match="PostgreSQL failed while"):
            gate.evaluate([{"role": "user", "content": "hi"}], 0, 1, conversation_id="conv")
        ledger.close()  # closing during an outage is logged, not raised
    finally:
        server.stop()


def test_a_stale_copy_is_held_and_its_apply_span_says_why(
    ledgers: list[PostgresLedger],
) -> None:
    a, b = ledgers
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Summarize the incident. " * 40},
        {"role": "assistant", "content": "The api was down for 4 minutes. " * 40},
        {"role": "user", "content": "Thanks."},
        {"role": "assistant", "content": "You're welcome."},
    ]
    first = GuardedCompactor(budget=300, ledger=a).compact(
        messages, conversation_id="c", force=True
    )
    assert first.compacted
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = configure(
        ledger=b,
        tracer_provider=provider,
        meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
        set_global=False,
    )
    second = GuardedCompactor(budget=300, telemetry=telemetry).compact(
        messages, conversation_id="c", force=True
    )
    assert (second.compacted, second.span, second.messages) == (False, first.span, messages)
    [apply] = [s for s in exporter.get_finished_spans() if s.name == "compaction.apply"]
    assert apply.attributes is not None
    assert apply.attributes["compaction.compacted"] is False
    assert apply.attributes["compaction.hold.reason"] == (
        "another worker already compacted this transcript state; read the conversation again"
    )
    # The compacted transcript is a new state: it compacts again when it needs to.
    third = GuardedCompactor(budget=100, ledger=b).compact(
        first.messages + messages[2:] * 10, conversation_id="c", force=True
    )
    assert third.compacted


def test_workers_that_are_gone_and_own_nothing_open_are_forgotten(postgres_url: str) -> None:
    idle = PostgresLedger(postgres_url, owner="idle", **FAST)
    owing = PostgresLedger(postgres_url, owner="owing", **FAST)
    owing.open("conv", "tool_call", "call_1")
    idle.close()
    owing.close()
    newcomer = PostgresLedger(postgres_url, owner="newcomer", **FAST)
    try:
        rows = _rows(postgres_url, "SELECT owner FROM otel_compaction_workers ORDER BY owner")
        assert rows == [("newcomer",), ("owing",)]  # owing's call is still an orphan to show
        [orphan] = newcomer.snapshot("conv").orphaned
        assert orphan.owner == "owing"
    finally:
        newcomer.close()


# -- `otel-compaction archive show/list` over the PostgreSQL archive --------------------------


def test_archive_list_and_show_read_the_postgresql_archive(
    postgres_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    span = [{"role": "user", "content": "deploy web-7"}, {"role": "assistant", "content": "ok"}]
    with Archive.from_url(postgres_url) as archive:
        stored = archive.put(span, start=3, conversation_id="sess-9", policy="default")
    monkeypatch.delenv("OTEL_COMPACTION_ARCHIVE_URL", raising=False)

    code, out, err = run_cli(capsys, "archive", "list", "--archive", postgres_url)
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == f"{redact(postgres_url)}: 1 archived span"
    assert out.splitlines()[2].startswith(f"{stored.handle}        3:5     2")
    code, out, _ = run_cli(capsys, "archive", "show", stored.handle, "--archive", postgres_url)
    assert code == 0
    assert out.splitlines()[:4] == [
        f"handle:       {stored.handle}",
        "span:         3:5 (2 messages)",
        "conversation: sess-9",
        "policy:       default",
    ]
    # With no option, the store the hooks' variable names (as the printed recall commands do).
    monkeypatch.setenv("OTEL_COMPACTION_ARCHIVE_URL", postgres_url)
    code, out, _ = run_cli(capsys, "archive", "show", stored.handle, "--format", "json")
    assert code == 0 and json.loads(out)["messages"] == span
    code, out, _ = run_cli(capsys, "archive", "list", "--format", "json")
    assert code == 0 and [s["handle"] for s in json.loads(out)] == [stored.handle]


def test_archive_inspection_of_postgresql_fails_in_one_line(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "archive", "list", "--archive", postgres_url)
    assert (code, out) == (2, "")
    assert err == (
        f"otel-compaction: error: no archive in {redact(postgres_url)} (no table "
        "otel_compaction_archived_spans: nothing was archived there yet)\n"
    )
    with psycopg.connect(postgres_url) as connection:  # inspection created nothing
        assert connection.execute(
            "SELECT to_regclass('otel_compaction_archived_spans')"
        ).fetchone() == (None,)
    Archive.from_url(postgres_url).close()  # a worker made the table
    unknown = "arc_" + "ef" * 12
    code, out, err = run_cli(capsys, "archive", "show", unknown, "--archive", postgres_url)
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and unknown in err and redact(postgres_url) in err
    down = f"postgresql://agent:s3cret@127.0.0.1:{free_port()}/agents"
    code, _, err = run_cli(capsys, "archive", "list", "--archive", down)
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("otel-compaction: error: ") and "s3cret" not in err
    code, _, err = run_cli(capsys, "archive", "list", "--archive", postgres_url, "--db", "a.db")
    assert code == 2 and "not allowed with argument" in err
