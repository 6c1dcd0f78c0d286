"""Acknowledged delivery in the core, on both buses: claim → reply → acknowledge.

A wait run with `Control(hold=True)` keeps its claims after it returns; `ack` files them
in the history, `release` puts them back at the head of the inbox in their order, and
`confirm` refuses to deliver claims a stale waiter no longer holds (fencing).
"""

from __future__ import annotations

import pytest

from wavewait.core import messages, wait
from wavewait.core.delivery import ClaimLost

from conftest import register_crew

pytestmark = pytest.mark.anyio


async def _bodies(bus) -> list[str]:
    return [i.body for i in await bus.peek("orchestrator")]


async def test_a_held_wait_keeps_its_claim_until_acknowledged(bus):
    await register_crew(bus, "orchestrator", "a")
    sent = await messages.send(bus, "a", "orchestrator", "hello")
    control = wait.Control(hold=True)
    r = await wait.wait_next(bus, "orchestrator", 5, control=control)
    assert (r.message, r.message_id) == ("hello", sent.id)
    d = control.delivery
    assert d is not None and d.expected == 1
    assert await _bodies(bus) == []  # claimed: no other wait gets it
    assert await bus.holds("orchestrator", d.wait_id) == 1
    assert [w.id for w in await bus.list_waits()] == [d.wait_id]  # its record guards the claim
    await d.confirm()
    taken = await d.ack()
    assert [i.body for i in taken] == ["hello"]
    assert [i.body for i in await bus.history("orchestrator")] == ["hello"]
    assert await bus.list_waits() == []
    assert await d.release() == 0  # settled once: a late release changes nothing


async def test_a_released_fan_in_puts_every_message_back_at_the_head_in_order(bus):
    await register_crew(bus, "orchestrator", "a", "b", "c")
    for who in ("a", "b", "c"):
        await messages.send(bus, who, "orchestrator", f"from {who}")
    control = wait.Control(hold=True)
    r = await wait.wait_fan_in(bus, "orchestrator", 5, ["a", "b", "c"], control=control)
    assert r.status == "complete" and all(t.message_id for t in r.results)
    await messages.send(bus, "a", "orchestrator", "later")
    assert control.delivery is not None
    assert await control.delivery.release() == 3
    assert await _bodies(bus) == ["from a", "from b", "from c", "later"]
    assert await bus.history("orchestrator") == []


async def test_a_timeout_holds_nothing_and_settles_cleanly(bus):
    await register_crew(bus, "orchestrator")
    control = wait.Control(hold=True)
    r = await wait.wait_next(bus, "orchestrator", 0, control=control)
    assert r.status == "timeout"
    assert control.delivery is not None and control.delivery.expected == 0
    await control.delivery.confirm()
    assert await control.delivery.ack() == []
    assert await bus.list_waits() == []


async def test_a_cancelled_held_wait_gives_its_claims_back(bus):
    import anyio

    await register_crew(bus, "orchestrator", "a", "b")
    await messages.send(bus, "a", "orchestrator", "from a")
    control = wait.Control(hold=True)
    with anyio.move_on_after(0.5):  # b never reports: the wait is still running when cancelled
        await wait.wait_fan_in(bus, "orchestrator", 30, ["a", "b"], control=control)
    assert control.delivery is None
    assert await _bodies(bus) == ["from a"]
    assert await bus.list_waits() == []


@pytest.fixture
async def pg():
    """Leases exist on the PostgreSQL bus only (a directory bus never reclaims a live local wait)."""
    from pg.pgtools import pg_bus

    async with pg_bus() as b:
        yield b


async def test_a_waiter_whose_lease_ran_out_does_not_deliver_what_another_took(pg):
    """PostgreSQL fencing: a waiter on another host, paused past its lease while another
    waiter took its claim over, must not deliver that message a second time."""
    bus = pg
    await register_crew(bus, "orchestrator", "a")
    sent = await messages.send(bus, "a", "orchestrator", "only once")
    stale = wait.Control(hold=True)
    r = await wait.wait_next(bus, "orchestrator", 5, control=stale)
    assert r.message_id == sent.id and stale.delivery is not None
    # as if its host froze: the record says another host, and the lease ran out
    await bus.conn.rows(
        "UPDATE waits SET record = jsonb_set(record, '{host}', '\"frozen-host\"'), host = 'frozen-host', "
        "lease_until = now() - interval '1 second' WHERE id = %s",
        [stale.wait_id],
    )
    await bus.recover()  # the recovery sweep (a wait's start or rescan, at most once a second per process)
    other = await wait.wait_next(bus, "orchestrator", 5)  # takes the returned claim
    assert other.message_id == sent.id
    with pytest.raises(ClaimLost, match="paused past its lease"):
        await stale.delivery.confirm()
    assert [i.id for i in await bus.history("orchestrator")] == [sent.id]  # delivered once
    assert await bus.pending("orchestrator") == []


async def test_a_resumed_waiter_that_still_holds_its_claim_delivers(bus):
    await register_crew(bus, "orchestrator", "a")
    await messages.send(bus, "a", "orchestrator", "mine")
    control = wait.Control(hold=True)
    await wait.wait_next(bus, "orchestrator", 5, control=control)
    assert control.delivery is not None
    await wait.wait_next(bus, "orchestrator", 0)  # another wait's recovery leaves a live claim alone
    await control.delivery.confirm()
    assert [i.body for i in await control.delivery.ack()] == ["mine"]
