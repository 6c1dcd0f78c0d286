"""What only the PostgreSQL bus has: its schema, claims across processes and hosts, leases."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import anyio
import psycopg
import pytest
from pg.pgtools import PG_URL, drop_schema, fresh_schema_url, new_schema, pg_bus, with_schema
from psycopg import sql

from wavewait.core import messages, wait
from wavewait.core.admission import sweep
from wavewait.core.bus import open_bus, pg_tasks
from wavewait.core.bus.pg_schema import SCHEMA_VERSION
from wavewait.core.bus.postgres import PostgresBus, split_url
from wavewait.core.errors import BusError
from wavewait.core.ids import new_id
from wavewait.core.model import Item
from wavewait.core.tasks import Task, task_store

from conftest import Background, env_for, register_crew, until, wavewait_cmd

pytestmark = pytest.mark.anyio
HERE = os.path.dirname(__file__)
ACTOR = [sys.executable, os.path.join(HERE, "pgactor.py")]


def item(to: str, body: str, sender: str = "flight", type: str = "message") -> Item:
    return Item(id=new_id(), type=type, to=to, sender=sender, body=body)


async def test_concurrent_first_use_creates_the_schema_once_with_its_version():
    with fresh_schema_url() as url:
        buses = await asyncio.gather(*(PostgresBus.open(url) for _ in range(6)))
        try:
            await buses[0].deliver(item("orchestrator", "hello"))
            assert [i.body for i in await buses[5].peek("orchestrator")] == ["hello"]
        finally:
            for b in buses:
                await b.close()
        schema = split_url(url)[1]
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            rows = conn.execute(
                sql.SQL("SELECT version FROM {}.schema_version").format(sql.Identifier(schema))
            ).fetchall()
        assert sorted(rows) == [(v,) for v in range(1, SCHEMA_VERSION + 1)]  # each migration ran once


async def test_a_bus_schema_newer_than_this_code_is_refused_with_what_to_do():
    with fresh_schema_url() as url:
        b = await PostgresBus.open(url)  # creates it at this code's version
        await b.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(
                sql.SQL("INSERT INTO {}.schema_version (version) VALUES (%s)").format(
                    sql.Identifier(split_url(url)[1])
                ),
                [SCHEMA_VERSION + 1],
            )
        with pytest.raises(BusError, match="newer than this wavewait"):
            await PostgresBus.open(url)


@pytest.mark.parametrize("schema", ['x"; DROP TABLE agents; --', "Upper", "9lives", "a" * 41])
async def test_a_schema_name_that_is_not_a_plain_identifier_is_refused(schema):
    with pytest.raises(BusError, match="schema"):
        await open_bus(with_schema(PG_URL, schema))


async def test_an_unreachable_server_is_a_bus_error_naming_the_url_without_its_password(monkeypatch):
    from wavewait.core.bus import postgres

    monkeypatch.setattr(postgres, "OPEN_TIMEOUT", 0.5)
    with pytest.raises(BusError) as e:
        await open_bus("postgresql://someone:s3cret@127.0.0.1:1/test?connect_timeout=1")
    assert "127.0.0.1:1" in str(e.value) and "s3cret" not in str(e.value)


async def test_item_ids_and_names_are_data_never_sql():
    async with pg_bus() as bus:
        body = '\'); DROP TABLE items; -- "quoted" \\ ünïcode'
        await bus.deliver(item("orchestrator", body, sender="o'brien"))
        (got,) = await bus.peek("orchestrator")
        assert (got.body, got.sender) == (body, "o'brien")


async def test_a_redelivered_item_id_is_stored_once():
    """A delivery retried after its commit was lost on the wire must not duplicate."""
    async with pg_bus() as bus:
        it = item("orchestrator", "once")
        first = await bus.deliver(it)
        again = await bus.deliver(it)
        assert first.seq == again.seq
        assert [i.body for i in await bus.peek("orchestrator")] == ["once"]


async def test_a_claim_is_idempotent_for_its_wait_and_refused_to_another():
    async with pg_bus() as bus:
        await bus.deliver(item("orchestrator", "x"))
        (ref,) = await bus.pending("orchestrator")
        assert (await bus.claim("orchestrator", ref, "wait-a")).body == "x"
        assert (await bus.claim("orchestrator", ref, "wait-a")).body == "x"  # a retried claim
        assert await bus.claim("orchestrator", ref, "wait-b") is None


async def test_history_is_bounded_per_inbox(monkeypatch):
    from wavewait.core.bus import pg_inbox

    monkeypatch.setattr(pg_inbox, "HISTORY_KEPT", 5)
    async with pg_bus() as bus:
        for i in range(8):
            await bus.deliver(item("orchestrator", f"m{i}"))
        for _ in range(8):
            n = await bus.claim_next("orchestrator", "w1")
            assert len(n) == 1
            await bus.take("orchestrator", "w1", "orchestrator")
        assert [i.body for i in await bus.history("orchestrator", 100)] == [f"m{i}" for i in range(3, 8)]


async def test_take_next_takes_the_oldest_in_order_into_history_and_leaves_the_rest():
    async with pg_bus() as bus:
        for i in range(5):
            await bus.deliver(item("orchestrator", f"m{i}"))
        await bus.deliver(item("orchestrator", "event", type="agent_dead"))
        first = await bus.take_next("orchestrator", "w1", "orchestrator", types=["message"], limit=3)
        assert [i.body for i in first] == ["m0", "m1", "m2"] and all(i.taken_by for i in first)
        second = await bus.take_next("orchestrator", "w1", "orchestrator", types=["message"], limit=3)
        assert [i.body for i in second] == ["m3", "m4"]  # a second call by the same wait: only its own
        assert [i.body for i in await bus.peek("orchestrator")] == ["event"]
        assert [i.body for i in await bus.history("orchestrator")] == [f"m{i}" for i in range(5)]
        assert await bus.take_next("orchestrator", "w1", "orchestrator", types=["message"]) == []


async def test_history_trims_keep_the_bound_with_many_takes(monkeypatch):
    from wavewait.core.bus import pg_inbox

    monkeypatch.setattr(pg_inbox, "HISTORY_KEPT", 40)
    async with pg_bus() as bus:
        for i in range(200):
            await bus.deliver(item("orchestrator", f"m{i:03d}"))
        while await bus.take_next("orchestrator", "w1", "orchestrator", limit=3):
            pass
        kept = [i.body for i in await bus.history("orchestrator", 1000)]
        assert 40 <= len(kept) <= 40 + 40 // 20 + 3  # the bound plus one trim interval and one take
        assert kept == [f"m{i:03d}" for i in range(200 - len(kept), 200)]  # the newest are kept


@pytest.mark.long
async def test_eight_consumer_processes_claim_10000_messages_exactly_once():
    async with pg_bus() as bus:
        n = 10_000
        bodies = [f"m{i:05d}" for i in range(n)]

        async def produce(part: list[str]) -> None:
            for body in part:
                await bus.deliver(item("pool", body))

        async with anyio.create_task_group() as tg:
            for k in range(4):
                tg.start_soon(produce, bodies[k::4])
        assert len(await bus.pending("pool")) == n
        outputs: list[list[str]] = []

        async def consume(mode: str) -> None:
            done = await anyio.run_process([*ACTOR, "consume", "pool", "10", mode], env=env_for(bus), check=False)
            assert done.returncode == 0, done.stderr.decode()
            outputs.append(json.loads(done.stdout))

        with anyio.fail_after(100):
            async with anyio.create_task_group() as tg:
                for k in range(8):  # by reference, whatever is next, and claim-and-take at once
                    tg.start_soon(consume, ("refs", "next", "take_next")[k % 3])
        taken = [b for out in outputs for b in out]
        assert len(taken) == n, f"{len(taken)} taken, {len(set(taken))} distinct"
        assert set(taken) == set(bodies)
        assert sum(1 for out in outputs if out) >= 2, "the consumers did not race"
        assert await bus.pending("pool") == [] and await bus.recover() == 0


async def start_holder(bus, seqs: str, **env: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [*ACTOR, "hold", "orchestrator", seqs],
        env=env_for(bus, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    line = (await anyio.to_thread.run_sync(proc.stdout.readline)).decode().split()
    assert line[:1] == ["held"], proc.stderr.read().decode() if proc.poll() is not None else line
    return proc, line[1]


def kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


async def test_claims_of_a_killed_waiter_process_return_to_the_inbox_in_order():
    async with pg_bus() as bus:
        for i in range(5):
            await bus.deliver(item("orchestrator", f"m{i}"))
        seqs = [r.seq for r in await bus.pending("orchestrator")]
        holder, _ = await start_holder(bus, f"{seqs[1]},{seqs[3]}")
        try:
            assert [i.body for i in await bus.peek("orchestrator")] == ["m0", "m2", "m4"]
            assert await bus.recover("orchestrator") == 0  # its owner is alive
        finally:
            kill(holder)
        got = [(await wait.wait_next(bus, "orchestrator", 5)).message for _ in range(5)]
        assert got == ["m0", "m1", "m2", "m3", "m4"]


async def test_claims_of_a_waiter_on_a_vanished_host_return_when_its_wait_lease_runs_out():
    async with pg_bus() as bus:
        for i in range(3):
            await bus.deliver(item("orchestrator", f"m{i}"))
        seqs = [r.seq for r in await bus.pending("orchestrator")]
        holder, wait_id = await start_holder(bus, f"{seqs[0]}", WAVEWAIT_HOST="host-b", WAVEWAIT_PG_WAIT_LEASE="0.6")

        async def lease_until():
            rows = await bus.conn.rows("SELECT lease_until FROM waits WHERE id = %s", [wait_id])
            return rows[0][0]

        first = await lease_until()

        async def renewed_twice() -> bool:  # the live holder keeps its lease fresh
            return (await lease_until() - first).total_seconds() > 0.35

        await until(renewed_twice, what="the holder to renew its wait lease")
        assert await bus.recover() == 0, "a live lease on another host keeps its claims"
        assert [w.host for w in await bus.list_waits()] == ["host-b"]
        kill(holder)  # the whole host vanishes: nobody renews, nobody on host-b cleans up

        async def returned() -> bool:
            return await bus.recover() == 1

        await until(returned, 10, "the lease to run out and the claim to return")
        assert [i.body for i in await bus.peek("orchestrator")] == ["m0", "m1", "m2"]
        assert await bus.list_waits() == []


async def test_an_agent_on_a_vanished_host_is_marked_dead_when_its_lease_runs_out(monkeypatch):
    """Two hosts: flights spawned by host-b's CLI; a fan-in here sees them through leases."""
    async with pg_bus() as bus:
        env = env_for(bus, WAVEWAIT_HOST="host-b", WAVEWAIT_AGENT_LEASE="0.6", WAVEWAIT_AGENT_ID="orchestrator")
        spawn = subprocess.run(
            wavewait_cmd("spawn", "flight-b", "--", "sleep", "600"), env=env, capture_output=True, text=True, timeout=60
        )
        assert spawn.returncode == 0, spawn.stderr
        flight = json.loads(spawn.stdout)
        agent = await bus.get_agent(flight["agent_id"])
        assert agent.host == "host-b" and agent.pid == flight["pid"]
        first = agent.lease_expires_at

        async def renewed_twice() -> bool:
            a = await bus.get_agent(agent.id)
            return a.lease_expires_at - first > 0.35

        await until(renewed_twice, what="host-b's supervisor to renew the lease")
        assert await sweep(bus, [await bus.get_agent(agent.id)]) == []  # alive elsewhere: not ours to judge
        async with anyio.create_task_group() as tg:
            bg = Background(tg)
            bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 60, [agent.id])
            await until(lambda: "fan" in bg.results or bus.list_waits(), what="the fan-in to start")
            os.killpg((await bus.get_agent(agent.id)).supervisor_pid, signal.SIGKILL)  # host-b is gone
            r = await bg.result("fan", 20)  # the fan-in sees the dead flight
        (t,) = r.results
        assert t.status == "dead" and "lease ran out" in (t.reason or "")
        assert "host-b" in t.reason
        events = [i for i in await bus.peek("orchestrator") if i.type == "agent_dead"]
        assert [e.sender for e in events] == [agent.id]


