"""spawn_agent with a preset over real MCP: the flight runs in its own worktree, reports by
itself, and the fan-in and list_agents show its branch, changes and tokens.

The agent replays event lines captured from Claude Code (tests/core/replay_agent.py);
tests/hosts/test_coding_wave.py runs the real CLIs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import until
from gittools import make_repo, status
from mcptools import data, error_text, mcp_client

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]
REPLAY = str(Path(__file__).parents[1] / "core" / "replay_agent.py")


async def test_a_preset_flight_spawned_over_mcp_reports_with_its_changes_and_tokens(bus, tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "project", monkeypatch)
    presets = tmp_path / "presets.toml"
    presets.write_text(
        f'[presets.replay]\nprogram = {json.dumps(sys.executable)}\nargs = [{json.dumps(REPLAY)}, "{{prompt}}"]\n'
        'events = "claude"\n'
    )
    plan = {"events": "claude-success.jsonl", "write": {"hello.txt": "hi\n"}}
    async with mcp_client(bus, "--presets", str(presets), cwd=str(repo)) as c:
        err = error_text(await c.call_tool("spawn_agent", {"name": "x", "prompt": "p", "preset": "gemini"}))
        assert "preset: no preset 'gemini'; known: claude, codex, replay" in err
        spawned = data(
            await c.call_tool(
                "spawn_agent", {"name": "coder", "prompt": "plan: " + json.dumps(plan), "preset": "replay", "wave": "w"}
            )
        )
        fan = data(await c.call_tool("wait", {"timeout": 60, "from_agents": [spawned["agent_id"]]}))
        entry = fan["results"][0]
        assert (entry["status"], entry["message"]) == ("received", "Wrote hello.txt.\nAll done.")
        assert entry["branch"] == "wavewait/w/coder"
        assert [p["path"] for p in entry["changes"]["paths"]] == ["hello.txt"]
        assert (entry["usage"]["input_tokens"], entry["usage"]["output_tokens"]) == (20, 10)

        async def closed() -> bool:
            return (await bus.get_agent(spawned["agent_id"])).status == "closed"

        await until(closed, 30, "the flight to end")
        listed = {a["name"]: a for a in data(await c.call_tool("list_agents", {}))["agents"]}
        coder = listed["coder"]
        assert coder["preset"] == "replay" and coder["worktree"]["branch"] == "wavewait/w/coder"
        assert (coder["changes"]["files"], coder["changes"]["added"], coder["changes"]["final"]) == (1, 1, True)
        assert coder["usage"]["cost_usd"] == pytest.approx(0.00028)
    assert status(repo) == ""  # the main tree is untouched
