"""A session that ends right after a wait's response was written gives back what the wait took.

A response is not delivered because it reached a pipe: a client that abandons a call and
closes its session (what the MCP SDK does when the caller's cancel scope exits: a courtesy
`notifications/cancelled`, stdin closed, the server stopped), or a host killed by its user,
never read it. Within the grace after the write, the session's end releases the items to
the head of the inbox; the next wait gets them again with the same `message_id`.
"""

from __future__ import annotations

import anyio
import pytest

from wavewait.core import messages

from conftest import register_crew
from mcptools import data, mcp_client

pytestmark = pytest.mark.anyio


async def _abandon_session_on_receipt(bus, tool: str, args: dict) -> bool:
    """Call `tool` in a fresh session and abandon the session, as the SDK's caller does when its
    cancel scope exits, as soon as the call's progress says it received something."""
    with anyio.CancelScope() as session_scope:
        async with mcp_client(bus) as c:

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                if message and "received" in message:
                    session_scope.cancel()

            await c.call_tool(tool, args, progress_callback=on_progress)
    return session_scope.cancelled_caught


@pytest.mark.parametrize(
    "tool, args, key",
    [
        ("wait", {"timeout": 5}, "message_id"),
        ("wait_for_event", {"timeout_secs": 5}, "event_id"),
    ],
)
async def test_a_session_abandoned_after_its_wait_took_a_message_loses_nothing(bus, tool, args, key):
    await register_crew(bus, "orchestrator", "sender")
    sent = [(await messages.send(bus, "sender", "orchestrator", f"m{i}")).id for i in range(4)]
    for _ in range(4):
        assert await _abandon_session_on_receipt(bus, tool, args)
        # the session is over (the client stopped its server): the message is back in the inbox
        assert len(await bus.pending("orchestrator")) == 4
    assert await bus.list_waits() == []
    async with mcp_client(bus) as c:
        got = [data(await c.call_tool(tool, args))[key] for _ in range(4)]
    assert got == sent  # every one, once, in order, with the same ids
