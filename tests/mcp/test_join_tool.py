"""A join through the real MCP client: `wait` with `need`, a wave, files and events
(docs/joins.md), its description found by the words a model searches with."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from wavewait.core import messages
from wavewait.core.agents import register

from conftest import has_progress, has_waits, register_crew, until
from mcptools import data, mcp_client

pytestmark = [pytest.mark.anyio]


@pytest.mark.both_buses
async def test_the_first_two_of_a_wave_and_an_artifact_through_the_real_client(bus, tmp_path):
    await register(bus, "orchestrator")
    for name in ("rev-a", "rev-b", "rev-c"):
        await register(bus, name, parent_id="orchestrator", wave="reviews")
    (tmp_path / "out").mkdir()
    got: dict[str, Any] = {}
    async with mcp_client(bus, cwd=str(tmp_path)) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        doc = tools["wait"].description or ""
        assert "first K" in doc and "any" in doc and "need" in tools["wait"].input_schema["properties"]

        async def join() -> None:
            args = {"timeout": 60, "wave": "reviews", "files": [{"glob": "out/*.pdf"}], "need": 3}
            got["r"] = data(await c.call_tool("wait", args))

        async with anyio.create_task_group() as tg:
            tg.start_soon(join)
            await until(lambda: has_waits(bus, 1), 30, "the join on the bus")
            await messages.send(bus, "rev-b", "orchestrator", "LGTM b")
            await messages.send(bus, "rev-a", "orchestrator", "LGTM a")
            await until(lambda: has_progress(bus, "met 2 / need 3"), 30, "two reviews met")
            assert "r" not in got
            (tmp_path / "out" / "report.pdf").write_text("%PDF")
    r = got["r"]
    assert r["status"] == "complete" and (r["need"], r["met"]) == (3, 3), r
    assert [e["status"] for e in r["results"]] == ["received", "received", "running"]
    assert r["files"] == [
        {"glob": str(tmp_path / "out" / "*.pdf"), "min_count": 1, "status": "met", "matched": 1,
         "files": [str(tmp_path / "out" / "report.pdf")]}
    ]  # fmt: skip


@pytest.mark.one_bus
async def test_a_question_ends_the_join_as_needs_input_and_a_need_beyond_the_targets_is_refused(bus, tmp_path):
    await register_crew(bus, "r1", "r2")
    await messages.ask(bus, "r1", "Which branch?", to="orchestrator")
    async with mcp_client(bus, cwd=str(tmp_path)) as c:
        r = data(await c.call_tool("wait", {"timeout": 60, "from_agents": ["r1", "r2"], "need": "any"}))
        assert r["status"] == "needs_input" and r["results"][0]["message"] == "Which branch?", r
        assert "answer it with reply, then call wait again with the same arguments" in r["hint"]
        bad = await c.call_tool("wait", {"timeout": 1, "from_agents": ["r1", "r2"], "need": 3})
        assert bad.is_error and "need: 'all', 'any' or a whole number from 1 to 2" in bad.content[0].text
