"""The PostgreSQL bus's listener: one LISTEN connection per open bus, for every
subscription of the process (and of the stores beside the bus that notify on its channel).

After a reconnect it listens again first and then wakes every subscriber to re-read:
notifications are hints, a woken wait re-reads its state, so one lost while deaf loses
nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import psycopg
from psycopg import AsyncConnection, sql

from ..errors import BusError
from ..watch import Fanout, Keyed
from . import pg_queries as q
from .keys import Interest, split_payload
from .pg_conn import RECONNECT_TIMEOUT, PgConn, cancel, redact

log = logging.getLogger(__name__)

LISTEN_CHECK = 10.0  # how often an idle LISTEN connection proves it is still connected


class Listener:
    """Subscriptions by key, woken by the NOTIFY payloads on the bus's channel."""

    def __init__(self, conn: PgConn) -> None:
        self.conn = conn
        self._fanout = Fanout()  # every subscription of this process, by key
        self._task: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self._error: BaseException | None = None

    async def subscribe(self, spec: Interest) -> Keyed:
        """A subscription to what `spec` names, listening when this returns (subscribe
        before reading)."""
        sub = self._fanout.add(
            Keyed(self._fanout, spec.keys, spec.prefixes, routes=spec.routes, trees=spec.trees, pool=spec.pool)
        )
        return await self._listening_for(sub)

    async def subscribe_keys(self, keys: Sequence[str] = (), prefixes: Sequence[str] = ()) -> Keyed:
        """A subscription to these keys (and keys with these prefixes), for stores beside the
        bus that notify on its channel with their own keys (the task queue's)."""
        return await self._listening_for(self._fanout.add(Keyed(self._fanout, keys, prefixes)))

    async def _listening_for(self, sub: Keyed) -> Keyed:
        try:
            await self._ensure_listening()
        except BaseException:
            sub.close()
            raise
        return sub

    async def _ensure_listening(self) -> None:
        if self._task is None or self._task.done():
            self._listening.clear()
            self._error = None
            self._task = asyncio.create_task(self._listen(), name="wavewait-pg-listen")
        if self._listening.is_set():
            return
        try:
            await asyncio.wait_for(self._listening.wait(), RECONNECT_TIMEOUT)
        except TimeoutError:
            raise BusError(
                f"cannot LISTEN on the PostgreSQL bus at {redact(self.conn.url)} "
                f"({self._error or 'no answer'}); check the server, then retry"
            ) from None

    async def _listen(self) -> None:
        """The process's one LISTEN connection; reconnects for as long as the bus is open."""
        delay = 0.05
        connected_before = False
        while not self.conn.closed:
            conn: AsyncConnection | None = None
            try:
                conn = await AsyncConnection.connect(self.conn.conninfo, autocommit=True, connect_timeout=5)
                await conn.execute(q.LISTEN.format(sql.Identifier(self.conn.channel)))
                self._listening.set()
                delay = 0.05
                if connected_before:  # anything may have changed while we were deaf: re-read
                    log.warning("wavewait: PostgreSQL bus connection back; waits re-read")
                    self._fanout.everything()
                connected_before = True
                while True:
                    async for n in conn.notifies(timeout=LISTEN_CHECK):
                        self._dispatch(n.payload)
                    await conn.execute(q.PING)  # an idle link may have died silently
            except psycopg.Error as e:
                self._error = e
                if self._listening.is_set():  # say it once per outage, not per attempt
                    log.warning(
                        "wavewait: lost the PostgreSQL LISTEN connection (%s); reconnecting",
                        str(e).strip() or e.__class__.__name__,
                    )
                self._listening.clear()
            finally:
                if conn is not None:
                    try:
                        await conn.close()
                    except psycopg.Error as e:  # already broken; nothing more to release
                        log.debug("closing a broken LISTEN connection: %s", e)
            if not self.conn.closed:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _dispatch(self, payload: str) -> None:
        """A payload names one key or several; each goes to its waits."""
        self._fanout.dispatch(split_payload(payload))

    async def close(self) -> None:
        await cancel(self._task)
        self._task = None