async def test_a_lease_renewal_wakes_no_waiter():
    async with pg_bus() as bus:
        from wavewait.core.agents import register

        await register(bus, "flight", lease=60)
        sub = await bus.subscribe(agents=True)
        try:
            await bus.update_agent("flight", lease_expires_at=1e10)
            await bus.update_agent("flight", last_message="hi")  # a real change, after it
            with anyio.fail_after(10):
                await sub.wait()
            # the only wake is the real change: the renewal before it sent nothing
            assert (await bus.get_agent("flight")).last_message == "hi"
            with anyio.move_on_after(0.3) as scope:
                await sub.wait()
            assert scope.cancelled_caught, "a lease renewal woke the subscriber"
        finally:
            sub.close()


async def test_the_schema_is_dropped_after_a_test_and_others_are_untouched():
    schema = new_schema()
    async with pg_bus() as other:
        await other.deliver(item("orchestrator", "kept"))
        async with pg_bus(schema) as bus:
            await bus.deliver(item("orchestrator", "x"))
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema]).fetchone() is None
        assert [i.body for i in await other.peek("orchestrator")] == ["kept"]
    drop_schema(schema)  # dropping twice is harmless


@pytest.mark.long
async def test_a_next_message_wait_takes_at_most_its_limit_while_the_table_is_vacuumed(monkeypatch):
    """Many next-message waits of one process on one inbox (max_messages 1), a sender at full
    speed and the bus's own VACUUM every half second: no wait takes a second message along
    (each message is returned by exactly one wait, alone), and none is left in the inbox.

    Before the claims picked their rows in a MATERIALIZED CTE, a VACUUM's new statistics
    made `seq IN (SELECT ... LIMIT 1 FOR UPDATE SKIP LOCKED)` claim 2-6 rows for one wait."""
    monkeypatch.setattr("wavewait.core.bus.pg_upkeep.VACUUM_EVERY", 0.5)
    sent_n, waits_n = 8000, 200
    got: list[str] = []
    extra: list[str] = []
    async with pg_bus() as bus:
        sender_bus = await open_bus(bus.url)  # its own connections, as a sending process has
        done = asyncio.Event()

        async def consume() -> None:
            while not done.is_set():
                r = await wait.wait_next(bus, "orchestrator", 5)
                if r.status == "received":
                    got.append(r.message or "")
                    extra.extend(m.message for m in r.more or [])

        async def send(k: int) -> None:
            """1,000 messages/s in all, on the clock: the inbox mostly empty, the waits asleep, as
            a server sees senders. The clock is the load's shape, not a wait for anything (the
            test waits on conditions); senders held back until the waits caught up (at most
            8, 30 or 100 messages ahead) never made the old claim over-claim, in 6 runs."""
            start = time.monotonic()
            for n, i in enumerate(range(k, sent_n, 4)):
                await anyio.sleep(max(0.0, start + n / 250 - time.monotonic()))
                await sender_bus.deliver(item("orchestrator", f"m{i}", sender=f"s{k}"))

        consumers = [asyncio.create_task(consume()) for _ in range(waits_n)]
        await asyncio.gather(*(send(k) for k in range(4)))
        await sender_bus.close()

        async def all_in() -> bool:
            return len(got) + len(extra) >= sent_n

        await until(all_in, 60, "every message returned by a wait")
        done.set()
        for c in consumers:
            c.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)
        assert extra == [], f"{len(extra)} messages came along with another (max_messages 1)"
        assert sorted(got) == sorted(f"m{i}" for i in range(sent_n))
        assert await bus.pending("orchestrator") == []


