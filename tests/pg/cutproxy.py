"""A TCP proxy in front of the test server that can lose one statement's answer.

The fault it makes is the one a retry has to survive: the server ran and committed the
statement, and the connection died before its answer reached the client. Armed with a piece
of SQL text, the proxy marks the first connection that sends it, holds back everything the
server answers on that connection until the server is ready for the next query (the
statement has committed: the bus runs in autocommit), then closes both sides without passing
the answer on.

Clients must connect with `sslmode=disable`: the proxy reads the server's messages (a type
byte and a length), and a TLS stream has none.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

READY = ord("Z")  # ReadyForQuery: the statement before it has ended (committed in autocommit)


class CutProxy:
    """Forward 127.0.0.1:`port` to the server; `arm(sql)` loses the answer to the next `sql`."""

    def __init__(self, server_host: str, server_port: int) -> None:
        self.server = (server_host, server_port)
        self.port = 0
        self.cuts = 0
        self._marker: bytes | None = None
        self._listener: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def arm(self, sql_text: str) -> None:
        self._marker = sql_text.encode()

    async def start(self) -> None:
        self._listener = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._listener.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(*self.server)
        doomed = asyncio.Event()
        up = asyncio.create_task(self._upstream(client_r, server_w, doomed))
        down = asyncio.create_task(self._downstream(server_r, client_w, doomed))
        self._tasks |= {up, down}
        try:
            await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (up, down):
                task.cancel()
                self._tasks.discard(task)
            for writer in (client_w, server_w):
                writer.close()

    async def _upstream(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, doomed: asyncio.Event) -> None:
        while chunk := await src.read(65536):
            if self._marker is not None and self._marker in chunk:
                self._marker = None
                doomed.set()
            dst.write(chunk)
            await dst.drain()

    async def _downstream(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, doomed: asyncio.Event) -> None:
        while True:
            kind = await src.readexactly(1)
            (length,) = struct.unpack("!i", await src.readexactly(4))
            body = await src.readexactly(length - 4)
            if doomed.is_set():
                if kind[0] == READY:  # committed: the client never hears of it
                    self.cuts += 1
                    return
                continue
            dst.write(kind + struct.pack("!i", length) + body)
            await dst.drain()


@contextlib.asynccontextmanager
async def cut_proxy(url: str) -> AsyncIterator[tuple[CutProxy, str]]:
    """A proxy in front of the server of `url`, and `url` rewritten to go through it."""
    parts = urlsplit(url)
    proxy = CutProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    await proxy.start()
    netloc = parts.netloc.rsplit("@", 1)
    user = f"{netloc[0]}@" if len(netloc) == 2 else ""
    sep = "&" if parts.query else ""
    through = parts._replace(netloc=f"{user}127.0.0.1:{proxy.port}", query=f"{parts.query}{sep}sslmode=disable")
    try:
        yield proxy, through.geturl()
    finally:
        await proxy.stop()
