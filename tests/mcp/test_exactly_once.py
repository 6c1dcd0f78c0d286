"""Exactly once, whichever way a client ends (docs/reliability.md), through the real MCP client.

A response is delivered once the client has read it: a script that calls `wait`, prints the
answer and closes its session gets nothing twice; a caller that gives up a call at any moment
around its answer loses nothing (its cancel comes before the session's end on stdin, and
counts); a server killed while its reply sits unread in a full pipe loses nothing either.
"""

from __future__ import annotations

import fcntl
import os
import random
import signal
import subprocess
import termios
from array import array
from functools import partial

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from wavewait.core import messages

from conftest import PYTHON, register_crew, until
from mcptools import data, mcp_client, server_env

pytestmark = [pytest.mark.anyio, pytest.mark.long]  # each tens of seconds, a minute loaded: ordered early


async def _pending(bus) -> list[str]:
    return [ref.id for ref in await bus.pending("orchestrator")]


async def _history(bus) -> list[str]:
    return [i.id for i in await bus.history("orchestrator")]


@pytest.mark.parametrize("front", ["1", "0"], ids=["front", "no-front"])
async def test_a_client_that_read_its_answer_and_closed_its_session_gets_nothing_twice(bus, front):
    """A one-shot script: open a session, `wait`, print the answer, exit. Each answer is
    acknowledged as the session ends (the client read it), inside the grace: 0 duplicated."""
    await register_crew(bus, "orchestrator", "sender")
    runs = 20 if front == "1" else 10
    sent, got = [], []
    for i in range(runs):
        sent.append((await messages.send(bus, "sender", "orchestrator", f"m{i}")).id)
        async with mcp_client(bus, env={"WAVEWAIT_MCP_PRERENDER": front}) as c:
            got.append(data(await c.call_tool("wait", {"timeout": 5}))["message_id"])
        # the session is over and its server gone: what it read is history, not queued again
        await until(lambda: _settled(bus), what="no wait left on the bus")
        assert await _pending(bus) == [], f"run {i}: the message is queued again (a duplicate)"
    assert got == sent
    assert await _history(bus) == sent


async def _settled(bus) -> bool:
    return await bus.list_waits() == []


async def test_a_caller_that_gives_up_around_its_answer_loses_nothing_and_gets_nothing_twice(bus):
    """The caller gives up its call 0–6 ms after the condition is met (its message sent), then
    its script ends the session: before the answer, crossing it, or after the client read it but
    before its caller got it (the client's courtesy cancel names the call, or the `tools/list` it
    sends to check the result against the tool's schema). Each message is either received by a
    call that returned, and then in the history, or back in the inbox for the next wait:
    0 lost, 0 duplicated, over 20 runs."""
    await register_crew(bus, "orchestrator", "sender")
    rng = random.Random(31)
    outcomes = []
    for i in range(20):
        async with mcp_client(bus) as c:
            sent, result = await _given_up(bus, c, f"m{i}", rng.uniform(0, 0.006))
        received = data(result)["message_id"] if result is not None else None
        assert sent, f"run {i}: the wait sent no progress, and returned {result}"
        await until(lambda: _settled(bus), what="no wait left on the bus")
        pending, history = await _pending(bus), await _history(bus)
        if received is not None:
            assert received == sent[0]
            assert sent[0] in history and sent[0] not in pending, f"run {i}: received, and queued again"
        else:  # never reached its caller: back in the inbox, then drained for the next run
            assert pending == [sent[0]], f"run {i}: not received and not queued: lost ({outcomes})"
            async with mcp_client(bus) as c:
                assert data(await c.call_tool("wait", {"timeout": 5}))["message_id"] == sent[0]
            await until(lambda: _settled(bus), what="the drain settled")
            assert await _pending(bus) == [], f"run {i}: the drain read it, and it is queued again"
        outcomes.append("received" if received else "given back")
    assert await _pending(bus) == []


