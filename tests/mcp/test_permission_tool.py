"""approve over real MCP: a permission request becomes the flight's question; the answer decides."""

from __future__ import annotations

import json

import anyio
import pytest

from wavewait.core import agents, messages, wait

from mcptools import mcp_client

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("allow", {"behavior": "allow", "updatedInput": {"command": "rm -rf build"}}),
        ("deny use make clean", {"behavior": "deny", "message": "denied by the person in charge: use make clean"}),
        ("not now", {"behavior": "deny", "message": "denied by the person in charge: not now"}),
    ],
)
async def test_a_permission_request_is_the_flights_question_until_answered(bus, answer, expected):
    await agents.register(bus, "orchestrator")
    await agents.register(bus, "flight", parent_id="orchestrator")
    got: dict = {}
    async with mcp_client(bus, "--agent", "flight") as c, anyio.create_task_group() as tg:

        async def ask() -> None:
            r = await c.call_tool("approve", {"tool_name": "Bash", "input": {"command": "rm -rf build"}})
            assert not r.is_error and len(r.content) == 1 and r.structured_content is None  # as Claude Code wants
            got["result"] = json.loads(r.content[0].text)

        tg.start_soon(ask)
        q = (await wait.wait_event(bus, "orchestrator", 30, ["question"])).to_json()
        assert q["from"] == "flight" and q["body"].startswith('permission: Bash {"command": "rm -rf build"}')
        asking = await bus.get_agent("flight")  # marked before its question was delivered
        assert asking.state == "needs_input" and asking.question_id == q["question_id"]
        await messages.answer(bus, "orchestrator", "flight", answer)
    assert got["result"] == expected
    assert (await bus.get_agent("flight")).state == "running"
