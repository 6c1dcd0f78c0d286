"""Group commit on the PostgreSQL bus: claims and takes of concurrent waits share statements,
and each wait still gets exactly what it claimed (pg_batch.py)."""

from __future__ import annotations

import asyncio
import itertools

import anyio
import psycopg
import pytest
from pg.pgtools import PG_URL, next_wait, pg_bus

from wavewait.core import wait
from wavewait.core.agents import register
from wavewait.core.bus import pg_queries, pg_upkeep
from wavewait.core.ids import new_id
from wavewait.core.model import Item, WaitRecord
from wavewait.core.proc import hostname, me

from conftest import Background, has_waits, until

pytestmark = pytest.mark.anyio
TYPES = ["message"]


def item(to: str, body: str) -> Item:
    return Item(id=new_id(), type="message", to=to, sender="flight", body=body)


class Statements:
    """Counts the statements a bus runs from now on (each one goes through `conn.run`)."""

    def __init__(self, bus) -> None:
        self.n = 0
        real = bus.conn.run

        async def counting(fn):
            self.n += 1
            return await real(fn)

        bus.conn.run = counting


async def registered(bus, inbox: str) -> str:
    record = next_wait(inbox)
    await bus.register_wait(record)
    return record.id


async def test_concurrent_claims_on_many_inboxes_share_statements_and_each_gets_its_own():
    async with pg_bus() as bus:
        boxes = [f"box{i:02d}" for i in range(40)]
        for b in boxes:
            await bus.deliver(item(b, f"for {b}, first"))
            await bus.deliver(item(b, f"for {b}, second"))
        waits = [await registered(bus, b) for b in boxes]
        statements = Statements(bus)
        got = await asyncio.gather(*(bus.claim_next(b, w, TYPES, 1) for b, w in zip(boxes, waits, strict=True)))
        assert [[i.body for i in g] for g in got] == [[f"for {b}, first"] for b in boxes]
        assert statements.n <= 3  # the first alone, the rest queued behind it together
        # the claims are the waits' own: a take moves each one's item, and ends each wait
        taken = await asyncio.gather(
            *(bus.take(b, w, "orchestrator", end=True) for b, w in zip(boxes, waits, strict=True))
        )
        assert [[i.body for i in t] for t in taken] == [[f"for {b}, first"] for b in boxes]
        assert all(t[0].taken_by == "orchestrator" for t in taken)
        assert statements.n <= 6
        assert await bus.list_waits() == []
        for b in boxes:
            assert [i.body for i in await bus.peek(b)] == [f"for {b}, second"]
            assert [i.body for i in await bus.history(b)] == [f"for {b}, first"]


async def test_concurrent_claims_on_one_inbox_share_a_statement_and_none_comes_back_empty():
    """Claims on one inbox in one statement share out its oldest rows in the waits' order
    (numbered), so none picks a row another took and none comes back empty while items wait."""
    async with pg_bus() as bus:
        for i in range(12):
            await bus.deliver(item("work", f"job {i:02d}"))
        waits = [await registered(bus, "work") for _ in range(8)]
        statements = Statements(bus)
        limits = [1, 1, 2, 1, 3, 1, 1, 1]
        got = await asyncio.gather(*(bus.claim_next("work", w, TYPES, n) for w, n in zip(waits, limits, strict=True)))
        assert statements.n <= 2  # the first alone, the other seven together
        assert [len(g) for g in got] == limits
        assert sorted(i.body for g in got for i in g) == [f"job {i:02d}" for i in range(11)]
        assert [i.body for i in got[0]] == ["job 00"]  # the first wait the oldest
        assert all(g[0].seq < h[0].seq for g, h in itertools.pairwise(got))  # in the waits' order
        assert [i.body for i in await bus.peek("work")] == ["job 11"]


async def test_concurrent_registrations_on_one_inbox_share_its_oldest_rows_out():
    async with pg_bus() as bus:
        for i in range(5):
            await bus.deliver(item("work", f"job {i}"))
        records = [next_wait("work") for _ in range(8)]
        statements = Statements(bus)
        got = await asyncio.gather(*(bus.register_wait(r, claim_from="work", types=TYPES, limit=1) for r in records))
        assert statements.n <= 2
        assert sorted(g[0].body for g in got if g) == [f"job {i}" for i in range(5)]
        assert sum(1 for g in got if not g) == 3
        assert await bus.pending("work") == []
        assert len(await bus.list_waits()) == 8


async def test_batched_claims_keep_each_waits_limit_and_the_order():
    async with pg_bus() as bus:
        for b in ("a", "b", "c"):
            for i in range(5):
                await bus.deliver(item(b, f"{b}{i}"))
        waits = {b: await registered(bus, b) for b in ("a", "b", "c")}
        limits = {"a": 1, "b": 3, "c": 10}
        got = await asyncio.gather(*(bus.claim_next(b, waits[b], TYPES, limits[b]) for b in ("a", "b", "c")))
        assert [[i.body for i in g] for g in got] == [["a0"], ["b0", "b1", "b2"], [f"c{i}" for i in range(5)]]


