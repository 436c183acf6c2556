"""A real PostgreSQL server for the tests and benchmarks, started on loopback.

`PostgresServer` runs Debian's ``postgresql`` binaries (``/usr/lib/postgresql/<version>/bin``,
the newest version there, else ``initdb`` and ``postgres`` on ``PATH``; ``OTEL_COMPACTION_PG_BIN``
names another directory) in a fresh temporary directory: its own cluster (``initdb`` with trust
authentication for the superuser ``postgres``), an ephemeral TCP port of ``127.0.0.1``, its
unix socket in the same directory, durability switched off for speed. ``initdb`` refuses to run
as root, so under root the server runs as the unprivileged ``postgres`` user (``setpriv``), the
directory handed to it. `stop` ends it and removes the directory.

As pytest fixtures: importing both fixture functions into a test module registers the
``postgres`` fixture (one server for the whole session, started on first use) and the
``postgres_url`` fixture (a database of its own for each test, dropped afterwards)::

    from postgres_server import postgres_fixture, postgres_url_fixture  # noqa: F401

    def test_something(postgres_url: str) -> None:
        with psycopg.connect(postgres_url) as connection: ...

Outside pytest (a benchmark)::

    with PostgresServer() as server:
        url = server.create_database("bench")

The binaries missing skips the test, or fails it when ``CI=true`` (CI must never skip).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from e2e_servers import LOOPBACK, free_port, unavailable
from loopback import LoopbackService

__all__ = [
    "PG_BIN_ENV",
    "PostgresServer",
    "PostgresUnavailable",
    "find_postgres_bin",
    "postgres_fixture",
    "postgres_url_fixture",
]

PG_BIN_ENV = "OTEL_COMPACTION_PG_BIN"
"""A directory holding ``initdb`` and ``postgres``, used instead of Debian's."""

SUPERUSER = "postgres"
DEBIAN_ROOT = Path("/usr/lib/postgresql")
SERVICE_USERS = ("postgres", "nobody")
"""Who runs the server when the tests run as root, the first that exists."""

