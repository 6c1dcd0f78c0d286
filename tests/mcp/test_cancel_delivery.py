"""Acknowledged delivery through the real MCP client: a cancelled call loses no message.

A client cancels a `wait` at the worst moment, as the wait takes its message: the message is
sent when the call's first progress notification arrives, and the cancel follows at once (no
notification follows a decided result, and the result is never held for one, so the cancel
reaches the server around the take: before the response, crossing it, or after it). A
cancelled call's message must come back for the next call, an answered one carries it:
every message sent is received by a call that completed, exactly once.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import termios
import time
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import anyio
import pytest
from mcp.types import CallToolResult

from wavewait.core import messages

from conftest import PYTHON, register_crew, until, wavewait_cmd
from mcptools import data, error_text, mcp_client, server_env

pytestmark = pytest.mark.anyio


@dataclass
class Raced:
    """How a call raced its own cancel. `result` is None when the cancel won (the client drops
    any response, as a client does); else the answer overtook the cancel. `sent_after`: when
    the messages the first progress notification made the test send were in, in seconds after
    the call (None: nothing was sent). `took`: how long the call ran."""

    result: CallToolResult | None
    sent_after: float | None
    took: float


async def _cancelled_on_receipt(c, tool: str, args: dict, deliver) -> Raced:
    """Call `tool`; on its first progress notification run `deliver()` (the messages it waits
    for arrive) and cancel the call. The callback runs in a task of its own, so the answer
    can overtake the cancel: then the call delivered. Returns once `deliver()` has ended too,
    so what it sent is known."""
    started = time.monotonic()
    asked = False
    sent_after: float | None = None
    delivered = anyio.Event()
    with anyio.CancelScope() as scope:

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            nonlocal asked, sent_after
            if not asked:  # once: the notifications that follow (1/3 received…) must not send again
                asked = True
                try:
                    await deliver()
                    sent_after = round(time.monotonic() - started, 3)
                finally:
                    delivered.set()
                scope.cancel()

        result = await c.call_tool(tool, args, progress_callback=on_progress)
    took = round(time.monotonic() - started, 3)
    if asked:
        with anyio.fail_after(10):
            await delivered.wait()
    return Raced(None if scope.cancelled_caught else result, sent_after, took)


async def _drain(c, tool: str, args: dict, key) -> list[str]:
    got = []
    while True:
        r = data(await c.call_tool(tool, args))
        if key(r) is None:
            return got
        got.append(key(r))


@pytest.mark.parametrize(
    "tool, args, key",
    [
        ("wait", {"timeout": 5}, lambda r: r.get("message_id")),
        ("wait_for_event", {"timeout_secs": 5}, lambda r: r.get("event_id")),
    ],
)
async def test_a_call_cancelled_after_its_wait_took_a_message_loses_nothing(bus, tool, args, key):
    await register_crew(bus, "orchestrator", "sender")
    sent: list[str] = []
    received: list[str] = []
    cancelled = 0
    instant = {**args, ("timeout" if tool == "wait" else "timeout_secs"): 0}

    async def deliver() -> None:
        sent.append((await messages.send(bus, "sender", "orchestrator", f"m{len(sent)}")).id)

    calls: list[str] = []  # how each call ended, for the failure message
    async with mcp_client(bus) as c:
        while len(sent) < 20 and len(calls) < 30:
            before = len(sent)
            raced = await _cancelled_on_receipt(c, tool, args, deliver)
            drained = []
            if raced.result is None:  # cancelled: its message comes back to the inbox
                cancelled += 1
                how = "cancelled"
                await until(lambda: _pending_count(bus, 1), what="the message back in the inbox")
                # taken by a blocking call: an instant check may answer from the server's view
                # before the release's change reached it (then the next call took it, and the
                # last one was left queued)
                drained.append(key(data(await c.call_tool(tool, args))))
            elif key(got := data(raced.result)) is not None:  # the answer overtook the cancel: it carries the message
                how = "answered"
                received.append(key(got))
            else:  # a timeout: only if the test sent too late for it (the message is drained next)
                how = f"timed out, sent after {raced.sent_after} s"
                late = raced.sent_after is None or raced.sent_after > raced.took - 0.5
                assert late, f"the wait missed a message sent {raced.took - raced.sent_after:.1f} s before it timed out"
            drained += await _drain(c, tool, instant, key)
            received += drained
            calls.append(f"{how} after {raced.took} s: {len(sent) - before} sent, {len(drained)} drained")
    # an item sent and not received once, in order, is lost or duplicated
    assert received == sent and len(sent) == 20, "\n".join([*calls, f"received {received}", f"sent {sent}"])
    # the cancel and the answer race (the answer is not held): the cancel wins some of 20 calls
    assert cancelled >= 1, calls


async def test_a_fan_in_cancelled_after_it_completed_gives_every_message_back(bus):
    await register_crew(bus, "orchestrator", "a1", "a2", "a3")

    async def deliver() -> None:
        for a in ("a1", "a2", "a3"):
            await messages.send(bus, a, "orchestrator", f"report of {a}")

    async with mcp_client(bus) as c:
        args = {"timeout": 5, "from_agents": ["a1", "a2", "a3"]}
        raced = await _cancelled_on_receipt(c, "wait", args, deliver)
        done = raced.result
        if done is None or data(done)["status"] == "timeout":  # cancelled (nearly always): the three come back
            await until(lambda: _pending_count(bus, 3), what="every message back in the inbox")
            done = await c.call_tool("wait", args)
        r = data(done)
    assert r["status"] == "complete"
    assert [t["message"] for t in r["results"]] == ["report of a1", "report of a2", "report of a3"]


async def test_a_completed_call_is_acknowledged_and_not_delivered_again(bus):
    await register_crew(bus, "orchestrator", "sender")
    await messages.send(bus, "sender", "orchestrator", "once")
    async with mcp_client(bus) as c:
        r = data(await c.call_tool("wait", {"timeout": 5}))
        assert r["message"] == "once"
        assert data(await c.call_tool("wait", {"timeout": 0}))["status"] == "timeout"
        # the grace after the write passes with the session open: acknowledged into history
        await until(lambda: _in_history(bus, "once"), what="the message acknowledged into history")
    assert await bus.pending("orchestrator") == []


async def _in_history(bus, body: str) -> bool:
    return any(i.body == body for i in await bus.history("orchestrator"))


async def test_a_server_killed_between_take_and_reply_loses_nothing(bus):
    """SIGKILL after the wait took its message, before the acknowledgement (a long grace keeps
    that window open): the next wait gets the message, with the same message_id."""
    await register_crew(bus, "orchestrator", "sender")
    sent = await messages.send(bus, "sender", "orchestrator", "survive me")
    with _server(bus, "600") as proc:
        assert proc.stdin is not None
        proc.stdin.write((INIT + WAIT_CALL).encode())
        proc.stdin.flush()
        # the wait took the message: it is claimed, no longer pending
        await until(
            lambda: _claimed(bus), timeout=30, what="the message claimed by the server's wait (a cold start under load)"
        )
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    async with mcp_client(bus) as c:
        r = data(await c.call_tool("wait", {"timeout": 10}))
    assert (r["message"], r["message_id"]) == ("survive me", sent.id)


INIT = (
    '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
    '"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n'
    '{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
)
WAIT_CALL = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait","arguments":{"timeout":5}}}\n'


@contextmanager
def _server(bus, grace: str) -> Iterator[subprocess.Popen]:
    """`wavewait mcp` on raw pipes, with this acknowledgement grace; killed if still running."""
    proc = subprocess.Popen(
        [PYTHON, "-m", "wavewait", "mcp", "--bus", bus.url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=server_env(bus, WAVEWAIT_ACK_GRACE=grace),
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()


async def _stopped(proc: subprocess.Popen, sig: int) -> None:
    """Send `sig`; the server settles what it holds and exits 0."""
    proc.send_signal(sig)
    assert await anyio.to_thread.run_sync(lambda: proc.wait(20)) == 0


LIST_TOOLS = '{"jsonrpc":"2.0","id":3,"method":"tools/list"}\n'


async def _read_reply(proc: subprocess.Popen, before: str = "") -> str:
    """The wait's response (id 2), read from the server's stdout (after requests `before`)."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((INIT + before + WAIT_CALL).encode())
    proc.stdin.flush()
    reply = ""
    while '"id":2' not in reply.replace(" ", ""):
        reply = (await anyio.to_thread.run_sync(proc.stdout.readline)).decode()
        assert reply, "the server ended before it answered"
    return reply


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
async def test_a_server_stopped_by_a_signal_within_the_grace_gives_the_message_back(bus, sig):
    """Hosts end their MCP server with a signal, also when their user killed them. This client
    read the response but never listed the tools, so nothing shows its caller got it (the MCP
    SDK's client lists them before it hands over a first result): the signal releases its
    items before the process ends; the next wait gets them with the same message_id."""
    await register_crew(bus, "orchestrator", "sender")
    sent = await messages.send(bus, "sender", "orchestrator", "read once")
    with _server(bus, "600") as proc:
        assert "read once" in await _read_reply(proc)
        await _stopped(proc, sig)
    assert [ref.id for ref in await bus.pending("orchestrator")] == [sent.id]
    assert await bus.history("orchestrator") == [] and await bus.list_waits() == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
