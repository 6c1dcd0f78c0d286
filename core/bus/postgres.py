"""The PostgreSQL bus: the same waits for an orchestrator and flights on several machines.

    postgresql://USER[:PASSWORD]@HOST[:PORT]/DB[?schema=NAME][&any libpq parameter]

`schema` (default `wavewait`) is this project's own parameter: the bus lives in that
schema, created and migrated on first use (`pg_schema.py`). Everything else goes to libpq.
The statements it runs are in `pg_queries.py`, by name.

How the protocol maps onto the server:
- a change (delivery, agent record, wait record) is one statement that also calls
  `pg_notify` on the bus's one channel, with a payload naming what changed
  (`i:<inbox>/<sender>` for an item that arrived or came back, so that only the waits that
  want that sender wake; `a:<agent>`, `w:<wait>`, `x:<wait>` for an interrupt). Notifications are hints: a woken
  wait re-reads its state, so a notification lost (say, while the server restarts) loses nothing.
- one LISTEN connection per open bus serves every subscription of the process; after a
  reconnect it listens again first and then wakes every subscriber to re-read.
- a claim sets `claimed_by` on a row under `FOR UPDATE SKIP LOCKED`, so each item goes to
  one wait; the row keeps its `seq`, so a returned claim is back in its original place.
- statements are retried across a lost connection (server restart, failover) until
  `RECONNECT_TIMEOUT`; each write is idempotent on retry (item ids are unique; a retried
  claim or take first reads back what the wait already claimed or took, in case the lost
  attempt committed), so a retry neither loses nor duplicates.
- the concurrent waits of one process share their registration, claim and take statements
  (group commit, `pg_batch.py`), and a process that turns rows over vacuums the tables
  itself (`pg_upkeep.VACUUM_EVERY`): a queue's dead rows would otherwise slow every claim.
- waits carry a lease on the server's clock, renewed by the waiting process; the
  recovery sweep returns claims of waits that ended, whose process died on this host, or
  whose lease ran out (their host vanished).

The bus is made of rooms, one concern each: `pg_conn.py` (the pool and the statement
runner), `pg_listen.py` (the LISTEN connection and the subscriptions it wakes),
`pg_inbox.py` (items and history), `pg_records.py` (agents, waits, wave documents, MCP
tasks) and `pg_upkeep.py` (the recovery sweep, the vacuum). `PostgresBus` composes them.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import AsyncConnection

from ..errors import BusError
from ..ids import check_id
from ..model import Agent, Item, McpTask, WaitRecord
from ..watch import Keyed
from . import wave_docs
from .facade import Facade
from .keys import interest
from .pg_conn import PgConn, redact, split_url
from .pg_inbox import PgInbox
from .pg_listen import Listener
from .pg_records import PgAgents, PgMcpTasks, PgWaits, PgWaveDocs
from .pg_tasks import PgTaskStore
from .pg_upkeep import PgUpkeep

OPEN_TIMEOUT = float(os.environ.get("WAVEWAIT_PG_OPEN_TIMEOUT", "5"))  # a restart takes a second or two


def log_dir() -> Path:
    """Where agents spawned on this machine write their output (the bus has no folder)."""
    if explicit := os.environ.get("WAVEWAIT_LOG_DIR"):
        return Path(explicit).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(state) / "wavewait" / "logs"


class PostgresBus(Facade[PgInbox, PgUpkeep]):
    """A bus in a PostgreSQL schema; open with `await PostgresBus.open(url)`."""

    multi_host = True  # agents may run on other hosts: supervisors renew leases
    recovers_all_at_once = True  # one statement finds every claiming wait (an index on claimed_by)
    reliable_changes = True  # NOTIFY is transactional; after a reconnect every wait re-reads

    def __init__(self, url: str, conninfo: str, schema: str) -> None:
        self.url = url
        self.schema = schema
        self.conn = PgConn(url, conninfo, schema)
        self.listener = Listener(self.conn)
        self.agents = PgAgents(self.conn)
        self.waits = PgWaits(self.conn)
        self.upkeep = PgUpkeep(self.conn, self.waits)
        self.inbox = PgInbox(self.conn, self.upkeep.grew, self.upkeep.churned)
        self.wave_docs = PgWaveDocs(self.conn, self.listener)
        self.mcp_tasks = PgMcpTasks(self.conn)

    @classmethod
    async def open(cls, url: str) -> PostgresBus:
        """Connect, create or migrate the schema if needed, and start the pool."""
        conninfo, schema = split_url(url)
        bus = cls(url, conninfo, schema)
        deadline = time.monotonic() + OPEN_TIMEOUT
        while True:  # one direct connection first, so a wrong URL fails soon and clearly
            try:
                async with await AsyncConnection.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
                    await bus.conn.ensure_schema(conn)
                break
            except psycopg.OperationalError as e:  # refused, or the server is restarting
                if time.monotonic() >= deadline:
                    raise BusError(
                        f"cannot reach the PostgreSQL bus at {redact(url)}: {str(e).strip()}; check "
                        "that the server runs and accepts this user (pg_isready), or pass --bus / "
                        "WAVEWAIT_BUS"
                    ) from e
                await asyncio.sleep(0.2)
        try:  # wait for the first pooled connection: a pool left connecting would hang exit
            await bus.conn.pool.open(wait=True, timeout=10.0)
        except psycopg.OperationalError as e:
            await bus.conn.pool.close()
            raise BusError(f"cannot open a connection pool to {redact(url)}: {e}; check the server") from e
        return bus

    # ------------------------------------------------------------------ agents
    async def put_agent(self, agent: Agent) -> None:
        await self.agents.put(agent)

    async def get_agent(self, agent_id: str) -> Agent | None:
        return await self.agents.get(agent_id)

    async def get_agents(self, agent_ids: Sequence[str]) -> dict[str, Agent]:
        return await self.agents.get_many(agent_ids)

    async def list_agents(self) -> list[Agent]:
        return await self.agents.list()

    async def update_agent(self, agent_id: str, **changes: Any) -> Agent | None:
        return await self.agents.modify(agent_id, None, None, changes)

    async def note_preview(self, agent_id: str, **changes: Any) -> None:
        """One UPDATE is cheap here: no coalescing needed."""
        await self.agents.modify(agent_id, None, None, changes)

    async def transition(self, agent_id: str, status: str, only_from: Sequence[str], **changes: Any) -> Agent | None:
        """Move an agent to `status` if it is in `only_from`; None when nothing changed."""
        return await self.agents.modify(agent_id, status, only_from, changes)

    # ------------------------------------------------------------------ items
    async def deliver(self, item: Item) -> Item:
        return await self.inbox.deliver(item)

    async def take(self, inbox: str, wait_id: str, taker: str, *, end: bool = False) -> list[Item]:
        if end:  # ended in the take's own statement: its lease is no longer renewed
            self.waits.mine.discard(wait_id)
        return await self.inbox.take(inbox, wait_id, taker, end=end)

    async def take_next(
        self, inbox: str, wait_id: str, taker: str, types: Sequence[str] | None = None, limit: int = 1
    ) -> list[Item]:
        """Claim and take up to `limit` of the oldest unclaimed items in one statement.

        Not part of the Bus protocol: a fast path for consumers that take whatever is next
        (no claimed state in between, so nothing to return if the consumer dies).
        """
        return await self.inbox.take_next(inbox, wait_id, taker, types, limit)

    async def history(self, inbox: str, limit: int = 100) -> list[Item]:
        return await self.inbox.history(inbox, limit)

    # ------------------------------------------------------------------ waits
    async def register_wait(
        self,
        record: WaitRecord,
        *,
        claim_from: str | None = None,
        types: Sequence[str] | None = None,
        limit: int = 1,
    ) -> list[Item]:
        return await self.waits.register(record, claim_from, types, limit)

    async def update_wait(self, wait_id: str, progress: str) -> None:
        await self.waits.update(wait_id, progress)

    async def end_wait(self, wait_id: str) -> None:
        await self.waits.end(wait_id)

    async def list_waits(self) -> list[WaitRecord]:
        return await self.waits.list()

    async def interrupt(self, wait_id: str) -> bool:
        return await self.waits.interrupt(wait_id)

    async def interrupted(self, wait_id: str) -> bool:
        return await self.waits.interrupted(wait_id)

    async def get_resolution(self, key: str) -> dict[str, Any] | None:
        return await self.waits.get_resolution(key)

    async def put_resolution(self, key: str, value: dict[str, Any]) -> None:
        await self.waits.put_resolution(key, value)

    # ------------------------------------------------------------------ wave documents
    async def get_wave_doc(self, wave: str, kind: str) -> dict[str, Any] | None:
        return await self.wave_docs.get(wave, kind)

    async def update_wave_doc(self, wave: str, kind: str, change: wave_docs.DocChange) -> dict[str, Any] | None:
        return await self.wave_docs.update(wave, kind, change)

    async def subscribe_waves(self, wave: str | None = None) -> Keyed:
        return await self.wave_docs.subscribe(wave)

    # ------------------------------------------------------------------ MCP tasks
    async def put_mcp_task(self, task: McpTask) -> None:
        await self.mcp_tasks.put(task)

    async def get_mcp_task(self, task_id: str) -> McpTask | None:
        return await self.mcp_tasks.get(task_id)

    async def transition_mcp_task(
        self, task_id: str, status: str, only_from: Sequence[str], **changes: Any
    ) -> McpTask | None:
        return await self.mcp_tasks.transition(task_id, status, only_from, changes)

    async def delete_mcp_task(self, task_id: str) -> None:
        await self.mcp_tasks.delete(task_id)

    # ------------------------------------------------------------------ changes, upkeep
    async def subscribe(
        self,
        *,
        inboxes: Sequence[str] = (),
        agents: bool | Sequence[str] = False,
        waits: bool = False,
        wait_id: str | None = None,
        senders: Sequence[str] | None = None,
        claim_group: str | None = None,
    ) -> Keyed:
        """A subscription that is listening when this returns (subscribe before reading)."""
        spec = interest(
            inboxes=inboxes, agents=agents, waits=waits, wait_id=wait_id, senders=senders, claim_group=claim_group
        )
        return await self.listener.subscribe(spec)

    def tasks(self, queue: str) -> PgTaskStore:
        return PgTaskStore(self.conn, self.listener, queue)

    def log_path(self, agent_id: str) -> str:
        folder = log_dir()
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        return str(folder / f"{check_id(agent_id, 'agent')}.log")

    async def close(self) -> None:
        self.conn.closed = True  # first: no background task starts another round
        await self.listener.close()
        await self.waits.close()
        await self.upkeep.close()
        await self.conn.close()
