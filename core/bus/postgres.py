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
  itself (`VACUUM_EVERY`): a queue's dead rows would otherwise slow every claim.
- waits carry a lease on the server's clock, renewed by the waiting process; the
  recovery sweep returns claims of waits that ended, whose process died on this host, or
  whose lease ran out (their host vanished).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool, PoolClosed

from ..errors import BusError
from ..ids import check_id, new_id
from ..model import SYSTEM_EVENTS_KEPT, SYSTEM_ITEM_TYPES, Agent, Item, ItemRef, McpTask, WaitRecord, now
from ..proc import alive, hostname
from ..watch import Fanout, Keyed
from . import pg_queries as q
from . import wave_docs
from .keys import arrival_key, interest
from .pg_batch import Batcher
from .pg_schema import SCHEMA_VERSION, current_version, migrate
from .pg_tasks import PgTaskStore

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_SCHEMA = "wavewait"
HISTORY_KEPT = 1000
#: seconds a wait record stays valid without renewal (server clock); renewed every third
WAIT_LEASE = float(os.environ.get("WAVEWAIT_PG_WAIT_LEASE", "30"))
LISTEN_CHECK = 10.0  # how often an idle LISTEN connection proves it is still connected
RECONNECT_TIMEOUT = float(os.environ.get("WAVEWAIT_PG_RECONNECT_TIMEOUT", "60"))
OPEN_TIMEOUT = float(os.environ.get("WAVEWAIT_PG_OPEN_TIMEOUT", "5"))  # a restart takes a second or two
#: pooled connections per process (plus one for LISTEN): many concurrent waits in one
#: server queue for these; WAVEWAIT_PG_POOL sets it (mind the server's max_connections)
POOL_MAX = int(os.environ.get("WAVEWAIT_PG_POOL", "10"))
#: seconds between the bus's own vacuums of its churn tables, by a process that changed rows
#: in them since (WAVEWAIT_PG_VACUUM_EVERY; 0: never, leave it to autovacuum). A queue's
#: tables turn over every row in seconds; the dead ones pile up until a vacuum, and every
#: claim walks past them: at 1,000 messages/s, 476,000 dead rows in `items` and 240,000 in
#: `waits` after 240 s on a server with autovacuum off, and the claims fell behind. Autovacuum
#: at its defaults looks once a minute and waits for a fifth of the table to be dead.
VACUUM_EVERY = float(os.environ.get("WAVEWAIT_PG_VACUUM_EVERY", "10"))
#: a fan-in over up to this many senders reads only their rows; over more, the whole backlog
#: costs less than sending every sender's id with each read
PENDING_SENDERS = 100
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,39}$")
_TRANSIENT = (psycopg.OperationalError,)  # lost connection, restart, pool timeout, deadlock


class _Claim(NamedTuple):
    inbox: str
    wait_id: str
    limit: int


class _Each(NamedTuple):
    inbox: str
    wait_id: str
    senders: tuple[str, ...]


class _Register(NamedTuple):
    record: WaitRecord
    inbox: str
    limit: int  # 0: no claim


class _Take(NamedTuple):
    inbox: str
    wait_id: str
    taker: str


def _claimed(rows: list[tuple[Any, ...]]) -> list[Item]:
    return sorted((Item.model_validate(r | {"seq": s}) for s, r, *_ in rows), key=lambda i: i.seq)


def _by_wait(rows: list[tuple[Any, ...]], waits: Sequence[str]) -> dict[str, list[tuple[Any, ...]]]:
    """Rows of a statement made for several waits (the wait is the last column), by wait."""
    out: dict[str, list[tuple[Any, ...]]] = {w: [] for w in waits}
    for row in rows:
        out[row[-1]].append(row[:-1])
    return out


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


def _taken(rows: list[tuple[Any, ...]]) -> list[Item]:
    """History rows as taken items, in their original order."""
    return sorted(
        (Item.model_validate(r | {"seq": s, "taken_by": by, "taken_at": at}) for s, r, by, at in rows),
        key=lambda i: i.seq,
    )


def log_dir() -> Path:
    """Where agents spawned on this machine write their output (the bus has no folder)."""
    if explicit := os.environ.get("WAVEWAIT_LOG_DIR"):
        return Path(explicit).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(state) / "wavewait" / "logs"


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


