"""Cost of auto-instrumentation: an instrumented model request as a ratio to an uninstrumented
one, both measured in this run against the loopback fake LLM server of the tests.

What it measures: one agent turn through the real SDK client (``openai`` Chat Completions,
JSON and streamed; Responses; ``anthropic`` Messages, JSON and streamed) with a transcript of
a system instruction, a user message and the last 7 tool calls with JSON arguments, assistant
text and their results (16 messages for Chat Completions, 15 for Messages, 22 Responses items).
The transcript is a sliding window: each request drops the oldest call and result and appends
the newest, so no request is an append to the previous one. Two kinds of turn:

* text: the model answers with text. The instrumented request reads and parses the transcript,
  works out its conversation, runs the detection checks, and records its request span.
* tool: the model answers with a tool call, and each request carries the result of the call
  the previous answer emitted. On top of the text turn's work, every request resolves one
  obligation (ending the call span, a linked result span, two histogram records) and opens
  one (a call span linked to the request span).

The telemetry goes to SDK providers configured as in production: a batch span processor (with
an exporter that discards) and a meter provider with a reader. Rounds alternate uninstrumented
and instrumented batches on the same client and connection; each figure is the best (minimum)
mean over the rounds, and only ratios between numbers of one run are judged. The fake server
runs in this process, so its work is in both figures; a real provider's latency (hundreds of
milliseconds) would make every ratio close to 1. Aim: within 1.1x. The exit status is 0
whatever the result: this is a report.

With ``--history``, two more parts follow a conversation that grows by a call and its result
before every request, from each history size: the instrumentation's own work per request (the
wrapper of the real SDK method, with the method answering at once, so no HTTP or SDK time
blurs it; aim: at the largest history within 1.5x of the smallest), and the same growth
through the real clients and the fake server, Chat Completions (``openai``) and Messages
(``anthropic``) (aim: within 1.1x of plain, and an added cost that does not grow).
``--own-only`` runs the first of them alone, after the instrumentation's own work on the
table's sliding-window requests (Chat Completions and Messages, text and tool turns, the SDK
method answering at once): what the table's added cost is made of, without HTTP blurring it.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from time import perf_counter
from typing import Any

from _report import each_round, keep_best, verdict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import fake_model_server  # the loopback fake of the providers (examples/)
from fake_model_server import FakeLLMServer, ToolCall
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_compaction import Telemetry, configure
from otel_compaction.instrumentation import CompactionInstrumentor

RATIO_AIM = 1.1
GROWTH_AIM = 1.5  # the own work at the largest history, to that at the smallest
MODEL = "model-bench"
SYSTEM = "You operate the service fleet. Verify every change before reporting it."
TURNS = 7  # tool call/result pairs in each request's window
APIS = {
    "chat.completions": ("chat", False),
    "chat.completions stream": ("chat", True),
    "responses": ("responses", False),
    "messages": ("messages", False),
    "messages stream": ("messages", True),
}
CASES = {
    f"{turn} turn, {name}": (api, stream, turn == "tool")
    for turn in ("text", "tool")
    for name, (api, stream) in APIS.items()
}


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release."""


def _arguments(n: int) -> dict[str, Any]:
    return {"service": f"svc-{n % 5}", "region": "eu-north-1", "dry_run": False, "step": n}


def _result(arguments: dict[str, Any]) -> str:
    return json.dumps({"status": "ok", "changed": 3, "service": arguments["service"]})


