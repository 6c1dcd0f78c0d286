"""Budgets over real MCP (docs/budgets.md): spawn_agent's budget_tokens sets the wave's budget,
a spawn past it is a tool error naming it, and a flight past its flight_budget_tokens comes
back from the fan-in dead with a `budget:` reason.

The agent replays event lines captured from Claude Code (tests/core/replay_agent.py): a whole
run reports 30 tokens, one model message then a held run 11 tokens."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import until
from mcptools import data, error_text, mcp_client

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]
REPLAY = str(Path(__file__).parents[1] / "core" / "replay_agent.py")
WHOLE_RUN = "plan: " + json.dumps({"events": "claude-success.jsonl"})
ONE_MESSAGE_THEN_HOLD = "plan: " + json.dumps({"events": "claude-success.jsonl", "lines": 2, "then": "block"})


async def test_spawn_agent_budgets_refuse_past_the_waves_and_stop_a_flight_past_its_own(bus, tmp_path):
    presets = tmp_path / "presets.toml"
    presets.write_text(
        f'[presets.replay]\nprogram = {json.dumps(sys.executable)}\nargs = [{json.dumps(REPLAY)}, "{{prompt}}"]\n'
        'events = "claude"\nworktree = false\n'
    )
    async with mcp_client(bus, "--presets", str(presets), cwd=str(tmp_path)) as c:
        bad = await c.call_tool("spawn_agent", {"name": "x", "command": ["true"], "wave": "w", "budget_tokens": 0})
        assert bad.is_error and "budget_tokens" in bad.content[0].text
        err = error_text(await c.call_tool("spawn_agent", {"name": "x", "command": ["true"], "budget_tokens": 9}))
        assert "a budget is the wave's; give wave too" in err
        first = data(
            await c.call_tool(
                "spawn_agent",
                {"name": "first", "prompt": WHOLE_RUN, "preset": "replay", "wave": "w", "budget_tokens": 30},
            )
        )

        async def closed() -> bool:
            a = await bus.get_agent(first["agent_id"])
            return a.status == "closed" and a.exit_code is not None

        await until(closed, 30, "the first flight to end")
        err = error_text(
            await c.call_tool("spawn_agent", {"name": "second", "prompt": WHOLE_RUN, "preset": "replay", "wave": "w"})
        )
        assert "wave 'w' has spent its budget: 30 tokens of 30 tokens, by its flights; nothing was started" in err
        capped = data(
            await c.call_tool(
                "spawn_agent",
                {"name": "capped", "prompt": ONE_MESSAGE_THEN_HOLD, "preset": "replay", "flight_budget_tokens": 10},
            )
        )
        fan = data(await c.call_tool("wait", {"timeout": 30, "from_agents": [capped["agent_id"]]}))
        entry = fan["results"][0]
        assert entry["status"] == "dead"
        assert entry["reason"].startswith("budget: its own cap of 10 tokens is spent (spent 11 tokens)"), entry
        listed = {a["name"]: a for a in data(await c.call_tool("list_agents", {}))["agents"]}
        assert "second" not in listed  # the refused spawn left no record
        assert listed["capped"]["reason"].startswith("budget:")
