"""The rest of the fault list: the bus removed under a wait, wall-clock jumps, a failed spawn."""

from __future__ import annotations

import shutil
import time

import anyio
import pytest

from wavewait.core import admission, wait
from wavewait.core.errors import BadInput, BusError

from conftest import Background, has_waits, register_crew, until
from mcptools import error_text, mcp_client

pytestmark = pytest.mark.anyio


async def test_a_bus_folder_removed_under_a_running_wait_ends_it_with_a_clear_error(file_bus):
    await register_crew(file_bus, "orchestrator")
    async with anyio.create_task_group() as tg:
        bg = Background(tg)

        async def waiting() -> object:
            try:
                return await wait.wait_next(file_bus, "orchestrator", 60)
            except BusError as e:
                return e

        bg.start("w", waiting)
        await until(lambda: has_waits(file_bus, 1), what="the wait registered")
        shutil.rmtree(file_bus.root)
        got = await bg.result("w", 30)  # woken by the removal, long before its 60 s
    assert isinstance(got, BusError) and "is gone" in str(got) and str(file_bus.root) in str(got)


async def test_through_mcp_a_removed_bus_is_an_error_result_and_the_server_stays_up(file_bus):
    await register_crew(file_bus, "orchestrator")
    async with mcp_client(file_bus) as c:
        await c.call_tool("list_agents", {})  # the server is up on the bus (its front answers earlier)
        shutil.rmtree(file_bus.root)
        text = error_text(await c.call_tool("wait", {"timeout": 5}))
        assert "is gone" in text and "Traceback" not in text
        assert (await c.list_tools()).tools


@pytest.mark.parametrize("jump", [3600.0, -3600.0])
async def test_a_wall_clock_jump_neither_ends_a_wait_early_nor_holds_it_past_its_timeout(bus, monkeypatch, jump):
    """Deadlines run on the monotonic clock: the wall clock jumping an hour either way changes nothing."""
    await register_crew(bus, "orchestrator")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + jump)
    start = time.monotonic()
    r = await wait.wait_next(bus, "orchestrator", 1.0)
    took = time.monotonic() - start
    assert r.status == "timeout" and took >= 1.0
    assert took < 30  # not an hour


async def test_a_failed_spawn_leaves_no_running_ghost_only_a_dead_record_with_the_reason(bus):
    await register_crew(bus, "orchestrator")
    with pytest.raises(BadInput, match="cannot start '/no/such/program'"):
        await admission.spawn(bus, "ghost", ["/no/such/program"], parent_id="orchestrator")
    ghosts = [a for a in await bus.list_agents() if a.name == "ghost"]
    assert [(a.status, a.reason) for a in ghosts] == [("dead", "No such file or directory")]
