"""No progress notification races a result (Claude Code drops the connection when one does).

The wire is read through tests/wirerelay.py between the real MCP client and `wavewait mcp`:
once a wait's result is decided no notification goes out, and the last one sent before it is
at least the gap (wavewait/mcp/settings.py PROGRESS_GAP) ahead of the response.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import wirerelay

from wavewait.core import messages
from wavewait.mcp.settings import PROGRESS_GAP

from conftest import register_crew
from mcptools import data, relayed

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]

#: the relay stamps a line when it reads it; a stall of the relay can only shrink what it sees
TOLERANCE = 0.5


def call_on_wire(log: Path, tool: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The progress notifications for the one `tool` call on the wire, and its response."""
    records = wirerelay.read(log)
    call = next(r for r in records if r["dir"] == "in" and r["msg"].get("params", {}).get("name") == tool)
    token = call["msg"]["params"]["_meta"]["progressToken"]
    progress = [
        r
        for r in records
        if r["dir"] == "out"
        and r["msg"].get("method") == "notifications/progress"
        and r["msg"]["params"]["progressToken"] == token
    ]
    response = next(
        r for r in records if r["dir"] == "out" and r["msg"].get("id") == call["msg"]["id"] and "method" not in r["msg"]
    )
    return progress, response


async def test_no_progress_once_the_result_is_decided_and_a_gap_before_it(bus, tmp_path):
    """The flight reports right after the first notification: the result is decided at once.
    No notification says `1/1 received` (the result does), and the response waits out the gap."""
    await register_crew(bus, "f1")
    log = tmp_path / "wire.jsonl"
    seen: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)
        if len(seen) == 1:
            await messages.send(bus, "f1", "orchestrator", "REPORT f1")

    async with relayed(bus, log) as c:
        r = data(await c.call_tool("wait", {"timeout": 30, "from_agents": ["f1"]}, progress_callback=on_progress))
    assert r["status"] == "complete"
    progress, response = call_on_wire(log, "wait")
    lines = [p["msg"]["params"].get("message", "") for p in progress]
    assert progress and not [m for m in lines if m.startswith("1/1")], lines
    assert response["t"] - progress[-1]["t"] >= PROGRESS_GAP * TOLERANCE, (response["t"] - progress[-1]["t"], lines)


async def test_no_beat_just_before_a_timeout(bus, tmp_path):
    """Beats every 0.48 s on a 1 s wait: the one due at 0.96 s would go out just before the timeout."""
    await register_crew(bus, "f1")
    log = tmp_path / "wire.jsonl"

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        pass

    async with relayed(bus, log, "--progress-every", "0.48") as c:
        r = data(await c.call_tool("wait", {"timeout": 1, "from_agents": ["f1"]}, progress_callback=on_progress))
    assert r["status"] == "timeout"
    progress, response = call_on_wire(log, "wait")
    assert len(progress) >= 2, progress  # the beats do go out
    assert response["t"] - progress[-1]["t"] >= PROGRESS_GAP * TOLERANCE, response["t"] - progress[-1]["t"]
