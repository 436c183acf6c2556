"""1,000 calls resolved concurrently, from threads and from asyncio tasks, leave the ledger
exact (nothing open, every status right), every result span linked to its own call span,
and the open-obligation metric back at zero."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from telemetry_harness import (
    Pipeline,
    histogram_counts,
    key,
    number_points,
)

from otel_compaction import conversation
from otel_compaction.recorder import ToolCallHandle
from otel_compaction.telemetry import semconv as sc

N = 1_000
WORKERS = 16
TOOL_CALL = key({sc.OBLIGATION_KIND: "tool_call"})


@pytest.fixture(autouse=True)
def _switch_often() -> Iterator[None]:
    """Switch threads far more often than usual, so that races show up."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def _open_count(pipeline: Pipeline) -> dict[frozenset[tuple[str, object]], int | float]:
    return number_points(pipeline.metrics()[sc.METRIC_OPEN_OBLIGATIONS])


def _assert_linked(pipeline: Pipeline, expected_calls: int) -> None:
    """Every result span links to the call span of its own call, one result per call."""
    spans = pipeline.spans()
    call_spans = [s for s in spans if s.name.startswith("execute_tool ")]
    results = [s for s in spans if s.name.startswith("tool_result ")]
    assert len(call_spans) == len(results) == expected_calls
    by_context = {(s.context.trace_id, s.context.span_id): s for s in call_spans if s.context}
    assert len(by_context) == expected_calls
    linked = []
    for result_span in results:
        [link] = result_span.links
        call_span = by_context[link.context.trace_id, link.context.span_id]
        assert call_span.attributes is not None and result_span.attributes is not None
        assert call_span.attributes["gen_ai.tool.call.id"] == (link.attributes or {}).get(
            "gen_ai.tool.call.id"
        )
        assert (
            call_span.attributes["compaction.obligation.status"]
            == result_span.attributes["compaction.obligation.status"]
        )
        linked.append((link.context.trace_id, link.context.span_id))
    assert len(set(linked)) == expected_calls


def _run_all(pool: ThreadPoolExecutor, job: Callable[[int], object], count: int) -> list[object]:
    """Run `job(i)` for every i on the pool, all released at once."""
    go = threading.Event()

    def gated(i: int) -> object:
        go.wait()
        return job(i)

    futures = [pool.submit(gated, i) for i in range(count)]
    go.set()
    return [future.result() for future in futures]


def test_calls_resolved_from_threads_leave_the_ledger_exact(pipeline: Pipeline) -> None:
    recorder = pipeline.recorder
    handles: list[ToolCallHandle] = []
    with ThreadPoolExecutor(WORKERS) as pool:
        opened = _run_all(
            pool,
            lambda i: recorder.call("search", f"call_{i}", conversation_id="conv-threads"),
            N,
        )
        handles = [h for h in opened if isinstance(h, ToolCallHandle)]
        assert len(handles) == N
        assert len(pipeline.ledger.open_obligations("conv-threads")) == N
        assert _open_count(pipeline) == {TOOL_CALL: N}

        def resolve(i: int) -> object:
            way = i % 4
            if way == 0:
                handles[i].result(i)
            elif way == 1:
                handles[i].error(ValueError(str(i)))
            elif way == 2:
                handles[i].abandon("cancelled")
            else:
                return recorder.resolve(f"call_{i}", i, conversation_id="conv-threads")
            return True

        assert _run_all(pool, resolve, N) == [True] * N

    assert pipeline.ledger.open_obligations() == ()
    records = pipeline.ledger.snapshot("conv-threads").obligations
    assert len(records) == N
    expected = {0: "result", 1: "error", 2: "abandoned", 3: "result"}
    for record in records:
        assert record.status == expected[int(record.id.removeprefix("call_")) % 4], record
    assert all(handle.resolved for handle in handles)
    assert _open_count(pipeline) == {TOOL_CALL: 0}
    metrics = pipeline.metrics()
    # Exactly one age per resolution, whichever way and thread resolved it.
    search = {"compaction.obligation.kind": "tool_call", "gen_ai.tool.name": "search"}
    assert histogram_counts(metrics["compaction.obligation.age"]) == {
        key({**search, "compaction.obligation.status": "result"}): N // 2,
        key({**search, "compaction.obligation.status": "error", "error.type": "ValueError"}): N
        // 4,
        key({**search, "compaction.obligation.status": "abandoned"}): N // 4,
    }
    _assert_linked(pipeline, N)


