"""Exactly once, whichever way a client ends: a wait's items are acknowledged once the client
has read the response (its bytes left the pipe or socket), and released when it has not.

Through the real MCP client over stdio against `wavewait mcp` as a subprocess, one server per
session, on both buses; and through a host of our own on pipes or sockets (what Node-based
hosts give their children), which reads or does not read, and ends, exactly when told.
"""

from __future__ import annotations

import array
import fcntl
import json
import os
import signal
import socket
import subprocess
import termios

import anyio
import pytest

from wavewait.core import messages

from conftest import PYTHON, register_crew, until
from mcptools import data, mcp_client, server_env

pytestmark = pytest.mark.anyio

RUNS = 20
#: seconds for a server to answer its first call: the front answers `initialize` at once, the
#: SDK behind it imports for a second of CPU, many on a loaded machine
STARTUP = 60.0
#: the server's stdout through the front (as hosts start it), or straight from the SDK
FRONT_OFF = {"WAVEWAIT_MCP_PRERENDER": "0"}


def _front(run: int) -> dict[str, str]:
    """Every other run without the front: the bytes reaching the client are counted either way."""
    return FRONT_OFF if run % 2 else {}


async def _settled(bus, ids: list[str]) -> bool:
    """Every item acknowledged once; nothing pending or claimed; no wait left."""
    history = [i.id for i in await bus.history("orchestrator")]
    return (
        sorted(history) == sorted(ids) == sorted(set(ids))
        and not await bus.pending("orchestrator")
        and not await bus.list_waits()
    )


async def test_a_client_that_read_its_answer_and_exited_gets_no_duplicate(bus):
    """A script that opens a session, calls `wait`, prints the answer and exits: the next
    session gets nothing again (it used to get every one again: the session's end released
    what the last 2 s of responses carried)."""
    await register_crew(bus, "orchestrator", "sender")
    sent, got = [], []
    for run in range(RUNS):
        sent.append((await messages.send(bus, "sender", "orchestrator", f"m{run}")).id)
        async with mcp_client(bus, env=_front(run)) as c:
            got.append(data(await c.call_tool("wait", {"timeout": 10}))["message_id"])
    assert got == sent
    await until(lambda: _settled(bus, sent), what="every message acknowledged once")
    async with mcp_client(bus) as c:
        assert data(await c.call_tool("wait", {"timeout": 0}))["status"] == "timeout"


async def test_a_session_abandoned_around_its_answer_loses_nothing_and_duplicates_nothing(bus):
    """The caller gives up 0 to 6 ms after its `wait` started on a queued message, so the
    session ends (the SDK closes the server's stdin) before the response, as it crosses, or
    just after it was read: each message is received by the caller once or comes back."""
    await register_crew(bus, "orchestrator", "sender")
    sent, received, outcomes = [], [], []
    for run in range(RUNS):
        sent.append((await messages.send(bus, "sender", "orchestrator", f"m{run}")).id)
        delay = 0.006 * run / (RUNS - 1)
        with anyio.CancelScope() as session:
            async with mcp_client(bus, env=_front(run)) as c:
                session.deadline = anyio.current_time() + delay
                r = await c.call_tool("wait", {"timeout": 10})
                received.append(data(r)["message_id"])
        outcomes.append(f"{delay * 1000:.1f} ms: {'abandoned' if session.cancelled_caught else 'answered'}")
        # the server has ended: each message was received once and acknowledged, or is back
        pending = [ref.id for ref in await bus.pending("orchestrator")]
        history = [i.id for i in await bus.history("orchestrator")]
        state = [("received " if i in received else "") + ("pending" if i in pending else "") for i in sent]
        assert sorted(pending + received) == sorted(sent), "lost or duplicated: " + "; ".join(outcomes + state)
        assert history == received, ("acknowledged is not what was received", run, outcomes)
    async with mcp_client(bus) as c:
        while (r := data(await c.call_tool("wait", {"timeout": 0}))).get("message_id"):
            received.append(r["message_id"])
    assert sorted(received) == sorted(sent), outcomes
    await until(lambda: _settled(bus, sorted(received, key=sent.index)), what="every message acknowledged once")


# ----------------------------------------------------------------------------- a host of our own
INIT = (
    '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
    '"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n'
    '{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
)
WAIT_CALL = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait","arguments":{"timeout":10}}}\n'


