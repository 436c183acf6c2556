"""The tests' PostgreSQL harness: a real server on loopback, a database of its own per test."""

from __future__ import annotations

import psycopg
from postgres_server import PostgresServer


def test_each_test_gets_its_own_database(postgres: PostgresServer, postgres_url: str) -> None:
    assert postgres_url.startswith("postgresql://postgres@127.0.0.1:")
    with psycopg.connect(postgres_url) as connection:
        connection.execute("CREATE TABLE probe (n integer)")
        connection.execute("INSERT INTO probe VALUES (7)")
        row = connection.execute("SELECT n, current_database() FROM probe").fetchone()
    assert row is not None
    assert row[0] == 7
    assert postgres_url.endswith("/" + row[1])
    with psycopg.connect(postgres.url) as connection:
        names = {r[0] for r in connection.execute("SELECT datname FROM pg_database")}
    assert row[1] in names


def test_a_database_is_dropped_after_its_test(postgres: PostgresServer) -> None:
    url = postgres.create_database()
    postgres.drop_database(url)
    with psycopg.connect(postgres.url) as connection:
        names = {r[0] for r in connection.execute("SELECT datname FROM pg_database")}
    assert url.rsplit("/", 1)[-1] not in names


def test_the_server_listens_only_on_loopback(postgres: PostgresServer) -> None:
    with psycopg.connect(postgres.url) as connection:
        row = connection.execute("SHOW listen_addresses").fetchone()
    assert row == ("127.0.0.1",)
