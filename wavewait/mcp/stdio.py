"""The MCP server's stdio: stdin read as lines on the event loop, and the SDK's stdout, which
reports each response it wrote to the deliveries (delivery.py) and counts the lines on the
client's fd (wire.py). With the front (front.py) both go through its pipes until the SDK is
up; then this reads stdin and writes the client's fd itself."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import stat
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TextIO

import anyio

from .delivery import Deliveries, response_id
from .front import FdLines, Front, Lines, Oversized, too_large
from .wire import Wire

log = logging.getLogger(__name__)

#: bytes read from stdin at a time (lines are split by `front.Lines`, bounded by the request limit)
CHUNK = 1 << 16


class ReportingStdout(anyio.AsyncFile[str]):
    """The SDK's stdout on stdio: after each flush, says which responses (by id) went out, and
    counts the SDK's lines, so that each held response's line is known on the client's fd.
    `wire`: the client's fd when this writes to it; None when the front forwards these lines
    to the client and reports them to its own wire. `direct`: `fp` is a pipe of this process's
    own (the front's), written on the event loop without blocking; else each write and flush
    runs in a worker thread, as the SDK's stdout does (the client's fd may be shared, and a
    file descriptor made non-blocking is so for every process holding it)."""

    def __init__(
        self,
        fp: TextIO,
        deliveries: Deliveries,
        wire: Wire | None = None,
        *,
        direct: bool = False,
        front: Front | None = None,
    ) -> None:
        """`front`: the front `fp` leads to (`direct`), whose wire this takes over once the
        front has nothing more to do (`Front.relay_done`)."""
        super().__init__(fp)
        self.deliveries = deliveries
        self.wire = wire
        self._count = 0  # SDK lines written
        self._lines: list[tuple[object | None, int]] = []  # since the last flush: (response id, bytes)
        self._fd: int | None = None
        self._out = bytearray()  # `direct`: written, not yet flushed
        self._front = front
        self._client: ClientFd | None = None  # the client's fd, once taken over from the front
        self._relayed: threading.Event | None = None  # set once the front forwarded its last line
        if direct:
            self._fd = fp.fileno()
            os.set_blocking(self._fd, False)

    async def write(self, b: str) -> int:
        rid = response_id(b) if self.deliveries.waiting_for_writes else None
        if rid is not None:
            self.deliveries.response_line(rid, self._count)
        self._count += 1
        if self._fd is None and self._client is None:
            n = await super().write(b)
            self._lines.append((rid, len(b.encode("utf-8")) if self.wire is not None else 0))
            return n
        data = b.encode("utf-8")
        self._out += data
        self._lines.append((rid, len(data)))
        return len(b)

    async def flush(self) -> None:
        if self._front is not None and self._front.relay_done():
            self._take_wire(self._front)
        if self._relayed is not None and not self._relayed.is_set():
            # the front's last lines go first; a client that stopped reading can hold them,
            # and a signal still ends the server (what this flush holds stays for the next)
            await anyio.to_thread.run_sync(self._relayed.wait, abandon_on_cancel=True)
        lines, self._lines = self._lines, []
        if self._client is not None:
            await self._client.write_all(self._out)
        elif self._fd is None:
            await super().flush()
        else:
            await _write_all(self._fd, self._out)
        if self.wire is not None:
            with self.wire.lock:
                for _, size in lines:
                    self.wire.sdk_line(size)
        self.deliveries.flushed([rid for rid, _ in lines if rid is not None])

    def _take_wire(self, front: Front) -> None:
        """Write the client's fd from here on: the front's pipe is closed, the front forwards
        what was in it (in order, counted on the wire) and ends (`_relayed`); the lines after
        it are written and counted here, on the event loop."""
        assert front.wire.fd is not None  # relay_done: a pipe or socket
        self._front = None
        self.wrapped.close()  # the front's pipe; `_out` is empty: each flush wrote it whole
        self._fd, self._client, self.wire, self._relayed = None, ClientFd(front.wire.fd), front.wire, front.relayed


class ClientFd:
    """The client's end of stdout (a pipe or socket), written on the event loop without making
    it non-blocking: the fd may be shared with other processes (a blocking fd is blocking for
    every process that holds it), so each write asks the kernel not to wait (`RWF_NOWAIT` on a
    pipe, `MSG_DONTWAIT` on a socket), and a full pipe is waited for on the loop."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._sock = socket.socket(fileno=os.dup(fd)) if stat.S_ISSOCK(os.fstat(fd).st_mode) else None
        self._blocking = False  # the kernel cannot write a pipe without waiting (before Linux 5.x)

    async def write_all(self, out: bytearray) -> None:
        while out:
            if self._blocking:
                del out[: await anyio.to_thread.run_sync(os.write, self.fd, bytes(out))]
                continue
            try:
                del out[: self._write_some(out)]
            except BlockingIOError:
                await _writable(self.fd)
            except OSError as e:
                if self._sock is not None or e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                self._blocking = True

    def _write_some(self, out: bytearray) -> int:
        if self._sock is not None:
            return self._sock.send(out, socket.MSG_DONTWAIT)
        return os.pwritev(self.fd, [out], -1, os.RWF_NOWAIT)


async def _write_all(fd: int, out: bytearray) -> None:
    """Write `out` to the non-blocking `fd` and empty it, waiting on the event loop while the
    pipe is full (its reader is behind)."""
    while out:
        try:
            del out[: os.write(fd, out)]
        except BlockingIOError:
            await _writable(fd)


async def _writable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def woken() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(fd, woken)
    try:
        await ready
    finally:
        loop.remove_writer(fd)


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
        self.on_line: Callable[[bytes], None] | None = None  # sees each line before the SDK does
        #: at the end of what is read, stdin handed over by the front, if it was (Front.take_stdin)
        self.take_over: Callable[[], FdLines | None] | None = None
        self._lines = Lines()
        self._ready: deque[bytes | Oversized] = deque()
        self._eof = False

    @classmethod
    async def open(cls, fd: int = 0) -> LoopStdin | None:
        """None when `fd` is not a pipe, socket or terminal (a file, say): read it as the SDK does."""
        try:
            return cls(await _loop_reader(fd))
        except (OSError, ValueError):
            return None

    async def _read(self) -> bytes:
        data = await self.reader.read(CHUNK)
        if not data and self.take_over is not None and (stdin := self.take_over()) is not None:
            # the front's pipe ended because it handed stdin over: read stdin from where it
            # stopped (the front wrote whole lines; a line it had begun is in `stdin.lines`)
            self.take_over = None
            self.reader, self._lines = await _loop_reader(stdin.fd), stdin.lines
            return await self._read()
        return data

    def __aiter__(self) -> LoopStdin:
        return self

    async def __anext__(self) -> str:
        while True:
            while not self._ready:
                if self._eof:
                    raise StopAsyncIteration
                data = await self._read()
                self._ready.extend(self._lines.feed(data) if data else self._lines.end())
                self._eof = not data
            line = self._ready.popleft()
            if not isinstance(line, Oversized):
                if self.on_line is not None:
                    self.on_line(line)
                return line.decode("utf-8", "replace")
            log.warning("wavewait mcp: dropped a request of %d bytes, over the limit", line.size)
            if self.answer is not None:
                await self.answer(too_large(line))


async def _loop_reader(fd: int) -> asyncio.StreamReader:
    """A reader of `fd` (a pipe, socket or terminal) on the running event loop."""
    reader = asyncio.StreamReader(limit=CHUNK)
    pipe = os.fdopen(os.dup(fd), "rb", buffering=0)
    try:
        await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    except BaseException:
        pipe.close()
        raise
    return reader