class _Workload:
    """One API's requests: the transcript of turn `n` and the answer scripted for it. A tool
    turn answers with the next call (so the next request resolves it); a text turn answers
    with text, and its transcript holds only calls already answered."""

    def __init__(self, server: FakeLLMServer, api: str, stream: bool, tools: bool) -> None:
        self.server, self.api, self.stream, self.tools = server, api, stream, tools
        self.prefix = ("toolu" if api == "messages" else "call") + ("" if tools else "_done")

    def call_id(self, n: int) -> str:
        return f"{self.prefix}_{n}"

    def history(self, n: int) -> list[Any]:
        """User text, then TURNS call/result pairs (with assistant text) ending at call n-1."""
        items: list[Any] = [{"role": "user", "content": "Roll the config change out to svc-0..4."}]
        for k in range(n - TURNS, n):
            items += self._pair(k)
        return items

    def _pair(self, k: int) -> list[Any]:
        call_id, arguments = self.call_id(k), _arguments(k)
        text = f"Applying step {k}."
        if self.api == "chat":
            function = {"name": "apply_config", "arguments": json.dumps(arguments)}
            call = {"id": call_id, "type": "function", "function": function}
            return [
                {"role": "assistant", "content": text, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call_id, "content": _result(arguments)},
            ]
        if self.api == "responses":
            item = {"type": "function_call", "call_id": call_id, "name": "apply_config"}
            return [
                {"role": "assistant", "content": text},
                {**item, "arguments": json.dumps(arguments)},
                {"type": "function_call_output", "call_id": call_id, "output": _result(arguments)},
            ]
        use = {"type": "tool_use", "id": call_id, "name": "apply_config", "input": arguments}
        result = {"type": "tool_result", "tool_use_id": call_id, "content": _result(arguments)}
        return [
            {"role": "assistant", "content": [{"type": "text", "text": text}, use]},
            {"role": "user", "content": [result]},
        ]

    def script(self, turns: range) -> None:
        for n in turns:
            calls = [ToolCall("apply_config", _arguments(n), id=self.call_id(n))]
            self.server.enqueue(self.api, "Next step.", tool_calls=calls if self.tools else ())  # type: ignore[arg-type]

    def request(self, client: Any, n: int) -> None:
        history = self.history(n)
        if self.api == "chat":
            messages = [{"role": "system", "content": SYSTEM}, *history]
            if not self.stream:
                client.chat.completions.create(model=MODEL, messages=messages)
                return
            with client.chat.completions.create(model=MODEL, messages=messages, stream=True) as s:
                for _ in s:
                    pass
        elif self.api == "responses":
            client.responses.create(model=MODEL, instructions=SYSTEM, input=history)
        elif not self.stream:
            client.messages.create(model=MODEL, max_tokens=256, system=SYSTEM, messages=history)
        else:
            with client.messages.create(
                model=MODEL, max_tokens=256, system=SYSTEM, messages=history, stream=True
            ) as events:
                for _ in events:
                    pass


def _client(server: FakeLLMServer, api: str) -> Any:
    options: dict[str, Any] = {"api_key": "bench", "max_retries": 0, "timeout": 30}
    if api == "messages":
        import anthropic

        return anthropic.Anthropic(base_url=server.anthropic_base_url, **options)
    import openai

    return openai.OpenAI(base_url=server.openai_base_url, **options)


def _batch(workload: _Workload, client: Any, turns: range) -> float:
    """Seconds per request over `turns`."""
    workload.script(turns)
    gc.collect()
    start = perf_counter()
    for n in turns:
        workload.request(client, n)
    return (perf_counter() - start) / len(turns)


def _measure(telemetry: Telemetry, rounds: int, per_batch: int) -> dict[str, float]:
    """The best seconds per request of every case, plain and instrumented."""
    instrumentor = CompactionInstrumentor()
    best: dict[str, float] = {}
    # The fake server writes headers and body separately; without TCP_NODELAY, Nagle's
    # algorithm and delayed acknowledgements add ~40 ms to a request and swamp the comparison.
    fake_model_server._Handler.disable_nagle_algorithm = True
    with FakeLLMServer() as server:
        clients = {api: _client(server, api) for api in ("chat", "responses", "messages")}
        workloads = {name: _Workload(server, *case) for name, case in CASES.items()}
        turn = TURNS
        for workload in workloads.values():  # warm up: connections, imports, caches
            _batch(workload, clients[workload.api], range(turn, turn + 5))
            turn += 5
        for _ in each_round(rounds):
            for name, workload in workloads.items():
                client = clients[workload.api]
                plain = _batch(workload, client, range(turn, turn + per_batch))
                keep_best(best, f"{name} plain", plain)
                turn += per_batch
                instrumentor.instrument(telemetry=telemetry)
                try:
                    instrumented = _batch(workload, client, range(turn, turn + per_batch))
                finally:
                    instrumentor.uninstrument()
                keep_best(best, f"{name} instrumented", instrumented)
                turn += per_batch
        for client in clients.values():
            client.close()
    return best


def _growing_batch(
    server: FakeLLMServer, client: Any, api: str, system: str, base: list[Any], count: int
) -> float:
    """Seconds per request of `count` requests of one conversation (`api`: ``chat`` or
    ``messages``, with the instruction `system`) that starts from `base` and appends a call
    and its result before each request."""
    workload = _Workload(server, api, False, False)
    messages = [{"role": "system", "content": system}] if api == "chat" else []
    messages += base
    start_turn = len(messages)
    workload.script(range(count))
    gc.collect()
    started = perf_counter()
    for n in range(count):
        messages += workload._pair(start_turn + n)
        if api == "chat":
            client.chat.completions.create(model=MODEL, messages=messages)
        else:
            client.messages.create(model=MODEL, max_tokens=256, system=system, messages=messages)
    return (perf_counter() - started) / count


