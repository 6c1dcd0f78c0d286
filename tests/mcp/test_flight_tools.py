"""The flight tools over real MCP: read_output, reply, and cwd/env on spawn_agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from wavewait.core import messages

from conftest import register_crew, until
from mcptools import data, error_text, mcp_client

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]


async def ended(bus, agent_id: str) -> bool:
    a = await bus.get_agent(agent_id)
    return a is not None and a.finished


async def test_spawn_in_a_directory_with_env_then_read_its_output(bus, tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    async with mcp_client(bus, cwd=str(tmp_path)) as c:
        spawned = data(
            await c.call_tool(
                "spawn_agent",
                {
                    "name": "shower",
                    "command": ["sh", "-c", 'pwd; echo "colour=$COLOUR"; echo oops >&2; exit 5'],
                    "cwd": "work",
                    "env": {"COLOUR": "teal"},
                },
            )
        )
        await until(lambda: ended(bus, spawned["agent_id"]), what="the flight to end")
        out = data(await c.call_tool("read_output", {"agent": spawned["agent_id"][:8], "lines": 2}))
        assert out["lines"] == ["colour=teal", "oops"] and out["state"] == "dead"
        listed = {a["name"]: a for a in data(await c.call_tool("list_agents", {}))["agents"]}
        assert listed["shower"]["reason"] == f"exited with code 5; last output:\n{work.resolve()}\ncolour=teal\noops"
        assert "not a directory" in error_text(
            await c.call_tool("spawn_agent", {"name": "x", "command": ["true"], "cwd": "nowhere"})
        )
        assert "cwd: may not contain a NUL" in error_text(
            await c.call_tool("spawn_agent", {"name": "x", "command": ["true"], "cwd": "\x00"})
        )
        assert "variable name" in error_text(
            await c.call_tool("spawn_agent", {"name": "x", "command": ["true"], "env": {"1BAD": "x"}})
        )
        assert "lines" in error_text(await c.call_tool("read_output", {"agent": spawned["agent_id"], "lines": 0}))


async def test_reply_answers_a_question_and_clears_needs_input(bus):
    await register_crew(bus, "file-reader")
    await bus.update_agent("file-reader", parent_id="orchestrator")
    q = await messages.ask(bus, "file-reader", "which database?")
    async with mcp_client(bus) as c:
        listed = {a["name"]: a for a in data(await c.call_tool("list_agents", {}))["agents"]}
        assert listed["file-reader"]["state"] == "needs_input"
        assert listed["file-reader"]["question"] == "which database?"
        data(await c.call_tool("reply", {"question_id": q.id, "message": "postgres"}))
        listed = {a["name"]: a for a in data(await c.call_tool("list_agents", {}))["agents"]}
        assert listed["file-reader"]["state"] == "running"
        assert "no open question" in error_text(await c.call_tool("reply", {"agent": "file-reader", "message": "x"}))
    assert [i.body for i in await bus.peek("file-reader") if i.type == messages.ANSWER] == ["postgres"]
