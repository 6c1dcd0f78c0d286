"""Many waits on one inbox: a change goes to the waits that want it, not to every wait.

A fan-in is woken by the arrivals of its own senders only; next-message waits sharing an
inbox are woken one per arrival. Counted through the real bus's own reads (its methods
wrapped on the instance), on both buses; and nothing is lost or taken twice.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import anyio
import pytest

from wavewait.core import messages, wait
from wavewait.core.bus.keys import arrival_key, departure_key, inbox_key
from wavewait.core.watch import Fanout, Keyed

from conftest import Background, has_waits, push_timers_out, register_crew, until

pytestmark = pytest.mark.anyio


def count_calls(monkeypatch: pytest.MonkeyPatch, bus: object, name: str) -> list[int]:
    """Count the calls of one method of the real bus (it still does the work)."""
    calls = [0]
    real = getattr(bus, name)

    async def counted(*args, **kwargs):
        calls[0] += 1
        return await real(*args, **kwargs)

    monkeypatch.setattr(bus, name, counted)
    return calls


async def settled(sub: Keyed) -> None:
    """Until this observer heard of a change (the hand-over that woke it woke every wait)."""
    with anyio.fail_after(10):
        await anext(sub)
    for _ in range(20):  # let the waits woken by the same hand-over take their step
        await asyncio.sleep(0)


async def test_a_fan_in_is_not_woken_by_the_messages_of_other_senders(bus, monkeypatch):
    await register_crew(bus, "flight-a", "flight-b")
    push_timers_out(monkeypatch)
    reads = count_calls(monkeypatch, bus, "claim_each")
    observer = await bus.subscribe(inboxes=["orchestrator"])
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 3600, ["flight-a"])
        await until(lambda: reads[0] >= 1, what="the fan-in's first read")
        first = reads[0]
        for i in range(10):  # one at a time: each a change of its own
            await messages.send(bus, "flight-b", "orchestrator", f"b-{i}")
            await settled(observer)
        assert reads[0] == first, "the fan-in on flight-a re-read the inbox for flight-b's messages"
        await messages.send(bus, "flight-a", "orchestrator", "a's report")
        r = await bg.result("fan", 30)
    observer.close()
    assert r.status == "complete" and r.results[0].message == "a's report"
    assert [i.body for i in await bus.peek("orchestrator")] == [f"b-{i}" for i in range(10)]
    assert reads[0] <= first + 2


async def test_next_message_waits_sharing_an_inbox_are_woken_one_per_arrival(bus, monkeypatch):
    await register_crew(bus, "flight-a")
    push_timers_out(monkeypatch)
    n = 20
    claims = count_calls(monkeypatch, bus, "claim_next")
    observer = await bus.subscribe(inboxes=["orchestrator"])
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        for k in range(n):
            bg.start(str(k), wait.wait_next, bus, "orchestrator", 3600)
        await until(lambda: has_waits(bus, n), what=f"{n} waits registered")
        before = claims[0]
        for i in range(5):
            await messages.send(bus, "flight-a", "orchestrator", f"m-{i}")
            await until(lambda i=i: len(bg.results) == i + 1, what=f"message {i} taken")
            await settled(observer)
        # a wake for the arrival, one handed on by the wait that returned: not one per wait
        assert claims[0] - before <= 5 * 3, f"{claims[0] - before} claims for 5 messages and {n} waits"
        tg.cancel_scope.cancel()
    observer.close()
    assert sorted(r.message for r in bg.results.values()) == [f"m-{i}" for i in range(5)]
    assert await bus.peek("orchestrator") == []


async def test_many_fan_ins_and_next_message_waits_on_one_inbox_lose_and_repeat_nothing(bus):
    """Fan-ins each on its own flight and next-message waits, all on one inbox, looping while
    the flights send: a fan-in gets its own flight's reports only, every message comes once."""
    flights = [f"flight-{i:02d}" for i in range(12)]
    await register_crew(bus, *flights, "sender")
    sent = [f"{f}-{i}" for i in range(5) for f in flights] + [f"sender-{i}" for i in range(40)]
    taken: list[str] = []
    done = anyio.Event()

    def took(message: str) -> None:
        taken.append(message)
        if len(taken) >= len(sent):
            done.set()

    async def fan_in(flight: str) -> None:
        while not done.is_set():
            control = wait.Control(hold=True)
            r = await wait.wait_fan_in(bus, "orchestrator", 0.5, [flight], control=control)
            assert control.delivery is not None
            await control.delivery.ack()
            for t in r.results:
                if t.status == "received":
                    assert t.agent_id == flight and t.message is not None and t.message.startswith(flight)
                    took(t.message)

    async def next_message() -> None:
        while not done.is_set():
            r = await wait.wait_next(bus, "orchestrator", 0.5)
            if r.status == "received":
                assert r.message is not None and r.message.startswith(r.sender or "?")
                took(r.message)

    async def send_all() -> None:
        for message in sent:
            await messages.send(bus, message.rpartition("-")[0], "orchestrator", message)

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(next_message)
            for f in flights:
                tg.start_soon(fan_in, f)
            tg.start_soon(send_all)
    assert Counter(taken) == Counter(sent)
    assert await bus.peek("orchestrator") == []


