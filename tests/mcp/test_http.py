"""The streamable HTTP transport: loopback only, bearer token, no foreign Host or Origin."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conftest import wavewait_cmd
from mcptools import server_env

pytestmark = pytest.mark.anyio

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@contextmanager
def http_process(bus, *flags: str) -> Iterator[subprocess.Popen[str]]:
    """`wavewait mcp --transport http --port 0 FLAGS...`, ended afterwards; its stderr is a pipe."""
    proc = subprocess.Popen(
        wavewait_cmd("mcp", "--transport", "http", "--port", "0", *flags),
        env=server_env(bus),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def stderr_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    return await anyio.to_thread.run_sync(proc.stderr.readline)


@pytest.fixture
async def http_server(bus):
    """`wavewait mcp --transport http --port 0 --token s3cret`; yields its URL."""
    with http_process(bus, "--token", "s3cret") as proc:
        line = await stderr_line(proc)
        m = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", line)
        assert m, line
        yield m.group(1)


async def test_http_refuses_a_missing_or_wrong_token_and_foreign_host_or_origin(http_server):
    url = http_server
    port = url.split(":")[2].split("/")[0]
    async with httpx2.AsyncClient() as h:
        missing = await h.post(url, json=INIT, headers=HEADERS)
        wrong = await h.post(url, json=INIT, headers=HEADERS | {"authorization": "Bearer nope"})
        host = await h.post(
            url, json=INIT, headers=HEADERS | {"authorization": "Bearer s3cret", "host": f"evil.example:{port}"}
        )
        origin = await h.post(
            url, json=INIT, headers=HEADERS | {"authorization": "Bearer s3cret", "origin": "http://evil.example"}
        )
        good = await h.post(
            url, json=INIT, headers=HEADERS | {"authorization": "Bearer s3cret", "origin": f"http://localhost:{port}"}
        )
    assert missing.status_code == 401 and "bearer" in missing.headers["www-authenticate"].lower()
    assert wrong.status_code == 401
    assert host.status_code == 421
    assert origin.status_code == 403
    assert good.status_code == 200


async def test_http_serves_the_tools_with_the_token(http_server):
    async with httpx2.AsyncClient(headers={"authorization": "Bearer s3cret"}) as h:
        async with Client(streamable_http_client(http_server, http_client=h)) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            r = await c.call_tool("wait", {"timeout": 0})
    assert "wait" in tools and r.structured_content["status"] == "timeout"


async def test_http_without_a_token_generates_one_and_prints_it(bus):
    with http_process(bus) as proc:
        first = await stderr_line(proc)
        assert "bearer token" in first and len(first.rsplit(" ", 1)[-1].strip()) >= 32
        assert "127.0.0.1" in await stderr_line(proc)
