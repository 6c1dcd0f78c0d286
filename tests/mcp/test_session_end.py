"""How a session's end settles what its waits took: by what the client read.

A response the client read is acknowledged when the session ends, however it ends (a caller
that got its answer and abandoned the session at once gets nothing twice). One it did not
read goes back, and so does one read by a client that never listed the tools (nothing shows
its caller got it): a host killed by its user, a raw script. Over HTTP, a session abandoned
before its answer went out gives back what its wait took. The next wait gets what went back
with the same `message_id`.
"""

from __future__ import annotations

import signal
import subprocess

import anyio
import anyio.lowlevel
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from wavewait.core import messages

from conftest import PYTHON, register_crew, until
from mcptools import data, mcp_client, server_env

pytestmark = pytest.mark.anyio


async def _abandon_session_on_receipt(bus, tool: str, args: dict) -> bool:
    """Call `tool` in a fresh session and abandon the session, as the SDK's caller does when its
    cancel scope exits, the moment the call returned: the client read the response."""
    with anyio.CancelScope() as session_scope:
        async with mcp_client(bus) as c:
            await c.call_tool(tool, args)
            session_scope.cancel()
            await anyio.lowlevel.checkpoint()
    return session_scope.cancelled_caught


@pytest.mark.parametrize(
    "tool, args, key",
    [
        ("wait", {"timeout": 5}, "message_id"),
        ("wait_for_event", {"timeout_secs": 5}, "event_id"),
    ],
)
async def test_a_session_abandoned_right_after_its_call_returned_gets_nothing_twice(bus, tool, args, key):
    """The call returned (its caller has the answer), then the caller's cancel scope around the
    session exits at once: the client read the response, so it is acknowledged, not queued again."""
    await register_crew(bus, "orchestrator", "sender")
    sent = [(await messages.send(bus, "sender", "orchestrator", f"m{i}")).id for i in range(4)]
    for n in range(4):
        assert await _abandon_session_on_receipt(bus, tool, args)
        await until(lambda: _no_waits(bus), what="the session's deliveries settled")
        assert len(await bus.pending("orchestrator")) == 3 - n  # this session's message is gone for good
    history = [i.id for i in await bus.history("orchestrator")]
    assert history == sent  # every one, once, in order


# A host: starts the server, calls wait, reads the response, says so, then blocks until killed.
HOST = """
import subprocess, sys
server = subprocess.Popen([sys.executable, "-m", "wavewait", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
server.stdin.write(sys.argv[1].encode()); server.stdin.flush()
while b'"id":2' not in server.stdout.readline().replace(b" ", b""):
    pass
print(server.pid, flush=True)
sys.stdin.read()
"""
INIT_AND_WAIT = (
    '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
    '"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n'
    '{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
    '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait","arguments":{"timeout":5}}}\n'
)


async def test_a_host_killed_right_after_reading_the_response_loses_nothing(bus):
    """The host read the wait's response and was killed (SIGKILL) before it could show it. It
    never listed the tools, so nothing shows its caller got the answer (the MCP SDK's client
    lists them first): its server sees stdin close, gives the message back, and ends."""
    await register_crew(bus, "orchestrator", "sender")
    sent = await messages.send(bus, "sender", "orchestrator", "for a dead host")
    host = subprocess.Popen(
        [PYTHON, "-c", HOST, INIT_AND_WAIT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=server_env(bus)
    )
    try:
        assert host.stdout is not None
        server_pid = int(await anyio.to_thread.run_sync(host.stdout.readline))
        assert await bus.pending("orchestrator") == []  # taken by the wait, its response read
        host.send_signal(signal.SIGKILL)
        host.wait(10)
    finally:
        if host.poll() is None:
            host.kill()
    await until(lambda: _pending_ids(bus, [sent.id]), what="the message back in the inbox")
    await until(lambda: not _alive(server_pid), what="the orphaned server to end")
    assert await bus.list_waits() == [] and await bus.history("orchestrator") == []


async def _no_waits(bus) -> bool:
    return await bus.list_waits() == []


def _alive(pid: int) -> bool:
    """Running (a zombie no one has reaped yet has ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_http_session_abandoned_before_its_answer_loses_nothing(bus, mode):
    """Over streamable HTTP the server stays up for other clients. The caller abandons its
    session while the wait is in place (the SDK's client then sends no DELETE in a
    handshake-era session, and closes its connection in a 2026-era exchange); the message
    arrives after. The wait, ended with its connection or finishing with no one to answer,
    leaves it in the inbox: the next session's wait gets it with the same `message_id`.
    (A session cancelled as its answer arrives is the window docs/reliability.md names.)"""
    from test_http import http_process, stderr_line

    await register_crew(bus, "orchestrator", "sender")
    with http_process(bus, "--token", "s3cret") as proc:
        url = (await stderr_line(proc)).split(" on ", 1)[1].strip()
        async with httpx2.AsyncClient(headers={"authorization": "Bearer s3cret"}) as h:
            with anyio.CancelScope() as session_scope:
                async with Client(streamable_http_client(url, http_client=h), mode=mode) as c:

                    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                        session_scope.cancel()  # the wait is in place: the caller gives up its session

                    await c.call_tool("wait", {"timeout": 5}, progress_callback=on_progress)
            assert session_scope.cancelled_caught
            sent = await messages.send(bus, "sender", "orchestrator", "over http")
            await until(lambda: _no_waits(bus), what="the abandoned wait to end")
            assert await _pending_ids(bus, [sent.id])
            async with Client(streamable_http_client(url, http_client=h), mode=mode) as c:
                r = data(await c.call_tool("wait", {"timeout": 5}))
    assert (r["message"], r["message_id"]) == ("over http", sent.id)


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
