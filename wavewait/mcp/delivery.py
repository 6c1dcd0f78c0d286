"""Acknowledged delivery over MCP: a wait's items leave the inbox once its response is out.

A consuming tool runs its wait with `Control(hold=True)` and hands the resulting
`Delivery` to `Deliveries.hold` before it returns. Then:

- on stdio, `ReportingStdout` tells us when the line carrying the response was flushed to
  the client; on other transports the response counts as written when the tool returns;
- a `notifications/cancelled` for the request before the acknowledgement (the client gave
  up on it and will drop the late response) releases the items to the head of the inbox;
- otherwise, `grace` seconds after the write (time for such a cancel to arrive), the items
  are acknowledged: they move to the inbox's history;
- the session ending first (stdin closed, the server stopped by a signal, an HTTP session
  deleted or the connection a response went on closed) releases them too, written or not:
  a response is not delivered because it reached a pipe. A client that abandons a call and closes its session (the MCP SDK, when
  its caller's cancel scope exits) or a host killed by its user never read it.

So the one duplicate left is a response read and its session ended (or its process killed)
within the grace: the next wait delivers the items again with the same `message_id`,
never a loss.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import sys
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio
from anyio.abc import TaskGroup

from ..core.delivery import Delivery, delivering
from .front import Lines, Oversized, too_large

log = logging.getLogger(__name__)

#: seconds between a response's write and its acknowledgement: a client's cancel that
#: crossed the response on the wire arrives well within it
GRACE = 2.0
#: seconds an ended connection is remembered: the client side of a closed TCP connection
#: keeps its port in TIME_WAIT for 60 s, so its key is not reused sooner
ENDED_KEPT = 60.0
#: bytes read from stdin at a time (lines are split by `front.Lines`, bounded by the request limit)
CHUNK = 1 << 16


@dataclass
class _Held:
    delivery: Delivery
    connection: str  # `connection_key` of the request's connection
    request_id: str
    peer: str  # the TCP connection it came on (HTTP), whose end also ends it
    written: anyio.Event = field(default_factory=anyio.Event)
    cancelled: anyio.Event = field(default_factory=anyio.Event)


class _GaveUp(Exception):
    """The client cancelled a request whose response is out: what it carried goes back."""


class Deliveries:
    """The held deliveries of one server, until each is settled. Each is listed on its own
    (two HTTP clients may both use request id 1) and found by (connection, request id)."""

    def __init__(self, grace: float = GRACE, *, writes_reported: bool = False) -> None:
        self.grace = grace
        self.writes_reported = writes_reported  # True on stdio: `written` is called per response
        self._held: dict[int, _Held] = {}
        self._serial = itertools.count()
        self._tg: TaskGroup | None = None
        self._stopped = False  # `running` has ended: the session is over
        #: connections that ended lately (key → when, oldest first): a call whose wait finished
        #: just after its client went away has no one to answer
        self._ended: OrderedDict[str, float] = OrderedDict()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Deliveries]:
        """Settle deliveries while the server runs; at its end, release every delivery not
        yet acknowledged, and return only once the bus has them back."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield self
            finally:
                self._tg, self._stopped = None, True
                with anyio.CancelScope(shield=True):
                    await self._release_where(lambda held: True)
                tg.cancel_scope.cancel()

    async def hold(self, request_context: Any, request_id: object, delivery: Delivery) -> None:
        """Fence (`ClaimLost` if the claims are gone), then keep the delivery until settled.
        The caller releases the delivery if this raises."""
        await delivery.confirm()
        held = _Held(delivery, connection_key(request_context), str(request_id), _peer(request_context))
        if self._stopped or held.connection in self._ended or held.peer in self._ended:
            await delivery.release()  # its session ended while the wait finished: no one to answer
            return
        if self._tg is None:  # not serving through `running` (an in-process test server)
            await delivery.ack()
            return
        serial = next(self._serial)
        self._held[serial] = held
        if not self.writes_reported:
            held.written.set()
        self._tg.start_soon(self._settle, serial, held)

    async def _settle(self, serial: int, held: _Held) -> None:
        """Acknowledge once the grace after the write has passed with no cancel; anything
        else that ends this (a cancel, the server stopping: a signal cancels this task
        before `running` gets to its end) releases."""
        try:
            async with delivering(held.delivery):  # settled once: a release by the session's end stands
                async with anyio.create_task_group() as tg:

                    async def on_cancel() -> None:
                        await held.cancelled.wait()
                        tg.cancel_scope.cancel()

                    tg.start_soon(on_cancel)
                    await held.written.wait()
                    await anyio.sleep(self.grace)
                    tg.cancel_scope.cancel()
                if held.cancelled.is_set():
                    raise _GaveUp
        except _GaveUp:
            pass  # released: the client cancelled the request
        finally:
            if self._held.get(serial) is held:
                del self._held[serial]

    async def _release_where(self, ended: Callable[[_Held], bool]) -> int:
        """Release the held deliveries of ended connections, in the order they were taken,
        so each item goes back to its place at the head of its inbox."""
        gone = [(serial, held) for serial, held in self._held.items() if ended(held)]
        for serial, _ in gone:
            del self._held[serial]
        for _, held in gone:
            with anyio.CancelScope(shield=True):
                try:
                    await held.delivery.release()
                except Exception as e:  # the others still go back; recovery returns these once we are gone
                    log.warning("wavewait mcp: could not give back what wait %s took: %s", held.delivery.wait_id, e)
        return len(gone)

    def ended(self, connection: str) -> None:
        """A client connection ended (an HTTP session deleted, a connection closed): what its
        responses carried within the grace goes back, as when stdin closes. Callable from
        a transport's callback; the release runs in the background."""
        now = time.monotonic()
        self._ended[connection] = now
        self._ended.move_to_end(connection)
        while now - next(iter(self._ended.values())) >= ENDED_KEPT:
            self._ended.popitem(last=False)
        if self._tg is not None and any(connection in (h.connection, h.peer) for h in self._held.values()):
            self._tg.start_soon(self._release_where, lambda held: connection in (held.connection, held.peer))

    def _matching(self, request_ids: list[object]) -> list[_Held]:
        """The held deliveries of these responses (stdio: one session, ids are unique)."""
        wanted = {str(r) for r in request_ids}
        return [held for held in self._held.values() if held.request_id in wanted]

    def flushed(self, request_ids: list[object]) -> None:
        """The flush carrying these responses returned: they reached the client's pipe."""
        for held in self._matching(request_ids):
            held.written.set()

    def cancelled(self, request_context: Any, request_id: object) -> None:
        connection, rid = connection_key(request_context), str(request_id)
        for held in self._held.values():
            if (held.connection, held.request_id) == (connection, rid):
                held.cancelled.set()

    @property
    def waiting_for_writes(self) -> bool:
        return any(not h.written.is_set() for h in self._held.values())


