"""A first end-to-end check of the core on a real directory bus."""

import pytest

from wavewait.core import messages, wait
from wavewait.core.agents import register

pytestmark = pytest.mark.anyio


async def test_fan_in_takes_one_message_per_listed_agent(bus):
    await register(bus, "orchestrator")
    for name in ("file-reader", "test-runner"):
        await register(bus, name)
    await messages.send(bus, "file-reader", "orchestrator", "found 3 issues")
    await messages.send(bus, "file-reader", "orchestrator", "second")
    await messages.send(bus, "test-runner", "orchestrator", "green")
    result = await wait.wait_fan_in(bus, "orchestrator", 5, ["file-reader", "test-runner"])
    assert result.status == "complete"
    assert [r.message for r in result.results] == ["found 3 issues", "green"]
    nxt = await wait.wait_next(bus, "orchestrator", 0)
    assert nxt.message == "second"
