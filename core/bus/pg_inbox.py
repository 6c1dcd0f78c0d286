"""The inbox of the PostgreSQL bus: items as rows of `items`, taken ones in `history`.

A claim sets `claimed_by` on a row under `FOR UPDATE SKIP LOCKED`, so each item goes to one
wait; the row keeps its `seq`, so a returned claim is back in its original place. The
concurrent claims and takes of one process share their statements (group commit,
`pg_batch.py`); a claim or take is retried through `PgConn.once`, so a retry neither loses
nor duplicates.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Collection, Sequence
from functools import partial
from typing import Any, NamedTuple

from psycopg import AsyncConnection, sql

from ..errors import BusError
from ..ids import check_id, new_id
from ..model import SYSTEM_EVENTS_KEPT, SYSTEM_ITEM_TYPES, Item, ItemRef, now
from . import pg_queries as q
from .keys import WAIT_PREFIX, arrival_key, wait_key
from .pg_batch import Batcher
from .pg_conn import PgConn

HISTORY_KEPT = 1000
#: seconds a wait record stays valid without renewal (server clock); renewed every third
WAIT_LEASE = float(os.environ.get("WAVEWAIT_PG_WAIT_LEASE", "30"))
#: a fan-in over up to this many senders reads only their rows; over more, the whole backlog
#: costs less than sending every sender's id with each read
PENDING_SENDERS = 100
#: `pending` by sender reads only their rows up to this many (an index lookup each): a full
#: fan-in reads the few hundred that sent since its last step, over a backlog of thousands
PENDING_FROM_MAX = 10_000


class _Claim(NamedTuple):
    inbox: str
    wait_id: str
    limit: int


class _Each(NamedTuple):
    inbox: str
    wait_id: str
    senders: tuple[str, ...]


class _Take(NamedTuple):
    inbox: str
    wait_id: str
    taker: str


def claimed(rows: list[tuple[Any, ...]]) -> list[Item]:
    """Claimed rows (seq, record, ...) as items, in their original order."""
    return sorted((Item.model_validate(r | {"seq": s}) for s, r, *_ in rows), key=lambda i: i.seq)


def by_wait(rows: list[tuple[Any, ...]], waits: Sequence[str]) -> dict[str, list[tuple[Any, ...]]]:
    """Rows of a statement made for several waits (the wait is the last column), by wait."""
    out: dict[str, list[tuple[Any, ...]]] = {w: [] for w in waits}
    for row in rows:
        out[row[-1]].append(row[:-1])
    return out


def _taken(rows: list[tuple[Any, ...]]) -> list[Item]:
    """History rows as taken items, in their original order."""
    return sorted(
        (Item.model_validate(r | {"seq": s, "taken_by": by, "taken_at": at}) for s, r, by, at in rows),
        key=lambda i: i.seq,
    )


class PgInbox:
    """Every inbox of one bus. `grew` is called when rows came in (the bus's upkeep analyzes
    them), `churned` when rows moved to history (it vacuums and analyzes the tables they
    turn over)."""

    def __init__(self, conn: PgConn, grew: Callable[[], None], churned: Callable[[], None]) -> None:
        self.conn = conn
        self._grew = grew
        self._churned = churned
        self._moved: dict[str, int] = {}  # inbox -> items this process moved to history since its trim
        # claims and takes of concurrent waits share statements (pg_batch.py): one claimer per
        # type filter (claims on one inbox share out its oldest rows), one taker
        self._claimers: dict[tuple[str, ...], Batcher[_Claim, list[Item]]] = {}
        self._each: dict[tuple[str, ...], Batcher[_Each, list[Item]]] = {}
        self._takers: Batcher[_Take, list[Item]] = Batcher(self._take_one, self._take_many, key=lambda r: r.wait_id)

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
                    self.conn.channel,
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

        seq = await self.conn.run(go)
        self._grew()  # a backlog growing changes the figures the planner goes by
        return item.model_copy(update={"seq": seq})

    async def pending(self, inbox: str, senders: Collection[str] | None = None) -> list[ItemRef]:
        """With a few `senders` (a fan-in's read), only their rows come back, not the backlog."""
        check_id(inbox, "inbox")
        if senders is not None and len(senders) <= PENDING_FROM_MAX:
            rows = await self.conn.rows(q.PENDING_FROM, [list(senders), inbox])
        else:
            rows = await self.conn.rows(q.PENDING, [inbox])
        refs = [ItemRef(seq=s, type=t, sender=f, id=i) for s, t, f, i in rows]
        return refs if senders is None else [r for r in refs if r.sender in senders]

    async def peek(self, inbox: str, after: int = 0) -> list[Item]:
        rows = await self.conn.rows(q.PEEK, [check_id(inbox, "inbox"), after])
        return [Item.model_validate(r | {"seq": s}) for s, r in rows]

    async def claim(self, inbox: str, ref: ItemRef, wait_id: str) -> Item | None:
        """Claim one item for `wait_id`; None if another wait has it. Idempotent per wait."""
        rows = await self.conn.rows(
            q.CLAIM,
            {"w": check_id(wait_id, "wait"), "seq": ref.seq, "inbox": check_id(inbox, "inbox")},
        )
        return Item.model_validate(rows[0][1] | {"seq": rows[0][0]}) if rows else None

    async def claim_many(self, inbox: str, refs: Sequence[ItemRef], wait_id: str) -> list[Item]:
        """Claim these items in one statement (rows other waits are claiming are skipped)."""
        if not refs:
            return []
        rows = await self.conn.rows(
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
        rows = await self.conn.once(
            q.CLAIM_NEXT.format(q.TYPE_FILTER if types else sql.SQL("")),
            q.HELD,
            {"w": r.wait_id, "inbox": r.inbox, "types": list(types), "n": r.limit},
        )
        return claimed(rows)

    async def _claim_many(self, types: tuple[str, ...], rs: list[_Claim]) -> list[list[Item]]:
        rows = await self.conn.once(
            q.CLAIM_NEXT_MANY.format(q.TYPE_FILTER if types else sql.SQL("")),
            q.HELD_MANY,
            {
                "inboxes": [r.inbox for r in rs],
                "ws": [r.wait_id for r in rs],
                "ns": [r.limit for r in rs],
                "types": list(types),
            },
        )
        got = by_wait(rows, [r.wait_id for r in rs])
        return [claimed(got[r.wait_id]) for r in rs]

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
        rows = await self.conn.once(q.CLAIM_EACH.format(q.TYPE_FILTER if types else sql.SQL("")), q.HELD_MANY, params)
        rows = [row for row in rows if (row[-1], row[1].get("sender")) in asked]
        got = by_wait(rows, [r.wait_id for r in rs])
        return [claimed(got[r.wait_id]) for r in rs]

    async def holds(self, inbox: str, wait_id: str) -> int | None:
        rows = await self.conn.rows(
            q.HOLDS, {"lease": WAIT_LEASE, "w": check_id(wait_id, "wait"), "inbox": check_id(inbox, "inbox")}
        )
        return int(rows[0][0]) if rows else None

    async def release(self, inbox: str, wait_id: str) -> int:
        rows = await self.conn.rows(q.RELEASE, [check_id(inbox, "inbox"), check_id(wait_id, "wait")])
        await self.conn.notify(*(arrival_key(inbox, sender) for (sender,) in rows))
        return len(rows)

    async def unclaim(self, inbox: str, ref: ItemRef, wait_id: str) -> bool:
        """Return one claim of `wait_id` to the inbox (a wait that took more than it can hand on)."""
        n = await self.conn.count(
            "UPDATE items SET claimed_by = NULL WHERE inbox = %s AND seq = %s AND claimed_by = %s",
            [check_id(inbox, "inbox"), ref.seq, check_id(wait_id, "wait")],
        )
        if n:
            await self.conn.notify(arrival_key(inbox, ref.sender))
        return bool(n)

    async def take(self, inbox: str, wait_id: str, taker: str, *, end: bool = False) -> list[Item]:
        """Move the wait's claims to history (and end the wait, `end`, in the same statement,
        shared with the takes other waits of this process make at the same time). On a retry
        (the first commit's answer was lost) the items this wait already moved are read
        back, so none goes missing."""
        check_id(inbox, "inbox")
        check_id(wait_id, "wait")
        if end:
            return await self._takers(_Take(inbox, wait_id, taker))
        params = {"inbox": inbox, "w": wait_id, "taker": taker, "at": now()}
        rows = await self.conn.once(q.TAKE, q.TAKEN_BY, params)
        await self._moved_to_history({inbox: len(rows)})
        return _taken(rows)

    async def _take_one(self, r: _Take) -> list[Item]:
        params = {"inbox": r.inbox, "w": r.wait_id, "taker": r.taker, "at": now()}
        params |= {"channel": self.conn.channel, "key": wait_key(r.wait_id)}
        rows = await self.conn.once(q.TAKE_AND_END, q.TAKEN_BY, params)
        await self._moved_to_history({r.inbox: len(rows)})
        return _taken(rows)

    async def _take_many(self, rs: list[_Take]) -> list[list[Item]]:
        waits = [r.wait_id for r in rs]
        params = {
            "inboxes": [r.inbox for r in rs],
            "ws": waits,
            "takers": [r.taker for r in rs],
            "at": now(),
            "channel": self.conn.channel,
            "wait_prefix": WAIT_PREFIX,
        }
        rows = await self.conn.once(q.TAKE_AND_END_MANY, q.TAKEN_BY_MANY, params)
        got = by_wait(rows, waits)
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
        """Claim and take up to `limit` of the oldest unclaimed items in one statement
        (`PostgresBus.take_next`). Each call files its rows in history under its own token,
        so a retry after a lost answer reads back exactly this call's items."""
        check_id(inbox, "inbox")
        token = f"{check_id(wait_id, 'wait')}/{new_id()}"  # '/' is no id character: no clash
        type_filter = q.TYPE_FILTER if types else sql.SQL("")
        params = {"inbox": inbox, "w": token, "taker": taker, "at": now(), "types": list(types or []), "n": limit}
        rows = await self.conn.once(q.TAKE_NEXT.format(type_filter), q.TAKEN_BY, params)
        await self._moved_to_history({inbox: len(rows)})
        return _taken(rows)

    async def _moved_to_history(self, moved: dict[str, int]) -> None:
        """Trim each inbox's history when it is due: once this process has moved a twentieth
        of HISTORY_KEPT into it since its last trim, not after every take (the trim scans
        the kept rows). An inbox's history then holds at most HISTORY_KEPT plus one interval
        and one take per writer."""
        self._churned()
        for inbox, n in moved.items():
            total = self._moved.get(inbox, 0) + n
            if total >= max(1, HISTORY_KEPT // 20):
                await self.conn.count(q.TRIM_HISTORY, {"inbox": inbox, "keep": HISTORY_KEPT})
                total = 0
            self._moved[inbox] = total

    async def history(self, inbox: str, limit: int = 100) -> list[Item]:
        rows = await self.conn.rows(q.HISTORY, [check_id(inbox, "inbox"), limit])
        return _taken(rows)