#: a PostgreSQL subscription is a keyed one: the NOTIFY payloads are its keys
PgSubscription = Keyed
#: NOTIFY payloads must stay under 8,000 bytes; keys are joined by spaces up to this
PAYLOAD_BYTES = 7900


def payloads(keys: Sequence[str]) -> list[str]:
    """Keys coalesced into as few NOTIFY payloads as fit (space-separated, each < 8,000 bytes)."""
    out: list[str] = []
    chunk: list[str] = []
    size = 0
    for key in dict.fromkeys(keys):
        if chunk and size + 1 + len(key) > PAYLOAD_BYTES:
            out.append(" ".join(chunk))
            chunk, size = [], 0
        chunk.append(key)
        size += len(key) + (1 if size else 0)
    if chunk:
        out.append(" ".join(chunk))
    return out


def _live(host: str | None, pid: int | None, pid_start: str | None, leased: bool | None) -> bool:
    """A wait is live while its process runs (on this host, where we can see it) or while its
    lease holds (elsewhere)."""
    if host == hostname():
        return alive(pid, pid_start)
    return bool(leased)


class PostgresBus:
    """A bus in a PostgreSQL schema; open with `await PostgresBus.open(url)`."""

    multi_host = True  # agents may run on other hosts: supervisors renew leases
    recovers_all_at_once = True  # one statement finds every claiming wait (an index on claimed_by)
    reliable_changes = True  # NOTIFY is transactional; after a reconnect every wait re-reads

    def __init__(self, url: str, conninfo: str, schema: str) -> None:
        self.url = url
        self.conninfo = conninfo
        self.schema = schema
        self.channel = f"wavewait.{schema}"
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
        self._fanout = Fanout()  # every subscription of this process, by key
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self._listen_error: BaseException | None = None
        self._my_waits: set[str] = set()
        self._moved: dict[str, int] = {}  # inbox -> items this process moved to history since its trim
        # claims and takes of concurrent waits share statements (pg_batch.py): one claimer per
        # type filter (claims on one inbox share out its oldest rows), one taker
        self._claimers: dict[tuple[str, ...], Batcher[_Claim, list[Item]]] = {}
        self._registrars: dict[tuple[str, ...], Batcher[_Register, list[Item]]] = {}
        self._each: dict[tuple[str, ...], Batcher[_Each, list[Item]]] = {}
        self._takers: Batcher[_Take, list[Item]] = Batcher(self._take_one, self._take_many, key=lambda r: r.wait_id)
        self._agent_reads: Batcher[tuple[str, ...], dict[str, Agent]] = Batcher(
            self._read_agents, self._read_agents_many, key=lambda _: object()
        )
        self._renewer: asyncio.Task[None] | None = None
        self._churned = False  # rows of the churn tables changed since the last vacuum
        self._vacuumed_at = time.monotonic()
        self._vacuum: asyncio.Task[None] | None = None
        self._closed = False

    # ------------------------------------------------------------------ opening
    @classmethod
    async def open(cls, url: str) -> PostgresBus:
        """Connect, create or migrate the schema if needed, and start the pool."""
        conninfo, schema = split_url(url)
        bus = cls(url, conninfo, schema)
        deadline = time.monotonic() + OPEN_TIMEOUT
        while True:  # one direct connection first, so a wrong URL fails soon and clearly
            try:
                async with await AsyncConnection.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
                    await bus._ensure_schema(conn)
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
            await bus.pool.open(wait=True, timeout=10.0)
        except psycopg.OperationalError as e:
            await bus.pool.close()
            raise BusError(f"cannot open a connection pool to {redact(url)}: {e}; check the server") from e
        return bus

    async def _configure(self, conn: AsyncConnection) -> None:
        await conn.execute(q.SET_SEARCH_PATH.format(sql.Identifier(self.schema)))
        if "synchronous_commit" not in self.conninfo:
            # like the directory bus (rename, no fsync): a commit survives any client crash
            # and a clean server restart; only a server crash may drop its last fraction of
            # a second. Put options=-csynchronous_commit%3Don in the URL to wait for the disk.
            await conn.execute(q.SET_ASYNC_COMMIT)

    async def _ensure_schema(self, conn: AsyncConnection) -> None:
        if await current_version(conn, self.schema) == SCHEMA_VERSION:
            return
        before = await migrate(conn, self.schema)
        if before < SCHEMA_VERSION:
            log.info("wavewait: bus schema %s migrated from version %d to %d", self.schema, before, SCHEMA_VERSION)

    # ------------------------------------------------------------------ running statements
    async def _run(self, fn: Callable[[AsyncConnection], Awaitable[T]]) -> T:
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

    async def _rows(self, query: Any, params: Any = None) -> list[tuple[Any, ...]]:
        async def go(conn: AsyncConnection) -> list[tuple[Any, ...]]:
            cur = await conn.execute(query, params)
            return await cur.fetchall() if cur.description else []

        return await self._run(go)

    async def _count(self, query: Any, params: Any = None) -> int:
        async def go(conn: AsyncConnection) -> int:
            cur = await conn.execute(query, params)
            return cur.rowcount

        return await self._run(go)

    async def _notify(self, *keys: str) -> None:
        if keys:
            await self._rows(q.NOTIFY, [self.channel, payloads(keys)])

    # ------------------------------------------------------------------ agents
    async def put_agent(self, agent: Agent) -> None:
        check_id(agent.id, "agent")
        await self._rows(
            q.PUT_AGENT,
            [agent.id, agent.created_at, agent.model_dump_json(), self.channel, f"a:{agent.id}"],
        )

    async def get_agent(self, agent_id: str) -> Agent | None:
        rows = await self._rows(q.GET_AGENT, [check_id(agent_id, "agent")])
        return Agent.model_validate(rows[0][0]) if rows else None

    async def get_agents(self, agent_ids: Sequence[str]) -> dict[str, Agent]:
        """One SELECT for many records (`id = ANY(...)`), not one per agent; shared with
        the reads other waits of this process make at the same time (reads never collide)."""
        ids = tuple(check_id(a, "agent") for a in agent_ids)
        if not ids:
            return {}
        return await self._agent_reads(ids)

    async def _read_agents(self, ids: tuple[str, ...]) -> dict[str, Agent]:
        rows = await self._rows(q.GET_AGENTS, [list(ids)])
        return {i: Agent.model_validate(r) for i, r in rows}

    async def _read_agents_many(self, reads: list[tuple[str, ...]]) -> list[dict[str, Agent]]:
        rows = dict(await self._rows(q.GET_AGENTS, [list({i for ids in reads for i in ids})]))
        return [{i: Agent.model_validate(rows[i]) for i in ids if i in rows} for ids in reads]

    async def list_agents(self) -> list[Agent]:
        rows = await self._rows(q.LIST_AGENTS)
        return [Agent.model_validate(r[0]) for r in rows]

    async def update_agent(self, agent_id: str, **changes: Any) -> Agent | None:
        return await self._modify(agent_id, None, None, changes)

    async def note_preview(self, agent_id: str, **changes: Any) -> None:
        """One UPDATE is cheap here: no coalescing needed."""
        await self._modify(agent_id, None, None, changes)

    async def transition(self, agent_id: str, status: str, only_from: Sequence[str], **changes: Any) -> Agent | None:
        """Move an agent to `status` if it is in `only_from`; None when nothing changed.

        One conditional UPDATE: the row lock makes each transition happen once.
        """
        return await self._modify(agent_id, status, only_from, changes)

    async def _modify(
        self,
        agent_id: str,
        status: str | None,
        only_from: Sequence[str] | None,
        changes: dict[str, Any],
    ) -> Agent | None:
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
            params += [self.channel, f"a:{agent_id}"]
        rows = await self._rows(query, params)
        return Agent.model_validate(rows[0][0]) if rows else None

    # ------------------------------------------------------------------ items
    async def deliver(self, item: Item) -> Item:
        check_id(item.to, "inbox")

        async def go(conn: AsyncConnection) -> int:
            cur = await conn.execute(
                q.DELIVER,
                [
                    item.id,
                    item.to,
                    item.type,
                    item.sender,
                    item.model_dump_json(exclude={"seq"}),
                    self.channel,
                    arrival_key(item.to, item.sender),
                ],
            )
            row = await cur.fetchone()
            if row is None:  # a retry after the first attempt committed: the same item, once
                cur = await conn.execute(q.DELIVERED_SEQ, [item.id, item.id, item.to])
                row = await cur.fetchone()
                if row is None:
                    raise BusError(f"item id {item.id} is already used by another inbox item")
            if item.type in SYSTEM_ITEM_TYPES:
                await conn.execute(
                    q.TRIM_EVENTS, {"inbox": item.to, "types": sorted(SYSTEM_ITEM_TYPES), "keep": SYSTEM_EVENTS_KEPT}
                )
            return int(row[0])

        seq = await self._run(go)
        return item.model_copy(update={"seq": seq})

    async def pending(self, inbox: str, senders: Collection[str] | None = None) -> list[ItemRef]:
        """With a few `senders` (a fan-in's read), only their rows come back, not the backlog."""
        check_id(inbox, "inbox")
        if senders is not None and len(senders) <= PENDING_SENDERS:
            rows = await self._rows(q.PENDING_FROM, [inbox, list(senders)])
        else:
            rows = await self._rows(q.PENDING, [inbox])
        refs = [ItemRef(seq=s, type=t, sender=f, id=i) for s, t, f, i in rows]
        return refs if senders is None else [r for r in refs if r.sender in senders]

    async def peek(self, inbox: str) -> list[Item]:
        rows = await self._rows(q.PEEK, [check_id(inbox, "inbox")])
        return [Item.model_validate(r | {"seq": s}) for s, r in rows]

    async def claim(self, inbox: str, ref: ItemRef, wait_id: str) -> Item | None:
        """Claim one item for `wait_id`; None if another wait has it. Idempotent per wait."""
        rows = await self._rows(
            q.CLAIM,
            {"w": check_id(wait_id, "wait"), "seq": ref.seq, "inbox": check_id(inbox, "inbox")},
        )
        return Item.model_validate(rows[0][1] | {"seq": rows[0][0]}) if rows else None

    async def claim_many(self, inbox: str, refs: Sequence[ItemRef], wait_id: str) -> list[Item]:
        """Claim these items in one statement (rows other waits are claiming are skipped)."""
        if not refs:
            return []
        rows = await self._rows(
            q.CLAIM_MANY,
            {"w": check_id(wait_id, "wait"), "seqs": [r.seq for r in refs], "inbox": check_id(inbox, "inbox")},
        )
        return sorted((Item.model_validate(r | {"seq": s}) for s, r in rows), key=lambda i: i.seq)

    async def claim_next(
        self,
        inbox: str,
        wait_id: str,
        types: Sequence[str] | None = None,
        limit: int = 1,
    ) -> list[Item]:
        """Claim up to `limit` of the oldest unclaimed items in one statement (skips locked
        rows), shared with the claims other waits of this process make at the same time."""
        kinds = tuple(types or ())
        claimer = self._claimers.get(kinds)
        if claimer is None:
            one, many = partial(self._claim_one, kinds), partial(self._claim_many, kinds)
            claimer = self._claimers[kinds] = Batcher(one, many, key=lambda r: r.wait_id)
        return await claimer(_Claim(check_id(inbox, "inbox"), check_id(wait_id, "wait"), limit))

    async def _claim_one(self, types: tuple[str, ...], r: _Claim) -> list[Item]:
        rows = await self._once(
            q.CLAIM_NEXT.format(q.TYPE_FILTER if types else sql.SQL("")),
            q.HELD,
            {"w": r.wait_id, "inbox": r.inbox, "types": list(types), "n": r.limit},
        )
        return _claimed(rows)

    async def _claim_many(self, types: tuple[str, ...], rs: list[_Claim]) -> list[list[Item]]:
        rows = await self._once(
            q.CLAIM_NEXT_MANY.format(q.TYPE_FILTER if types else sql.SQL("")),
            q.HELD_MANY,
            {
                "inboxes": [r.inbox for r in rs],
                "ws": [r.wait_id for r in rs],
                "ns": [r.limit for r in rs],
                "types": list(types),
            },
        )
        got = _by_wait(rows, [r.wait_id for r in rs])
        return [_claimed(got[r.wait_id]) for r in rs]

    async def claim_each(
        self, inbox: str, wait_id: str, senders: Collection[str], types: Sequence[str], *, relist: bool = False
    ) -> list[Item]:
        """One statement for every sender (their rows found by sender, not through the
        backlog), shared with the fan-ins of this process claiming at the same time."""
        if not senders:
            return []
        if len(senders) > PENDING_SENDERS:  # a fan-in over thousands: one read of the inbox, then claims
            return await self._claim_each_listed(inbox, wait_id, senders, types)
        kinds = tuple(types)
        each = self._each.get(kinds)
        if each is None:
            many = partial(self._claim_each, kinds)
            each = self._each[kinds] = Batcher(
                lambda r: self._claim_each_one(many, r), many, keys=lambda r: ((r.inbox, s) for s in r.senders)
            )
        request = _Each(
            check_id(inbox, "inbox"), check_id(wait_id, "wait"), tuple(check_id(s, "sender") for s in senders)
        )
        return await each(request)

    async def _claim_each_listed(
        self, inbox: str, wait_id: str, senders: Collection[str], types: Sequence[str]
    ) -> list[Item]:
        wanted = set(types)
        queued: dict[str, list[ItemRef]] = {}
        for ref in await self.pending(inbox):
            if ref.sender in senders and ref.type in wanted:
                queued.setdefault(ref.sender, []).append(ref)
        got: list[Item] = []
        while queued:  # where another wait got one first, that sender's next
            items = await self.claim_many(inbox, [refs.pop(0) for refs in queued.values()], wait_id)
            got += items
            done = {i.sender for i in items}
            queued = {s: refs for s, refs in queued.items() if s not in done and refs}
        got.sort(key=lambda i: i.seq)
        return got

    @staticmethod
    async def _claim_each_one(many: Callable[[list[_Each]], Awaitable[list[list[Item]]]], r: _Each) -> list[Item]:
        return (await many([r]))[0]

    async def _claim_each(self, types: tuple[str, ...], rs: list[_Each]) -> list[list[Item]]:
        pairs = [(r.inbox, r.wait_id, s) for r in rs for s in r.senders]
        asked = {(w, s) for _, w, s in pairs}
        params = {
            "inboxes": [p[0] for p in pairs],
            "ws": [p[1] for p in pairs],
            "senders": [p[2] for p in pairs],
            "types": list(types),
        }
        # on a retry (the first attempt's answer lost) what a wait holds of a sender it asked
        # for is what that attempt claimed: read back, not claimed again (a fan-in holds
        # nothing of a sender it still waits on)
        rows = await self._once(q.CLAIM_EACH.format(q.TYPE_FILTER if types else sql.SQL("")), q.HELD_MANY, params)
        rows = [row for row in rows if (row[-1], row[1].get("sender")) in asked]
        got = _by_wait(rows, [r.wait_id for r in rs])
        return [_claimed(got[r.wait_id]) for r in rs]

    async def holds(self, inbox: str, wait_id: str) -> int | None:
        rows = await self._rows(
            q.HOLDS, {"lease": WAIT_LEASE, "w": check_id(wait_id, "wait"), "inbox": check_id(inbox, "inbox")}
        )
        return int(rows[0][0]) if rows else None

    async def release(self, inbox: str, wait_id: str) -> int:
        rows = await self._rows(q.RELEASE, [check_id(inbox, "inbox"), check_id(wait_id, "wait")])
        await self._notify(*(arrival_key(inbox, sender) for (sender,) in rows))
        return len(rows)

    async def unclaim(self, inbox: str, ref: ItemRef, wait_id: str) -> bool:
        """Return one claim of `wait_id` to the inbox (a wait that took more than it can hand on)."""
        n = await self._count(
            "UPDATE items SET claimed_by = NULL WHERE inbox = %s AND seq = %s AND claimed_by = %s",
            [check_id(inbox, "inbox"), ref.seq, check_id(wait_id, "wait")],
        )
        if n:
            await self._notify(arrival_key(inbox, ref.sender))
        return bool(n)

    async def take(self, inbox: str, wait_id: str, taker: str, *, end: bool = False) -> list[Item]:
        """Move the wait's claims to history (and end the wait, `end`, in the same statement).
        On a retry (the first commit's answer was lost) the items this wait already moved are
        read back, so none goes missing."""
        check_id(inbox, "inbox")
        check_id(wait_id, "wait")
        if end:  # shared with the takes other waits of this process make at the same time
            self._my_waits.discard(wait_id)
            return await self._takers(_Take(inbox, wait_id, taker))
        params = {"inbox": inbox, "w": wait_id, "taker": taker, "at": now()}
        rows = await self._once(q.TAKE, q.TAKEN_BY, params)
        await self._moved_to_history({inbox: len(rows)})
        return _taken(rows)

    async def _take_one(self, r: _Take) -> list[Item]:
        params = {"inbox": r.inbox, "w": r.wait_id, "taker": r.taker, "at": now()}
        params |= {"channel": self.channel, "key": f"w:{r.wait_id}"}
        rows = await self._once(q.TAKE_AND_END, q.TAKEN_BY, params)
        await self._moved_to_history({r.inbox: len(rows)})
        return _taken(rows)

    async def _take_many(self, rs: list[_Take]) -> list[list[Item]]:
        waits = [r.wait_id for r in rs]
        params = {
            "inboxes": [r.inbox for r in rs],
            "ws": waits,
            "takers": [r.taker for r in rs],
            "at": now(),
            "channel": self.channel,
        }
        rows = await self._once(q.TAKE_AND_END_MANY, q.TAKEN_BY_MANY, params)
        got = _by_wait(rows, waits)
        moved: dict[str, int] = {}
        for r in rs:
            moved[r.inbox] = moved.get(r.inbox, 0) + len(got[r.wait_id])
        await self._moved_to_history(moved)
        return [_taken(got[r.wait_id]) for r in rs]

    async def take_next(
        self,
        inbox: str,
        wait_id: str,
        taker: str,
        types: Sequence[str] | None = None,
        limit: int = 1,
    ) -> list[Item]:
        """Claim and take up to `limit` of the oldest unclaimed items in one statement.

        Not part of the Bus protocol: a fast path for consumers that take whatever is next
        (no claimed state in between, so nothing to return if the consumer dies). Each call
        files its rows in history under its own token, so a retry after a lost answer reads
        back exactly this call's items.
        """
        check_id(inbox, "inbox")
        token = f"{check_id(wait_id, 'wait')}/{new_id()}"  # '/' is no id character: no clash
        type_filter = q.TYPE_FILTER if types else sql.SQL("")
        params = {"inbox": inbox, "w": token, "taker": taker, "at": now(), "types": list(types or []), "n": limit}
        rows = await self._once(q.TAKE_NEXT.format(type_filter), q.TAKEN_BY, params)
        await self._moved_to_history({inbox: len(rows)})
        return _taken(rows)

    async def _once(self, query: Any, read_back: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
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

        return await self._run(go)

    async def _moved_to_history(self, moved: dict[str, int]) -> None:
        """Trim each inbox's history when it is due: once this process has moved a twentieth
        of HISTORY_KEPT into it since its last trim, not after every take (the trim scans
        the kept rows). An inbox's history then holds at most HISTORY_KEPT plus one interval
        and one take per writer."""
        self._churned = True
        self._vacuum_when_due()
        for inbox, n in moved.items():
            total = self._moved.get(inbox, 0) + n
            if total >= max(1, HISTORY_KEPT // 20):
                await self._count(q.TRIM_HISTORY, {"inbox": inbox, "keep": HISTORY_KEPT})
                total = 0
            self._moved[inbox] = total

    async def history(self, inbox: str, limit: int = 100) -> list[Item]:
        rows = await self._rows(q.HISTORY, [check_id(inbox, "inbox"), limit])
        return _taken(rows)

    # ------------------------------------------------------------------ waits
    async def register_wait(
        self,
        record: WaitRecord,
        *,
        claim_from: str | None = None,
        types: Sequence[str] | None = None,
        limit: int = 1,
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
        self._my_waits.add(record.id)
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renew_leases(), name="wavewait-pg-leases")
        return got

    async def _register_one(self, types: tuple[str, ...], r: _Register) -> list[Item]:
        rec = r.record
        rows = await self._once(
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
                "channel": self.channel,
                "key": f"w:{rec.id}",
                "inbox": r.inbox,
                "types": list(types),
                "n": r.limit,
            },
        )
        return _claimed(rows)

    async def _register_many(self, types: tuple[str, ...], rs: list[_Register]) -> list[list[Item]]:
        waits = [r.record.id for r in rs]
        rows = await self._once(
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
                "channel": self.channel,
                "types": list(types),
            },
        )
        got = _by_wait(rows, waits)
        return [_claimed(got[w]) for w in waits]

    async def _renew_leases(self) -> None:
        """Keep the leases of this process's waits fresh while they run."""
        while self._my_waits and not self._closed:
            await asyncio.sleep(WAIT_LEASE / 3)
            ids = list(self._my_waits)
            if not ids:
                break
            try:
                await self._count(q.RENEW_LEASES, [WAIT_LEASE, ids])
            except BusError as e:  # the next round tries again; the lease may lapse meanwhile
                log.warning("wavewait: could not renew wait leases: %s", e)

    async def update_wait(self, wait_id: str, progress: str) -> None:
        await self._rows(
            q.UPDATE_WAIT,
            [progress, WAIT_LEASE, check_id(wait_id, "wait"), progress, self.channel, f"w:{wait_id}"],
        )

    async def end_wait(self, wait_id: str) -> None:
        check_id(wait_id, "wait")
        self._my_waits.discard(wait_id)
        await self._rows(q.END_WAIT, [wait_id, self.channel, f"w:{wait_id}"])

    async def list_waits(self) -> list[WaitRecord]:
        rows = await self._rows(q.LIST_WAITS)
        records = []
        for data, leased in rows:
            rec = WaitRecord.model_validate(data)
            if not self._wait_live(rec, leased):
                await self.end_wait(rec.id)  # its process or host is gone; the sweep returns its claims
                continue
            records.append(rec)
        return records

    @staticmethod
    def _wait_live(rec: WaitRecord | None, leased: bool | None) -> bool:
        return rec is not None and _live(rec.host, rec.pid, rec.pid_start, leased)

    async def interrupt(self, wait_id: str) -> bool:
        rows = await self._rows(
            q.INTERRUPT,
            [check_id(wait_id, "wait"), self.channel, f"w:{wait_id} x:{wait_id}"],
        )
        return bool(rows)

    async def interrupted(self, wait_id: str) -> bool:
        rows = await self._rows(q.INTERRUPTED, [check_id(wait_id, "wait")])
        return bool(rows and rows[0][0])

    async def get_resolution(self, key: str) -> dict[str, Any] | None:
        rows = await self._rows(q.GET_RESOLUTION, [check_id(key, "id")])
        return rows[0][0] if rows else None

    async def put_resolution(self, key: str, value: dict[str, Any]) -> None:
        await self._rows(
            q.PUT_RESOLUTION,
            [check_id(key, "id"), json.dumps(value)],
        )

    # ------------------------------------------------------------------ wave documents
    async def get_wave_doc(self, wave: str, kind: str) -> dict[str, Any] | None:
        rows = await self._rows(q.GET_WAVE_DOC, list(wave_docs.doc_key(wave, kind)))
        return rows[0][0] if rows else None

    async def update_wave_doc(self, wave: str, kind: str, change: wave_docs.DocChange) -> dict[str, Any] | None:
        wave, kind = wave_docs.doc_key(wave, kind)

        async def go(conn: AsyncConnection) -> dict[str, Any] | None:
            async with conn.transaction():
                await conn.execute(q.LOCK_WAVE_DOC, [f"{self.channel}:wave:{wave}~{kind}"])
                cur = await conn.execute(q.GET_WAVE_DOC, [wave, kind])
                row = await cur.fetchone()
                current = row[0] if row else None
                new = change(current)
                if new is None or new == current:
                    return current
                await conn.execute(q.PUT_WAVE_DOC, [wave, kind, now(), wave_docs.encode(new, wave, kind)])
                await conn.execute(q.NOTIFY, [self.channel, [wave_docs.payload(wave)]])
                return new

        return await self._run(go)

    async def subscribe_waves(self, wave: str | None = None) -> Keyed:
        if wave is None:
            return await self.subscribe_payloads(prefixes=[wave_docs.payload("")])
        return await self.subscribe_payloads(keys=[wave_docs.payload(check_id(wave, "wave"))])

    # ------------------------------------------------------------------ MCP tasks
    async def put_mcp_task(self, task: McpTask) -> None:
        await self._rows(
            q.PUT_MCP_TASK, [check_id(task.id, "taskId"), task.status, task.updated_at, task.model_dump_json()]
        )

    async def get_mcp_task(self, task_id: str) -> McpTask | None:
        rows = await self._rows(q.GET_MCP_TASK, [check_id(task_id, "taskId")])
        return McpTask.model_validate(rows[0][0]) if rows else None

    async def transition_mcp_task(
        self, task_id: str, status: str, only_from: Sequence[str], **changes: Any
    ) -> McpTask | None:
        at = now()
        patch = changes | {"status": status, "updated_at": at}  # JSON values: status, results, messages
        rows = await self._rows(
            q.TRANSITION_MCP_TASK,
            [status, at, json.dumps(patch), check_id(task_id, "taskId"), list(only_from)],
        )
        return McpTask.model_validate(rows[0][0]) if rows else None

    async def delete_mcp_task(self, task_id: str) -> None:
        await self._rows(q.DELETE_MCP_TASK, [check_id(task_id, "taskId")])

    # ------------------------------------------------------------------ changes
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
        sub = self._fanout.add(
            Keyed(self._fanout, spec.keys, spec.prefixes, routes=spec.routes, trees=spec.trees, pool=spec.pool)
        )
        return await self._listening_for(sub)

    async def subscribe_payloads(self, keys: Sequence[str] = (), prefixes: Sequence[str] = ()) -> Keyed:
        """Like `subscribe`, for stores beside the bus that notify on its channel with their own
        payloads (the task queue's `q:<queue>`)."""
        return await self._listening_for(self._fanout.add(Keyed(self._fanout, keys, prefixes)))

    async def _listening_for(self, sub: Keyed) -> Keyed:
        try:
            await self._ensure_listening()
        except BaseException:
            sub.close()
            raise
        return sub

    async def _ensure_listening(self) -> None:
        if self._listener is None or self._listener.done():
            self._listening.clear()
            self._listen_error = None
            self._listener = asyncio.create_task(self._listen(), name="wavewait-pg-listen")
        if self._listening.is_set():
            return
        try:
            await asyncio.wait_for(self._listening.wait(), RECONNECT_TIMEOUT)
        except TimeoutError:
            raise BusError(
                f"cannot LISTEN on the PostgreSQL bus at {redact(self.url)} "
                f"({self._listen_error or 'no answer'}); check the server, then retry"
            ) from None

    async def _listen(self) -> None:
        """The process's one LISTEN connection; reconnects for as long as the bus is open."""
        delay = 0.05
        connected_before = False
        while not self._closed:
            conn: AsyncConnection | None = None
            try:
                conn = await AsyncConnection.connect(self.conninfo, autocommit=True, connect_timeout=5)
                await conn.execute(q.LISTEN.format(sql.Identifier(self.channel)))
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
                self._listen_error = e
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
            if not self._closed:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _dispatch(self, payload: str) -> None:
        """A payload names one key or several (space-separated); each goes to its waits."""
        self._fanout.dispatch(payload.split(" "))

    # ------------------------------------------------------------------ upkeep
    def _vacuum_when_due(self) -> None:
        """Start a vacuum of the churn tables in the background when one is due."""
        due = VACUUM_EVERY > 0 and time.monotonic() - self._vacuumed_at >= VACUUM_EVERY
        if due and self._churned and not self._closed and (self._vacuum is None or self._vacuum.done()):
            self._churned, self._vacuumed_at = False, time.monotonic()
            self._vacuum = asyncio.create_task(self._vacuum_churn(), name="wavewait-pg-vacuum")

    async def _vacuum_churn(self) -> None:
        key = f"wavewait:{self.schema}:vacuum"

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
            await self._run(go)
        except (BusError, psycopg.Error) as e:  # upkeep: the next one tries again
            log.warning("wavewait: could not vacuum the PostgreSQL bus's tables: %s", e)

    async def recover(self, inbox: str | None = None) -> int:
        """Return claims whose wait ended, whose process died here, or whose lease ran out."""
        inbox_filter = sql.SQL("")
        params: list[Any] = []
        if inbox is not None:
            inbox_filter = q.IN_INBOX
            params.append(check_id(inbox, "inbox"))
        rows = await self._rows(q.CLAIMING_WAITS.format(inbox_filter), params)
        returned = 0
        for wait_id, exists, host, pid, pid_start, leased in rows:
            if exists and _live(host, pid, pid_start, leased):
                continue
            if exists:
                await self.end_wait(wait_id)
            boxes = await self._rows(q.RETURN_CLAIMS, [wait_id])
            for box in sorted({b for b, _ in boxes}):
                n = sum(1 for b, _ in boxes if b == box)
                log.warning("wavewait: returned %d claimed item(s) of ended wait %s to %s", n, wait_id, box)
            await self._notify(*sorted({arrival_key(b, sender) for b, sender in boxes}))
            returned += len(boxes)
        return returned

    def tasks(self, queue: str) -> PgTaskStore:
        return PgTaskStore(self, queue)

    def log_path(self, agent_id: str) -> str:
        folder = log_dir()
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        return str(folder / f"{check_id(agent_id, 'agent')}.log")

    async def close(self) -> None:
        self._closed = True
        for task in (self._listener, self._renewer, self._vacuum):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._listener = self._renewer = self._vacuum = None
        await self.pool.close()
