"""Make ``docs/images/jaeger-refusal.png``: Jaeger's trace page of the demo's run that was
refused, its refused decision opened on the refusal event.

It starts Jaeger v2 and the project's Collector on loopback as the end-to-end test does
(``tests/jaeger_stack.py``), runs ``otel-compaction demo`` against them, picks the trace with
the most ``compaction.refused`` events, and has headless Chromium (Debian's ``chromium``)
open it through the DevTools protocol: the page searches for the first refused
``compaction.evaluate`` span by its ID (``uiFind``), that span is opened on its tags and its
events, and the window is captured, then reduced to a palette of colours to keep the file small.

``go build`` embeds no UI in Jaeger, so a built Jaeger UI is needed (``--ui-assets``: the
``packages/jaeger-ui/build`` directory of the jaeger-ui repository at the release matching
Jaeger v1.75.0, after ``npm ci && npm run build``; ``docs/stack.md``).

    python scripts/jaeger_screenshot.py --ui-assets ../jaeger-ui/packages/jaeger-ui/build

Needs the built ``.tools/bin/jaeger`` and ``.tools/bin/otelcol-compaction``
(``collector-config/build/build.sh``), ``chromium``, Pillow and ``websockets`` (both come
with the ``dev`` extra). Not a test: nothing runs it in CI.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from PIL import Image
from websockets.sync.client import connect
from websockets.sync.connection import Connection

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "examples")]

from e2e_servers import free_port, loopback_environment  # noqa: E402
from jaeger_stack import CollectorServer, JaegerServer  # noqa: E402

SERVICE = "otel-compaction-demo"
"""The service name ``docs/stack.md`` gives the demo."""
REFUSED = "compaction.refused"
DEFAULT_OUTPUT = ROOT / "docs" / "images" / "jaeger-refusal.png"
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_T = TypeVar("_T")
_CENTRE_DETAIL = (
    "document.querySelector('.span-row.is-expanded')?.scrollIntoView({block: 'center'})"
)
"""Scroll the expanded span's row to the middle of the timeline."""
_EXPAND_REFUSAL = """
(() => {
  if (document.querySelector('.span-row.is-expanded')) return true;
  const row = document.querySelector('.span-row.is-matching-filter');
  if (!row) return false;
  row.querySelector('.span-name').click();
  return true;
})()
"""
"""Open the span that the search (``uiFind``, the refused span's ID) matches, unless the page
opened it."""
_EXPAND_EVENTS = """
(() => {
  const logs = document.querySelector('.detail-row .AccordianLogs');
  if (!logs) return false;
  if (!logs.querySelector('.AccordianLogs--content'))
    logs.querySelector('.AccordianLogs--header').click();
  return document.querySelectorAll('.span-row.is-expanded').length;
})()
"""
"""Show the open span's events (Jaeger calls them "Logs"), one line each; the number of open
spans."""


def _poll(predicate: Callable[[], _T | None], timeout: float, what: str) -> _T:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.5)


def _refusals(trace: dict[str, Any]) -> int:
    return sum(
        1
        for span in trace["spans"]
        for log in span["logs"]
        for field in log["fields"]
        if field["key"] == "event" and field["value"] == REFUSED
    )


def _first_refusal(trace: dict[str, Any]) -> str:
    """The ID of the trace's first span to carry a refusal event."""
    refused = [span for span in trace["spans"] if _refusals({"spans": [span]})]
    return str(min(refused, key=lambda span: span["startTime"])["spanID"])


def demo_refusal(jaeger: JaegerServer, collector: CollectorServer) -> tuple[str, str]:
    """Run the demo against `collector`; once Jaeger has its traces, the IDs of the trace
    with the most refusals and of that trace's first refused decision span."""
    subprocess.run(
        [sys.executable, "-m", "otel_compaction", "demo", "--quiet"],
        env=loopback_environment(
            {"OTEL_SERVICE_NAME": SERVICE, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.otlp_http_url}
        ),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        check=True,
        timeout=300,
    )
    _poll(lambda: any(map(_refusals, jaeger.traces(SERVICE))), 30, "a refused trace")
    time.sleep(3)  # the rest of the demo's spans, still in the Collector's batches
    best = max(jaeger.traces(SERVICE), key=_refusals)
    return str(best["traceID"]), _first_refusal(best)


