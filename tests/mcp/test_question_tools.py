"""ask and approve over real MCP: the question is the flight's until answered; the answer comes back."""

from __future__ import annotations

import json

import anyio
import pytest

from wavewait.core import agents, messages, wait

from mcptools import data, mcp_client

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]


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


async def test_ask_waits_for_the_answer_and_leaves_an_unanswered_question_open(bus):
    await agents.register(bus, "orchestrator")
    await agents.register(bus, "flight", parent_id="orchestrator")
    got: dict = {}
    async with mcp_client(bus, "--agent", "flight") as c:
        early = data(await c.call_tool("ask", {"question": "tabs or spaces?", "timeout": 0}))
        assert early["status"] == "timeout" and "still open" in early["hint"]
        flight = await bus.get_agent("flight")
        assert flight.state == "needs_input" and flight.question_id == early["question_id"]
        again = await c.call_tool("ask", {"question": "and line length?", "timeout": 0})
        assert again.is_error and "is still open" in again.content[0].text  # one question at a time
        await messages.answer(bus, "orchestrator", "flight", "spaces")  # answers the open question
        again = await c.call_tool("ask", {"question": "and line length?", "timeout": 0})
        assert again.is_error and "an answer is waiting in your inbox" in again.content[0].text
        late = data(await c.call_tool("wait_for_event", {"types": ["answer"], "timeout_secs": 0}))
        assert late["body"] == "spaces"
        async with anyio.create_task_group() as tg:

            async def ask() -> None:
                got["r"] = data(await c.call_tool("ask", {"question": "four or two?", "timeout": 30}))

            tg.start_soon(ask)
            q = None
            while q is None or q["body"] != "four or two?":
                q = (await wait.wait_event(bus, "orchestrator", 30, ["question"])).to_json()
            await messages.answer(bus, "orchestrator", "flight", "four")
    assert got["r"]["status"] == "answered" and got["r"]["question_id"] == q["question_id"]
    assert got["r"]["answer"] == "four"
    assert (await bus.get_agent("flight")).state == "running"