GROWING_APIS = {"chat.completions": "chat", "messages": "messages"}


def _growing(
    telemetry: Telemetry, sizes: Sequence[int], rounds: int, per_batch: int
) -> dict[str, dict[int, tuple[float, float]]]:
    """Per API, for each history size, the best seconds per request plain and instrumented."""
    instrumentor = CompactionInstrumentor()
    best: dict[str, float] = {}
    fake_model_server._Handler.disable_nagle_algorithm = True
    with FakeLLMServer() as server:
        clients = {api: _client(server, api) for api in GROWING_APIS.values()}
        for number in each_round(rounds):
            for name, api in GROWING_APIS.items():
                client = clients[api]
                for size in sizes:
                    # A conversation of its own each batch (its first request is parsed whole).
                    opening = f"{SYSTEM} (conversation {number}-{size})"
                    workload = _Workload(server, api, False, False)
                    base: list[Any] = [{"role": "user", "content": "Roll the config change out."}]
                    pair = 0
                    while len(base) + 1 < size:  # the instruction is the first message
                        base += workload._pair(10**6 + pair)
                        pair += 1
                    plain = _growing_batch(server, client, api, opening, base, per_batch)
                    keep_best(best, f"{name} {size} plain", plain)
                    instrumentor.instrument(telemetry=telemetry)
                    try:
                        seconds = _growing_batch(
                            server, client, api, f"{opening} instrumented", base, per_batch
                        )
                    finally:
                        instrumentor.uninstrument()
                    keep_best(best, f"{name} {size} instrumented", seconds)
        for client in clients.values():
            client.close()
    return {
        name: {size: (best[f"{name} {size} plain"], best[f"{name} {size} instrumented"])
               for size in sizes}
        for name in GROWING_APIS
    }  # fmt: skip


def _answer(api: str, call: ToolCall | None = None) -> Any:
    """The SDK's own response object (what the wrapped method returns): a text answer, or one
    that emits `call`."""
    usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    if api == "chat":
        from openai.types.chat import ChatCompletion

        message: dict[str, Any] = {"role": "assistant", "content": "Next step."}
        if call is not None:
            function = {"name": call.name, "arguments": json.dumps(call.arguments)}
            message["tool_calls"] = [{"id": call.id, "type": "function", "function": function}]
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return ChatCompletion.model_validate(
            {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": MODEL,
             "choices": [choice], "usage": usage}
        )  # fmt: skip
    from anthropic.types import Message

    content: list[dict[str, Any]] = [{"type": "text", "text": "Next step."}]
    if call is not None:
        content.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        )
    return Message.model_validate(
        {"id": "msg_1", "type": "message", "role": "assistant", "model": MODEL,
         "content": content, "stop_reason": "end_turn",
         "usage": {"input_tokens": 10, "output_tokens": 2}}
    )  # fmt: skip


def _own_batch(traced: Any, api: str, base: list[Any], count: int) -> float:
    """Seconds per request of the instrumentation's own work over `count` requests of one
    conversation that starts from `base` and appends a call and its result before each (after
    its first request, untimed, which reads the whole history)."""
    workload = _Workload(None, api, False, False)  # type: ignore[arg-type]
    answer = _answer(api)

    def sdk(**_: Any) -> Any:
        return answer

    messages = list(base)
    kwargs: dict[str, Any] = {"model": MODEL, "messages": messages}
    if api == "messages":
        kwargs.update(system=SYSTEM, max_tokens=256)
    traced(sdk, None, (), kwargs)
    gc.collect()
    started = perf_counter()
    for n in range(count):
        messages += workload._pair(len(base) + n)
        traced(sdk, None, (), kwargs)
    return (perf_counter() - started) / count


