"""Life of a message under load: exactly-once across processes, bursts, lost wake-ups."""

from __future__ import annotations

import json

import anyio
import pytest

from wavewait.core import wait

from conftest import Background, env_for, register_crew, until
from coretools import actor_cmd, crew, run_actor, waits_of

pytestmark = pytest.mark.anyio


@pytest.mark.long
async def test_eight_racing_consumer_processes_take_each_of_2000_messages_exactly_once(bus):
    await crew(bus)
    await run_actor(bus, "burst", "orchestrator", "file-reader", "2000")
    outputs: list[bytes] = []

    async def consume() -> None:
        done = await anyio.run_process(actor_cmd("consume", "orchestrator"), env=env_for(bus), check=False)
        assert done.returncode == 0, done.stderr.decode()
        outputs.append(done.stdout)

    with anyio.fail_after(110):
        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(consume)
    taken = [body for out in outputs for body in json.loads(out)]
    assert len(taken) == 2000, f"{len(taken)} taken, {len(set(taken))} distinct"
    assert set(taken) == {f"file-reader-{i}" for i in range(2000)}
    assert sum(1 for out in outputs if json.loads(out)) >= 2, "the consumers did not race"
    assert await bus.pending("orchestrator") == []


@pytest.mark.long
@pytest.mark.one_bus  # the overflow of the kernel's inotify queue; PostgreSQL bursts: tests/pg
async def test_a_burst_of_20000_messages_is_all_delivered_in_fifo_order(bus):
    await crew(bus)
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 3600, ["linter"])
        await until(lambda: waits_of(bus, "fan_in"), what="the fan-in to register")
        # 20,000 items land while the wait listens (more than the kernel queues), then one it wants;
        # what is tested is the overflow, not durability: the burst skips the per-item fsync
        await run_actor(bus, "burst", "orchestrator", "file-reader", "20000", timeout=110, WAVEWAIT_FSYNC="0")
        await run_actor(bus, "burst", "orchestrator", "linter", "1")
        r = await bg.result("fan", 30)
    assert [(t.status, t.message) for t in r.results] == [("received", "linter-0")]
    refs = await bus.pending("orchestrator")
    assert len(refs) == 20000
    seqs = [r.seq for r in refs]
    assert seqs == sorted(seqs) and len(set(seqs)) == 20000
    items = await bus.peek("orchestrator")
    assert [i.body for i in items] == [f"file-reader-{i}" for i in range(20000)]


async def test_many_messages_at_once_all_reach_a_fan_in_over_every_sender(bus):
    senders = [f"flight-{i:02d}" for i in range(60)]
    await register_crew(bus, *senders)
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 3600, senders)
        await until(lambda: waits_of(bus, "fan_in"), what="the fan-in to register")
        await run_actor(bus, "send-each", "orchestrator", ",".join(senders), "2")
        r = await bg.result("fan", 30)
    assert r.status == "complete"
    assert [(t.agent_id, t.message) for t in r.results] == [(s, f"{s}-0") for s in senders]
    # one (the oldest) per sender was taken; the second of each is still queued, in order
    assert [i.body for i in await bus.peek("orchestrator")] == [f"{s}-1" for s in senders]


class Deaf:
    """A subscription whose change events are all lost (as when the kernel queue overflows)."""

    def __init__(self, real) -> None:
        self.real = real
        self.poked = anyio.Event()

    def __aiter__(self) -> Deaf:
        return self

    async def __anext__(self) -> None:
        await self.poked.wait()
        self.poked = anyio.Event()

    async def wait(self) -> None:
        await self.__anext__()

    def poke(self, key: str | None = None) -> None:
        self.poked.set()

    def reset(self) -> None:
        self.poked = anyio.Event()

    def close(self) -> None:
        self.real.close()


async def test_a_wait_whose_wake_ups_are_all_lost_still_gets_the_message(bus, monkeypatch):
    await crew(bus)
    backstop = wait.WaitSettings(rescan_every=0.5)  # the backstop, made short for the test
    real_subscribe = bus.subscribe

    async def deaf_subscribe(**kwargs):
        return Deaf(await real_subscribe(**kwargs))

    monkeypatch.setattr(bus, "subscribe", deaf_subscribe)
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("next", wait.wait_next, bus, "orchestrator", 3600, settings=backstop)
        await until(lambda: waits_of(bus, "next"), what="the wait to register")
        await run_actor(bus, "send", "orchestrator", "test-runner", "1")
        nxt = await bg.result("next", 30)  # found anyway, by the rescan
        bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 3600, ["linter"], settings=backstop)
        await until(lambda: waits_of(bus, "fan_in"), what="the fan-in to register")
        await run_actor(bus, "send", "orchestrator", "linter", "1")
        fan = await bg.result("fan", 30)
    assert nxt.message == "test-runner-0"
    assert fan.results[0].message == "linter-0"


async def test_after_a_burst_of_sends_the_senders_last_message_is_the_newest(bus):
    await crew(bus)
    await run_actor(bus, "send", "orchestrator", "linter", "50")
    linter = await bus.get_agent("linter")
    assert (linter.last_message, linter.status) == ("linter-49", "running")
    assert len(await bus.pending("orchestrator")) == 50