async def _given_up(bus, c, body: str, delay: float) -> tuple[list[str], CallToolResult | None]:
    """`wait`, its message sent on its first progress notification, and the call given up
    `delay` seconds later: what was sent, and the result if the call returned first."""
    sent: list[str] = []
    sending, done = anyio.Event(), anyio.Event()
    result = None
    with anyio.CancelScope() as call_scope:

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if sending.is_set():
                return
            sending.set()  # the wait is in place: its condition is met now, then the caller gives up
            with anyio.CancelScope(shield=True):  # the answer may come before `send` returns here
                sent.append((await messages.send(bus, "sender", "orchestrator", body)).id)
            done.set()
            call_scope.deadline = anyio.current_time() + delay

        result = await c.call_tool("wait", {"timeout": 5}, progress_callback=on_progress)
    if sending.is_set():
        await done.wait()
    return sent, result


async def test_an_http_caller_that_gives_up_around_its_answer_loses_nothing_and_gets_nothing_twice(bus):
    """The same over streamable HTTP in a session (the handshake era), 10 runs: the call given
    up 0–6 ms after its message was sent, then the session deleted. Each message is either
    received by a call that returned, and then in the history, or back in the inbox: 0 lost,
    0 duplicated. (A 2026-era exchange has no session: a client that moves its listing to a
    new connection may see a message again, never lose it: docs/reliability.md.)"""
    from test_http import http_process, stderr_line

    await register_crew(bus, "orchestrator", "sender")
    rng = random.Random(33)
    with http_process(bus, "--token", "s3cret") as proc:
        url = (await stderr_line(proc)).split(" on ", 1)[1].strip()
        for i in range(10):
            async with (
                httpx2.AsyncClient(headers={"authorization": "Bearer s3cret"}) as h,
                Client(streamable_http_client(url, http_client=h), mode="legacy") as c,
            ):
                sent, result = await _given_up(bus, c, f"h{i}", rng.uniform(0, 0.006))
            assert sent, f"run {i}: the wait sent no progress, and returned {result}"
            received = data(result)["message_id"] if result is not None else None
            await until(lambda: _settled(bus), what="no wait left on the bus")
            settled = partial(_queued_or_history, bus, sent[0])
            await until(settled, what="the run's delivery settled")
            pending, history = await _pending(bus), await _history(bus)
            if received is not None:
                assert sent[0] in history and sent[0] not in pending, f"run {i}: received, and queued again"
            else:
                assert pending == [sent[0]], f"run {i}: not received and not queued: lost"
                async with (
                    httpx2.AsyncClient(headers={"authorization": "Bearer s3cret"}) as h,
                    Client(streamable_http_client(url, http_client=h), mode="legacy") as c,
                ):
                    assert data(await c.call_tool("wait", {"timeout": 5}))["message_id"] == sent[0]
                await until(settled, what="the drain settled")
                assert sent[0] in await _history(bus)
                assert await _pending(bus) == [], f"run {i}: the drain read it, and it is queued again"


async def _queued_or_history(bus, message_id: str) -> bool:
    """Settled: acknowledged (history) or given back (queued), no longer claimed."""
    return message_id in await _pending(bus) or message_id in await _history(bus)


INIT = (
    '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
    '"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n'
    '{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
)


def _unread(fd: int) -> int:
    buf = array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return buf[0]