def _own_work(
    telemetry: Telemetry, sizes: Sequence[int], rounds: int, per_batch: int
) -> dict[str, dict[int, float]]:
    """Per API, the best seconds per request of the instrumentation's own work (the wrapped
    SDK method answers at once) at each history size."""
    from otel_compaction.instrumentation._anthropic import MESSAGES
    from otel_compaction.instrumentation._openai import CHAT
    from otel_compaction.instrumentation._runtime import Runtime
    from otel_compaction.instrumentation._settings import Settings
    from otel_compaction.instrumentation._wrapping import traced_method

    runtime = Runtime(telemetry, Settings.resolve({}))
    apis = {"chat.completions": ("chat", CHAT), "messages": ("messages", MESSAGES)}
    best: dict[str, float] = {}
    for number in each_round(rounds):
        for name, (api, described) in apis.items():
            traced = traced_method(runtime, described, is_async=False)
            for size in sizes:
                workload = _Workload(None, api, False, False)  # type: ignore[arg-type]
                base: list[Any] = [{"role": "user", "content": f"Roll out ({number}, {size})."}]
                if api == "chat":
                    base.insert(0, {"role": "system", "content": SYSTEM})
                pair = 0
                while len(base) < size:
                    base += workload._pair(10**6 + pair)
                    pair += 1
                keep_best(best, f"{name} {size}", _own_batch(traced, api, base, per_batch))
    runtime.shutdown("benchmark finished")
    return {name: {size: best[f"{name} {size}"] for size in sizes} for name in apis}


WINDOW_APIS = {"chat.completions": "chat", "messages": "messages"}


def _window_batch(traced: Any, workload: _Workload, turns: range) -> float:
    """Seconds per request of the instrumentation's own work on the table's requests of
    `turns` (sliding windows, the SDK answering at once); the requests and answers are built
    before the clock starts."""
    requests: list[tuple[dict[str, Any], Any]] = []
    for n in turns:
        history = workload.history(n)
        if workload.api == "chat":
            kwargs: dict[str, Any] = {
                "model": MODEL,
                "messages": [{"role": "system", "content": SYSTEM}, *history],
            }
        else:
            kwargs = {"model": MODEL, "messages": history, "system": SYSTEM, "max_tokens": 256}
        emitted = ToolCall("apply_config", _arguments(n), id=workload.call_id(n))
        requests.append((kwargs, _answer(workload.api, emitted if workload.tools else None)))
    gc.collect()
    started = perf_counter()
    for kwargs, answer in requests:
        traced(lambda **_: answer, None, (), kwargs)  # noqa: B023 - called at once
    return (perf_counter() - started) / len(requests)


def _window_own(telemetry: Telemetry, rounds: int, per_batch: int) -> dict[str, float]:
    """The best seconds per request of the instrumentation's own work on the table's Chat
    Completions and Messages requests, text and tool turns."""
    from otel_compaction.instrumentation._anthropic import MESSAGES
    from otel_compaction.instrumentation._openai import CHAT
    from otel_compaction.instrumentation._runtime import Runtime
    from otel_compaction.instrumentation._settings import Settings
    from otel_compaction.instrumentation._wrapping import traced_method

    runtime = Runtime(telemetry, Settings.resolve({}))
    described = {"chat": CHAT, "messages": MESSAGES}
    best: dict[str, float] = {}
    turn = TURNS
    for _ in each_round(rounds):
        for kind in ("text", "tool"):
            for name, api in WINDOW_APIS.items():
                traced = traced_method(runtime, described[api], is_async=False)
                workload = _Workload(None, api, False, kind == "tool")  # type: ignore[arg-type]
                _window_batch(traced, workload, range(turn, turn + 5))  # its first is whole
                seconds = _window_batch(traced, workload, range(turn + 5, turn + 5 + per_batch))
                keep_best(best, f"{kind} turn, {name}", seconds)
                turn += per_batch + 5
    runtime.shutdown("benchmark finished")
    return best


def _report_window(results: dict[str, float], per_batch: int) -> None:
    print(
        f"\nThe instrumentation's own work on the table's requests (the SDK answers at once, no "
        f"HTTP): {per_batch} sliding-window requests, best mean"
    )
    for name, seconds in results.items():
        print(f"{name:<34}{seconds * 1e6:>8.0f} us")


def _report_own(results: dict[str, dict[int, float]], per_batch: int) -> None:
    print(
        f"\nThe instrumentation's own work per request (the SDK answers at once): {per_batch} "
        "requests of one conversation from each history size, each appending a call and its "
        "result; ratio to the smallest history"
    )
    for name, by_size in results.items():
        sizes = list(by_size)
        first = by_size[sizes[0]]
        row = "  ".join(
            f"{size:,}: {seconds * 1e6:.0f} us ({seconds / first:.2f}x)"
            for size, seconds in by_size.items()
        )
        ratio = by_size[sizes[-1]] / first
        print(f"{name:<18}{row}  aim <={GROWTH_AIM:g}x {verdict(ratio <= GROWTH_AIM)}")


