"""A next-message wait that takes up to `max_messages` at once (a burst of reports in one call),
on both buses: FIFO, within the output budget, acknowledged or returned as a whole."""

from __future__ import annotations

import anyio
import pytest

from wavewait.core import messages, wait
from wavewait.core.errors import BadInput

from conftest import Background, has_waits, register_crew, until

pytestmark = pytest.mark.anyio


async def _queued(bus) -> list[str]:
    return [i.body for i in await bus.peek("orchestrator")]


async def _burst(bus, n: int = 5) -> None:
    await register_crew(bus, "a", "b")
    for i in range(n):
        await messages.send(bus, "ab"[i % 2], "orchestrator", f"m{i}")


async def test_a_batched_wait_returns_the_oldest_and_the_ones_queued_behind_it(bus):
    await _burst(bus)
    r = await wait.wait_next(bus, "orchestrator", 5, max_messages=3)
    assert (r.status, r.sender, r.message) == ("received", "a", "m0")
    assert r.more is not None
    assert [(m.sender, m.name, m.message, m.type) for m in r.more] == [
        ("b", "b", "m1", "message"),
        ("a", "a", "m2", "message"),
    ]
    assert all(m.message_id and m.sent_at for m in r.more)
    assert r.summary() == "3 messages from a, b"
    assert await _queued(bus) == ["m3", "m4"]
    rest = await wait.wait_next(bus, "orchestrator", 5, max_messages=10)  # fewer queued: takes what is there
    assert [rest.message, *(m.message for m in rest.more or [])] == ["m3", "m4"]
    assert [i.body for i in await bus.history("orchestrator")] == [f"m{i}" for i in range(5)]


async def test_one_message_by_default_and_no_more_field(bus):
    await _burst(bus, 2)
    r = await wait.wait_next(bus, "orchestrator", 5)
    assert r.message == "m0" and r.more is None and "more" not in r.to_json()


async def test_a_held_batch_is_acknowledged_or_returned_whole_in_its_order(bus):
    await _burst(bus)
    held = wait.Control(hold=True)
    await wait.wait_next(bus, "orchestrator", 5, max_messages=3, control=held)
    assert held.delivery is not None and held.delivery.expected == 3
    await held.delivery.confirm()
    assert await held.delivery.release() == 3  # the reply never reached the caller
    assert await _queued(bus) == ["m0", "m1", "m2", "m3", "m4"]
    again = wait.Control(hold=True)
    await wait.wait_next(bus, "orchestrator", 5, max_messages=3, control=again)
    assert again.delivery is not None
    await again.delivery.ack()
    assert await _queued(bus) == ["m3", "m4"]
    assert [i.body for i in await bus.history("orchestrator")] == ["m0", "m1", "m2"]


async def test_messages_past_the_budget_stay_queued_at_their_place(bus):
    await register_crew(bus, "a")
    for body in ("x" * 10, "y" * 10, "z" * 10, "w" * 10):
        await messages.send(bus, "a", "orchestrator", body)
    # each entry counts whole, about 170 characters here: two fit in 400, not three
    r = await wait.wait_next(bus, "orchestrator", 5, max_messages=4, budget=400)
    assert [r.message, *(m.message for m in r.more or [])] == ["x" * 10, "y" * 10]
    assert await _queued(bus) == ["z" * 10, "w" * 10]
    big = await wait.wait_next(bus, "orchestrator", 5, max_messages=4, budget=5)  # the first always comes
    assert big.message == "z" * 10 and big.more is None
    assert await _queued(bus) == ["w" * 10]


async def test_a_sleeping_batched_wait_returns_with_the_first_message_it_sees(bus):
    await register_crew(bus, "a")
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("next", wait.wait_next, bus, "orchestrator", 30, max_messages=50)
        await until(lambda: has_waits(bus, 1), what="the wait to register")
        await messages.send(bus, "a", "orchestrator", "only one")
        r = await bg.result("next", 20)
    assert r.message == "only one" and r.more is None


@pytest.mark.parametrize("bad", [0, 101, True, 1.5, "3"])
async def test_max_messages_out_of_range_is_refused_before_anything_is_taken(bus, bad):
    await _burst(bus, 1)
    with pytest.raises(BadInput, match="max_messages: must be a whole number from 1 to 100"):
        await wait.wait_next(bus, "orchestrator", 5, max_messages=bad)
    assert await _queued(bus) == ["m0"]
    assert await bus.list_waits() == []
