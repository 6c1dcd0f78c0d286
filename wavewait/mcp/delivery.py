"""Acknowledged delivery over MCP: a wait's items leave the inbox once its response is out.

A consuming tool runs its wait with `Control(hold=True)` and hands the resulting
`Delivery` to `Deliveries.hold` before it returns. Then:

- on stdio, `ReportingStdout` tells us when the line carrying the response was flushed to
  the client; on other transports the response counts as written when the tool returns;
- a `notifications/cancelled` for the request before the acknowledgement (the client gave
  up on it and will drop the late response) releases the items to the head of the inbox;
- otherwise, `grace` seconds after the write (time for such a cancel to arrive), the items
  are acknowledged: they move to the inbox's history;
- the session ending first releases what was not written and acknowledges what was.

If the process is killed in the grace window the next wait delivers the items again: the
one documented duplicate (same `message_id`), never a loss.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio
from anyio.abc import TaskGroup

from ..core.delivery import Delivery

log = logging.getLogger(__name__)

#: seconds between a response's write and its acknowledgement: a client's cancel that
#: crossed the response on the wire arrives well within it
GRACE = 2.0
#: the longest line read from stdin (a request carrying a message of the 1 MiB allowed fits)
MAX_LINE = 16 * 1024 * 1024


#: the longest a stopping server waits for a flush already under way to say whether it
#: reached the client (the flush runs in a worker thread that cannot be cancelled)
FLUSH_WAIT = 5.0


@dataclass
class _Held:
    delivery: Delivery
    written: anyio.Event = field(default_factory=anyio.Event)
    cancelled: anyio.Event = field(default_factory=anyio.Event)
    writing: bool = False  # its response was handed to a flush
    flush_done: anyio.Event = field(default_factory=anyio.Event)  # that flush returned or failed

    async def reached_client(self) -> bool:
        """Whether the response is out and the client still wants it. A flush under way is
        waited for: a server stopped by a signal the moment the client read its response
        must not take that response for unsent (the client has it: no redelivery)."""
        if self.writing and not self.flush_done.is_set():
            with anyio.move_on_after(FLUSH_WAIT):
                await self.flush_done.wait()
        return self.written.is_set() and not self.cancelled.is_set()


class Deliveries:
    """The held deliveries of one server, by (session, request id), until each is settled."""

    def __init__(self, grace: float = GRACE, *, writes_reported: bool = False) -> None:
        self.grace = grace
        self.writes_reported = writes_reported  # True on stdio: `written` is called per response
        self._held: dict[tuple[str, str], _Held] = {}
        self._tg: TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Deliveries]:
        """Settle deliveries while the server runs; at its end, release what was never
        written and acknowledge what was (the client has it)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield self
            finally:
                self._tg = None
                with anyio.CancelScope(shield=True):
                    for key, h in list(self._held.items()):
                        await self._settle_now(key, h)
                tg.cancel_scope.cancel()

    async def hold(self, request_context: Any, request_id: object, delivery: Delivery) -> None:
        """Fence (`ClaimLost` if the claims are gone), then keep the delivery until settled.
        The caller releases the delivery if this raises."""
        await delivery.confirm()
        if self._tg is None:  # not serving through `running` (an in-process test server)
            await delivery.ack()
            return
        held = _Held(delivery)
        key = (connection_key(request_context), str(request_id))
        self._held[key] = held
        if not self.writes_reported:
            held.written.set()
        self._tg.start_soon(self._settle, key, held)

    async def _settle(self, key: tuple[str, str], held: _Held) -> None:
        try:
            async with anyio.create_task_group() as tg:

                async def on_cancel() -> None:
                    await held.cancelled.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(on_cancel)
                await held.written.wait()
                await anyio.sleep(self.grace)
                tg.cancel_scope.cancel()
        finally:
            if self._held.get(key) is held:
                with anyio.CancelScope(shield=True):  # a server stopping before the write releases too
                    await self._settle_now(key, held)

    async def _settle_now(self, key: tuple[str, str], held: _Held) -> None:
        """Acknowledge or release, once. The delivery stays listed until its flush said how
        it went (`flushed` finds it there); a `Delivery` settles only once, so the server's
        end and the delivery's own task may both get here."""
        reached = await held.reached_client()
        if self._held.get(key) is held:
            del self._held[key]
        await (held.delivery.ack() if reached else held.delivery.release())

    def _matching(self, request_ids: list[object]) -> list[_Held]:
        """The held deliveries of these responses (stdio: one session, ids are unique)."""
        wanted = {str(r) for r in request_ids}
        return [held for (_, rid), held in self._held.items() if rid in wanted]

    def writing(self, request_ids: list[object]) -> None:
        """These responses were handed to a flush."""
        for held in self._matching(request_ids):
            held.writing = True

    def flushed(self, request_ids: list[object], ok: bool) -> None:
        """The flush carrying these responses returned (`ok`: they reached the client's pipe)."""
        for held in self._matching(request_ids):
            if ok:
                held.written.set()
            held.flush_done.set()

    def cancelled(self, request_context: Any, request_id: object) -> None:
        held = self._held.get((connection_key(request_context), str(request_id)))
        if held is not None:
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
        self.deliveries.writing(ids)
        ok = False
        try:
            await super().flush()
            ok = True
        finally:
            self.deliveries.flushed(ids, ok)


def connection_key(request_context: Any) -> str:
    """Which client connection a request came on: request ids are unique only within one.
    The HTTP session id; "" on stdio, where a server has one connection."""
    headers = getattr(getattr(request_context, "request", None), "headers", None)
    return str(headers.get("mcp-session-id", "")) if headers is not None else ""


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
    where a worker thread blocked in `readline` would hold it until the host closes stdin."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    @classmethod
    async def open(cls, fd: int = 0) -> LoopStdin | None:
        """None when `fd` is not a pipe, socket or terminal (a file, say): read it as the SDK does."""
        reader = asyncio.StreamReader(limit=MAX_LINE)
        try:
            pipe = os.fdopen(os.dup(fd), "rb", buffering=0)
            await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        except (OSError, ValueError):
            return None
        return cls(reader)

    def __aiter__(self) -> LoopStdin:
        return self

    async def __anext__(self) -> str:
        line = await self.reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", "replace")


def cancel_handler(deliveries: Deliveries) -> Callable[[Any, Any], Any]:
    """A `notifications/cancelled` handler: a request cancelled after its tool returned
    gives back what its wait took."""

    async def on_cancelled(ctx: Any, params: Any) -> None:
        request_id = getattr(params, "request_id", None)
        if request_id is not None:
            deliveries.cancelled(ctx, request_id)

    return on_cancelled