async def test_a_server_killed_while_its_reply_sits_unread_in_a_full_pipe_loses_nothing(bus):
    """The client reads nothing: the reply (a message of 200 KB) is bigger than the pipe, so
    the server blocks writing it. SIGKILL then: the next wait gets it, with its id."""
    await register_crew(bus, "orchestrator", "sender")
    sent = await messages.send(bus, "sender", "orchestrator", "x" * 200_000)
    call = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait","arguments":{"timeout":5}}}\n'

    proc = subprocess.Popen(
        [PYTHON, "-m", "wavewait", "mcp", "--bus", bus.url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=server_env(bus, WAVEWAIT_ACK_GRACE="0.01"),  # acknowledged at once, were the reply out
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((INIT + call).encode())
        proc.stdin.flush()
        out = proc.stdout.fileno()
        await until(
            lambda: _claimed_all(bus),
            timeout=30,
            what="the message taken by the server's wait (a cold start under load)",
        )
        # more than the initialize answer: the reply is on its way, and 200 KB cannot fit in the pipe
        await until(lambda: _unread(out) > 32_768, what="the pipe full, the server blocked writing its reply")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert await _history(bus) == []
    async with mcp_client(bus) as c:
        r = data(await c.call_tool("wait", {"timeout": 10}))
    assert r["message_id"] == sent.id and len(r["message"]) == 200_000


async def _claimed_all(bus) -> bool:
    return await _pending(bus) == []


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_http_client_that_read_its_answer_and_ended_gets_nothing_twice(bus, mode):
    """Over streamable HTTP, in both eras, a one-shot client: its own connection, `wait`, the
    answer, the session (or connection) ended inside the grace. The reply was sent whole and
    the client's listing of the tools that followed it was answered (the SDK's client checks
    the result against the tool's schema first), though the handshake-era client often resets
    the reply's own connection: acknowledged, 10 runs, 0 duplicated."""
    from test_http import http_process, stderr_line

    await register_crew(bus, "orchestrator", "sender")
    sent, got = [], []
    with http_process(bus, "--token", "s3cret") as proc:
        url = (await stderr_line(proc)).split(" on ", 1)[1].strip()
        for i in range(10):
            sent.append((await messages.send(bus, "sender", "orchestrator", f"h{i}")).id)
            async with httpx2.AsyncClient(headers={"authorization": "Bearer s3cret"}) as h:
                async with Client(streamable_http_client(url, http_client=h), mode=mode) as c:
                    got.append(data(await c.call_tool("wait", {"timeout": 5}))["message_id"])
            await until(lambda: _settled(bus), what="no wait left on the bus")
            assert await _pending(bus) == [], f"run {i}: the message is queued again (a duplicate)"
    assert got == sent
    assert await _history(bus) == sent


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


async def _modern(url: str, rid: int, method: str, params: dict) -> dict:
    """One 2026-era exchange (no session) on a connection of its own, closed after the reply."""
    body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": {**params, "_meta": MODERN_META}}
    headers = {
        "accept": "application/json, text/event-stream",
        "authorization": "Bearer s3cret",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": method,
    }
    async with httpx2.AsyncClient(timeout=30) as h:
        r = await h.post(url, json=body, headers=headers | ({"mcp-name": params["name"]} if "name" in params else {}))
    assert r.status_code == 200, r.text
    return r.json()["result"]


async def test_a_2026_era_client_that_lists_the_tools_on_a_new_connection_gets_nothing_twice(bus):
    """Without a session, a one-shot client's answer comes on one connection, which closes,
    and its listing of the tools (the SDK's schema check) may come on another: its pool opens
    a new one when the first is still busy. A listing from the same host within the grace
    counts for the answer: acknowledged, 3 runs, 0 duplicated (before, the answer's
    connection closing with no listing on it gave the message back: the next wait got it
    again). With no listing at all, the caller may have given up before its check: given back."""
    from test_http import http_process, stderr_line

    await register_crew(bus, "orchestrator", "sender")
    with http_process(bus, "--token", "s3cret") as proc:
        url = (await stderr_line(proc)).split(" on ", 1)[1].strip()
        sent, got = [], []
        for i in range(3):
            sent.append((await messages.send(bus, "sender", "orchestrator", f"n{i}")).id)
            answer = await _modern(url, 1, "tools/call", {"name": "wait", "arguments": {"timeout": 5}})
            got.append(answer["structuredContent"]["message_id"])
            assert "wait" in {t["name"] for t in (await _modern(url, 2, "tools/list", {}))["tools"]}
            await until(lambda: _settled(bus), what="no wait left on the bus")
            assert await _pending(bus) == [], f"run {i}: the message is queued again (a duplicate)"
        assert got == sent and await _history(bus) == sent
        unlisted = (await messages.send(bus, "sender", "orchestrator", "no listing")).id
        answer = await _modern(url, 3, "tools/call", {"name": "wait", "arguments": {"timeout": 5}})
        assert answer["structuredContent"]["message_id"] == unlisted
        await until(lambda: _settled(bus), what="no wait left on the bus")
        assert await _pending(bus) == [unlisted]