# ----------------------------------------------------------------------------- the fan-out
async def test_an_arrival_wakes_the_waits_of_its_sender_and_one_member_of_a_pool():
    fanout = Fanout()
    box = inbox_key("orch")
    of_a = fanout.add(Keyed(fanout, [box], routes={arrival_key("orch", "a"): box}))
    of_b = fanout.add(Keyed(fanout, [box], routes={arrival_key("orch", "b"): box}))
    everything = fanout.add(Keyed(fanout, [box], trees=[box]))
    pool = [fanout.add(Keyed(fanout, [box], pool=(box, "oldest:*"))) for _ in range(5)]

    def woken() -> list[Keyed]:
        return [s for s in (of_a, of_b, everything, *pool) if s._event.is_set()]

    async def handed_over() -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    fanout.dispatch([arrival_key("orch", "a")])
    await handed_over()
    assert of_a in woken() and everything in woken() and of_b not in woken()
    assert sum(s in woken() for s in pool) == 1
    assert of_a.changed() == {box} and everything.changed() == {box}
    # two items at once: two members more, not the one already woken again
    fanout.dispatch([arrival_key("orch", "b"), arrival_key("orch", "b")])
    await handed_over()
    assert sum(s in woken() for s in pool) == 3 and of_b in woken()
    # an item that left: news for those that look at everything, nobody else
    for s in (of_a, of_b, everything):
        await anext(s)
    fanout.dispatch([departure_key("orch")])
    await handed_over()
    assert woken() == [everything, *[s for s in pool if s._event.is_set()]]
    # a change nobody can attribute wakes them all
    fanout.dispatch([box])
    await handed_over()
    assert set(woken()) == {of_a, of_b, everything, *pool}


async def test_a_subscription_by_sender_says_who_sent_and_not_who_might_have():
    """A full fan-in reads only the senders its wake names (`arrivals`); a change of the inbox
    nobody can attribute, an overflow or a poke makes that unknown (None): read them all."""
    fanout = Fanout()
    box = inbox_key("orch")
    sub = fanout.add(Keyed(fanout, [box], routes={arrival_key("orch", s): box for s in ("a", "b", "c")}))

    async def handed_over() -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    fanout.dispatch([arrival_key("orch", "a"), arrival_key("orch", "x")])
    await handed_over()
    fanout.dispatch([arrival_key("orch", "c")])
    await handed_over()
    assert sub.changed() == {box} and sub.arrivals() == {"a", "c"}  # x is not one of its senders
    assert sub.changed() == set() and sub.arrivals() == set()
    fanout.dispatch([arrival_key("orch", "b"), box])  # the root: any sender may have sent
    await handed_over()
    assert sub.changed() == {box} and sub.arrivals() is None
    fanout.dispatch([arrival_key("orch", "b")])
    sub.poke()
    await handed_over()
    assert sub.changed() is None and sub.arrivals() is None
    fanout.dispatch([arrival_key("orch", "b")])
    await handed_over()
    assert sub.changed() == {box} and sub.arrivals() == {"b"}


async def test_a_pool_member_that_closes_hands_its_wake_on():
    fanout = Fanout()
    box = inbox_key("orch")
    first, second = (fanout.add(Keyed(fanout, [box], pool=(box, "oldest:*"))) for _ in range(2))
    fanout.dispatch([arrival_key("orch", "a")])
    for _ in range(5):
        await asyncio.sleep(0)
    woken = first if first._event.is_set() else second
    other = second if woken is first else first
    assert not other._event.is_set()
    woken.close()  # its wait ended (cancelled, say) without taking the item it was woken for
    assert other._event.is_set() and other.changed() == {box}
    other.close()
    assert len(fanout) == 0


async def test_a_pool_member_reset_for_its_first_read_is_woken_by_the_next_arrival():
    """A wait resets its subscription for its first read (which reads everything). Woken just
    before, by a member that closed, and left marked woken, the pool passed it over: the item
    the closed member's wait gave back after that read woke nobody, and the wait slept
    through it to its timeout (seen through the real client: a call cancelled while a
    blocking call started)."""
    fanout = Fanout()
    box = inbox_key("orch")
    closing, starting = (fanout.add(Keyed(fanout, [box], pool=(box, "oldest:*"))) for _ in range(2))
    closing.close()  # a wait cancelled while it holds an item hands its wake on
    assert starting._event.is_set()
    starting.reset()  # its first read: nothing there yet (the item is still claimed)
    assert not starting._event.is_set() and starting.changed() == set()
    fanout.dispatch([arrival_key("orch", "a")])  # the cancelled wait's release
    for _ in range(5):
        await asyncio.sleep(0)
    assert starting._event.is_set() and starting.changed() == {box}
    starting.close()
