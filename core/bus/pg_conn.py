"""The PostgreSQL bus's connection: its URL, its pool, and the statement runner every room
of the bus (and the task store beside it) runs its statements through.

Statements are retried across a lost connection (server restart, failover) until
`RECONNECT_TIMEOUT`; a statement that claims rows for waits or moves them to history runs
through `once`, so a retry after a lost answer neither loses nor repeats what it did.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool, PoolClosed

from ..errors import BusError
from . import pg_queries as q
from .keys import payloads
from .pg_schema import SCHEMA_VERSION, current_version, migrate

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_SCHEMA = "wavewait"
RECONNECT_TIMEOUT = float(os.environ.get("WAVEWAIT_PG_RECONNECT_TIMEOUT", "60"))
#: pooled connections per process (plus one for LISTEN): many concurrent waits in one
#: server queue for these; WAVEWAIT_PG_POOL sets it (mind the server's max_connections)
POOL_MAX = int(os.environ.get("WAVEWAIT_PG_POOL", "10"))
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,39}$")
_TRANSIENT = (psycopg.OperationalError,)  # lost connection, restart, pool timeout, deadlock


def split_url(url: str) -> tuple[str, str]:
    """(libpq conninfo URL, schema): our `schema` parameter is taken out of the query."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = DEFAULT_SCHEMA
    rest = []
    for key, value in query:
        if key == "schema":
            schema = value
        else:
            rest.append((key, value))
    if not _SCHEMA_RE.match(schema):
        raise BusError(
            f"bus URL: schema {schema!r} is not allowed; use lower-case letters, digits and '_' "
            "(at most 40, not starting with a digit), e.g. ?schema=wavewait"
        )
    return urlunsplit(parts._replace(query=urlencode(rest))), schema


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _not_again(params: dict[str, Any], done: list[tuple[Any, ...]]) -> dict[str, Any]:
    """A claim's parameters with nothing left to claim for a wait that the lost attempt
    claimed for (`done`: one wait's rows, or rows that end with their wait). A wait claims
    only while it holds nothing in the inbox, so what it holds is what that attempt took."""
    if "ns" in params:
        holding = {row[-1] for row in done}
        return params | {"ns": [0 if w in holding else n for w, n in zip(params["ws"], params["ns"], strict=True)]}
    if "n" in params and done:
        return params | {"n": 0}
    if "senders" in params:  # claim_each: leave out each (wait, sender) the wait holds a row of
        held = {(row[-1], row[1].get("sender")) for row in done}
        keep = [i for i, pair in enumerate(zip(params["ws"], params["senders"], strict=True)) if pair not in held]
        return params | {k: [params[k][i] for i in keep] for k in ("inboxes", "ws", "senders")}
    return params


async def cancel(task: asyncio.Task[None] | None) -> None:
    """End a background task of the bus (closing it), if it runs."""
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class PgConn:
    """One bus's schema on one server: the pool, and statements run on it with retries."""

    def __init__(self, url: str, conninfo: str, schema: str) -> None:
        self.url = url
        self.conninfo = conninfo
        self.schema = schema
        self.channel = f"wavewait.{schema}"  # the one NOTIFY channel of the bus
        self.pool = AsyncConnectionPool(
            conninfo,
            min_size=1,
            max_size=POOL_MAX,
            open=False,
            timeout=10.0,
            max_idle=60.0,
            kwargs={"autocommit": True, "connect_timeout": 5},
            configure=self._configure,
            name=f"wavewait-{schema}",
        )
        self.closed = False  # the bus was closed: its background tasks stop

    async def _configure(self, conn: AsyncConnection) -> None:
        await conn.execute(q.SET_SEARCH_PATH.format(sql.Identifier(self.schema)))
        if "synchronous_commit" not in self.conninfo:
            # like the directory bus (rename, no fsync): a commit survives any client crash
            # and a clean server restart; only a server crash may drop its last fraction of
            # a second. Put options=-csynchronous_commit%3Don in the URL to wait for the disk.
            await conn.execute(q.SET_ASYNC_COMMIT)

    async def ensure_schema(self, conn: AsyncConnection) -> None:
        """Create or migrate the bus's schema on `conn` (a direct connection) when needed."""
        if await current_version(conn, self.schema) == SCHEMA_VERSION:
            return
        before = await migrate(conn, self.schema)
        if before < SCHEMA_VERSION:
            log.info("wavewait: bus schema %s migrated from version %d to %d", self.schema, before, SCHEMA_VERSION)

    async def run(self, fn: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run `fn` on a pooled connection; across a lost connection, retry until the deadline."""
        deadline: float | None = None
        delay = 0.05
        while True:
            try:
                async with self.pool.connection() as conn:
                    return await fn(conn)
            except PoolClosed as e:
                raise BusError("the PostgreSQL bus was closed; open it again") from e
            except _TRANSIENT as e:
                t = time.monotonic()
                if deadline is None:
                    deadline = t + RECONNECT_TIMEOUT
                    log.warning(
                        "wavewait: PostgreSQL bus unavailable (%s); retrying for up to %.0f s",
                        str(e).strip() or e.__class__.__name__,
                        RECONNECT_TIMEOUT,
                    )
                if t >= deadline:
                    raise BusError(
                        f"the PostgreSQL bus at {redact(self.url)} has been unreachable for "
                        f"{RECONNECT_TIMEOUT:.0f} s ({e}); check the server, then retry"
                    ) from e
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                await self.pool.check()  # drop the other connections that died with it

    async def rows(self, query: Any, params: Any = None) -> list[tuple[Any, ...]]:
        """The rows a statement returns (none when it returns none)."""

        async def go(conn: AsyncConnection) -> list[tuple[Any, ...]]:
            cur = await conn.execute(query, params)
            return await cur.fetchall() if cur.description else []

        return await self.run(go)

    async def count(self, query: Any, params: Any = None) -> int:
        """How many rows a statement changed."""

        async def go(conn: AsyncConnection) -> int:
            cur = await conn.execute(query, params)
            return cur.rowcount

        return await self.run(go)

    async def notify(self, *keys: str) -> None:
        """Tell every process listening on the bus that these keys changed."""
        if keys:
            await self.rows(q.NOTIFY, [self.channel, payloads(keys)])

    async def once(self, query: Any, read_back: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Run a statement that claims rows for waits, or moves their rows to history, so
        that a retry does not do it twice: on a retry (the last attempt may have committed,
        its answer lost) first read back with `read_back` what it did, then run it again for
        the waits it did nothing for (a take run again finds nothing left to move)."""
        attempts = 0

        async def go(conn: AsyncConnection) -> list[tuple[Any, ...]]:
            nonlocal attempts
            attempts += 1
            done: list[tuple[Any, ...]] = []
            todo = params
            if attempts > 1:
                cur = await conn.execute(read_back, params)
                done = await cur.fetchall()
                todo = _not_again(params, done)
            cur = await conn.execute(query, todo)
            return done + await cur.fetchall()

        return await self.run(go)

    async def close(self) -> None:
        self.closed = True
        await self.pool.close()
