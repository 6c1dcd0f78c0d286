"""The streamable HTTP transport: loopback only, bearer token, no foreign Host or Origin."""

from __future__ import annotations

import queue
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from wavewait.core import messages

from conftest import has_waits, register_crew, until, wavewait_cmd
from mcptools import server_env

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@contextmanager
def http_process(bus, *flags: str) -> Iterator[subprocess.Popen[str]]:
    """`wavewait mcp --transport http --port 0 FLAGS...`, ended afterwards. Its stderr is read
    to its end as it comes (`stderr_line` takes its lines), so the server never blocks on a
    full pipe when it logs."""
    proc = subprocess.Popen(
        wavewait_cmd("mcp", "--transport", "http", "--port", "0", *flags),
        env=server_env(bus),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    _STDERR[proc.pid] = lines
    reader = threading.Thread(target=_drain, args=(proc, lines), daemon=True)
    reader.start()
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        reader.join(timeout=10)
        del _STDERR[proc.pid]


_STDERR: dict[int, queue.Queue[str]] = {}


def _drain(proc: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.put(line)
    lines.put("")  # its end


async def stderr_line(proc: subprocess.Popen[str]) -> str:
    """The next line the server wrote to stderr ("" once it has ended)."""
    return await anyio.to_thread.run_sync(_STDERR[proc.pid].get)


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


async def test_a_wait_runs_as_an_mcp_task_over_http(http_server, bus):
    """The Tasks extension over streamable HTTP (2026-07-28, one request per exchange): the
    task created by one request is read by the next, with the message the wait took."""
    await register_crew(bus, "sender")
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    }
    auth = {**HEADERS, "authorization": "Bearer s3cret", "mcp-protocol-version": "2026-07-28"}

    async def rpc(http: httpx2.AsyncClient, rid: int, method: str, name: str, params: dict) -> dict:
        body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": {**params, "_meta": meta}}
        r = await http.post(http_server, json=body, headers={**auth, "mcp-method": method, "mcp-name": name})
        assert r.status_code == 200, r.text
        return r.json()["result"]

    async with httpx2.AsyncClient(timeout=30) as http:
        task = await rpc(http, 1, "tools/call", "wait", {"name": "wait", "arguments": {"timeout": 30}})
        assert (task["resultType"], task["status"]) == ("task", "working")
        await until(lambda: has_waits(bus, 1), what="the task's wait registered")
        await messages.send(bus, "sender", "orchestrator", "over http")
        seen: dict = {}

        async def settled() -> bool:
            seen.update(await rpc(http, 2, "tasks/get", task["taskId"], {"taskId": task["taskId"]}))
            return seen["status"] != "working"

        await until(settled, 20, what="the task to settle")
    assert seen["status"] == "completed"
    assert seen["result"]["structuredContent"]["message"] == "over http"
    assert [i.body for i in await bus.history("orchestrator")] == ["over http"]
