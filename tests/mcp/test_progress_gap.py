"""No progress notification races a result (Claude Code drops the connection when one does),
and no result waits for a notification.

The wire is read through tests/wirerelay.py between the real MCP client and `wavewait mcp`. A
wait's progress line goes out only once it has been still for the gap
(wavewait/mcp/settings.py PROGRESS_GAP, WAVEWAIT_PROGRESS_GAP); a line still held when the
result is decided is dropped, and the result leaves at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
import wirerelay

from wavewait.core import messages
from wavewait.mcp.settings import PROGRESS_GAP

from conftest import has_progress, has_waits, register_crew, until
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


@pytest.mark.both_buses
async def test_a_fan_in_answer_is_not_held_by_a_pending_notification(bus, tmp_path):
    """A gap far longer than the test: every line the wait makes stays held. The first report
    changes the line (`1/2 received`, seen on the wait's record), the second decides the
    result: it comes back at once, and no notification ever went out, before it or after.
    Held results (the old way: the result waited out the gap after the last notification)
    would keep the call for the whole gap."""
    await register_crew(bus, "f1", "f2")
    log = tmp_path / "wire.jsonl"
    seen: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    async with relayed(bus, log, env={"WAVEWAIT_PROGRESS_GAP": "600"}) as c:
        got: dict[str, Any] = {}

        async def call() -> None:
            r = await c.call_tool("wait", {"timeout": 900, "from_agents": ["f1", "f2"]}, progress_callback=on_progress)
            got["r"] = data(r)

        with anyio.fail_after(60):  # a tenth of the gap: a held result cannot come back in time
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await until(lambda: has_waits(bus, 1), 30, "the wait on the bus")
                await messages.send(bus, "f1", "orchestrator", "REPORT f1")
                await until(lambda: has_progress(bus, "1/2 received"), 30, "the first report taken")
                await messages.send(bus, "f2", "orchestrator", "REPORT f2")
    assert got["r"]["status"] == "complete", got
    assert [x["message"] for x in got["r"]["results"]] == ["REPORT f1", "REPORT f2"]
    progress, _ = call_on_wire(log, "wait")
    assert progress == [] and seen == [], (progress, seen)


async def test_a_still_line_goes_out_and_none_once_the_result_is_decided(bus, tmp_path):
    """The first report arrives as the wait starts; its line (`1/2`) goes out once it has been
    still for the gap, and the second report, sent on that notification, decides the result:
    no line says `2/2` (the result does), and the line went out the gap after the change."""
    await register_crew(bus, "f1", "f2")
    log = tmp_path / "wire.jsonl"
    seen: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)
        if message and message.startswith("1/2") and seen.count(message) == 1:
            await messages.send(bus, "f2", "orchestrator", "REPORT f2")

    async with relayed(bus, log) as c:
        async with anyio.create_task_group() as tg:

            async def first() -> None:
                await until(lambda: has_waits(bus, 1), 30, "the wait on the bus")
                await messages.send(bus, "f1", "orchestrator", "REPORT f1")

            tg.start_soon(first)
            r = data(
                await c.call_tool("wait", {"timeout": 60, "from_agents": ["f1", "f2"]}, progress_callback=on_progress)
            )
    assert r["status"] == "complete"
    progress, response = call_on_wire(log, "wait")
    lines = [p["msg"]["params"].get("message", "") for p in progress]
    assert [m for m in lines if m.startswith("1/2")], lines
    assert not [m for m in lines if m.startswith("2/2")], lines
    assert progress[-1]["t"] <= response["t"]


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
