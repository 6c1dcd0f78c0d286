"""Records on the PostgreSQL bus: agents, waits (with their leases and stored resolutions),
wave documents and MCP tasks, a row each. A change that others wait on is one statement
that also notifies its key on the bus's channel.

Waits carry a lease on the server's clock, renewed by the waiting process, so the recovery
sweep can tell a wait whose host vanished.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from functools import partial
from typing import Any, NamedTuple

from psycopg import AsyncConnection, sql

from ..errors import BusError
from ..ids import check_id
from ..model import Agent, Item, McpTask, WaitRecord, now
from ..proc import alive, hostname
from ..watch import Keyed
from . import pg_queries as q
from . import wave_docs
from .keys import WAIT_PREFIX, agent_key, interrupt_key, payload, wait_key, wave_key
from .pg_batch import Batcher
from .pg_conn import PgConn, cancel
from .pg_inbox import WAIT_LEASE, by_wait, claimed
from .pg_listen import Listener

log = logging.getLogger(__name__)


def live(host: str | None, pid: int | None, pid_start: str | None, leased: bool | None) -> bool:
    """A wait is live while its process runs (on this host, where we can see it) or while its
    lease holds (elsewhere)."""
    if host == hostname():
        return alive(pid, pid_start)
    return bool(leased)


class PgAgents:
    def __init__(self, conn: PgConn) -> None:
        self.conn = conn
        self._reads: Batcher[tuple[str, ...], dict[str, Agent]] = Batcher(
            self._read, self._read_many, key=lambda _: object()
        )

    async def put(self, agent: Agent) -> None:
        check_id(agent.id, "agent")
        await self.conn.rows(
            q.PUT_AGENT,
            [agent.id, agent.created_at, agent.model_dump_json(), self.conn.channel, agent_key(agent.id)],
        )

    async def get(self, agent_id: str) -> Agent | None:
        rows = await self.conn.rows(q.GET_AGENT, [check_id(agent_id, "agent")])
        return Agent.model_validate(rows[0][0]) if rows else None

    async def get_many(self, agent_ids: Sequence[str]) -> dict[str, Agent]:
        """One SELECT for many records (`id = ANY(...)`), not one per agent; shared with
        the reads other waits of this process make at the same time (reads never collide)."""
        ids = tuple(check_id(a, "agent") for a in agent_ids)
        if not ids:
            return {}
        return await self._reads(ids)

    async def _read(self, ids: tuple[str, ...]) -> dict[str, Agent]:
        rows = await self.conn.rows(q.GET_AGENTS, [list(ids)])
        return {i: Agent.model_validate(r) for i, r in rows}

    async def _read_many(self, reads: list[tuple[str, ...]]) -> list[dict[str, Agent]]:
        rows = dict(await self.conn.rows(q.GET_AGENTS, [list({i for ids in reads for i in ids})]))
        return [{i: Agent.model_validate(rows[i]) for i in ids if i in rows} for ids in reads]

    async def list(self) -> list[Agent]:
        rows = await self.conn.rows(q.LIST_AGENTS)
        return [Agent.model_validate(r[0]) for r in rows]

    async def modify(
        self,
        agent_id: str,
        status: str | None,
        only_from: Sequence[str] | None,
        changes: dict[str, Any],
    ) -> Agent | None:
        """Change fields (and the status, if it is in `only_from`): one conditional UPDATE,
        whose row lock makes each transition happen once; None when nothing changed."""
        check_id(agent_id, "agent")
        patch = dict(changes)
        if status is not None:
            patch["status"] = status
        # validate the new values before they reach the row (id and name are placeholders)
        checked = Agent.model_validate({"id": agent_id, "name": "x"} | patch)
        data = checked.model_dump(mode="json", include=set(patch)) | {"updated_at": now()}
        quiet = set(patch) <= {"lease_expires_at"}  # a lease renewal wakes nobody
        guard = sql.SQL("")
        params: list[Any] = [json.dumps(data), agent_id]
        if only_from is not None:
            guard = q.STATUS_GUARD
            params.append(list(only_from))
        if quiet:
            query = q.PATCH_AGENT_QUIETLY.format(guard)
        else:
            query = q.PATCH_AGENT.format(guard)
            params += [self.conn.channel, agent_key(agent_id)]
        rows = await self.conn.rows(query, params)
        return Agent.model_validate(rows[0][0]) if rows else None


class _Register(NamedTuple):
    record: WaitRecord
    inbox: str
    limit: int  # 0: no claim


class PgWaits:
    def __init__(self, conn: PgConn) -> None:
        self.conn = conn
        self.mine: set[str] = set()  # waits of this process, registered and not ended: their leases renewed
        self._registrars: dict[tuple[str, ...], Batcher[_Register, list[Item]]] = {}
        self._renewer: asyncio.Task[None] | None = None

    async def register(
        self, record: WaitRecord, claim_from: str | None, types: Sequence[str] | None, limit: int
    ) -> list[Item]:
        """Register the wait; with `claim_from`, also claim up to `limit` of that inbox's oldest
        unclaimed items (of `types`) for it, in the same statement (shared with the
        registrations other waits of this process make at the same time)."""
        check_id(record.id, "wait")
        kinds = tuple(types or ())
        registrar = self._registrars.get(kinds)
        if registrar is None:
            one, many = partial(self._register_one, kinds), partial(self._register_many, kinds)
            registrar = self._registrars[kinds] = Batcher(one, many, key=lambda r: r.record.id)
        request = _Register(
            record, check_id(claim_from or record.waiter, "inbox"), limit if claim_from is not None else 0
        )
        got = await registrar(request)
        self.mine.add(record.id)
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renew_leases(), name="wavewait-pg-leases")
        return got

    async def _register_one(self, types: tuple[str, ...], r: _Register) -> list[Item]:
        rec = r.record
        rows = await self.conn.once(
            q.REGISTER_WAIT.format(q.TYPE_FILTER if types else sql.SQL("")),
            q.HELD,
            {
                "w": rec.id,
                "started": rec.started_at,
                "host": rec.host,
                "pid": rec.pid,
                "pid_start": rec.pid_start,
                "lease": WAIT_LEASE,
                "record": rec.model_dump_json(),
                "channel": self.conn.channel,
                "key": wait_key(rec.id),
                "inbox": r.inbox,
                "types": list(types),
                "n": r.limit,
            },
        )
        return claimed(rows)

    async def _register_many(self, types: tuple[str, ...], rs: list[_Register]) -> list[list[Item]]:
        waits = [r.record.id for r in rs]
        rows = await self.conn.once(
            q.REGISTER_WAITS.format(q.TYPE_FILTER if types else sql.SQL("")),
            q.HELD_MANY,
            {
                "ws": waits,
                "starteds": [r.record.started_at for r in rs],
                "hosts": [r.record.host for r in rs],
                "pids": [r.record.pid for r in rs],
                "pid_starts": [r.record.pid_start for r in rs],
                "records": [r.record.model_dump_json() for r in rs],
                "inboxes": [r.inbox for r in rs],
                "ns": [r.limit for r in rs],
                "lease": WAIT_LEASE,
                "channel": self.conn.channel,
                "wait_prefix": WAIT_PREFIX,
                "types": list(types),
            },
        )
        got = by_wait(rows, waits)
        return [claimed(got[w]) for w in waits]

    async def _renew_leases(self) -> None:
        """Keep the leases of this process's waits fresh while they run."""
        while self.mine and not self.conn.closed:
            await asyncio.sleep(WAIT_LEASE / 3)
            ids = list(self.mine)
            if not ids:
                break
            try:
                await self.conn.count(q.RENEW_LEASES, [WAIT_LEASE, ids])
            except BusError as e:  # the next round tries again; the lease may lapse meanwhile
                log.warning("wavewait: could not renew wait leases: %s", e)

    async def update(self, wait_id: str, progress: str) -> None:
        await self.conn.rows(
            q.UPDATE_WAIT,
            [progress, WAIT_LEASE, check_id(wait_id, "wait"), progress, self.conn.channel, wait_key(wait_id)],
        )

    async def end(self, wait_id: str) -> None:
        check_id(wait_id, "wait")
        self.mine.discard(wait_id)
        await self.conn.rows(q.END_WAIT, [wait_id, self.conn.channel, wait_key(wait_id)])

    async def list(self) -> list[WaitRecord]:
        rows = await self.conn.rows(q.LIST_WAITS)
        records = []
        for data, leased in rows:
            rec = WaitRecord.model_validate(data)
            if not live(rec.host, rec.pid, rec.pid_start, leased):
                await self.end(rec.id)  # its process or host is gone; the sweep returns its claims
                continue
            records.append(rec)
        return records

    async def interrupt(self, wait_id: str) -> bool:
        rows = await self.conn.rows(
            q.INTERRUPT,
            [check_id(wait_id, "wait"), self.conn.channel, payload(wait_key(wait_id), interrupt_key(wait_id))],
        )
        return bool(rows)

    async def interrupted(self, wait_id: str) -> bool:
        rows = await self.conn.rows(q.INTERRUPTED, [check_id(wait_id, "wait")])
        return bool(rows and rows[0][0])

    async def get_resolution(self, key: str) -> dict[str, Any] | None:
        rows = await self.conn.rows(q.GET_RESOLUTION, [check_id(key, "id")])
        return rows[0][0] if rows else None

    async def put_resolution(self, key: str, value: dict[str, Any]) -> None:
        await self.conn.rows(q.PUT_RESOLUTION, [check_id(key, "id"), json.dumps(value)])

    async def close(self) -> None:
        await cancel(self._renewer)
        self._renewer = None