async def test_a_wait_on_many_targets_rereads_a_slice_of_them_at_each_rescan(monkeypatch):
    """Change notices are reliable here, so the backstop of a wait on more than BACKSTOP_SLICE
    targets re-reads the next slice of them at each rescan, never all of them after its first
    step (re-reading 100,000 flights held the wait's step 5.5 s); with every notice lost, the
    reports of all slices still come."""
    flights = [f"flight-{i:02d}" for i in range(12)]
    monkeypatch.setattr(wait.engine, "BACKSTOP_SLICE", 4)
    async with pg_bus() as bus:
        await register_crew(bus, *flights)
        monkeypatch.setattr(bus.listener, "_dispatch", lambda payload: None)
        asked: list[int] = []
        real = bus.get_agents

        async def counting(ids):
            asked.append(len(ids))
            return await real(ids)

        monkeypatch.setattr(bus, "get_agents", counting)
        backstop = wait.WaitSettings(rescan_every=0.05, progress_every=3600, sweep_every=3600)
        async with anyio.create_task_group() as tg:
            bg = Background(tg)
            bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 3600, flights, settings=backstop)
            # the full reads: resolving the ids, then the wait's first step
            await until(lambda: asked.count(len(flights)) >= 2, what="the first step")
            first = len(asked)
            for f in reversed(flights):  # the last slice's first
                await messages.send(bus, f, "orchestrator", f"report of {f}")
                await bus.update_agent(f, last_message="reported")  # its record changed, unheard
            fan = await bg.result("fan", 30)
    assert fan.status == "complete" and [t.message for t in fan.results] == [f"report of {f}" for f in flights]
    rereads = asked[first:]
    assert rereads and max(rereads) <= 4, asked


