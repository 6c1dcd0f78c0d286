"""Flights of the stand-in agent that speaks Claude Code's stream-json (talkagent.py): its
preset, and a flight of it started through the core as any face starts one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from wavewait.core import agents, flights
from wavewait.core.bus import Bus
from wavewait.core.model import Agent

TALKAGENT = str(Path(__file__).with_name("talkagent.py"))
PRESET = "talker"


def presets_file(folder: Path) -> str:
    """A presets TOML with `talker`: the stand-in as a Claude Code conversation (the prompt is
    its first user message, a resume is `--resume SESSION`), without worktree or MCP server."""
    path = folder / "talk-presets.toml"
    path.write_text(
        f"""
[presets.{PRESET}]
program = {json.dumps(sys.executable)}
args = [{json.dumps(TALKAGENT)}]
events = "claude"
conversation = "claude"
resume_args = ["--resume", "{{session}}"]
mcp = "none"
worktree = false
"""
    )
    return str(path)


async def start_talker(bus: Bus, folder: Path, name: str, prompt: str, keep_open: float = 600.0) -> Agent:
    """A flight of the stand-in, told `prompt` as its first message, kept open between turns."""
    await agents.register(bus, "orchestrator")
    return await flights.start(
        bus,
        name,
        parent_id="orchestrator",
        preset=PRESET,
        presets_file=presets_file(folder),
        prompt=prompt,
        cwd=str(folder),
        keep_open=keep_open,
    )