async def test_two_hundred_waits_in_one_process_each_get_their_message_once():
    """The load the batching is for, through the wait engine: many next-message waits
    woken together; every message arrives once, none is left behind."""
    async with pg_bus() as bus:
        boxes = [f"c{i:03d}" for i in range(200)]
        for b in [*boxes, "flight"]:
            await register(bus, b)
        async with anyio.create_task_group() as tg:
            bg = Background(tg)
            for b in boxes:
                bg.start(b, wait.wait_next, bus, b, 60)
            await until(lambda: has_waits(bus, 200), 30, "200 waits to register")
            await asyncio.gather(*(bus.deliver(item(b, f"to {b}")) for b in boxes))
            await until(lambda: len(bg.results) == 200, 30, "every wait to return")
        assert {b: r.message for b, r in bg.results.items()} == {b: f"to {b}" for b in boxes}
        assert await bus.list_waits() == []
        assert [await bus.pending(b) for b in boxes] == [[]] * 200


async def test_concurrent_registrations_share_statements_and_each_claims_from_its_own_inbox():
    async with pg_bus() as bus:
        boxes = [f"box{i:02d}" for i in range(30)]
        for b in boxes:
            await bus.deliver(item(b, f"for {b}"))
        pid, pid_start = me()
        records = [
            WaitRecord(id=new_id(), kind="next", tool="wait", waiter=b, host=hostname(), pid=pid, pid_start=pid_start)
            for b in boxes
        ]
        fan_in = WaitRecord(id=new_id(), kind="fan_in", tool="wait_fan_in", waiter="box00", host=hostname(), pid=pid)
        statements = Statements(bus)
        got = await asyncio.gather(
            bus.register_wait(fan_in),  # no claim
            *(bus.register_wait(r, claim_from=r.waiter, types=TYPES, limit=1) for r in records),
        )
        assert got[0] == [] and [[i.body for i in g] for g in got[1:]] == [[f"for {b}"] for b in boxes]
        assert statements.n <= 4  # the first alone; the rest in one per type filter
        listed = {w.id: w for w in await bus.list_waits()}
        assert set(listed) == {fan_in.id, *(r.id for r in records)}
        assert listed[records[3].id].waiter == "box03" and listed[fan_in.id].kind == "fan_in"
        for r in records:  # each claim is its wait's: a take moves it
            assert [i.body for i in await bus.take(r.waiter, r.id, "x", end=True)] == [f"for {r.waiter}"]