INSTALL_HINT = (
    "install Debian's postgresql package (apt-get install postgresql), or set "
    f"{PG_BIN_ENV} to a directory with initdb and postgres"
)


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL binaries are not on this machine; the message says where they were
    looked for and how to install them."""


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path.name)) or (0,)


def find_postgres_bin() -> Path:
    """The directory with ``initdb``, ``postgres`` and ``pg_ctl``: `PG_BIN_ENV`, else the
    newest ``/usr/lib/postgresql/<version>/bin``, else the directory of ``initdb`` on
    ``PATH`` (symbolic links resolved). Raises `PostgresUnavailable` otherwise."""
    configured = os.environ.get(PG_BIN_ENV)
    candidates: list[Path] = []
    if configured:
        candidates.append(Path(configured))
    elif DEBIAN_ROOT.is_dir():
        versions = sorted(DEBIAN_ROOT.iterdir(), key=_version_key, reverse=True)
        candidates.extend(version / "bin" for version in versions)
    on_path = shutil.which("initdb")
    if on_path is not None and not configured:
        candidates.append(Path(on_path).resolve().parent)
    for directory in candidates:
        if all((directory / name).is_file() for name in ("initdb", "postgres")):
            return directory
    where = f"{PG_BIN_ENV}={configured}" if configured else f"{DEBIAN_ROOT}/*/bin and PATH"
    raise PostgresUnavailable(
        f"PostgreSQL's initdb and postgres not found in {where}; {INSTALL_HINT}"
    )


def _service_user() -> pwd.struct_passwd | None:
    """The unprivileged account the server runs as under root; None when not root."""
    if os.geteuid() != 0:
        return None
    for name in SERVICE_USERS:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise PostgresUnavailable(
        f"running as root and none of the users {', '.join(SERVICE_USERS)} exists to run "
        "PostgreSQL as (initdb refuses root); Debian's postgresql package creates 'postgres'"
    )


class PostgresServer(LoopbackService):
    """A PostgreSQL server of its own, on an ephemeral loopback port; a context manager.

    `url` is the superuser's libpq URL to the ``postgres`` database; `create_database` makes
    another database and returns its URL.
    """

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        max_connections: int = 200,
        durable_commits: bool = False,
    ) -> None:
        """Find the binaries (`find_postgres_bin` unless `bin_dir`); nothing starts yet.
        `durable_commits` keeps ``synchronous_commit`` on, so that what a client saw
        committed survives a kill of the server (off by default: the tests run faster)."""
        self.bin_dir = bin_dir if bin_dir is not None else find_postgres_bin()
        self.durable_commits = durable_commits
        self.max_connections = max_connections
        self.port = 0
        self.directory: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._environment: dict[str, str] = {}

    @property
    def url(self) -> str:
        """The superuser's URL to the ``postgres`` database."""
        return self.database_url("postgres")

    def database_url(self, database: str) -> str:
        """The superuser's URL to `database` over TCP on loopback."""
        if not self.port:
            raise RuntimeError("the PostgreSQL server is not started")
        return f"postgresql://{SUPERUSER}@{LOOPBACK}:{self.port}/{database}"

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        if self.directory is None:
            raise RuntimeError("the PostgreSQL server is not started")
        return self.directory / "postgres.log"

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines of the server's log."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except (OSError, RuntimeError) as error:
            return f"(no log: {error})"
        return "\n".join(text.splitlines()[-lines:])

    def _as_service_user(self, argv: Sequence[str]) -> list[str]:
        user = _service_user()
        if user is None:
            return list(argv)
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise PostgresUnavailable(
                "running as root and setpriv (util-linux) is missing to drop privileges"
            )
        return [
            setpriv,
            f"--reuid={user.pw_uid}",
            f"--regid={user.pw_gid}",
            "--init-groups",
            "--",
            *argv,
        ]

    def start(self, timeout: float = 60.0) -> PostgresServer:
        """Make the cluster, start the server and wait until it accepts connections."""
        directory = Path(tempfile.mkdtemp(prefix="otel-compaction-pg-"))
        self.directory = directory
        user = _service_user()
        if user is not None:
            os.chown(directory, user.pw_uid, user.pw_gid)
        data = directory / "data"
        environment = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C",
            "LC_ALL": "C",
            "HOME": str(directory),
        }
        initdb = subprocess.run(
            self._as_service_user(
                [
                    str(self.bin_dir / "initdb"),
                    f"--pgdata={data}",
                    f"--username={SUPERUSER}",
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-sync",
                ]
            ),
            env=environment,
            cwd=directory,
            capture_output=True,
            check=False,
        )
        if initdb.returncode != 0:
            output = (initdb.stdout + initdb.stderr).decode("utf-8", "replace")
            self.stop()
            raise RuntimeError(f"initdb failed with {initdb.returncode}:\n{output}")
        self.port = free_port()
        self._environment = environment
        self._launch(timeout)
        return self

    def _launch(self, timeout: float) -> None:
        """Start the server on the cluster and port made by `start`, and wait for it."""
        assert self.directory is not None
        directory, environment, user = self.directory, self._environment, _service_user()
        data = directory / "data"
        log = (directory / "postgres.log").open("ab")
        if user is not None:
            os.chown(directory / "postgres.log", user.pw_uid, user.pw_gid)
        try:
            self.process = subprocess.Popen(
                self._as_service_user(
                    [
                        str(self.bin_dir / "postgres"),
                        "-D",
                        str(data),
                        "-p",
                        str(self.port),
                        "-k",
                        str(directory),
                        "-c",
                        f"listen_addresses={LOOPBACK}",
                        "-c",
                        f"max_connections={self.max_connections}",
                        "-c",
                        "fsync=off",
                        "-c",
                        f"synchronous_commit={'on' if self.durable_commits else 'off'}",
                        "-c",
                        "full_page_writes=off",
                    ]
                ),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environment,
                cwd=directory,
            )
        finally:
            log.close()
        self._await_ready(timeout)

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend it started (a crash, not a shutdown),
        keeping the cluster for `restart`."""
        process = self.process
        if process is None:
            return
        children = _children(process.pid)
        process.kill()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait(20)
        deadline = time.monotonic() + 20
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart(self, timeout: float = 60.0) -> None:
        """Start the killed server again on the same cluster and port (crash recovery)."""
        self.kill()
        self._launch(timeout)

    def _await_ready(self, timeout: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"PostgreSQL exited during start-up:\n{tail}")
            try:
                with psycopg.connect(self.url, connect_timeout=2) as connection:
                    connection.execute("SELECT 1")
                return
            except psycopg.OperationalError as error:
                last_error = error
                time.sleep(0.1)
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(
            f"PostgreSQL did not accept connections within {timeout:g}s ({last_error}):\n{tail}"
        )

    def create_database(self, name: str | None = None) -> str:
        """Create database `name` (a fresh unique name when None); return its URL."""
        import psycopg

        database = name or f"t_{uuid.uuid4().hex[:16]}"
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", database):
            raise ValueError(f"database name {database!r}: use lower-case letters, digits, _")
        with psycopg.connect(self.url, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{database}"')
        return self.database_url(database)

    def drop_database(self, url_or_name: str) -> None:
        """Drop a database made by `create_database`, ending its connections first."""
        import psycopg

        database = url_or_name.rsplit("/", 1)[-1]
        with psycopg.connect(self.url, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the server (a fast shutdown, then a kill) and remove its directory;
        idempotent."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(2)  # SIGINT: PostgreSQL's fast shutdown
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        directory, self.directory = self.directory, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from ``/proc``)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return ""


@pytest.fixture(autouse=True)
def _outbox_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's ledger outboxes in its own directory, never the user's state."""
    monkeypatch.setenv("OTEL_COMPACTION_OUTBOX_DIR", str(tmp_path / "outbox"))


@pytest.fixture(name="postgres", scope="session")
def postgres_fixture() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session; skips (fails under CI) without the binaries
    or psycopg."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("psycopg is not installed; pip install -e '.[dev]' (or '.[postgres]')")
    try:
        server = PostgresServer()
    except PostgresUnavailable as error:
        unavailable(str(error))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(name="postgres_url")
def postgres_url_fixture(postgres: PostgresServer) -> Iterator[str]:
    """The URL of a fresh database on the session's server, dropped after the test."""
    url = postgres.create_database()
    try:
        yield url
    finally:
        with contextlib.suppress(Exception):
            postgres.drop_database(url)
