"""Changes that say what changed: keys in the change stream, waits woken by key, the backstop."""

from __future__ import annotations

import asyncio
import threading

import anyio
import pytest

from wavewait.core import messages, wait
from wavewait.core.bus.keys import PAYLOAD_BYTES, payloads
from wavewait.core.watch import MAX_KEYS, Fanout, Keyed

from conftest import Background, push_timers_out, register_crew, until
from coretools import crew, run_actor, waits_of

pytestmark = pytest.mark.anyio


async def test_a_change_names_its_key_and_wakes_only_the_subscriptions_on_that_key(bus):
    await register_crew(bus, "flight-a", "flight-b")
    on_a = await bus.subscribe(inboxes=["flight-a"])
    on_b = await bus.subscribe(inboxes=["flight-b"], agents=["flight-b"])
    try:
        await messages.send(bus, "orchestrator", "flight-b", "for b")
        with anyio.fail_after(10):
            await anext(on_b)
        seen_b = on_b.changed()
        assert seen_b is not None and "i:flight-b" in seen_b
        await messages.send(bus, "orchestrator", "flight-a", "for a")
        await bus.update_agent("flight-a", last_message="not waited on")
        with anyio.fail_after(10):
            await anext(on_a)
        # flight-a's subscription never heard of flight-b's inbox or of any agent record
        assert on_a.changed() == {"i:flight-a"}
    finally:
        on_a.close()
        on_b.close()


async def test_a_fan_in_rereads_only_the_targets_whose_records_changed(bus, monkeypatch):
    flights = [f"flight-{i:02d}" for i in range(40)]
    await register_crew(bus, *flights)
    push_timers_out(monkeypatch)
    asked: list[list[str]] = []
    real = bus.get_agents

    async def counting(ids):
        asked.append(list(ids))
        return await real(ids)

    monkeypatch.setattr(bus, "get_agents", counting)
    said: list[str] = []
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start(
            "fan", wait.wait_fan_in, bus, "orchestrator", 3600, flights, on_progress=lambda p: said.append(p.message)
        )
        # the full reads: resolving the ids, then the wait's first step
        await until(lambda: sum(len(ids) == len(flights) for ids in asked) >= 2, what="the first step")
        first = len(asked)
        # in two halves, so that even a wake that coalesced a whole half names 20 senders, not 40
        for f in flights[:20]:
            await messages.send(bus, f, "orchestrator", f"report of {f}")
        await until(lambda: said[-1].startswith("20/40"), what="20/40 received")
        for f in flights[20:]:  # the last half decides the result (no progress line says 40/40)
            await messages.send(bus, f, "orchestrator", f"report of {f}")
        r = await bg.result("fan", 30)
    assert r.status == "complete" and all(t.status == "received" for t in r.results)
    later = asked[first:]
    # each wake reads the few senders whose records changed, never all 40 again
    assert all(len(ids) < len(flights) for ids in later)


async def test_a_lost_notification_is_covered_by_the_backstop(bus, monkeypatch):
    """Every change this process would hear is dropped; the slow rescan still finds the message."""
    await crew(bus)
    if hasattr(bus, "listener"):
        monkeypatch.setattr(bus.listener, "_dispatch", lambda payload: None)
    else:
        monkeypatch.setattr(bus, "_changed_paths", lambda paths: None)
    backstop = wait.WaitSettings(rescan_every=0.5)
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 3600, ["linter"], settings=backstop)
        await until(lambda: waits_of(bus, "fan_in"), what="the fan-in to register")
        await run_actor(bus, "send", "orchestrator", "linter", "1")
        fan = await bg.result("fan", 30)
    assert fan.results[0].message == "linter-0"


def test_notify_payloads_coalesce_keys_within_the_size_limit():
    keys = [f"i:{'x' * 30}-{n:05d}" for n in range(2000)] + ["a:one", "a:one"]
    out = payloads(keys)
    assert len(out) > 1 and all(len(p.encode()) <= PAYLOAD_BYTES for p in out)
    assert [k for p in out for k in p.split(" ")] == list(dict.fromkeys(keys))


@pytest.mark.anyio
async def test_a_loop_that_falls_behind_its_watcher_gets_the_keys_merged_not_queued(monkeypatch):
    """A watcher thread dispatching faster than the loop runs must not queue a hand-over per
    batch (memory grew by hundreds of MB at 1,000 messages/s): the keys merge, and past
    MAX_KEYS they become 'read everything'."""
    loop = asyncio.get_running_loop()
    scheduled = 0
    schedule = loop.call_soon_threadsafe

    def counted(*args, **kwargs):
        nonlocal scheduled
        scheduled += 1
        return schedule(*args, **kwargs)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counted)
    fanout = Fanout()
    sub = fanout.add(Keyed(fanout, prefixes=["i:"]))

    def burst(keys: list[str]) -> None:
        thread = threading.Thread(target=lambda: [fanout.dispatch([k]) for k in keys])
        thread.start()
        thread.join()  # the loop is held the whole time: nothing is handed over meanwhile

    burst([f"i:box{i % 100}" for i in range(20_000)])
    with anyio.fail_after(5):
        await sub.wait()
    assert sub.changed() == {f"i:box{i}" for i in range(100)}
    assert scheduled == 1  # one hand-over for the 20,000 dispatches
    burst([f"i:box{i}" for i in range(MAX_KEYS + 1)])
    with anyio.fail_after(5):
        await sub.wait()
    assert sub.changed() is None  # too many to name: re-read everything
    sub.close()
