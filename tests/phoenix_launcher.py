"""Start ``phoenix serve`` with every listener on loopback.

Run with the Python of an environment that has Arize Phoenix installed:
``python tests/phoenix_launcher.py`` (the ``PHOENIX_*`` environment configures it). Phoenix
binds its HTTP server to ``PHOENIX_HOST``, but its OTLP/gRPC server to every interface
(``[::]:PORT``); this launcher rewrites that address to ``127.0.0.1`` before Phoenix starts,
so that the tests never listen beyond loopback. It also skips the download of a code sandbox
binary that Phoenix attempts at startup (the tests run offline; the sandbox is not used).
Phoenix's files are not modified.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

LOOPBACK = "127.0.0.1"


def _bind_grpc_to_loopback() -> None:
    """Make every ``grpc.aio`` server created from now on bind wildcard addresses to loopback."""
    grpc_aio: Any = importlib.import_module("grpc.aio")
    create_server = grpc_aio.server

    def loopback_server(*args: Any, **kwargs: Any) -> Any:
        server = create_server(*args, **kwargs)
        for method in ("add_insecure_port", "add_secure_port"):
            bind = getattr(server, method)

            def rebound(address: str, *rest: Any, _bind: Any = bind) -> Any:
                host, _, port = address.rpartition(":")
                if host in ("", "[::]", "0.0.0.0"):
                    address = f"{LOOPBACK}:{port}"
                return _bind(address, *rest)

            setattr(server, method, rebound)
        return server

    grpc_aio.server = loopback_server


def _skip_sandbox_download() -> None:
    """Report the code sandbox's binary as unavailable instead of downloading it."""
    try:
        download: Any = importlib.import_module("phoenix.server.sandbox._download")
    except ImportError:  # a release without the sandbox downloads nothing
        return
    unavailable = download.WASMBinaryUnavailable

    def offline(*_args: Any, **_kwargs: Any) -> Any:
        raise unavailable("not downloaded: this server runs offline")

    download.ensure_wasm_binary = offline


def main() -> int:
    """Run ``phoenix serve``."""
    _bind_grpc_to_loopback()
    _skip_sandbox_download()
    phoenix_main = importlib.import_module("phoenix.server.main")
    sys.argv = ["phoenix", "serve"]
    result = phoenix_main.main()
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
