"""The task queue on the PostgreSQL bus: rows beside the bus's own tables.

- `task_queues`: one row per queue with its task count. An enqueue raises the count only
  while it is below the budget (a conditional upsert: the row lock makes concurrent
  enqueues take turns), and inserts the task in the same statement.
- `tasks`: one row per task. A unique index on (queue, dedup_key) over the tasks that are
  not failed is the dedup guard: a concurrent duplicate waits for the first insert and
  then fails, and the failed statement takes its count back with it.
- `handoffs`: one row per completed task, written in the same statement as its status.

Enqueues and completions that one process makes at the same time share a statement (group
commit, `pg_batch.py`): one round trip, one commit and one notification for all of them. A
batch goes in whole or not at all; one refused whole (a budget it would overrun, a duplicate
of a task already queued) runs again one request at a time, so each gets its own answer as
if it had run alone.

Every change notifies `q:<queue>` on the bus's channel. The tables have their own version
table (`task_schema_version`), created and migrated on first use the way `pg_schema.py`
does the bus's, under a transaction-scoped advisory lock. Every statement is parameterised.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, errors, sql

from ..errors import BusError
from ..ids import check_id
from ..model import Conflict, HandoffRecord, Task, now
from ..watch import Keyed
from .keys import queue_key
from .pg_batch import Batcher
from .pg_conn import PgConn
from .pg_listen import Listener

TASKS_SCHEMA_VERSION = 2

#: version -> statements; append new versions, never edit an applied one.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE task_queues (
            queue text PRIMARY KEY,
            n bigint NOT NULL DEFAULT 0)""",
        """CREATE TABLE tasks (
            queue text NOT NULL,
            id text NOT NULL,
            seq bigint NOT NULL,
            status text NOT NULL,
            dedup_key text NOT NULL,
            record jsonb NOT NULL,
            PRIMARY KEY (queue, id))""",
        "CREATE UNIQUE INDEX tasks_dedup ON tasks (queue, dedup_key) WHERE status <> 'failed'",
        """CREATE TABLE handoffs (
            queue text NOT NULL,
            task_id text NOT NULL,
            completed_at double precision NOT NULL,
            record jsonb NOT NULL,
            PRIMARY KEY (queue, task_id))""",
    ),
    # the tasks not finished, for a runner's round: read without visiting the finished ones
    2: ("CREATE INDEX tasks_live ON tasks (queue, seq) WHERE status IN ('queued', 'running')",),
}

_ready: set[str] = set()  # bus URLs whose task tables this process has seen at this version


async def migrate(conn: AsyncConnection, schema: str) -> int:
    """Bring the task tables of `schema` to TASKS_SCHEMA_VERSION; return the version found."""
    ident = sql.Identifier(schema)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"wavewait:{schema}:tasks"])
        await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
        await conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.task_schema_version ("
                "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(ident)
        )
        cur = await conn.execute(sql.SQL("SELECT coalesce(max(version), 0) FROM {}.task_schema_version").format(ident))
        row = await cur.fetchone()
        found = int(row[0]) if row else 0
        if found > TASKS_SCHEMA_VERSION:
            raise BusError(
                f"the task tables of bus schema {schema!r} are at version {found}, newer than this "
                f"wavewait understands ({TASKS_SCHEMA_VERSION}); upgrade wavewait on this machine"
            )
        await conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(ident))
        for version in range(found + 1, TASKS_SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version]:
                await conn.execute(statement)  # fixed text, no input
            await conn.execute("INSERT INTO task_schema_version (version) VALUES (%s)", [version])
    return found


