"""Over streamable HTTP, a session that ends gives back what a wait took unless its response
went out: the server stays up for other clients, and a session's end is a DELETE with its
`mcp-session-id` or the close of the connection the request came on (the SDK's client abandons
a 2026-era exchange, which has no session, by closing it). On stdio see test_read_delivery.py.
"""

from __future__ import annotations

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from wavewait.core import messages

from conftest import register_crew, until
from mcptools import data

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_http_session_abandoned_after_its_wait_took_a_message_loses_nothing(bus, mode):
    """Over streamable HTTP the server stays up for other clients. The SDK's client ends a
    handshake-era session (`legacy`) with a DELETE, and abandons a 2026-era exchange (`auto`)
    by closing its connection: either way the server gives back what the wait took."""
    from test_http import http_process, stderr_line

    await register_crew(bus, "orchestrator", "sender")
    sent: list = []
    with http_process(bus, "--token", "s3cret") as proc:
        url = (await stderr_line(proc)).split(" on ", 1)[1].strip()
        async with httpx2.AsyncClient(headers={"authorization": "Bearer s3cret"}) as h:
            with anyio.CancelScope() as session_scope:
                async with Client(streamable_http_client(url, http_client=h), mode=mode) as c:

                    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                        # the wait is in place: the message arrives, and the caller gives up at once,
                        # as the send returns: before the wait's answer, which needs a wake and a take
                        if not sent:
                            sent.append(await messages.send(bus, "sender", "orchestrator", "over http"))
                            session_scope.cancel()

                    await c.call_tool("wait", {"timeout": 5}, progress_callback=on_progress)
            assert session_scope.cancelled_caught
            await until(lambda: _pending_ids(bus, [sent[0].id]), what="the message back in the inbox")
            async with Client(streamable_http_client(url, http_client=h)) as c:
                r = data(await c.call_tool("wait", {"timeout": 5}))
    assert (r["message"], r["message_id"]) == ("over http", sent[0].id)


async def _pending_ids(bus, ids: list[str]) -> bool:
    return [ref.id for ref in await bus.pending("orchestrator")] == ids


async def test_two_http_clients_with_the_same_request_ids_each_get_their_message_acknowledged(bus):
    """2026-era HTTP has no session: two clients' calls may carry the same request id, and
    each delivery is settled on its own (one used to replace the other and stay claimed)."""
    from test_http import http_process, stderr_line

    await register_crew(bus, "orchestrator", "sender")
    for body in ("one", "two"):
        await messages.send(bus, "sender", "orchestrator", body)
    with http_process(bus, "--token", "s3cret") as proc:
        url = (await stderr_line(proc)).split(" on ", 1)[1].strip()
        got = []
        async with httpx2.AsyncClient(headers={"authorization": "Bearer s3cret"}) as h:
            async with (
                Client(streamable_http_client(url, http_client=h)) as a,
                Client(streamable_http_client(url, http_client=h)) as b,
            ):
                got.append(data(await a.call_tool("wait", {"timeout": 5}))["message"])
                got.append(data(await b.call_tool("wait", {"timeout": 5}))["message"])
                await until(lambda: _history(bus, ["one", "two"]), what="both acknowledged after the grace")
    assert got == ["one", "two"]
    assert await bus.pending("orchestrator") == [] and await bus.list_waits() == []


async def _history(bus, bodies: list[str]) -> bool:
    return [i.body for i in await bus.history("orchestrator")] == bodies


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_http_client_that_read_its_answer_and_ended_gets_no_duplicate(bus, mode):
    """A one-shot script over HTTP: its session ends (a DELETE, or the connection closed) right
    after the response was sent to its last byte, and the message stays taken."""
    from test_http import http_process, stderr_line

    await register_crew(bus, "orchestrator", "sender")
    sent = await messages.send(bus, "sender", "orchestrator", "once over http")
    with http_process(bus, "--token", "s3cret") as proc:  # its session ends well within the 2 s grace
        url = (await stderr_line(proc)).split(" on ", 1)[1].strip()
        async with httpx2.AsyncClient(headers={"authorization": "Bearer s3cret"}) as h:
            async with Client(streamable_http_client(url, http_client=h), mode=mode) as c:
                assert data(await c.call_tool("wait", {"timeout": 5}))["message_id"] == sent.id
        await until(lambda: _history(bus, ["once over http"]), what="the message acknowledged at the session's end")
        async with httpx2.AsyncClient(headers={"authorization": "Bearer s3cret"}) as h:
            async with Client(streamable_http_client(url, http_client=h), mode=mode) as c:
                assert data(await c.call_tool("wait", {"timeout": 0}))["status"] == "timeout"
    assert await bus.pending("orchestrator") == [] and await bus.list_waits() == []