def upkeep_counts(schema: str) -> dict[str, tuple[int, int]]:
    """Each churn table's (vacuum_count, analyze_count) in `schema`, by PostgreSQL's own view."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT relname, vacuum_count, analyze_count FROM pg_stat_user_tables"
            " WHERE schemaname = %s AND relname IN ('items', 'waits', 'history')",
            [schema],
        ).fetchall()
    return {name: (vacuumed, analyzed) for name, vacuumed, analyzed in rows}


async def test_the_bus_vacuums_its_churn_tables_itself(monkeypatch):
    """A queue's tables turn over every row; on a server whose autovacuum is off or slow the
    dead rows would pile up and every claim walk past them. The bus vacuums them itself."""
    monkeypatch.setattr(pg_upkeep, "VACUUM_EVERY", 1e-9)  # due at the first take
    async with pg_bus() as bus:
        for i in range(20):
            await bus.deliver(item("box", f"m{i}"))
            w = await registered(bus, "box")
            (got,) = await bus.claim_next("box", w, TYPES, 1)
            assert [t.body for t in await bus.take("box", w, "x", end=True)] == [got.body]

        await until(lambda: upkeep_counts(bus.schema).get("waits", (0, 0))[0] > 0, 30, "the bus to vacuum its tables")
        assert bus.upkeep._vacuum is not None


async def test_sends_alone_analyze_the_items_and_vacuum_nothing(monkeypatch):
    """A send leaves no dead row: what it changes is the figures the planner goes by, so a
    sending process analyzes `items` and leaves the vacuum of all three tables, work only
    takes make, to the processes that take."""
    monkeypatch.setattr(pg_upkeep, "VACUUM_EVERY", 1e-9)  # due at every change
    async with pg_bus() as bus:

        async def analyzed() -> bool:
            if upkeep_counts(bus.schema).get("items", (0, 0))[1] == 0:
                await bus.deliver(item("box", "one more"))  # a change: the next analyze is due
                return False
            return True

        await until(analyzed, 30, "a send to analyze the items")
        counts = upkeep_counts(bus.schema)
        assert all(vacuumed == 0 for vacuumed, _ in counts.values()), counts
        assert bus.upkeep._vacuum is None


async def test_a_backlog_that_grew_after_the_last_vacuum_is_still_read_by_sender(monkeypatch):
    """The table vacuumed with one row queued, then 3,000 reports sent and none taken (a big
    fan-in whose answer is full leaves them queued): the sends keep the table's figures
    current, so reading the queued reports of 100 senders looks each one up in its index.
    Before, the figures stayed those of the near-empty table, and the planner walked the
    whole backlog once per sender (1.8 s for 100 senders over 55,000 queued; a second
    100,000-flight fan-in answered 12 s late)."""
    monkeypatch.setattr(pg_upkeep, "VACUUM_EVERY", 1e-9)  # due at every change
    async with pg_bus() as bus:
        with psycopg.connect(PG_URL, autocommit=True) as conn:  # as on a server with autovacuum off
            for table in ("items", "waits", "history"):
                conn.execute(f'ALTER TABLE "{bus.schema}".{table} SET (autovacuum_enabled = false)')

        for body in ("first", "second"):
            await bus.deliver(item("box", body))
        w = await registered(bus, "box")
        await bus.claim_next("box", w, TYPES, 1)
        await bus.take("box", w, "x", end=True)
        await until(lambda: upkeep_counts(bus.schema).get("items", (0, 0))[0] > 0, 30, "the bus to vacuum its tables")
        await until(lambda: bus.upkeep._vacuum is not None and bus.upkeep._vacuum.done(), 30, "that vacuum to end")
        senders = [f"flight-{i:05d}" for i in range(3000)]
        for i in range(0, len(senders), 100):
            await asyncio.gather(
                *(
                    bus.deliver(Item(id=new_id(), type="message", to="box", sender=s, body=s))
                    for s in senders[i : i + 100]
                )
            )

        async def counted() -> bool:
            rows = await bus.conn.rows("SELECT reltuples FROM pg_class WHERE oid = 'items'::regclass")
            if rows[0][0] < 2000:
                await bus.deliver(item("box", "one more"))  # a change: the next vacuum is due
                return False
            return True

        await until(counted, 60, "the bus's vacuum to count the backlog")
        asked = senders[-100:]
        plan = "\n".join(r[0] for r in await bus.conn.rows("EXPLAIN " + pg_queries.PENDING_FROM, [asked, "box"]))
        assert "items_pending_from" in plan and "sender = s.sender" in plan.split("Index Cond")[1], plan
        assert sorted(ref.sender for ref in await bus.pending("box", asked)) == asked


async def test_batched_ends_and_lease_renewals_never_deadlock(caplog):
    """Both lock many wait rows: in id order, so neither waits on the other in a cycle (a
    deadlock costs the server's deadlock_timeout, a second, before one of them retries)."""
    async with pg_bus() as bus:
        for _ in range(5):
            boxes = [f"box{i:02d}" for i in range(60)]
            waits = [await registered(bus, b) for b in boxes]
            for b in boxes:
                await bus.deliver(item(b, f"for {b}"))
            await asyncio.gather(*(bus.claim_next(b, w, TYPES, 1) for b, w in zip(boxes, waits, strict=True)))

            async def renew(ids: list[str]) -> None:
                await bus.conn.count(pg_queries.RENEW_LEASES, [30.0, ids])

            await asyncio.gather(
                *(bus.take(b, w, "x", end=True) for b, w in zip(boxes, waits, strict=True)),
                *(renew(waits[::-1] if k % 2 else waits) for k in range(8)),
            )
            assert await bus.list_waits() == []
    assert "deadlock" not in caplog.text


async def test_registrations_of_fan_ins_on_one_inbox_share_statements():
    """A fan-in's registration claims nothing, so 40 of them on one inbox (a server holding
    many fan-ins for one caller) run together, not one statement each."""
    async with pg_bus() as bus:
        pid, pid_start = me()
        records = [
            WaitRecord(id=new_id(), kind="fan_in", tool="wait", waiter="orchestrator", host=hostname(), pid=pid)
            for _ in range(40)
        ]
        records[0].pid_start = pid_start
        statements = Statements(bus)
        got = await asyncio.gather(*(bus.register_wait(r) for r in records))
        assert got == [[]] * 40
        assert statements.n <= 3  # the first alone, the rest queued behind it together
        assert {w.id for w in await bus.list_waits()} == {r.id for r in records}


async def test_fan_ins_on_one_inbox_claim_their_senders_items_together_and_never_the_same_row():
    """Fan-ins with distinct senders share one claim statement on one inbox, each getting
    its own sender's oldest item; two asking for one sender never share it (one gets the
    next) and never share a statement."""
    async with pg_bus() as bus:
        senders = [f"f{i:02d}" for i in range(30)]
        for s in senders:
            for k in range(2):
                await bus.deliver(Item(id=new_id(), type="message", to="orchestrator", sender=s, body=f"{s}-{k}"))
        waits = [await registered(bus, "orchestrator") for _ in range(32)]
        statements = Statements(bus)
        asks = [[s] for s in senders] + [["f00"], ["f00", "f01"]]
        got = await asyncio.gather(
            *(bus.claim_each("orchestrator", w, ask, TYPES) for w, ask in zip(waits, asks, strict=True))
        )
        assert [[i.body for i in g] for g in got[:30]] == [[f"{s}-0"] for s in senders]
        assert [i.body for i in got[30]] == ["f00-1"]  # f00's oldest went to the first
        assert [i.body for i in got[31]] == ["f01-1"]  # f00 has nothing left; f01's next
        assert statements.n <= 4  # the first alone, then the rest in as few as their senders allow
        assert await bus.pending("orchestrator", ["f00", "f01"]) == []