class ReportingStdout(anyio.AsyncFile[str]):
    """The SDK's stdout on stdio: after each flush, says which responses (by id) went out."""

    def __init__(self, fp: TextIO, deliveries: Deliveries) -> None:
        super().__init__(fp)
        self.deliveries = deliveries
        self._lines: list[str] = []

    async def write(self, b: str) -> int:
        n = await super().write(b)
        if self.deliveries.waiting_for_writes:
            self._lines.append(b)
        return n

    async def flush(self) -> None:
        lines, self._lines = self._lines, []
        ids = [rid for line in lines if (rid := _response_id(line)) is not None]
        await super().flush()
        self.deliveries.flushed(ids)


def connection_key(request_context: Any) -> str:
    """Which client connection a request came on: request ids are unique only within one.
    On HTTP the session (`mcp-session-id`), else the TCP connection (a 2026-era exchange
    has no session); "" on stdio, where a server has one connection."""
    headers = getattr(getattr(request_context, "request", None), "headers", None)
    if headers is not None and (session := headers.get("mcp-session-id")):
        return session_key(str(session))
    return _peer(request_context)


def _peer(request_context: Any) -> str:
    """The TCP connection an HTTP request came on ("" on stdio). The SDK's client abandons a
    call over HTTP by closing the connection its response streams on, in either era."""
    client = getattr(getattr(request_context, "request", None), "client", None)
    return peer_key(client.host, client.port) if client is not None else ""


def session_key(session_id: str) -> str:
    return f"session {session_id}"


def peer_key(host: str, port: int) -> str:
    return f"peer {host}:{port}"


def _response_id(line: str) -> object | None:
    """The id of a JSON-RPC response (result or error) on this line, else None."""
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    if isinstance(msg, dict) and "id" in msg and ("result" in msg or "error" in msg):
        rid: object = msg["id"]
        return rid
    return None


@asynccontextmanager
async def claimed_stdout() -> AsyncIterator[TextIO]:
    """The process's stdout for the wire, with fd 1 pointed at stderr meanwhile, so stray
    output of this process and its children cannot corrupt the protocol (as the SDK does)."""
    sys.stdout.flush()
    wire_fd = os.dup(1)
    os.set_inheritable(wire_fd, False)
    os.dup2(2, 1)
    wire = os.fdopen(wire_fd, "w", encoding="utf-8", closefd=True)
    try:
        yield wire
    finally:
        try:
            wire.flush()
        except OSError as e:
            log.warning("wavewait mcp: could not flush the last output: %s", e)
        os.dup2(wire.fileno(), 1)
        wire.close()


class LoopStdin:
    """stdin as lines read on the event loop: a cancelled server stops reading at once,
    where a worker thread blocked in `readline` would hold it until the host closes stdin.
    A line over the request limit is dropped as it comes in and answered through `answer`
    (the server's write stream) with an error naming the limit; the lines after it are read."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.answer: Callable[[dict[str, Any]], Awaitable[None]] | None = None
        self._lines = Lines()
        self._ready: deque[bytes | Oversized] = deque()
        self._eof = False

    @classmethod
    async def open(cls, fd: int = 0) -> LoopStdin | None:
        """None when `fd` is not a pipe, socket or terminal (a file, say): read it as the SDK does."""
        reader = asyncio.StreamReader(limit=CHUNK)
        try:
            pipe = os.fdopen(os.dup(fd), "rb", buffering=0)
            await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        except (OSError, ValueError):
            return None
        return cls(reader)

    def __aiter__(self) -> LoopStdin:
        return self

    async def __anext__(self) -> str:
        while True:
            while not self._ready:
                if self._eof:
                    raise StopAsyncIteration
                data = await self.reader.read(CHUNK)
                self._ready.extend(self._lines.feed(data) if data else self._lines.end())
                self._eof = not data
            line = self._ready.popleft()
            if not isinstance(line, Oversized):
                return line.decode("utf-8", "replace")
            log.warning("wavewait mcp: dropped a request of %d bytes, over the limit", line.size)
            if self.answer is not None:
                await self.answer(too_large(line))


def cancel_handler(deliveries: Deliveries) -> Callable[[Any, Any], Any]:
    """A `notifications/cancelled` handler: a request cancelled after its tool returned
    gives back what its wait took."""

    async def on_cancelled(ctx: Any, params: Any) -> None:
        request_id = getattr(params, "request_id", None)
        if request_id is not None:
            deliveries.cancelled(ctx, request_id)

    return on_cancelled