async def test_a_server_stopped_by_a_signal_after_its_response_was_read_gives_no_duplicate(bus, sig):
    """A host that listed the tools, read the wait's response and stopped its server with a
    signal at once (within the grace): the client read it, so it is acknowledged."""
    await register_crew(bus, "orchestrator", "sender")
    sent = await messages.send(bus, "sender", "orchestrator", "read once")
    with _server(bus, "600") as proc:
        assert "read once" in await _read_reply(proc, LIST_TOOLS)
        await _stopped(proc, sig)
    assert [i.id for i in await bus.history("orchestrator")] == [sent.id]
    assert await bus.pending("orchestrator") == [] and await bus.list_waits() == []


async def test_a_server_stopped_by_a_signal_with_its_response_unread_gives_the_message_back(bus):
    """The host listed the tools, read those answers, but never read the wait's response."""
    await register_crew(bus, "orchestrator", "sender")
    sent = await messages.send(bus, "sender", "orchestrator", "never read")
    with _server(bus, "600") as proc:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((INIT + LIST_TOOLS).encode())
        proc.stdin.flush()
        while '"id":3' not in (await anyio.to_thread.run_sync(proc.stdout.readline)).decode().replace(" ", ""):
            pass
        proc.stdin.write(WAIT_CALL.encode())
        proc.stdin.flush()
        # the response, one short line (written whole), is in the pipe and nobody reads it
        await until(lambda: _unread(proc) > 0, what="the wait's response in the pipe")
        await _stopped(proc, signal.SIGTERM)
    assert [ref.id for ref in await bus.pending("orchestrator")] == [sent.id]
    assert await bus.history("orchestrator") == [] and await bus.list_waits() == []