class _Page:
    """One page of a headless Chromium, driven through the DevTools protocol."""

    def __init__(self, socket: Connection) -> None:
        self._socket = socket
        self._next = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result, skipping the events in between."""
        self._next += 1
        self._socket.send(json.dumps({"id": self._next, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv(timeout=60))
            if message.get("id") == self._next:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)[
            "result"
        ].get("value")


def screenshot(url: str, output: Path, *, chromium: str, width: int, height: int) -> None:
    """Open `url` in headless Chromium, open the span its search matches, and save the window
    as a PNG."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        browser = subprocess.Popen(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                f"--window-size={width},{height}",
                "--hide-scrollbars",
                f"--remote-debugging-port={port}",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:

            def page_socket() -> str | None:
                try:
                    with _OPENER.open(f"http://127.0.0.1:{port}/json/list", timeout=2) as reply:
                        targets = json.loads(reply.read())
                except OSError:
                    return None
                pages = [t for t in targets if t.get("type") == "page"]
                return str(pages[0]["webSocketDebuggerUrl"]) if pages else None

            address = _poll(page_socket, 30, "Chromium's DevTools endpoint")
            with connect(address, max_size=None, proxy=None) as socket:
                page = _Page(socket)
                page.call("Page.enable")
                page.call("Page.navigate", url=url)
                _poll(lambda: page.evaluate(_EXPAND_REFUSAL), 30, "the refused span")
                opened = _poll(lambda: page.evaluate(_EXPAND_EVENTS), 15, "the span's events")
                if opened != 1:
                    raise SystemExit(f"{opened} spans open, expected the refused one alone")
                time.sleep(1.0)  # let the rows re-render around the opened span
                page.evaluate(_CENTRE_DETAIL)
                time.sleep(0.5)
                shot = page.call("Page.captureScreenshot", format="png")
        finally:
            browser.terminate()
            browser.wait(10)
    image = Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")
    output.parent.mkdir(parents=True, exist_ok=True)
    image.quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(output, optimize=True)


def main(argv: list[str] | None = None) -> int:
    """Start the stack, run the demo, and capture its refused trace in Jaeger's UI."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ui-assets", type=Path, required=True, help="a built Jaeger UI")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="the PNG to write")
    parser.add_argument("--chromium", default="chromium", help="the browser (default: chromium)")
    parser.add_argument("--size", default="1400x900", help="window size (default: 1400x900)")
    args = parser.parse_args(argv)
    chromium = shutil.which(args.chromium)
    if chromium is None:
        parser.error(f"{args.chromium} not found; apt-get install chromium")
    if not (args.ui_assets / "index.html").is_file():
        parser.error(f"{args.ui_assets} holds no index.html: not a built Jaeger UI")
    width, height = (int(n) for n in args.size.split("x"))
    with tempfile.TemporaryDirectory(prefix="jaeger-screenshot-") as directory:
        workdir = Path(directory)
        jaeger = JaegerServer(workdir / "jaeger", ui_assets=args.ui_assets.resolve()).start()
        try:
            collector = CollectorServer(workdir / "collector", jaeger_otlp=jaeger.otlp_grpc)
            collector.start()
            try:
                trace_id, span_id = demo_refusal(jaeger, collector)
                url = f"{jaeger.url}/trace/{trace_id}?uiFind={span_id}"
                screenshot(url, args.output, chromium=chromium, width=width, height=height)
            finally:
                collector.stop()
        finally:
            jaeger.stop()
    sys.stdout.write(f"{args.output}: trace {trace_id}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
