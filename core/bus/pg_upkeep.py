"""Upkeep of the PostgreSQL bus: the recovery sweep, and the vacuum of the tables that turn
over every row.

A queue's tables turn over every row in seconds; the dead rows pile up until a vacuum, and
every claim walks past them, so a process that changed rows in them vacuums them itself
(`VACUUM_EVERY`) rather than wait for autovacuum, which at its defaults looks once a
minute and waits for a fifth of a table to be dead.

The vacuum analyzes them too, and a send counts as a change: the planner goes by the row
count and the columns' figures of the last vacuum or analyze. A table vacuumed while nearly
empty, whose backlog then grew to 100,000 with no one taking (a big fan-in whose answer is
full leaves reports queued), kept its near-empty figures, and the planner looked each
sender up by walking the inbox's whole backlog (35 s for 1,000 senders; 3 ms with the
figures current; docs/distributed.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import psycopg
from psycopg import AsyncConnection, sql

from ..errors import BusError
from ..ids import check_id
from . import pg_queries as q
from .keys import arrival_key
from .pg_conn import PgConn, cancel
from .pg_records import PgWaits, live

log = logging.getLogger(__name__)

#: seconds between the bus's own vacuums of its churn tables, by a process that changed rows
#: in them since (WAVEWAIT_PG_VACUUM_EVERY; 0: never, leave it to autovacuum)
VACUUM_EVERY = float(os.environ.get("WAVEWAIT_PG_VACUUM_EVERY", "10"))


class PgUpkeep:
    def __init__(self, conn: PgConn, waits: PgWaits) -> None:
        self.conn = conn
        self.waits = waits
        self._vacuumed_at = time.monotonic()
        self._vacuum: asyncio.Task[None] | None = None

    def churned(self) -> None:
        """Rows of the churn tables changed: start a vacuum in the background when one is due."""
        due = VACUUM_EVERY > 0 and time.monotonic() - self._vacuumed_at >= VACUUM_EVERY
        if due and not self.conn.closed and (self._vacuum is None or self._vacuum.done()):
            self._vacuumed_at = time.monotonic()
            self._vacuum = asyncio.create_task(self._vacuum_churn(), name="wavewait-pg-vacuum")

    async def _vacuum_churn(self) -> None:
        key = f"wavewait:{self.conn.schema}:vacuum"

        async def go(conn: AsyncConnection) -> None:
            cur = await conn.execute(q.TRY_VACUUM_LOCK, [key])
            row = await cur.fetchone()
            if not (row and row[0]):
                return  # another process is at it
            try:
                await conn.execute(q.VACUUM_CHURN)
            finally:
                await conn.execute(q.VACUUM_UNLOCK, [key])

        try:
            await self.conn.run(go)
        except (BusError, psycopg.Error) as e:  # upkeep: the next one tries again
            log.warning("wavewait: could not vacuum the PostgreSQL bus's tables: %s", e)

    async def recover(self, inbox: str | None = None) -> int:
        """Return claims whose wait ended, whose process died here, or whose lease ran out."""
        inbox_filter = sql.SQL("")
        params: list[Any] = []
        if inbox is not None:
            inbox_filter = q.IN_INBOX
            params.append(check_id(inbox, "inbox"))
        rows = await self.conn.rows(q.CLAIMING_WAITS.format(inbox_filter), params)
        returned = 0
        for wait_id, exists, host, pid, pid_start, leased in rows:
            if exists and live(host, pid, pid_start, leased):
                continue
            if exists:
                await self.waits.end(wait_id)
            boxes = await self.conn.rows(q.RETURN_CLAIMS, [wait_id])
            for box in sorted({b for b, _ in boxes}):
                n = sum(1 for b, _ in boxes if b == box)
                log.warning("wavewait: returned %d claimed item(s) of ended wait %s to %s", n, wait_id, box)
            await self.conn.notify(*sorted({arrival_key(b, sender) for b, sender in boxes}))
            returned += len(boxes)
        return returned

    async def close(self) -> None:
        await cancel(self._vacuum)
        self._vacuum = None