#: one statement: count the task in (only below the budget), insert it, notify; no row back
#: when the budget is spent; a unique violation when a live task has the same dedup key
_ADD = (
    "WITH c AS (INSERT INTO task_queues AS q (queue, n) VALUES (%(queue)s, 1) "
    "ON CONFLICT (queue) DO UPDATE SET n = q.n + 1 WHERE q.n < %(max)s RETURNING n), "
    "i AS (INSERT INTO tasks (queue, id, seq, status, dedup_key, record) "
    "SELECT %(queue)s, %(id)s, c.n, %(status)s, %(key)s, jsonb_set(%(record)s::jsonb, '{seq}', to_jsonb(c.n)) "
    "FROM c RETURNING seq) "
    "SELECT seq, pg_notify(%(channel)s, %(payload)s) FROM i"
)
#: one statement: the status (only from the given ones, only by the task's agent if
#: `run_by`, only while no flight has the id `not_flight`: a compare-and-set), the handoff
#: beside it under the task's type, notify
_COMPLETE = (
    "WITH u AS (UPDATE tasks SET record = record || %(patch)s::jsonb, status = %(status)s "
    "WHERE queue = %(queue)s AND id = %(id)s AND status = ANY(%(from)s) "
    "AND (%(run_by)s::text IS NULL OR record->>'agent_id' = %(run_by)s) "
    "AND (%(not_flight)s::text IS NULL OR NOT EXISTS (SELECT 1 FROM agents a WHERE a.id = %(not_flight)s "
    "AND jsonb_typeof(a.record->'supervisor_pid') = 'number')) RETURNING record), "
    "h AS (INSERT INTO handoffs (queue, task_id, completed_at, record) "
    "SELECT %(queue)s, %(id)s, %(at)s, %(handoff)s::jsonb || jsonb_build_object('type', u.record->'type') FROM u "
    "ON CONFLICT (queue, task_id) DO UPDATE SET record = excluded.record, completed_at = excluded.completed_at) "
    "SELECT record, pg_notify(%(channel)s, %(payload)s) FROM u"
)

#: many tasks at once: counted in together (only if all fit the budget; the smallest of
#: their budgets), inserted with consecutive seqs in arrival order, one notification
_ADD_MANY = (
    "WITH c AS (INSERT INTO task_queues AS q (queue, n) SELECT %(queue)s, %(k)s::bigint WHERE %(k)s <= %(max)s "
    "ON CONFLICT (queue) DO UPDATE SET n = q.n + %(k)s WHERE q.n + %(k)s <= %(max)s RETURNING n), "
    "i AS (INSERT INTO tasks (queue, id, seq, status, dedup_key, record) "
    "SELECT %(queue)s, r.id, c.n - %(k)s + r.o, r.status, r.key, "
    "jsonb_set(r.record::jsonb, '{seq}', to_jsonb(c.n - %(k)s + r.o)) "
    "FROM c, unnest(%(ids)b::text[], %(statuses)b::text[], %(keys)b::text[], %(records)b::text[]) "
    "WITH ORDINALITY AS r(id, status, key, record, o) RETURNING id, seq) "
    "SELECT id, seq, (SELECT pg_notify(%(channel)s, %(payload)s)) FROM i"
)
#: many completions at once, each its own compare-and-set (as `_COMPLETE`), one notification.
#: The lists go in binary (`%b`): as text, each element is escaped by a regular expression,
#: which cost more than the statement for a batch of records
_COMPLETE_MANY = (
    "WITH r AS (SELECT * FROM unnest(%(ids)b::text[], %(statuses)b::text[], %(froms)b::text[], "
    "%(run_by)b::text[], %(not_flight)b::text[], %(ats)b::float8[], %(handoffs)b::text[]) "
    "AS r(id, status, from_, run_by, not_flight, at, handoff)), "
    "u AS (UPDATE tasks t SET record = t.record || jsonb_build_object('status', r.status, 'updated_at', r.at), "
    "status = r.status FROM r WHERE t.queue = %(queue)s AND t.id = r.id "
    "AND t.status = ANY(string_to_array(r.from_, ',')) "
    "AND (r.run_by IS NULL OR t.record->>'agent_id' = r.run_by) "
    "AND (r.not_flight IS NULL OR NOT EXISTS (SELECT 1 FROM agents a WHERE a.id = r.not_flight "
    "AND jsonb_typeof(a.record->'supervisor_pid') = 'number')) RETURNING t.id, t.record, r.at, r.handoff), "
    "h AS (INSERT INTO handoffs (queue, task_id, completed_at, record) "
    "SELECT %(queue)s, u.id, u.at, u.handoff::jsonb || jsonb_build_object('type', u.record->'type') FROM u "
    "ON CONFLICT (queue, task_id) DO UPDATE SET record = excluded.record, completed_at = excluded.completed_at) "
    "SELECT u.id, u.record, (SELECT pg_notify(%(channel)s, %(payload)s)) FROM u"
)


