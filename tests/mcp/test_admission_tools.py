"""spawn_agent's max_parallel over real MCP: the wave's limit kept, a queued flight shown,
killed without starting, and stopped with the session that queued it."""

from __future__ import annotations

from pathlib import Path

import pytest

from wavewait.core import waves

from conftest import PYTHON, register_crew, until
from mcptools import data, error_text, mcp_client

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]

GATED = 'while [ ! -e "$1" ]; do sleep 0.02; done; exec "$2" -m wavewait notify --message done'


def gated(gate: Path) -> list[str]:
    return ["sh", "-c", GATED, "flight", str(gate), PYTHON]


async def test_spawn_agent_with_max_parallel_queues_past_the_limit(bus, tmp_path: Path):
    await register_crew(bus)
    async with mcp_client(bus, cwd=str(tmp_path)) as c:
        spawn = {"wave": "capped", "max_parallel": 1}
        first = data(await c.call_tool("spawn_agent", {"name": "first", "command": gated(tmp_path / "a"), **spawn}))
        second = data(await c.call_tool("spawn_agent", {"name": "second", "command": gated(tmp_path / "b"), **spawn}))
        third = data(await c.call_tool("spawn_agent", {"name": "third", "command": gated(tmp_path / "c"), **spawn}))
        assert first["status"] == "running" and first["pid"]
        assert (second["status"], second["pid"]) == ("queued", None)
        assert second["reason"] == "waiting for a slot: its wave runs 1 at most"
        assert (await waves.get_settings(bus, "capped")).max_parallel == 1
        listed = {a["name"]: a for a in data(await c.call_tool("list_agents", {"wave": "capped"}))["agents"]}
        assert (listed["second"]["status"], listed["second"]["state"]) == ("queued", "queued")
        killed = data(await c.call_tool("kill_agent", {"agent": second["agent_id"]}))
        assert killed["status"] == "dead"
        assert "caps a wave" in error_text(
            await c.call_tool("spawn_agent", {"name": "x", "command": ["true"], "max_parallel": 2})
        )
        assert "max_parallel" in error_text(
            await c.call_tool("spawn_agent", {"name": "x", "command": ["true"], "wave": "capped", "max_parallel": 0})
        )
    # the session ended: its flights stop, the queued one without ever starting
    await until(lambda: _dead(bus, third["agent_id"]), what="the queued flight to be stopped")
    await until(lambda: _dead(bus, first["agent_id"]), what="the running flight to be stopped")
    for a in (second, third):
        after = await bus.get_agent(a["agent_id"])
        assert after.supervisor_pid is None and after.started_at is None
        assert "before it started" in after.reason


async def _dead(bus, agent_id: str) -> bool:
    return (await bus.get_agent(agent_id)).status == "dead"