def _unread(proc: subprocess.Popen) -> int:
    assert proc.stdout is not None
    buf = array("i", [0])
    fcntl.ioctl(proc.stdout.fileno(), termios.FIONREAD, buf)
    return buf[0]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
async def test_a_server_stopped_by_a_signal_after_the_grace_gives_no_duplicate(bus, sig):
    """Past the grace the response counts as read: a later signal leaves it acknowledged."""
    await register_crew(bus, "orchestrator", "sender")
    await messages.send(bus, "sender", "orchestrator", "read once")
    with _server(bus, "0.2") as proc:
        assert "read once" in await _read_reply(proc)
        await until(lambda: _in_history(bus, "read once"), what="the message acknowledged after the grace")
        await _stopped(proc, sig)
    assert [i.body for i in await bus.history("orchestrator")] == ["read once"]
    assert await bus.pending("orchestrator") == [] and await bus.list_waits() == []


async def _pending_count(bus, n: int) -> bool:
    return len(await bus.pending("orchestrator")) == n


async def _claimed(bus) -> bool:
    return not await bus.pending("orchestrator")


async def test_the_cli_returns_the_message_when_stdout_fails(bus):
    """`wavewait wait > /dev/full`: the print fails, the message stays, the exit code says so."""
    await register_crew(bus, "orchestrator", "sender")
    await messages.send(bus, "sender", "orchestrator", "keep me")
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            wavewait_cmd("wait", "5", "--agent", "orchestrator"),
            stdout=full,
            stderr=subprocess.PIPE,
            env=server_env(bus),
            text=True,
            timeout=60,
        )
    assert r.returncode == 5, r.stderr
    assert "nothing was consumed" in r.stderr
    assert [ref.type for ref in await bus.pending("orchestrator")] == ["message"]
    out = subprocess.run(
        wavewait_cmd("wait", "5", "--agent", "orchestrator"),
        capture_output=True,
        env=server_env(bus),
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "keep me" in out.stdout


async def test_a_closed_pipe_returns_the_message_too(bus):
    await register_crew(bus, "orchestrator", "sender")
    await messages.send(bus, "sender", "orchestrator", "keep me too")
    r_fd, w_fd = os.pipe()
    os.close(r_fd)  # nobody reads: the write gets EPIPE
    try:
        r = subprocess.run(
            wavewait_cmd("wait", "5", "--agent", "orchestrator"),
            stdout=w_fd,
            stderr=subprocess.PIPE,
            env=server_env(bus),
            text=True,
            timeout=60,
        )
    finally:
        os.close(w_fd)
    assert r.returncode == 5, r.stderr
    assert len(await bus.pending("orchestrator")) == 1


async def test_an_unknown_tool_error_text_is_still_an_error(bus):
    """The delivery path leaves errors alone: a bad call takes nothing."""
    await register_crew(bus, "orchestrator", "sender")
    await messages.send(bus, "sender", "orchestrator", "stay")
    async with mcp_client(bus) as c:
        assert "timeout" in error_text(await c.call_tool("wait", {"timeout": -1}))
    assert len(await bus.pending("orchestrator")) == 1
