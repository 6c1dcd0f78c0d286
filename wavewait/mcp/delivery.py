"""Acknowledged delivery over MCP: a wait's items leave the inbox once the client has read its response.

A consuming tool runs its wait with `Control(hold=True)` and hands the resulting
`Delivery` to `Deliveries.hold` before it returns. Then:

- on stdio the response is read once its bytes have left the pipe or socket the client reads
  (`wire.Wire`: the bytes written to it, less the kernel's unread count; a reading taken after
  stdin closed, or on a socket whose peer closed, does not count); over HTTP once its
  exchange's last byte was sent (`sent`); elsewhere when the tool returns;
- a `notifications/cancelled` for the request before the response was read, or within `grace`
  seconds after (a cancel that crossed the response on the wire), releases the items to the
  head of the inbox: the client drops a response to a request it cancelled;
- otherwise, `grace` seconds after the read, the items are acknowledged: they move to the
  inbox's history;
- the session ending first (stdin closed, the server stopped by a signal, an HTTP session
  deleted or the connection a response went on closed) settles each by the same rule: what
  was read is acknowledged (a one-shot script that printed its answer and exited), what was
  not is released (a client that abandoned the call and closed its session, as the MCP SDK
  does when its caller's cancel scope exits, or a host killed by its user). An HTTP
  connection reset releases too: the client may not have had the response.

So the one duplicate left is a server killed (SIGKILL) while its response sits unread: the
items come back by recovery, and a client that reads the response later gets them again with
the same `message_id`. (A client that read the response and lost it itself, killed before it
showed it, is past our reach: the items were delivered.)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import sys
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio
from anyio.abc import TaskGroup

from ..core.delivery import Delivery
from .front import Lines, Oversized, too_large
from .wire import Wire

log = logging.getLogger(__name__)

#: seconds from a response's read to its acknowledgement: a client's cancel that crossed the
#: response on the wire arrives well within it
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
    read: anyio.Event = field(default_factory=anyio.Event)  # the client has the response
    cancelled: anyio.Event = field(default_factory=anyio.Event)

    @property
    def delivered(self) -> bool:
        return self.read.is_set() and not self.cancelled.is_set()


class Deliveries:
    """The held deliveries of one server, until each is settled. Each is listed on its own
    (two HTTP clients may both use request id 1) and found by (connection, request id)."""

    def __init__(self, grace: float = GRACE) -> None:
        self.grace = grace
        self.wire: Wire | None = None  # stdio: what the client has read (`attach`)
        self.sends_reported = False  # HTTP: `sent` is called when a response's exchange is sent
        self._held: dict[int, _Held] = {}
        self._serial = itertools.count()
        self._tg: TaskGroup | None = None
        self._stopped = False  # `running` has ended: the session is over
        #: connections that ended lately (key → when, oldest first): a call whose wait finished
        #: just after its client went away has no one to answer
        self._ended: OrderedDict[str, float] = OrderedDict()

    def attach(self, wire: Wire) -> None:
        """Serve stdio on `wire`: a response counts as read when the wire says so."""
        loop = asyncio.get_running_loop()

        def on_read(keys: list[str]) -> None:  # from the wire's watcher thread
            with contextlib.suppress(RuntimeError):  # the loop has closed: the session's end took its last look
                loop.call_soon_threadsafe(self._read, keys)

        self.wire = wire
        wire.on_read = on_read

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Deliveries]:
        """Settle deliveries while the server runs; at its end, acknowledge what was read and
        release the rest, and return only once the bus has them."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield self
            finally:
                self._tg, self._stopped = None, True
                with anyio.CancelScope(shield=True):
                    await self._settle_where(lambda held: True)
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
        if self.wire is not None:
            self.wire.watch(held.request_id)
        elif not self.sends_reported:
            held.read.set()
        self._tg.start_soon(self._settle, serial, held)

    async def _settle(self, serial: int, held: _Held) -> None:
        """Acknowledge once the response was read and the grace after it passed with no cancel;
        release on a cancel. Cancelled from outside (the session is ending), it leaves the
        delivery to `running`, which settles it by what the client read."""
        decided = False
        try:
            async with anyio.create_task_group() as tg:

                async def on_cancel() -> None:
                    await held.cancelled.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(on_cancel)
                await held.read.wait()
                await anyio.sleep(self.grace)
                tg.cancel_scope.cancel()
            decided = True
        finally:
            if decided and self._held.get(serial) is held:
                del self._held[serial]
                self._forget(held)
                with anyio.CancelScope(shield=True):
                    await (held.delivery.ack() if held.delivered else held.delivery.release())

    async def _settle_where(self, ended: Callable[[_Held], bool], reset: bool = False) -> int:
        """Settle the held deliveries of ended connections after a last look at what the client
        read: acknowledge those it read, release the others (all of them if the connection was
        `reset`) in the order they were taken, so each item goes back to its place at the head
        of its inbox."""
        if self.wire is not None:
            self._read(self.wire.check(final=True))
        gone = [(serial, held) for serial, held in self._held.items() if ended(held)]
        for serial, held in gone:
            del self._held[serial]
            self._forget(held)
        for _, held in gone:
            with anyio.CancelScope(shield=True):
                try:
                    await (held.delivery.ack() if held.delivered and not reset else held.delivery.release())
                except Exception as e:  # the others are still settled; recovery returns these once we are gone
                    log.warning("wavewait mcp: could not settle what wait %s took: %s", held.delivery.wait_id, e)
        return len(gone)

    def _forget(self, held: _Held) -> None:
        if self.wire is not None:
            self.wire.unwatch(held.request_id)

    def _read(self, keys: Iterable[str]) -> None:
        """The client has read the responses to these requests (stdio: one session, ids are unique)."""
        wanted = set(keys)
        for held in self._held.values():
            if held.request_id in wanted:
                held.read.set()

    def ended(self, connection: str, reset: bool = False) -> None:
        """A client connection ended (an HTTP session deleted, a connection closed, or `reset`):
        what its responses carried is settled now, as when stdin closes. Callable from a
        transport's callback; the settling runs in the background."""
        now = time.monotonic()
        self._ended[connection] = now
        self._ended.move_to_end(connection)
        while now - next(iter(self._ended.values())) >= ENDED_KEPT:
            self._ended.popitem(last=False)
        if self._tg is not None and any(connection in (h.connection, h.peer) for h in self._held.values()):
            self._tg.start_soon(self._settle_where, lambda held: connection in (held.connection, held.peer), reset)

    def sent(self, connection: str, request_ids: Callable[[], list[object]]) -> None:
        """HTTP: an exchange on `connection` was sent to its last byte: the responses to its
        `request_ids()` (read only when one of its deliveries waits for that) are out."""
        waiting = [held for held in self._held.values() if held.connection == connection and not held.read.is_set()]
        if waiting:
            wanted = {str(r) for r in request_ids()}
            for held in waiting:
                if held.request_id in wanted:
                    held.read.set()

    def cancelled(self, request_context: Any, request_id: object) -> None:
        connection, rid = connection_key(request_context), str(request_id)
        for held in self._held.values():
            if (held.connection, held.request_id) == (connection, rid):
                held.cancelled.set()


class ReportingStdout(anyio.AsyncFile[str]):
    """The SDK's stdout on stdio: counts on `wire` what each flush put in the fd, and which
    response (by id) each line carried while a delivery waits for its response."""

    def __init__(self, fp: TextIO, wire: Wire) -> None:
        super().__init__(fp)
        self.wire = wire
        self._lines: list[tuple[int, str | None]] = []

    async def write(self, b: str) -> int:
        n = await super().write(b)
        rid = _response_id(b) if self.wire.watching else None
        self._lines.append((len(b) if b.isascii() else len(b.encode()), None if rid is None else str(rid)))
        return n

    async def flush(self) -> None:
        lines, self._lines = self._lines, []
        await anyio.to_thread.run_sync(self._flush, lines)

    def _flush(self, lines: list[tuple[int, str | None]]) -> None:
        """In the worker thread: counted as soon as the flush returned, even if the awaiting
        task is being cancelled (the server is stopping and takes a last look)."""
        with self.wire.writing:
            self.wrapped.flush()
            for nbytes, key in lines:
                self.wire.sent(nbytes, key)


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
