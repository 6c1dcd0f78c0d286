"""A request over the size limit is answered with an error and the session goes on.

A `send` or `notify_completion` whose request line is 50 MB used to close the connection,
and the host lost every wavewait tool for the rest of its session. Now the line is read and
dropped as it streams in (never held whole), answered with a JSON-RPC error naming the limit
(with the request's id, read from the start of the line), and the next call is served.
"""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from wavewait.core.limits import MAX_REQUEST_BYTES
from wavewait.mcp.front import Lines, Oversized, head_id, too_large

from conftest import register_crew
from mcptools import data, mcp_client, server_pid

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]

BIG = 50_000_000  # bytes of message: the request line is a little longer


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.parametrize("front", ["front", "no-front"])
@pytest.mark.parametrize(
    "tool, args",
    [
        ("send", {"to": "worker", "message": "x" * BIG}),
        ("notify_completion", {"status": "success", "message": "x" * BIG}),
    ],
)
async def test_an_oversized_request_is_refused_and_the_session_goes_on(bus, tool, args, front):
    await register_crew(bus, "orchestrator", "worker")
    env = {} if front == "front" else {"WAVEWAIT_MCP_PRERENDER": "0"}
    async with mcp_client(bus, env=env) as c:
        assert data(await c.call_tool("list_agents", {}))  # the SDK server is up
        pid = server_pid()
        before = _peak_rss_mib(pid)
        with pytest.raises(MCPError) as refused:
            await c.call_tool(tool, args)
        peak = _peak_rss_mib(pid)
        # the same session serves the next call
        r = data(await c.call_tool("send", {"to": "worker", "message": "after"}))
        assert r["message_id"]
    message = str(refused.value)
    assert "too large" in message and f"{MAX_REQUEST_BYTES:,} bytes" in message and "16 MiB" in message
    assert [i.body for i in await bus.peek("worker")] == ["after"]  # the oversized send did nothing
    # read and dropped as it came: the server never held the 50 MB line (it may hold up to the limit)
    assert peak - before < 40, f"peak RSS grew {peak - before:.0f} MiB reading a 50 MB request"


def test_lines_drop_a_long_line_as_it_comes_and_keep_the_rest():
    lines = Lines(limit=10)
    out = lines.feed(b'{"id":7,"x":"') + lines.feed(b"y" * 100) + lines.feed(b'"}\nshort\nlast')
    out += lines.end()
    assert out[1:] == [b"short\n", b"last"]
    assert isinstance(out[0], Oversized) and out[0].size == 115 and out[0].head.startswith(b'{"id":7')
    assert lines.feed(b"a" * 10 + b"\n") == [b"a" * 10 + b"\n"]  # at the limit is not over it


@pytest.mark.parametrize(
    "head, expected",
    [
        (b'{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"arguments":{"message":"xx', 42),
        (b'  {"id" : "req-1", "params": {', "req-1"),
        (b'{"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"id":5,"message":"xx', None),
        (b'{"jsonrpc":"2.0","id":true,"method":"x"', None),
        (b'{"jsonrpc":"2.0","id":4', None),  # the cut may fall inside the id: 4 could be 42
        (b"not json at all", None),
        (b'["a batch"', None),
    ],
)
def test_the_id_is_read_from_the_start_of_the_line_or_is_null(head, expected):
    assert head_id(head) == expected
    error = too_large(Oversized(head, 50_000_000))
    assert error["id"] == expected and error["error"]["data"] == {"limit": MAX_REQUEST_BYTES, "size": 50_000_000}


@pytest.mark.long
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_oversized_http_request_gets_a_413_and_the_session_goes_on(bus, mode):
    """Over HTTP the body is bounded the same way: a 413 whose body is the JSON-RPC error (the
    SDK's client shows its message), and the session serves the next call."""
    from test_http import http_process, stderr_line

    await register_crew(bus, "orchestrator", "worker")
    with http_process(bus, "--token", "s3cret") as proc:
        url = (await stderr_line(proc)).split(" on ", 1)[1].strip()
        async with httpx2.AsyncClient(headers={"authorization": "Bearer s3cret"}, timeout=60) as h:
            async with Client(streamable_http_client(url, http_client=h), mode=mode) as c:
                assert data(await c.call_tool("list_agents", {}))
                before = _peak_rss_mib(proc.pid)
                with pytest.raises(MCPError) as refused:
                    await c.call_tool("send", {"to": "worker", "message": "x" * BIG})
                peak = _peak_rss_mib(proc.pid)
                assert data(await c.call_tool("send", {"to": "worker", "message": "after"}))["message_id"]
                # the largest message allowed, escaped to a 6 MiB body, is within the one limit of both transports
                assert data(await c.call_tool("send", {"to": "worker", "message": ESCAPED}))["message_id"]
            # the 413 itself, as any HTTP client sees it
            raw = await h.post(url, content=b"{" + b" " * (MAX_REQUEST_BYTES + 1) + b"}", headers=_JSON)
    assert raw.status_code == 413
    error = raw.json()["error"]
    assert error["data"] == {"limit": MAX_REQUEST_BYTES, "size": MAX_REQUEST_BYTES + 3}
    for message in (error["message"], str(refused.value)):
        assert "too large" in message and f"{MAX_REQUEST_BYTES:,} bytes" in message and "16 MiB" in message
    assert [i.body for i in await bus.peek("worker")] == ["after", ESCAPED]
    assert peak - before < 40, f"peak RSS grew {peak - before:.0f} MiB reading a 50 MB request"


ESCAPED = "\x01" * (1 << 20)  # 1 MiB of UTF-8, 6 bytes each in JSON ("\u0001")
_JSON = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