class Host:
    """`wavewait mcp` with its stdin and stdout on pipes or on sockets (one socket pair each, as
    Node gives a child), whose other ends the test holds: it reads, or leaves unread, at will."""

    def __init__(self, bus, wire: str, *flags: str, **env: str) -> None:
        if wire == "socket":
            (self._in, child_in), (self._out, child_out) = socket.socketpair(), socket.socketpair()
            fds = child_in.detach(), child_out.detach()
        else:
            r, w = os.pipe()
            r2, w2 = os.pipe()
            self._in, self._out = os.fdopen(w, "wb", buffering=0), os.fdopen(r2, "rb", buffering=0)
            fds = r, w2
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "wavewait", "mcp", "--bus", bus.url, *flags],
            stdin=fds[0],
            stdout=fds[1],
            env=server_env(bus, **env),
        )
        for fd in fds:
            os.close(fd)  # the child has them
        self._buf = b""

    def send(self, text: str) -> None:
        data = text.encode()
        if isinstance(self._in, socket.socket):
            self._in.sendall(data)
        else:
            self._in.write(data)

    def unread(self) -> int:
        """Bytes the server wrote that we have not read."""
        buf = array.array("i", [0])
        fcntl.ioctl(self._out.fileno(), termios.FIONREAD, buf, True)
        return buf[0]

    def _read_some(self) -> bytes:
        if isinstance(self._out, socket.socket):
            return self._out.recv(1 << 16)
        return self._out.read(1 << 16)

    async def response(self, request_id: int) -> dict:
        """Read up to the response to `request_id` (and no further than the chunk it ends in)."""
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                msg = json.loads(line)
                if msg.get("id") == request_id and "method" not in msg:
                    return msg
            chunk = await anyio.to_thread.run_sync(self._read_some)
            assert chunk, "the server ended before it answered"
            self._buf += chunk

    def close(self) -> None:
        """As a host that ends: both ends closed, whatever was not read is dropped."""
        self._in.close()
        self._out.close()

    async def ended(self) -> int:
        return await anyio.to_thread.run_sync(lambda: self.proc.wait(30))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.mark.parametrize("wire", ["pipe", "socket"])
async def test_a_host_that_ended_with_the_answer_unread_gets_it_again(bus, wire):
    """A host killed (both ends closed) while the response sits unread: on a socket the kernel
    drops it, and the queue empties as if it had been read; on a pipe it stays. Either way the
    message goes back to the inbox, and the server ends."""
    await register_crew(bus, "orchestrator", "sender")
    sent = await messages.send(bus, "sender", "orchestrator", "for a host that died")
    host = Host(bus, wire)
    try:
        host.send(INIT)
        await host.response(1)
        host.send(WAIT_CALL)
        await until(lambda: host.unread() > 0, STARTUP, what="the wait's response in the wire")
        host.close()
        assert await host.ended() == 0
    finally:
        host.kill()
    assert [ref.id for ref in await bus.pending("orchestrator")] == [sent.id]
    assert await bus.history("orchestrator") == [] and await bus.list_waits() == []


@pytest.mark.parametrize("wire", ["pipe", "socket"])
async def test_a_host_that_read_the_answer_has_it_acknowledged_and_kept_when_it_ends(bus, wire):
    """The unread count (a pipe's, or a socket's queue: Node-based hosts) says the response
    was read: it is acknowledged while the session is open, and stays so when the host ends."""
    await register_crew(bus, "orchestrator", "sender")
    sent = await messages.send(bus, "sender", "orchestrator", "read, then gone")
    host = Host(bus, wire, WAVEWAIT_ACK_GRACE="0.2")
    try:
        host.send(INIT)
        await host.response(1)
        host.send(WAIT_CALL)
        assert "read, then gone" in json.dumps(await host.response(2))
        await until(lambda: _settled(bus, [sent.id]), what="the message acknowledged once read")
        host.close()
        assert await host.ended() == 0
    finally:
        host.kill()
    assert await _settled(bus, [sent.id])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("read", [True, False], ids=["read", "unread"])
async def test_a_server_stopped_by_a_signal_settles_by_what_was_read(bus, sig, read):
    """Hosts end their servers with a signal, also when their user killed them: a response
    read is acknowledged, one still in the pipe goes back (exit 0 either way)."""
    await register_crew(bus, "orchestrator", "sender")
    sent = await messages.send(bus, "sender", "orchestrator", "signalled")
    host = Host(bus, "pipe", WAVEWAIT_ACK_GRACE="600")
    try:
        host.send(INIT)
        await host.response(1)
        host.send(WAIT_CALL)
        if read:
            await host.response(2)
        else:
            await until(lambda: host.unread() > 0, STARTUP, what="the wait's response in the pipe")
        host.proc.send_signal(sig)
        assert await host.ended() == 0
    finally:
        host.kill()
    where = bus.history if read else bus.pending
    assert [i.id for i in await where("orchestrator")] == [sent.id]
    assert await (bus.pending if read else bus.history)("orchestrator") == []
    assert await bus.list_waits() == []


async def test_a_server_killed_while_blocked_writing_a_reply_bigger_than_the_pipe_loses_nothing(bus):
    """The one duplicate left, and no loss: SIGKILL while the reply fills the pipe and the rest
    of it waits to be written; the next wait gets the message with the same id."""
    await register_crew(bus, "orchestrator", "sender")
    body = "x" * 300_000
    sent = await messages.send(bus, "sender", "orchestrator", body)
    host = Host(bus, "pipe", "--output-budget", "1000000")
    try:
        host.send(INIT)
        await host.response(1)
        host.send(WAIT_CALL)
        full = fcntl.fcntl(host._out.fileno(), fcntl.F_GETPIPE_SZ)
        await until(lambda: host.unread() == full, STARTUP, what="the pipe full of the reply")
        assert not await bus.pending("orchestrator")  # taken, and the reply blocked in the write
        host.proc.send_signal(signal.SIGKILL)
        await host.ended()
    finally:
        host.kill()
        host.close()
    async with mcp_client(bus, "--output-budget", "1000000") as c:
        r = data(await c.call_tool("wait", {"timeout": 15}))
        assert (r["message_id"], len(r["message"])) == (sent.id, len(body))
    await until(lambda: _settled(bus, [sent.id]), what="the message acknowledged once")