@dataclass(frozen=True, slots=True)
class _Add:
    task: Task
    max_tasks: int
    key: str  # the task's dedup key, computed once


@dataclass(frozen=True, slots=True)
class _Complete:
    task_id: str
    handoff: HandoffRecord
    record: str  # the handoff as stored (JSON)
    only_from: tuple[str, ...]
    run_by: str | None
    not_flight: str | None


def _patch(task_id: str, queue: str, changes: dict[str, Any]) -> dict[str, Any]:
    """The changed fields, validated and as JSON (id, queue and type are placeholders)."""
    checked = Task.model_validate({"id": task_id, "queue": queue, "type": "x"} | changes)
    return checked.model_dump(mode="json", include=set(changes)) | {"updated_at": now()}


class PgTaskStore:
    """One queue's rows in a PostgreSQL bus (handed out by `PostgresBus.tasks`): its
    statements run on the bus's connection, its subscriptions on the bus's listener."""

    def __init__(self, conn: PgConn, listener: Listener, queue: str) -> None:
        self.queue = check_id(queue, "queue")
        self.conn = conn
        self.listener = listener
        self.payload = queue_key(queue)
        # a duplicate waits for the next statement (where it meets the first as a conflict);
        # one task is completed in one statement at most
        self._adds: Batcher[_Add, Conflict | None] = Batcher(
            self._add_one, self._add_many, key=lambda r: r.key, inline=True
        )
        self._completes: Batcher[_Complete, Task | None] = Batcher(
            self._complete_one, self._complete_many, key=lambda r: r.task_id, inline=True
        )

    async def _ready(self) -> None:
        if self.conn.url in _ready:
            return

        async def go(conn: AsyncConnection) -> None:
            await migrate(conn, self.conn.schema)

        await self.conn.run(go)
        _ready.add(self.conn.url)

    async def add(self, task: Task, max_tasks: int) -> Conflict | None:
        await self._ready()
        return await self._adds(_Add(task, max_tasks, task.dedup_key))

    async def _add_one(self, r: _Add) -> Conflict | None:
        attempts = 0

        async def go(conn: AsyncConnection) -> Conflict | None:
            nonlocal attempts
            attempts += 1
            return await self._add_on(conn, r, retried=attempts > 1)

        return await self.conn.run(go)

    async def _add_on(self, conn: AsyncConnection, r: _Add, *, retried: bool) -> Conflict | None:
        """One enqueue; `retried`: an attempt before may have committed, its answer lost."""
        task = r.task
        if retried:
            cur = await conn.execute("SELECT seq FROM tasks WHERE queue = %s AND id = %s", [self.queue, task.id])
            if (row := await cur.fetchone()) is not None:
                task.seq = int(row[0])
                return None
        try:
            cur = await conn.execute(_ADD, self._add_params(r))
        except errors.UniqueViolation:
            cur = await conn.execute(
                "SELECT id FROM tasks WHERE queue = %s AND dedup_key = %s AND status <> 'failed'",
                [self.queue, r.key],
            )
            row = await cur.fetchone()
            return Conflict("dedup", existing=str(row[0]) if row else "(failed meanwhile; enqueue it again)")
        if (row := await cur.fetchone()) is not None:
            task.seq = int(row[0])
            return None
        cur = await conn.execute("SELECT n FROM task_queues WHERE queue = %s", [self.queue])
        row = await cur.fetchone()
        return Conflict("budget", count=int(row[0]) if row else 0)

    async def _add_many(self, rs: list[_Add]) -> list[Conflict | None]:
        """Enqueues that arrived together, in one statement; refused whole, one at a time."""
        params = {
            "queue": self.queue,
            "k": len(rs),
            "max": min(r.max_tasks for r in rs),
            "ids": [r.task.id for r in rs],
            "statuses": [r.task.status for r in rs],
            "keys": [r.key for r in rs],
            "records": [r.task.model_dump_json() for r in rs],
            "channel": self.conn.channel,
            "payload": self.payload,
        }
        attempts = 0

        async def go(conn: AsyncConnection) -> list[Conflict | None]:
            nonlocal attempts
            attempts += 1
            if attempts == 1:
                try:
                    cur = await conn.execute(_ADD_MANY, params)
                    seqs = {str(row[0]): int(row[1]) for row in await cur.fetchall()}
                except errors.UniqueViolation:
                    seqs = {}
                if seqs:  # all of them went in
                    for r in rs:
                        r.task.seq = seqs[r.task.id]
                    return [None] * len(rs)
            # refused whole, or run again after a lost answer: each on its own
            return [await self._add_on(conn, r, retried=attempts > 1) for r in rs]

        return await self.conn.run(go)

    def _add_params(self, r: _Add) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "max": r.max_tasks,
            "id": r.task.id,
            "status": r.task.status,
            "key": r.key,
            "record": r.task.model_dump_json(),
            "channel": self.conn.channel,
            "payload": self.payload,
        }

    async def get(self, task_id: str) -> Task | None:
        await self._ready()
        rows = await self.conn.rows(
            "SELECT record FROM tasks WHERE queue = %s AND id = %s", [self.queue, check_id(task_id, "taskId")]
        )
        return Task.model_validate(rows[0][0]) if rows else None

    async def some(self, task_ids: Sequence[str]) -> dict[str, Task]:
        await self._ready()
        ids = [check_id(t, "taskId") for t in task_ids]
        if not ids:
            return {}
        rows = await self.conn.rows("SELECT record FROM tasks WHERE queue = %s AND id = ANY(%s)", [self.queue, ids])
        found = [Task.model_validate(r[0]) for r in rows]
        return {t.id: t for t in found}

    async def tasks(self) -> list[Task]:
        await self._ready()
        rows = await self.conn.rows("SELECT record FROM tasks WHERE queue = %s ORDER BY seq, id", [self.queue])
        return [Task.model_validate(r[0]) for r in rows]

    async def live(self) -> list[Task]:
        await self._ready()
        rows = await self.conn.rows(
            "SELECT record FROM tasks WHERE queue = %s AND status IN ('queued', 'running') ORDER BY seq, id",
            [self.queue],
        )
        return [Task.model_validate(r[0]) for r in rows]

    async def update(self, task_id: str, only_from: Sequence[str], **changes: Any) -> Task | None:
        await self._ready()
        data = _patch(check_id(task_id, "taskId"), self.queue, changes)
        patch = json.dumps(data)
        attempts = 0

        async def go(conn: AsyncConnection) -> Task | None:
            nonlocal attempts
            attempts += 1
            cur = await conn.execute(
                "WITH u AS (UPDATE tasks SET record = record || %s::jsonb, status = coalesce(%s, status) "
                "WHERE queue = %s AND id = %s AND status = ANY(%s) RETURNING record) "
                "SELECT record, pg_notify(%s, %s) FROM u",
                [patch, data.get("status"), self.queue, task_id, list(only_from), self.conn.channel, self.payload],
            )
            row = await cur.fetchone()
            if row is None and attempts > 1:  # did the last attempt commit before its answer was lost?
                cur = await conn.execute(  # its patch is there, its updated_at included
                    "SELECT record FROM tasks WHERE queue = %s AND id = %s AND record @> %s::jsonb",
                    [self.queue, task_id, patch],
                )
                row = await cur.fetchone()
            return Task.model_validate(row[0]) if row else None

        return await self.conn.run(go)

    async def complete(
        self,
        task_id: str,
        handoff: HandoffRecord,
        only_from: Sequence[str],
        *,
        run_by: str | None = None,
        not_flight: str | None = None,
    ) -> Task | None:
        await self._ready()
        check_id(task_id, "taskId")
        record = handoff.model_dump_json(by_alias=True)
        return await self._completes(_Complete(task_id, handoff, record, tuple(only_from), run_by, not_flight))

    async def _complete_one(self, r: _Complete) -> Task | None:
        attempts = 0

        async def go(conn: AsyncConnection) -> Task | None:
            nonlocal attempts
            attempts += 1
            return await self._complete_on(conn, r, retried=attempts > 1)

        return await self.conn.run(go)

    async def _complete_on(self, conn: AsyncConnection, r: _Complete, *, retried: bool) -> Task | None:
        """One completion; `retried`: an attempt before may have committed, its answer lost."""
        h = r.handoff
        cur = await conn.execute(
            _COMPLETE,
            {
                "patch": json.dumps({"status": h.status, "updated_at": h.completed_at}),
                "status": h.status,
                "queue": self.queue,
                "id": r.task_id,
                "from": list(r.only_from),
                "at": h.completed_at,
                "handoff": r.record,
                "run_by": r.run_by,
                "not_flight": r.not_flight,
                "channel": self.conn.channel,
                "payload": self.payload,
            },
        )
        row = await cur.fetchone()
        if row is None and retried:  # did the last attempt commit before its answer was lost?
            cur = await conn.execute(
                "SELECT t.record FROM tasks t JOIN handoffs h ON h.queue = t.queue AND h.task_id = t.id "
                "WHERE t.queue = %s AND t.id = %s AND h.record - 'type' = %s::jsonb - 'type'",
                [self.queue, r.task_id, r.record],
            )
            row = await cur.fetchone()
        return Task.model_validate(row[0]) if row else None

    async def _complete_many(self, rs: list[_Complete]) -> list[Task | None]:
        """Completions that arrived together, in one statement, each its own compare-and-set."""
        params = {
            "queue": self.queue,
            "ids": [r.task_id for r in rs],
            "statuses": [r.handoff.status for r in rs],
            "froms": [",".join(r.only_from) for r in rs],
            "run_by": [r.run_by for r in rs],
            "not_flight": [r.not_flight for r in rs],
            "ats": [r.handoff.completed_at for r in rs],
            "handoffs": [r.record for r in rs],
            "channel": self.conn.channel,
            "payload": self.payload,
        }
        attempts = 0

        async def go(conn: AsyncConnection) -> list[Task | None]:
            nonlocal attempts
            attempts += 1
            if attempts > 1:  # run again after a lost answer: each on its own, reading back first
                return [await self._complete_on(conn, r, retried=True) for r in rs]
            cur = await conn.execute(_COMPLETE_MANY, params)
            done = {str(row[0]): row[1] for row in await cur.fetchall()}
            return [Task.model_validate(done[r.task_id]) if r.task_id in done else None for r in rs]

        return await self.conn.run(go)

    async def handoff(self, task_id: str) -> HandoffRecord | None:
        await self._ready()
        rows = await self.conn.rows(
            "SELECT record FROM handoffs WHERE queue = %s AND task_id = %s", [self.queue, check_id(task_id, "taskId")]
        )
        return HandoffRecord.model_validate(rows[0][0]) if rows else None

    async def handoffs_of(self, task_ids: Sequence[str]) -> dict[str, HandoffRecord]:
        await self._ready()
        ids = [check_id(t, "taskId") for t in task_ids]
        rows = await self.conn.rows(
            "SELECT record FROM handoffs WHERE queue = %s AND task_id = ANY(%s)", [self.queue, ids]
        )
        found = [HandoffRecord.model_validate(r[0]) for r in rows]
        return {h.task_id: h for h in found}

    async def handoffs(self) -> list[HandoffRecord]:
        await self._ready()
        rows = await self.conn.rows(
            "SELECT record FROM handoffs WHERE queue = %s ORDER BY completed_at, task_id", [self.queue]
        )
        return [HandoffRecord.model_validate(r[0]) for r in rows]

    async def subscribe(self) -> Keyed:
        return await self.listener.subscribe_keys(keys=[self.payload])