class PgWaveDocs:
    """A wave's documents, each changed under an advisory lock of its own (wave_docs.py)."""

    def __init__(self, conn: PgConn, listener: Listener) -> None:
        self.conn = conn
        self.listener = listener

    async def get(self, wave: str, kind: str) -> dict[str, Any] | None:
        rows = await self.conn.rows(q.GET_WAVE_DOC, list(wave_docs.doc_key(wave, kind)))
        return rows[0][0] if rows else None

    async def update(self, wave: str, kind: str, change: wave_docs.DocChange) -> dict[str, Any] | None:
        wave, kind = wave_docs.doc_key(wave, kind)

        async def go(conn: AsyncConnection) -> dict[str, Any] | None:
            async with conn.transaction():
                await conn.execute(q.LOCK_WAVE_DOC, [f"{self.conn.channel}:wave:{wave}~{kind}"])
                cur = await conn.execute(q.GET_WAVE_DOC, [wave, kind])
                row = await cur.fetchone()
                current = row[0] if row else None
                new = change(current)
                if new is None or new == current:
                    return current
                await conn.execute(q.PUT_WAVE_DOC, [wave, kind, now(), wave_docs.encode(new, wave, kind)])
                await conn.execute(q.NOTIFY, [self.conn.channel, [wave_key(wave)]])
                return new

        return await self.conn.run(go)

    async def subscribe(self, wave: str | None = None) -> Keyed:
        if wave is None:
            return await self.listener.subscribe_keys(prefixes=[wave_key("")])
        return await self.listener.subscribe_keys(keys=[wave_key(check_id(wave, "wave"))])


class PgMcpTasks:
    def __init__(self, conn: PgConn) -> None:
        self.conn = conn

    async def put(self, task: McpTask) -> None:
        await self.conn.rows(
            q.PUT_MCP_TASK, [check_id(task.id, "taskId"), task.status, task.updated_at, task.model_dump_json()]
        )

    async def get(self, task_id: str) -> McpTask | None:
        rows = await self.conn.rows(q.GET_MCP_TASK, [check_id(task_id, "taskId")])
        return McpTask.model_validate(rows[0][0]) if rows else None

    async def transition(
        self, task_id: str, status: str, only_from: Sequence[str], changes: dict[str, Any]
    ) -> McpTask | None:
        at = now()
        patch = changes | {"status": status, "updated_at": at}  # JSON values: status, results, messages
        rows = await self.conn.rows(
            q.TRANSITION_MCP_TASK,
            [status, at, json.dumps(patch), check_id(task_id, "taskId"), list(only_from)],
        )
        return McpTask.model_validate(rows[0][0]) if rows else None

    async def delete(self, task_id: str) -> None:
        await self.conn.rows(q.DELETE_MCP_TASK, [check_id(task_id, "taskId")])
