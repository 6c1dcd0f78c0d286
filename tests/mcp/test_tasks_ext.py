"""The MCP Tasks extension (`io.modelcontextprotocol/tasks`) on the wire: raw JSON-RPC over
stdio to `wavewait mcp` subprocesses, on both buses.

A wait called with the extension declared in the request's `_meta` is answered at once with
a task; `tasks/get` from this or another server process on the bus gives its result;
`tasks/cancel` gives back what the wait had taken; without the extension nothing changes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import wirerelay

from wavewait.core import messages
from wavewait.mcp.tasks_ext import poll_interval_ms

from conftest import PYTHON, has_progress, has_waits, register_crew, until
from mcptools import data, mcp_client, relayed, server_env

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]

TASKS = "io.modelcontextprotocol/tasks"
MODERN = "2026-07-28"


def meta(tasks: bool = True) -> dict[str, Any]:
    """The 2026-07-28 request envelope; `tasks`: the request declares the extension."""
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}} if tasks else {},
    }


class Raw:
    """One `wavewait mcp` process spoken to line by line."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc, self.n = proc, 0

    async def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    async def request(self, method: str, params: dict[str, Any] | None = None, *, tasks: bool = True) -> dict[str, Any]:
        """Send a request (with the modern envelope) and return its response (result or error)."""
        self.n += 1
        body = dict(params or {})
        body["_meta"] = meta(tasks)
        await self.send({"jsonrpc": "2.0", "id": self.n, "method": method, "params": body})
        return await self.response(self.n)

    async def response(self, rid: int) -> dict[str, Any]:
        assert self.proc.stdout is not None
        with anyio.fail_after(30):
            while True:
                line = await anyio.to_thread.run_sync(self.proc.stdout.readline)
                assert line, "the server ended before it answered"
                msg = json.loads(line)
                if msg.get("id") == rid and ("result" in msg or "error" in msg):
                    return msg

    async def call(self, tool: str, arguments: dict[str, Any], *, tasks: bool = True) -> dict[str, Any]:
        return await self.request("tools/call", {"name": tool, "arguments": arguments}, tasks=tasks)

    async def get(self, task_id: str) -> dict[str, Any]:
        r = await self.request("tasks/get", {"taskId": task_id})
        assert "result" in r, r
        res: dict[str, Any] = r["result"]
        return res

    async def settled(self, task_id: str) -> dict[str, Any]:
        """The task once it left `working` (polled within a deadline)."""
        seen: dict[str, Any] = {}

        async def done() -> bool:
            seen.update(await self.get(task_id))
            return seen["status"] != "working"

        await until(done, 20, what=f"task {task_id} to settle")
        return seen


@asynccontextmanager
async def raw_server(bus, *flags: str, **env: str) -> AsyncIterator[Raw]:
    proc = subprocess.Popen(
        [PYTHON, "-m", "wavewait", "mcp", "--bus", bus.url, *flags],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=server_env(bus, **env),
    )
    try:
        yield Raw(proc)
    finally:
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                await anyio.to_thread.run_sync(lambda: proc.wait(20))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def structured(task: dict[str, Any]) -> dict[str, Any]:
    assert task["status"] == "completed", task
    assert task["result"]["isError"] is False, task
    out: dict[str, Any] = task["result"]["structuredContent"]
    return out