def _report_growing(results: dict[str, dict[int, tuple[float, float]]], per_batch: int) -> None:
    print(
        f"\nA growing conversation: {per_batch} requests from each history size, each "
        "appending a call and its result"
    )
    header = f"{'history':>10}{'plain us':>10}{'instrumented us':>17}{'added us':>10}{'ratio':>8}"
    for name, by_size in results.items():
        print(f"{name}\n{header}  aim <={RATIO_AIM:g}x")
        for size, (plain, instrumented) in by_size.items():
            ratio = instrumented / plain
            added = (instrumented - plain) * 1e6
            print(
                f"{size:>10,}{plain * 1e6:>10.0f}{instrumented * 1e6:>17.0f}{added:>10.0f}"
                f"{ratio:>7.3f}x  {verdict(ratio <= RATIO_AIM)}"
            )
        sizes = list(by_size)
        first = by_size[sizes[0]][1] - by_size[sizes[0]][0]
        last = by_size[sizes[-1]][1] - by_size[sizes[-1]][0]
        print(
            f"added cost at {sizes[-1]:,} vs {sizes[0]:,} messages: {last * 1e6:.0f} us vs "
            f"{first * 1e6:.0f} us"
        )


def _report(best: dict[str, float], rounds: int, per_batch: int) -> None:
    print()
    print(
        "One agent turn (a sliding window of 7 calls) through the real SDK client, "
        f"best mean of {rounds} rounds of {per_batch} requests"
    )
    print("plain = not instrumented; the fake server runs in this process (in both figures)")
    print()
    header = f"{'request':<34}{'plain us':>10}{'instrumented us':>17}{'ratio':>8}"
    print(f"{header}  aim <={RATIO_AIM:g}x")
    print("-" * (len(header) + 14))
    rows = [(name, best[f"{name} plain"], best[f"{name} instrumented"]) for name in CASES]
    rows.append(("all", sum(r[1] for r in rows), sum(r[2] for r in rows)))
    for name, plain, instrumented in rows:
        ratio = instrumented / plain
        print(
            f"{name:<34}{plain * 1e6:>10.0f}{instrumented * 1e6:>17.0f}{ratio:>7.3f}x"
            f"  {verdict(ratio <= RATIO_AIM)}"
        )
    added = (rows[-1][2] - rows[-1][1]) / len(CASES)
    print(f"\nInstrumentation adds {added * 1e6:.0f} us per request on average.")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the report; always returns 0."""
    parser = argparse.ArgumentParser(
        description="Time instrumented model requests against uninstrumented ones on the "
        "loopback fake LLM server (ratios measured in one run; the exit status is always 0).",
    )
    parser.add_argument("--quick", action="store_true", help="fewer requests and rounds")
    parser.add_argument(
        "--own-only",
        action="store_true",
        help="only the instrumentation's own work per request, without HTTP (fast, quiet)",
    )
    parser.add_argument("--requests", type=int, help="requests per batch (default 200, quick 40)")
    parser.add_argument("--rounds", type=int, help="rounds per measurement (default 7, quick 3)")
    parser.add_argument(
        "--history",
        default="30,300,3000",
        help="history sizes of the growing-conversation part (default 30,300,3000; '' skips)",
    )
    args = parser.parse_args(argv)
    sizes = [int(part) for part in args.history.split(",") if part.strip()]
    per_batch = args.requests or (40 if args.quick else 200)
    rounds = args.rounds or (3 if args.quick else 7)

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(_Discard()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    telemetry = configure(
        tracer_provider=tracer_provider, meter_provider=meter_provider, set_global=False
    )
    growing: dict[str, dict[int, tuple[float, float]]] = {}
    own: dict[str, dict[int, float]] = {}
    try:
        if args.own_only:
            _report_window(_window_own(telemetry, rounds, per_batch), per_batch)
            _report_own(_own_work(telemetry, sizes, rounds, per_batch), per_batch)
            return 0
        best = _measure(telemetry, rounds, per_batch)
        if sizes:
            own = _own_work(telemetry, sizes, rounds, per_batch)
            growing = _growing(telemetry, sizes, min(rounds, 3), max(10, per_batch // 4))
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()
    _report(best, rounds, per_batch)
    if own:
        _report_own(own, per_batch)
    if growing:
        _report_growing(growing, max(10, per_batch // 4))
    return 0


if __name__ == "__main__":
    sys.exit(main())
