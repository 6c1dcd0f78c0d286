"""Upkeep of the PostgreSQL bus: the recovery sweep, and the vacuum of the tables that turn
over every row.

A queue's tables turn over every row in seconds; the dead rows pile up until a vacuum, and
every claim walks past them, so a process that changed rows in them vacuums them itself
(`VACUUM_EVERY`) rather than wait for autovacuum, which at its defaults looks once a
minute and waits for a fifth of a table to be dead.

The vacuum analyzes them too. A send is analyzed alone (`grew`): the planner goes by the row
count and the columns' figures of the last vacuum or analyze. A table vacuumed while nearly
empty, whose backlog then grew to 100,000 with no one taking (a big fan-in whose answer is
full leaves reports queued), kept its near-empty figures, and the planner looked each
sender up by walking the inbox's whole backlog (35 s for 1,000 senders; 3 ms with the
figures current; docs/distributed.md). A send leaves no dead row, so it pays for the
analyze of `items` only, not for the vacuum of all three tables that only takes need.
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
#: in them since, and between its analyzes of `items` by a process that sent
#: (WAVEWAIT_PG_VACUUM_EVERY; 0: never, leave both to autovacuum)
VACUUM_EVERY = float(os.environ.get("WAVEWAIT_PG_VACUUM_EVERY", "10"))


class PgUpkeep:
    def __init__(self, conn: PgConn, waits: PgWaits) -> None:
        self.conn = conn
        self.waits = waits
        self._vacuumed_at = self._analyzed_at = time.monotonic()
        self._vacuum: asyncio.Task[None] | None = None
        self._analyze: asyncio.Task[None] | None = None

    def churned(self) -> None:
        """Rows moved to history (dead rows left): vacuum and analyze the churn tables in the
        background when that is due."""
        if self._due(self._vacuumed_at, self._vacuum):
            self._vacuumed_at = self._analyzed_at = time.monotonic()
            self._vacuum = asyncio.create_task(self._locked("vacuum", q.VACUUM_CHURN), name="wavewait-pg-vacuum")

    def grew(self) -> None:
        """Rows came in (none dead): analyze `items` in the background when that is due."""
        if self._due(self._analyzed_at, self._analyze):
            self._analyzed_at = time.monotonic()
            self._analyze = asyncio.create_task(self._locked("analyze", q.ANALYZE_ITEMS), name="wavewait-pg-analyze")

    def _due(self, last: float, running: asyncio.Task[None] | None) -> bool:
        busy = running is not None and not running.done()
        return VACUUM_EVERY > 0 and time.monotonic() - last >= VACUUM_EVERY and not busy and not self.conn.closed

    async def _locked(self, what: str, statement: str) -> None:
        """Run `statement` unless another process of this bus is running it."""
        key = f"wavewait:{self.conn.schema}:{what}"

        async def go(conn: AsyncConnection) -> None:
            cur = await conn.execute(q.TRY_UPKEEP_LOCK, [key])
            row = await cur.fetchone()
            if not (row and row[0]):
                return  # another process is at it
            try:
                await conn.execute(statement)
            finally:
                await conn.execute(q.UPKEEP_UNLOCK, [key])

        try:
            await self.conn.run(go)
        except (BusError, psycopg.Error) as e:  # upkeep: the next one tries again
            log.warning("wavewait: could not %s the PostgreSQL bus's tables: %s", what, e)

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
        await cancel(self._analyze)
        self._vacuum = self._analyze = None