async def test_a_task_augmented_wait_answers_with_a_task_and_its_result_carries_the_message(bus):
    await register_crew(bus, "file-reader")
    async with raw_server(bus) as s:
        created = await s.call("wait", {"timeout": 30, "from_agents": ["file-reader"]})
        task = created["result"]
        assert task["resultType"] == "task" and task["status"] == "working"
        assert set(task) >= {"taskId", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"}
        got = await s.get(task["taskId"])
        assert (got["resultType"], got["status"]) == ("complete", "working")
        await until(lambda: has_waits(bus, 1), what="the task's wait registered")
        sent = await messages.send(bus, "file-reader", "orchestrator", "three files read")
        done = await s.settled(task["taskId"])
    r = structured(done)
    assert r["status"] == "complete"
    assert (r["results"][0]["message"], r["results"][0]["message_id"]) == ("three files read", sent.id)
    # the stored result carried the message: it left the inbox for its history
    assert await bus.pending("orchestrator") == []
    assert [i.body for i in await bus.history("orchestrator")] == ["three files read"]
    assert await bus.list_waits() == []


@pytest.mark.both_buses
async def test_another_server_process_on_the_bus_gets_the_same_result_by_task_id(bus):
    await register_crew(bus, "sender")
    await messages.send(bus, "sender", "orchestrator", "hello")
    async with raw_server(bus) as a:
        task_id = (await a.call("wait", {"timeout": 10}))["result"]["taskId"]
        first = await a.settled(task_id)
    # the first server is gone; a new one (a reconnected client) reads the task from the bus
    async with raw_server(bus) as b:
        again = await b.get(task_id)
        assert structured(again) == structured(first)
        assert structured(again)["message"] == "hello"
    # another caller on the same bus does not see it
    async with raw_server(bus, "--agent", "someone-else") as c:
        r = await c.request("tasks/get", {"taskId": task_id})
    assert r["error"]["code"] == -32602 and "not found" in r["error"]["message"]


async def _cancel_on(canceller: Raw, owner: Raw, bus) -> None:
    """A fan-in on two flights holds file-reader's message; `canceller` cancels the task."""
    await register_crew(bus, "file-reader", "test-runner")
    await messages.send(bus, "file-reader", "orchestrator", "reader-1")
    await messages.send(bus, "file-reader", "orchestrator", "reader-2")
    task_id = (await owner.call("wait", {"timeout": 60, "from_agents": ["file-reader", "test-runner"]}))["result"][
        "taskId"
    ]
    await until(lambda: has_progress(bus, "1/2 received"), what="the task's wait to hold reader-1")
    assert [i.body for i in await bus.peek("orchestrator")] == ["reader-2"]
    r = await canceller.request("tasks/cancel", {"taskId": task_id})
    assert r["result"]["resultType"] == "complete", r
    done = await owner.settled(task_id)
    assert done["status"] == "cancelled" and "result" not in done
    assert "went back to the inbox" in done["statusMessage"]
    await until(lambda: has_waits(bus, 0), what="the cancelled wait's record removed")
    assert [i.body for i in await bus.peek("orchestrator")] == ["reader-1", "reader-2"]
    async with mcp_client(bus) as c:  # a plain wait gets them, in order
        assert data(await c.call_tool("wait", {"timeout": 5}))["message"] == "reader-1"
        assert data(await c.call_tool("wait", {"timeout": 5}))["message"] == "reader-2"


async def test_tasks_cancel_gives_back_what_a_running_fan_in_took(bus):
    async with raw_server(bus) as s:
        await _cancel_on(s, s, bus)


@pytest.mark.both_buses
async def test_tasks_cancel_through_another_server_process_gives_it_back_too(bus):
    async with raw_server(bus) as owner, raw_server(bus) as other:
        await _cancel_on(other, owner, bus)


@pytest.mark.both_buses
async def test_a_server_killed_with_a_task_running_leaves_it_failed_and_loses_nothing(bus):
    await register_crew(bus, "file-reader", "test-runner")
    await messages.send(bus, "file-reader", "orchestrator", "survive me")
    async with raw_server(bus) as a:
        task_id = (await a.call("wait", {"timeout": 60, "from_agents": ["file-reader", "test-runner"]}))["result"][
            "taskId"
        ]
        await until(lambda: has_progress(bus, "1/2 received"), what="the task's wait to hold the message")
        os.kill(a.proc.pid, signal.SIGKILL)
        await anyio.to_thread.run_sync(lambda: a.proc.wait(10))
    async with raw_server(bus) as b:
        t = await b.get(task_id)
    assert t["status"] == "failed" and t["error"]["code"] == -32603
    assert "ended before it finished" in t["error"]["message"]
    await until(lambda: _pending(bus, ["survive me"]), what="the dead task's claim returned")


@pytest.mark.both_buses
async def test_a_server_that_stops_with_a_task_running_cancels_it_and_gives_back_its_claims(bus):
    """stdin closed (the host's session ended): the running task's wait is cancelled, its
    message goes back, and the task reads `cancelled` from the next server."""
    await register_crew(bus, "file-reader", "test-runner")
    await messages.send(bus, "file-reader", "orchestrator", "keep me")
    async with raw_server(bus) as a:
        task_id = (await a.call("wait", {"timeout": 60, "from_agents": ["file-reader", "test-runner"]}))["result"][
            "taskId"
        ]
        await until(lambda: has_progress(bus, "1/2 received"), what="the task's wait to hold the message")
    assert a.proc.returncode == 0
    assert [i.body for i in await bus.peek("orchestrator")] == ["keep me"]
    assert await bus.list_waits() == []
    async with raw_server(bus) as b:
        t = await b.get(task_id)
    assert t["status"] == "cancelled" and "server stopped" in t["statusMessage"]


async def test_every_wait_tool_runs_as_a_task_and_a_tool_error_is_a_completed_task(bus, tmp_path):
    """wait_for_event (consuming), wave_wait_for_signal and wait_agent (watching) as tasks; a
    bad argument is the tool's isError result in a `completed` task, as the spec says."""
    await register_crew(bus, "worker")
    project = tmp_path / "project"
    (project / "flights").mkdir(parents=True)
    async with raw_server(bus, WAVEWAIT_PROJECT_DIR=str(project)) as s:
        ids = {
            tool: (await s.call(tool, args))["result"]["taskId"]
            for tool, args in (
                ("wait_for_event", {"types": ["worker_complete"], "timeout_secs": 30}),
                ("wave_wait_for_signal", {"signal_path": "flights/*.done", "timeout_sec": 30}),
                ("wait_agent", {"id": "w1", "agentId": "worker", "kind": "agent-idle", "description": "the job"}),
            )
        }
        await until(lambda: has_waits(bus, 3), what="the three tasks' waits registered")
        (project / "flights" / "a.done").write_text("ok")
        await messages.notify_completion(bus, "worker", status="success", message="built")
        event = structured(await s.settled(ids["wait_for_event"]))
        signal_ = structured(await s.settled(ids["wave_wait_for_signal"]))
        agent = structured(await s.settled(ids["wait_agent"]))
        bad = await s.settled((await s.call("wait", {"timeout": -1}))["result"]["taskId"])
    assert (event["type"], event["message"]) == ("worker_complete", "built")
    assert signal_["matched"] == [str(project / "flights" / "a.done")]
    assert agent["resolution"]["status"] == "agent_idle"
    assert bad["status"] == "completed" and bad["result"]["isError"] is True
    assert "timeout" in bad["result"]["content"][0]["text"]
    assert await bus.pending("orchestrator") == []  # the event was taken once its task stored it


async def _pending(bus, bodies: list[str]) -> bool:
    return [i.body for i in await bus.peek("orchestrator")] == bodies


async def test_without_the_extension_declared_nothing_changes(bus):
    await register_crew(bus, "sender")
    await messages.send(bus, "sender", "orchestrator", "plain")
    async with raw_server(bus) as s:
        r = await s.call("wait", {"timeout": 10}, tasks=False)
        assert "resultType" not in r["result"] or r["result"]["resultType"] == "complete"
        assert r["result"]["structuredContent"]["message"] == "plain"
        assert "taskId" not in r["result"]
        # tasks/* from a request that does not declare it: missing required client capability
        e = (await s.request("tasks/get", {"taskId": "0" * 32}, tasks=False))["error"]
        assert e["code"] == -32021 and TASKS in json.dumps(e["data"])
        # a tool that is not a wait is never a task, declared or not
        listed = (await s.call("list_agents", {}))["result"]
        assert "taskId" not in listed and listed["structuredContent"]["agents"]
        # the plain wait's message acknowledged once the grace passed (a session ending first gives it back)
        await until(lambda: has_waits(bus, 0), what="the wait acknowledged")
    # the handshake protocol (2025-06-18) has no tasks: unchanged, and no tasks/* methods
    async with raw_server(bus) as old:
        await old.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {"extensions": {TASKS: {}}},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        )
        await old.response(1)
        await old.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await old.send(
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "wait", "arguments": {"timeout": 0}}}
        )
        r = await old.response(2)
        assert r["result"]["structuredContent"]["status"] == "timeout" and "taskId" not in r["result"]
        await old.send({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": "0" * 32}})
        assert (await old.response(3))["error"]["code"] == -32601


async def test_a_real_client_that_does_not_declare_the_extension_gets_a_plain_result(bus, tmp_path):
    """Codex 0.169.0 never declares it, and fails a call answered with a task anyway
    (`Unexpected response type`): a task only when the request asks for one (docs/hosts.md)."""
    await register_crew(bus, "sender")
    await messages.send(bus, "sender", "orchestrator", "plain")
    log = tmp_path / "wire.jsonl"
    async with relayed(bus, log) as c:
        r = data(await c.call_tool("wait", {"timeout": 10, "from_agents": ["sender"]}))
    assert r["status"] == "complete" and r["results"][0]["message"] == "plain"
    wire = wirerelay.read(log)
    [call] = [x["msg"] for x in wire if x["dir"] == "in" and x["msg"].get("method") == "tools/call"]
    assert TASKS not in json.dumps(call["params"].get("_meta", {}))  # the client does not declare it
    [answer] = [x["msg"] for x in wire if x["dir"] == "out" and x["msg"].get("id") == call["id"]]
    assert "taskId" not in answer["result"] and answer["result"].get("resultType", "complete") == "complete"


async def test_a_poll_of_a_task_this_process_runs_is_answered_from_memory(bus):
    """A host polls every backgrounded wait each pollIntervalMs: the process running the task
    answers without reading the bus (here its record is gone from the bus, and it still
    answers `working`, while another process on the bus finds nothing)."""
    await register_crew(bus, "file-reader")
    async with raw_server(bus) as a, raw_server(bus) as b:
        task_id = (await a.call("wait", {"timeout": 60, "from_agents": ["file-reader"]}))["result"]["taskId"]
        await until(lambda: has_waits(bus, 1), what="the task's wait registered")
        assert (await b.get(task_id))["status"] == "working"  # from the bus
        await bus.delete_mcp_task(task_id)
        assert (await a.get(task_id))["status"] == "working"  # from memory
        r = await b.request("tasks/get", {"taskId": task_id})
        assert "not found" in r["error"]["message"]


async def test_the_suggested_poll_interval_keeps_a_servers_polls_bounded(bus):
    """500 ms while few tasks run in the server; with more, what keeps their polls near 200 a
    second (bench/bench_tasks_poll.py: a tasks/get costs about 1 ms of CPU)."""
    assert [poll_interval_ms(n) for n in (0, 1, 100, 200, 1000)] == [500, 500, 500, 1000, 5000]
    await register_crew(bus, "file-reader")
    async with raw_server(bus) as s:
        task = (await s.call("wait", {"timeout": 30, "from_agents": ["file-reader"]}))["result"]
        assert task["pollIntervalMs"] == 500
        assert (await s.get(task["taskId"]))["pollIntervalMs"] == 500


async def test_bad_task_ids_are_clear_errors(bus):
    async with raw_server(bus) as s:
        for bad, says in (
            ("0" * 32, "Task not found"),
            ("../../etc/passwd", "not a valid id"),
            ("", "non-empty"),
        ):
            for method in ("tasks/get", "tasks/cancel", "tasks/update"):
                e = (await s.request(method, {"taskId": bad}))["error"]
                assert e["code"] == -32602 and says in e["message"], (method, bad, e)
        e = (await s.request("tasks/get", {}))["error"]
        assert e["code"] == -32602, e