def test_reused_ids_resolved_by_id_from_threads_each_resolve_one_call(pipeline: Pipeline) -> None:
    recorder = pipeline.recorder
    ids = [f"dup_{i % 10}" for i in range(N)]  # 100 calls share each id
    rounds = 3  # a lost resolution is a race: give it several chances to show
    for number in range(rounds):
        conversation_id = f"conv-dup-{number}"
        handles = [
            recorder.call("search", call_id, conversation_id=conversation_id) for call_id in ids
        ]
        assert _open_count(pipeline) == {TOOL_CALL: N}

        def resolve(i: int, conversation_id: str = conversation_id) -> object:
            return recorder.resolve(ids[i], i, conversation_id=conversation_id)

        with ThreadPoolExecutor(WORKERS) as pool:
            resolved = _run_all(pool, resolve, N)
        # Every resolution found its own call: none was lost to a race, none resolved twice.
        assert resolved == [True] * N
        assert all(handle.resolved for handle in handles)
        assert not recorder.resolve("dup_0", conversation_id=conversation_id)
        assert pipeline.ledger.open_obligations() == ()
        records = pipeline.ledger.snapshot(conversation_id).obligations
        assert Counter(o.id for o in records) == Counter(ids)
        assert _open_count(pipeline) == {TOOL_CALL: 0}
    _assert_linked(pipeline, rounds * N)


def test_calls_resolved_from_asyncio_tasks_leave_the_ledger_exact(pipeline: Pipeline) -> None:
    recorder = pipeline.recorder
    all_open = asyncio.Event()
    seen_open: list[object] = []
    started = 0

    @recorder.tool("fetch")
    async def fetch(i: int) -> int:
        nonlocal started
        started += 1
        if started == N:  # every call is open now
            seen_open.append(len(pipeline.ledger.open_obligations("conv-async")))
            seen_open.append(_open_count(pipeline))
            all_open.set()
        await all_open.wait()
        await asyncio.sleep(0)
        if i % 5 == 1:
            raise ValueError(i)
        if i % 5 == 2:
            await asyncio.sleep(3600)  # cancelled below: abandoned
        return i

    async def main() -> list[object]:
        with conversation("conv-async"):
            tasks = [asyncio.create_task(fetch(i)) for i in range(N)]
            await all_open.wait()
            await asyncio.sleep(0)
            for i, task in enumerate(tasks):
                if i % 5 == 2:
                    task.cancel()
            return list(await asyncio.gather(*tasks, return_exceptions=True))

    outcomes = asyncio.run(main())
    assert seen_open == [N, {TOOL_CALL: N}]
    kinds = Counter(type(o).__name__ for o in outcomes)
    assert kinds == {"int": 3 * N // 5, "ValueError": N // 5, "CancelledError": N // 5}

    assert pipeline.ledger.open_obligations() == ()
    statuses = Counter(o.status for o in pipeline.ledger.snapshot("conv-async").obligations)
    assert statuses == {"result": 3 * N // 5, "error": N // 5, "abandoned": N // 5}
    assert _open_count(pipeline) == {TOOL_CALL: 0}
    _assert_linked(pipeline, N)


def test_calls_opened_in_tasks_and_resolved_on_worker_threads(pipeline: Pipeline) -> None:
    recorder = pipeline.recorder

    async def one(i: int, pool: ThreadPoolExecutor) -> None:
        handle = recorder.call("lookup", f"call_{i}")  # the conversation comes from the scope
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(pool, handle.result, i)

    async def main() -> None:
        with ThreadPoolExecutor(WORKERS) as pool, conversation("conv-mixed"):
            await asyncio.gather(*(one(i, pool) for i in range(N)))

    asyncio.run(main())
    records = pipeline.ledger.snapshot("conv-mixed").obligations
    assert [o.id for o in records] == [f"call_{i}" for i in range(N)]
    assert {o.status for o in records} == {"result"}
    assert _open_count(pipeline) == {TOOL_CALL: 0}
    _assert_linked(pipeline, N)
