"""A statement that committed but whose answer was lost (the connection died between the
two) is retried, and the retry must neither claim a second item for the wait nor lose the
first: the one window where "never lose a message" depends on the retry alone.

The fault is real: a proxy between the bus and the test server lets the statement run and
commit, then closes the connection before its answer reaches the bus (`cutproxy.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from pg.cutproxy import CutProxy, cut_proxy
from pg.pgtools import PG_URL, drop_schema, new_schema, next_wait, require_pg, with_schema

from wavewait.core.bus.postgres import PostgresBus
from wavewait.core.ids import new_id
from wavewait.core.model import HandoffRecord, Item
from wavewait.core.tasks import Task, task_store

pytestmark = pytest.mark.anyio
TYPES = ["message"]

# pieces of each statement's text as it goes to the server (placeholders become $n)
CLAIM_NEXT = "FOR UPDATE SKIP LOCKED) UPDATE items SET claimed_by = $"
CLAIM_NEXT_MANY = "AS r(inbox, w, n, k)"
REGISTER_WAIT = "c AS (UPDATE items SET claimed_by"
REGISTER_WAITS = "AS r(w, started, host"
TAKE_AND_END = "e AS (DELETE FROM waits WHERE id = $"
TAKE_AND_END_MANY = "AS r(inbox, w, taker)"
TAKE_NEXT = "t AS (DELETE FROM items USING x"
CLAIM_EACH = "AS r(inbox, w, sender)"


@contextlib.asynccontextmanager
async def bus_behind_proxy() -> AsyncIterator[tuple[PostgresBus, CutProxy]]:
    require_pg()
    schema = new_schema()
    try:
        async with cut_proxy(with_schema(PG_URL, schema)) as (proxy, url):
            bus = await PostgresBus.open(url)
            try:
                yield bus, proxy
            finally:
                await bus.close()
    finally:
        drop_schema(schema)


def item(to: str, body: str) -> Item:
    return Item(id=new_id(), type="message", to=to, sender="flight", body=body)


async def filled(bus: PostgresBus, *boxes: str, n: int = 3) -> None:
    for b in boxes:
        for i in range(n):
            await bus.deliver(item(b, f"{b}{i}"))


def bodies(items: list[Item]) -> list[str]:
    return [i.body for i in items]


@pytest.mark.parametrize("limit", [1, 2])
async def test_a_claim_whose_answer_was_lost_returns_what_it_claimed_and_claims_nothing_more(limit):
    async with bus_behind_proxy() as (bus, proxy):
        await filled(bus, "box")
        rec = next_wait("box")
        await bus.register_wait(rec)
        proxy.arm(CLAIM_NEXT)
        got = await bus.claim_next("box", rec.id, TYPES, limit)
        assert proxy.cuts == 1  # the statement committed and its answer never arrived
        assert bodies(got) == ["box0", "box1"][:limit]
        assert bodies(await bus.peek("box")) == ["box0", "box1", "box2"][limit:]
        assert bodies(await bus.take("box", rec.id, "x", end=True)) == ["box0", "box1"][:limit]


async def test_a_claim_retried_after_a_lost_attempt_that_claimed_nothing_claims_then():
    """The read-back finds nothing held (the lost attempt found the inbox empty): the retry
    claims what has arrived meanwhile, as a first attempt would."""
    async with bus_behind_proxy() as (bus, proxy):
        rec = next_wait("box")
        await bus.register_wait(rec)
        proxy.arm(CLAIM_NEXT)
        assert await bus.claim_next("box", rec.id, TYPES, 1) == []
        assert proxy.cuts == 1
        await filled(bus, "box", n=1)
        assert bodies(await bus.claim_next("box", rec.id, TYPES, 1)) == ["box0"]


async def test_a_registration_whose_answer_was_lost_keeps_its_first_claim():
    async with bus_behind_proxy() as (bus, proxy):
        await filled(bus, "box")
        rec = next_wait("box")
        proxy.arm(REGISTER_WAIT)
        got = await bus.register_wait(rec, claim_from="box", types=TYPES, limit=1)
        assert proxy.cuts == 1
        assert bodies(got) == ["box0"]
        assert [w.id for w in await bus.list_waits()] == [rec.id]
        assert bodies(await bus.peek("box")) == ["box1", "box2"]


async def test_batched_claims_whose_answer_was_lost_each_keep_their_own():
    async with bus_behind_proxy() as (bus, proxy):
        boxes = ["a", "b", "c"]
        await filled(bus, *boxes)
        recs = [next_wait(b) for b in boxes]
        for r in recs:
            await bus.register_wait(r)
        proxy.arm(CLAIM_NEXT_MANY)  # concurrent claims share one statement
        got = await asyncio.gather(*(bus.claim_next(r.waiter, r.id, TYPES, 1) for r in recs))
        assert proxy.cuts == 1
        assert [bodies(g) for g in got] == [["a0"], ["b0"], ["c0"]]
        for b in boxes:
            assert bodies(await bus.peek(b)) == [f"{b}1", f"{b}2"]


async def test_batched_registrations_whose_answer_was_lost_each_keep_their_first_claim():
    async with bus_behind_proxy() as (bus, proxy):
        boxes = ["a", "b", "c"]
        await filled(bus, *boxes)
        recs = [next_wait(b) for b in boxes]
        proxy.arm(REGISTER_WAITS)
        got = await asyncio.gather(*(bus.register_wait(r, claim_from=r.waiter, types=TYPES, limit=2) for r in recs))
        assert proxy.cuts == 1
        assert [bodies(g) for g in got] == [["a0", "a1"], ["b0", "b1"], ["c0", "c1"]]
        assert sorted(w.id for w in await bus.list_waits()) == sorted(r.id for r in recs)
        for b in boxes:
            assert bodies(await bus.peek(b)) == [f"{b}2"]


async def test_takes_whose_answer_was_lost_return_what_they_moved_once():
    async with bus_behind_proxy() as (bus, proxy):
        boxes = ["a", "b", "c", "d"]
        await filled(bus, *boxes, n=2)
        recs = [next_wait(b) for b in boxes]
        for r in recs:
            await bus.register_wait(r, claim_from=r.waiter, types=TYPES, limit=1)
        proxy.arm(TAKE_AND_END)
        first = await bus.take("a", recs[0].id, "x", end=True)
        assert proxy.cuts == 1
        proxy.arm(TAKE_AND_END_MANY)  # concurrent takes share a statement
        rest = await asyncio.gather(*(bus.take(r.waiter, r.id, "x", end=True) for r in recs[1:]))
        assert proxy.cuts == 2
        assert [bodies(t) for t in [first, *rest]] == [[f"{b}0"] for b in boxes]
        for b in boxes:
            assert bodies(await bus.history(b)) == [f"{b}0"]
            assert bodies(await bus.peek(b)) == [f"{b}1"]
        assert await bus.list_waits() == []


async def test_a_take_next_whose_answer_was_lost_takes_no_second_batch():
    async with bus_behind_proxy() as (bus, proxy):
        await filled(bus, "box", n=4)
        proxy.arm(TAKE_NEXT)
        got = await bus.take_next("box", new_id(), "x", TYPES, 2)
        assert proxy.cuts == 1
        assert bodies(got) == ["box0", "box1"]
        assert bodies(await bus.peek("box")) == ["box2", "box3"]


async def test_a_task_update_whose_answer_was_lost_is_reported_made():
    """A runner that marks a task running must hear that it did, or it leaves the task
    running with no agent (requeued later, an attempt spent for nothing)."""
    async with bus_behind_proxy() as (bus, proxy):
        store = task_store(bus, "q1")
        task = Task(id=new_id(), queue="q1", type="build")
        assert await store.add(task, max_tasks=10) is None
        proxy.arm("UPDATE tasks SET record = record ||")
        marked = await store.update(task.id, ("queued",), status="running", attempts=1)
        assert proxy.cuts == 1
        assert marked is not None and (marked.status, marked.attempts) == ("running", 1)
        assert await store.update(task.id, ("queued",), status="running", attempts=2) is None  # not twice


async def test_a_fan_ins_claim_whose_answer_was_lost_returns_one_item_per_sender_and_no_second():
    """The retry of a fan-in's claim (the oldest of each sender) reads back what the lost
    attempt claimed for those senders: no sender's second item is claimed (it would be taken
    with the wait's claims, never delivered), and an earlier claim of another sender that
    the wait holds is not handed over again."""
    async with bus_behind_proxy() as (bus, proxy):
        for sender in ("a", "b", "c"):
            for i in range(2):
                await bus.deliver(Item(id=new_id(), type="message", to="box", sender=sender, body=f"{sender}{i}"))
        rec = next_wait("box")
        await bus.register_wait(rec)
        assert bodies(await bus.claim_each("box", rec.id, ["c"], TYPES)) == ["c0"]  # held from before
        proxy.arm(CLAIM_EACH)
        got = await bus.claim_each("box", rec.id, ["a", "b"], TYPES)
        assert proxy.cuts == 1
        assert bodies(got) == ["a0", "b0"]
        assert bodies(await bus.peek("box")) == ["a1", "b1", "c1"]
        assert sorted(bodies(await bus.take("box", rec.id, "x", end=True))) == ["a0", "b0", "c0"]


async def test_claims_sharing_out_one_inbox_whose_answer_was_lost_each_keep_their_own():
    async with bus_behind_proxy() as (bus, proxy):
        await filled(bus, "box", n=5)
        recs = [next_wait("box") for _ in range(4)]
        for r in recs:
            await bus.register_wait(r)
        proxy.arm(CLAIM_NEXT_MANY)  # the first runs alone; the other three share out the box
        got = await asyncio.gather(*(bus.claim_next("box", r.id, TYPES, 1) for r in recs))
        assert proxy.cuts == 1
        assert sorted(b for g in got for b in bodies(g)) == ["box0", "box1", "box2", "box3"]
        assert bodies(await bus.peek("box")) == ["box4"]
        for r, g in zip(recs, got, strict=True):  # what each was told it holds is what it takes
            assert bodies(await bus.take("box", r.id, "x", end=True)) == bodies(g)


async def test_enqueues_and_completions_sharing_a_statement_whose_answer_was_lost_are_each_made_once():
    """Enqueues (and completions) that one process makes at once share a statement; when its
    answer is lost, each is read back on its own: none is made twice, none reported refused,
    and the budget is spent once per task."""
    async with bus_behind_proxy() as (bus, proxy):
        store = task_store(bus, "q1")
        tasks = [Task(id=new_id(), queue="q1", type="build", inputs={"n": i}) for i in range(6)]
        await store.tasks()  # its tables are made: the six arrive together
        proxy.arm("WITH ORDINALITY AS r(id, status, key, record, o)")
        added = await asyncio.gather(*(store.add(t, max_tasks=6) for t in tasks))
        assert proxy.cuts == 1
        assert added == [None] * 6
        assert sorted(t.seq for t in await store.tasks()) == list(range(1, 7))
        assert await store.add(Task(id=new_id(), queue="q1", type="build", inputs={"n": 9}), max_tasks=6) is not None
        proxy.arm("AS r(id, status, from_, run_by")
        records = [
            HandoffRecord.model_validate(
                {"goals": "g", "did": f"did {t.id}", "forNextAgent": "n", "taskId": t.id, "type": "", "status": "done"}
            )
            for t in tasks
        ]
        done = await asyncio.gather(
            *(store.complete(t.id, r, ("queued",)) for t, r in zip(tasks, records, strict=True))
        )
        assert proxy.cuts == 2
        assert [d.id if d else None for d in done] == [t.id for t in tasks]
        for t in tasks:
            assert (await store.handoff(t.id)).did == f"did {t.id}"
