"""The stdio transport: the MCP SDK's own stream protocols (`ReadStream`, `WriteStream`), read
and written in the task that asks.

The SDK's `stdio_server` puts a task and a zero-buffer memory stream on each side: a reader
task parses each line and hands it over to the dispatcher's loop, a writer task takes each
response and writes it. Each message then costs two extra task switches and a contextvars
copy before the SDK's own dispatch begins (bench/bench_tasks_poll.py: about a tenth of a
`tasks/get` poll's CPU). Here the dispatcher's receive reads and parses the next line itself,
and a response is serialised and written by the task that sends it. What is parsed, and how,
is the SDK's (`jsonrpc_message_adapter`, the same as `stdio_server`): a line that is not a
JSON-RPC message reaches the dispatcher as the exception, as there.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Self

import anyio
from mcp.shared.message import SessionMessage
from mcp.types import jsonrpc_message_adapter


class LineReader:
    """`ReadStream[SessionMessage | Exception]` over an async iterator of lines."""

    def __init__(self, lines: AsyncIterator[str]) -> None:
        self._lines = lines
        self._closed = False

    async def receive(self) -> SessionMessage | Exception:
        if self._closed:
            raise anyio.ClosedResourceError
        try:
            line = await anext(self._lines)
        except StopAsyncIteration:
            raise anyio.EndOfStream from None
        try:
            return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
        except Exception as exc:  # the SDK's reader hands a bad line on as its exception
            return exc

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class LineWriter:
    """`WriteStream[SessionMessage]`: each message one line on `stdout`, written and flushed
    before `send` returns (one sender at a time: a write may wait for the pipe)."""

    def __init__(self, stdout: Any) -> None:
        self._stdout = stdout  # an anyio.AsyncFile[str] (delivery.ReportingStdout)
        self._lock = asyncio.Lock()  # taken without a yield when free
        self._closed = False

    async def send(self, item: SessionMessage, /) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        line = item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
        async with self._lock:
            await self._stdout.write(line)
            await self._stdout.flush()

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