async def test_task_tables_of_version_1_are_migrated_and_their_tasks_kept():
    """The task tables take their own migrations (pg_tasks.MIGRATIONS): a queue written at
    version 1 gets the index of the live tasks on first use, and its tasks read as before."""
    with fresh_schema_url() as url:
        schema = split_url(url)[1]
        bus = await open_bus(url)
        try:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
                conn.execute("CREATE TABLE task_schema_version (version integer PRIMARY KEY, applied_at timestamptz)")
                for statement in pg_tasks.MIGRATIONS[1]:
                    conn.execute(statement)
                conn.execute("INSERT INTO task_schema_version VALUES (1, now())")
                old = Task(id=new_id(), queue="q1", type="build", seq=1)
                conn.execute(
                    "INSERT INTO tasks VALUES ('q1', %s, 1, 'queued', %s, %s::jsonb)",
                    [old.id, old.dedup_key, old.model_dump_json()],
                )
                conn.execute("INSERT INTO task_queues VALUES ('q1', 1)")
            pg_tasks._ready.discard(url)
            store = task_store(bus, "q1")
            assert [t.id for t in await store.live()] == [old.id]
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
                versions = [r[0] for r in conn.execute("SELECT version FROM task_schema_version ORDER BY 1")]
                indexes = [
                    r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s", [schema])
                ]
            assert versions == [1, pg_tasks.TASKS_SCHEMA_VERSION] == [1, 2]
            assert "tasks_live" in indexes
        finally:
            await bus.close()
