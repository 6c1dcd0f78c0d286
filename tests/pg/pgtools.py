"""Helpers for tests on the PostgreSQL bus: the test server, a fresh schema per test.

The server is `WAVEWAIT_TEST_PG` or postgresql://postgres@127.0.0.1:5432/test. Under
`CI=true` an unreachable server fails the test (CI must prove both buses); elsewhere the
test is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from functools import cache
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from wavewait.core.bus.postgres import PostgresBus
from wavewait.core.ids import new_id
from wavewait.core.model import WaitRecord, now
from wavewait.core.proc import hostname, me

PG_URL = os.environ.get("WAVEWAIT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
STALE_AFTER = "1 hour"  # schemas of test runs that were killed before they could clean up


def with_schema(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"] + [("schema", schema)]
    return urlunsplit(parts._replace(query=urlencode(query)))


@cache
def _reachable() -> str | None:
    """None when the test server answers, else why not. Also drops stale test schemas."""
    try:
        conn = _connect_retrying()
        with conn:
            stale = conn.execute(
                "SELECT n.nspname FROM pg_namespace n WHERE n.nspname LIKE 't\\_%%' AND EXISTS ("
                "SELECT 1 FROM pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'schema_version')"
            ).fetchall()
            for (name,) in stale:
                try:
                    row = conn.execute(
                        sql.SQL("SELECT max(applied_at) < now() - %s::interval FROM {}.schema_version").format(
                            sql.Identifier(name)
                        ),
                        [STALE_AFTER],
                    ).fetchone()
                except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
                    continue  # a concurrent test run dropped it between the list and this read
                if row and row[0]:
                    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
    except psycopg.Error as e:
        return f"PostgreSQL test server {PG_URL} unreachable: {str(e).strip()}"
    return None


def _connect_retrying(seconds: float = 10.0) -> psycopg.Connection:
    """A connection to the test server, waiting out a restart by a concurrent test run."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return psycopg.connect(PG_URL, connect_timeout=3, autocommit=True)
        except psycopg.OperationalError:
            if time.monotonic() >= deadline:
                raise
            subprocess.run(["pg_isready", "-h", "127.0.0.1", "-q", "-t", "1"], check=False)


def require_pg() -> None:
    """Fail under CI, skip elsewhere, when the test server cannot be reached."""
    why = _reachable()
    if why is not None:
        _missing(f"{why}; set WAVEWAIT_TEST_PG or start the server to run PostgreSQL tests")


def _missing(why: str) -> None:
    """Under CI=true a PostgreSQL test must run: what it needs missing is a failure."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{why} (CI=true: PostgreSQL tests must run; see .ci/run)")
    pytest.skip(why)


def next_wait(inbox: str) -> WaitRecord:
    """The record of a next-message wait on `inbox` by this process."""
    pid, pid_start = me()
    return WaitRecord(
        id=new_id(),
        kind="next",
        tool="wait",
        waiter=inbox,
        host=hostname(),
        pid=pid,
        pid_start=pid_start,
        started_at=now(),
    )


def new_schema() -> str:
    return f"t_{uuid.uuid4().hex[:20]}"


def drop_schema(schema: str) -> None:
    for attempt in range(3):  # the server may be coming back from a restart test
        try:
            with _connect_retrying() as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
            return
        except psycopg.OperationalError:
            if attempt == 2:
                raise


@contextlib.asynccontextmanager
async def pg_bus(schema: str | None = None) -> AsyncIterator[PostgresBus]:
    """A PostgreSQL bus in a fresh schema, dropped afterwards."""
    require_pg()
    schema = schema or new_schema()
    bus = await PostgresBus.open(with_schema(PG_URL, schema))
    try:
        yield bus
    finally:
        try:
            await bus.close()
        finally:
            drop_schema(schema)


@contextlib.contextmanager
def fresh_schema_url() -> Iterator[str]:
    """A bus URL on a fresh schema (created by whoever opens it first), dropped afterwards."""
    require_pg()
    schema = new_schema()
    try:
        yield with_schema(PG_URL, schema)
    finally:
        drop_schema(schema)


def _cluster() -> list[str]:
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    if not versions or not shutil.which("pg_ctlcluster"):
        _missing("no local PostgreSQL cluster to restart (pg_ctlcluster, /etc/postgresql)")
    return ["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main"]


def server_up() -> bool:
    return subprocess.run(["pg_isready", "-h", "127.0.0.1", "-q", "-t", "1"], check=False).returncode == 0


def restart_server() -> None:
    """Restart the local server (fast shutdown, start): every connection drops once."""
    done = subprocess.run([*_cluster(), "restart"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"pg_ctlcluster restart failed: {done.stderr or done.stdout}"


def ensure_server_up() -> None:
    """Start the local server if a test left it down (always run after a restart test)."""
    if not server_up():
        subprocess.run([*_cluster(), "start"], capture_output=True, timeout=60, check=False)
