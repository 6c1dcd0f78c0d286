"""One bad string cannot stall the server: every field that takes a path, a glob, an id, a name or
a command refuses a 1 MB string of any shape at once, and a wait blocked in the same server goes on.

A `signal_path` of "a/" repeated once took 2.5 s to be refused at 100 KB and more than 90 s at
1 MB, normalised (`realpath`, one `lstat` a folder) before its length was checked, on the event
loop: every other wait of the server froze, and SIGTERM did nothing. Now each value is measured
first (core/limits.py) and the file system is asked off the loop. The server runs under
tests/loopwatch.py, which logs every step of the event loop that used more than 50 ms of CPU.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import struct
import subprocess
import termios
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import anyio
import loopwatch
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from wavewait.core import agents, messages

from conftest import PYTHON, has_waits, register_crew, until
from gittools import make_repo
from mcptools import data, mcp_client, server_env
from mergetools import WAVE, flight, preset_file

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]

MB = 1_000_000
#: a megabyte of each shape a path, glob or id parser may choke on
SHAPES = {
    "components": "a/" * (MB // 2),
    "dotdot": "../" * (MB // 3),
    "stars": "*" * MB,
    "globstars": "**/" * (MB // 3),
    "braces": "{a," * (MB // 3),
    "brackets": "[" * MB,
    "home": "~/" * (MB // 2),
    "multibyte": "é" * (MB // 2),  # 1 MB of UTF-8
    "one-name": "a" * MB,
}
REFUSED_WITHIN = 1.0  # seconds from a call to its refusal
WAIT_RETURNS_WITHIN = 1.0  # seconds from a message to the blocked wait's return
LONGEST_ERROR = 1000  # characters: a refusal names what was wrong, it does not echo a megabyte

TYPES = """
[types.research]
description = "Find out what the code does"
prompt = "Research {topic}."
"""
CMD = ["true"]
PAST = "2000-01-01T00:00:00Z"  # a wait_agent that was let through returns at once
HANDOFF = {"goals": "g", "did": "d", "forNextAgent": "n"}
AGENT_WAIT = {"id": "w-1", "agentId": "worker", "kind": "agent-idle", "description": "d", "timeoutAt": PAST}


def _fields(s: str) -> dict[str, list[tuple[str, dict[str, Any], str]]]:
    """Per group of tools (one server each): (tool, arguments with `s` in one field, that field's name)."""
    return {
        "waits": [
            ("wait", {"timeout": 0, "from_agents": [s]}, "from_agents[0]"),
            ("wave_wait_for_signal", {"signal_path": s, "timeout_sec": 1}, "signal_path"),
            ("wait_agent", AGENT_WAIT | {"id": s}, "id"),
            ("wait_agent", AGENT_WAIT | {"agentId": s}, "agentId"),
            ("wait_agent", AGENT_WAIT | {"agentIds": [s]}, "agentIds[0]"),
            ("wait_agent", AGENT_WAIT | {"description": s}, "description"),
            ("wait_agent", AGENT_WAIT | {"timeoutAt": s}, "timeoutAt"),
            ("wait_for_event", {"types": [s], "timeout_secs": 0}, "types[0]"),
        ],
        "messages": [
            ("send", {"to": s, "message": "m"}, "to"),
            ("notify_completion", {"status": "success", "message": "m", "worker_id": s}, "worker_id"),
            ("notify_completion", {"status": "success", "message": "m", "session_id": s}, "session_id"),
            ("notify_completion", {"status": "success", "message": "m", "changes": [s]}, "changes[0]"),
            ("reply", {"agent": s, "message": "m"}, "agent"),
            ("reply", {"question_id": s, "message": "m"}, "question_id"),
            ("close_agent", {"agentId": s}, "agentId"),
            ("kill_agent", {"agent": s}, "agent"),
            ("read_output", {"agent": s}, "agent"),
            ("tell_agent", {"agent": s, "message": "x"}, "agent"),
            ("read_transcript", {"agent": s}, "agent"),
            ("list_agents", {"wave": s}, "wave"),
        ],
        "spawn": [
            ("spawn_agent", {"name": s, "command": CMD}, "name"),
            ("spawn_agent", {"name": "n", "command": [s]}, "command[0]"),
            ("spawn_agent", {"name": "n", "command": [*CMD, s]}, "command[1]"),
            ("spawn_agent", {"name": "n", "command": CMD, "wave": s}, "wave"),
            ("spawn_agent", {"name": "n", "command": CMD, "cwd": s}, "cwd"),
            ("spawn_agent", {"name": "n", "command": CMD, "env": {"X": s}}, "env.X"),
            ("spawn_agent", {"name": "n", "prompt": "p", "preset": s}, "preset"),
            ("spawn_agent", {"name": "n", "prompt": s, "preset": "claude"}, "prompt"),
            ("spawn_agent", {"name": "n", "prompt": "p", "preset": "claude", "model": s}, "model"),
            ("spawn_agent", {"name": "n", "command": CMD, "worktree": True, "base": s}, "base"),
        ],
        "merge": [
            ("merge_wave", {"wave": s, "dry_run": True}, "wave"),
            ("merge_wave", {"into": s, "dry_run": True}, "into"),
            ("merge_wave", {"check": s, "dry_run": True}, "check"),
            ("merge_wave", {"resolve_with": s, "dry_run": True}, "resolve_with"),
            ("approve", {"tool_name": s, "input": {}}, "tool_name"),
            ("approve", {"tool_name": "Bash", "input": {}, "tool_use_id": s}, "tool_use_id"),
        ],
        "queue": [
            ("enqueue_task", {"type": s, "inputs": {}, "reason": "r"}, "type"),
            ("enqueue_task", {"type": "research", "inputs": {}, "reason": "r", "dependsOn": [s]}, "dependsOn[0]"),
            ("enqueue_task", {"type": "research", "inputs": {}, "reason": "r", "model": s}, "model"),
            ("complete_task", {"status": "done", "handoff": HANDOFF, "taskId": s}, "taskId"),
            (
                "complete_task",
                {"status": "done", "handoff": HANDOFF | {"filesTouched": [s]}, "taskId": "t-1"},
                "handoff.filesTouched[0]",
            ),
            ("read_handoffs", {"type": s}, "type"),
            ("read_handoffs", {"taskId": s}, "taskId"),
        ],
    }


GROUPS = list(_fields(""))


def _watched(bus, log: Path, *flags: str, cwd: Path) -> Client:
    """A client of `wavewait mcp` run under tests/loopwatch.py (its slow loop steps go to `log`)."""
    params = StdioServerParameters(
        command=PYTHON,
        args=[loopwatch.__file__, str(log), "mcp", "--bus", bus.url, *flags],
        env=server_env(bus, WAVEWAIT_PROJECT_DIR=str(cwd)),
        cwd=str(cwd),
    )
    return Client(params)  # type: ignore[arg-type]


class BlockedWait:
    """A `wait` for the next message, blocked in the server; `check` sends it one and times the return."""

    def __init__(self, c: Client, bus) -> None:
        self.c, self.bus, self.n = c, bus, 0
        self.task: asyncio.Task[Any] | None = None
        self.returned_at = 0.0

    async def start(self) -> None:
        self.task = asyncio.create_task(self.c.call_tool("wait", {"timeout": 60}))
        self.task.add_done_callback(lambda _: setattr(self, "returned_at", time.monotonic()))
        await until(lambda: has_waits(self.bus, 1), timeout=60, what="the blocked wait on the bus")

    async def send(self) -> float:
        self.n += 1
        await messages.send(self.bus, "worker", "orchestrator", f"ping {self.n}")
        return time.monotonic()

    async def returned(self, sent_at: float) -> None:
        assert self.task is not None
        with anyio.fail_after(10):
            r = await self.task
        assert not r.is_error and r.structured_content["message"] == f"ping {self.n}", r
        late = self.returned_at - sent_at
        assert late < WAIT_RETURNS_WITHIN, f"the blocked wait returned {late:.2f} s after its message"


def _slow_steps(log: Path, skip: int) -> list[str]:
    return log.read_text().splitlines()[skip:] if log.exists() else []


@pytest.mark.parametrize("group", [pytest.param("waits", marks=pytest.mark.both_buses), *GROUPS[1:]])
async def test_a_megabyte_in_any_field_is_refused_at_once_and_a_blocked_wait_goes_on(bus, tmp_path, group):
    await register_crew(bus, "orchestrator", "worker")
    types = tmp_path / "types.toml"
    types.write_text(TYPES)
    flags = ("--queue", "q1", "--task-types", str(types)) if group == "queue" else ()
    log = tmp_path / "loop.log"
    async with _watched(bus, log, *flags, cwd=tmp_path) as c:
        await c.call_tool("list_agents", {})  # up; what start-up took is not a request's
        started = len(_slow_steps(log, 0))
        waiting = BlockedWait(c, bus)
        problems = []
        for tool, _, field in _fields("")[group]:
            await waiting.start()
            sent_at = None
            for shape, s in SHAPES.items():
                args = next(a for t, a, f in _fields(s)[group] if (t, f) == (tool, field))
                call = asyncio.create_task(c.call_tool(tool, args))
                t0 = time.monotonic()
                if sent_at is None:  # the message crosses the first bad call
                    sent_at = await waiting.send()
                with anyio.fail_after(10):
                    r = await call
                took = time.monotonic() - t0
                text = r.content[0].text if r.content else ""
                where = f"{tool}.{field} ({shape})"
                if not r.is_error:
                    problems.append(f"{where}: not refused: {text[:200]}")
                elif f"{field}:" not in text and f"{field}[" not in text:
                    problems.append(f"{where}: the refusal does not name the field: {text[:300]}")
                elif len(text) > LONGEST_ERROR:
                    problems.append(f"{where}: a refusal of {len(text):,} characters: {text[:200]}")
                if took > REFUSED_WITHIN:
                    problems.append(f"{where}: refused after {took:.2f} s")
            assert sent_at is not None
            await waiting.returned(sent_at)
        slow = _slow_steps(log, started)
    assert not problems, "\n".join(problems)
    assert not slow, "steps of the event loop over 50 ms of CPU:\n" + "\n".join(slow)


MANY = 20_000  # entries: 20 times the bound
WAVE_IDS = 200_000  # agent ids: twice the bound of a fan-in's list (a wave of 100,000)
LISTS = [
    ("wait", {"timeout": 0, "from_agents": ["a"] * WAVE_IDS}, "from_agents"),
    ("wait_for_event", {"types": ["a"] * MANY, "timeout_secs": 0}, "types"),
    ("wait_agent", AGENT_WAIT | {"agentIds": ["worker"] * WAVE_IDS}, "agentIds"),
    ("notify_completion", {"status": "success", "message": "m", "changes": ["a"] * MANY}, "changes"),
    ("spawn_agent", {"name": "n", "command": ["true"] * MANY}, "command"),
    ("spawn_agent", {"name": "n", "command": CMD, "env": {f"V{i}": "x" for i in range(MANY)}}, "env"),
    ("approve", {"tool_name": "Bash", "input": {f"k{i}": i for i in range(MANY)}}, "input"),
    ("enqueue_task", {"type": "research", "inputs": {f"k{i}": i for i in range(MANY)}, "reason": "r"}, "inputs"),
    ("enqueue_task", {"type": "research", "inputs": {}, "reason": "r", "dependsOn": ["t"] * MANY}, "dependsOn"),
]


async def test_a_long_list_or_object_is_refused_before_it_is_validated(bus, tmp_path):
    """Counted first (1,000 entries at most), not validated entry by entry on the event loop:
    the SDK's validation of a tool's arguments is one step of it (65-90 ms for 250,000 entries)."""
    await register_crew(bus, "orchestrator", "worker")
    types = tmp_path / "types.toml"
    types.write_text(TYPES)
    async with _watched(bus, tmp_path / "loop.log", "--queue", "q1", "--task-types", str(types), cwd=tmp_path) as c:
        for tool, args, field in LISTS:
            r = await c.call_tool(tool, args)
            text = r.content[0].text if r.content else ""
            most, got = ("100,000", WAVE_IDS) if field in ("from_agents", "agentIds") else ("1,000", MANY)
            assert r.is_error and f"{field}: at most {most} entries, got {got:,}" in text, (tool, text[:300])
    assert await bus.list_agents() and not [a for a in await bus.list_agents() if a.name == "n"]


def _line(id_: int, method: str, params: dict[str, Any]) -> bytes:
    return (json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}) + "\n").encode()


OPENING = (
    _line(
        1,
        "initialize",
        {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    )
    + b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
)


def _unread(fd: int) -> int:
    """Bytes written to a pipe that its reader has not read yet."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


@pytest.mark.parametrize("end", ["sigterm", "stdin-closed"])
async def test_the_server_ends_within_a_second_while_it_handles_a_bad_request(bus, tmp_path, end):
    """A host ends its server with SIGTERM or by closing its stdin, with a wait blocked and a
    megabyte request read: the server ends at once and leaves no wait behind. (It used to spin
    on the request for minutes, deaf to both.)"""
    await register_crew(bus, "orchestrator", "worker")
    env = server_env(bus, WAVEWAIT_PROJECT_DIR=str(tmp_path))
    bad = _line(3, "tools/call", {"name": "wave_wait_for_signal", "arguments": {"signal_path": SHAPES["components"]}})
    proc = subprocess.Popen(
        [PYTHON, "-m", "wavewait", "mcp", "--bus", bus.url], env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(OPENING + _line(2, "tools/call", {"name": "wait", "arguments": {"timeout": 60}}))
        proc.stdin.flush()
        await until(lambda: has_waits(bus, 1), timeout=60, what="the blocked wait on the bus")
        await anyio.to_thread.run_sync(lambda: (proc.stdin.write(bad), proc.stdin.flush()))
        await until(lambda: _unread(proc.stdin.fileno()) == 0, what="the server to read the request")
        took = await _end(proc, end)
    finally:
        proc.kill()
        proc.wait()
    assert took < 1.0, f"the server took {took:.2f} s to end ({end})"
    assert proc.returncode == 0 and await bus.list_waits() == []


async def _end(proc: subprocess.Popen[bytes], end: str) -> float:
    """End the server by SIGTERM or by closing its stdin; the seconds it took to exit."""
    assert proc.stdin is not None
    t0 = time.monotonic()
    if end == "sigterm":
        proc.send_signal(signal.SIGTERM)
    else:
        proc.stdin.close()
    with suppress(subprocess.TimeoutExpired):
        await anyio.to_thread.run_sync(proc.wait, 30)
    return time.monotonic() - t0


@pytest.mark.parametrize("end", ["sigterm", "stdin-closed"])
async def test_the_server_ends_within_a_second_while_a_merge_check_runs(bus, tmp_path, monkeypatch, end):
    """A merge's check (a shell command, maybe minutes of tests) runs in a worker thread: ended
    with the request, its process group is killed, so the server does not wait for it to exit."""
    repo = make_repo(tmp_path / "project", monkeypatch)
    (repo / ".git" / "info" / "exclude").write_text(".wavebus/\n")
    await agents.register(bus, "orchestrator")
    await flight(bus, repo, preset_file(tmp_path), "alpha", {"alpha.txt": "alpha\n"})
    marker = tmp_path / "check.pid"
    check = f"echo $$ > {marker}.tmp && mv {marker}.tmp {marker} && exec sleep 60"
    env = server_env(bus, WAVEWAIT_WORKTREES=os.environ["WAVEWAIT_WORKTREES"])
    proc = subprocess.Popen(
        [PYTHON, "-m", "wavewait", "mcp", "--bus", bus.url],
        env=env,
        cwd=str(repo),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    try:
        assert proc.stdin is not None
        merge = {"name": "merge_wave", "arguments": {"wave": WAVE, "check": check}}
        proc.stdin.write(OPENING + _line(2, "tools/call", merge))
        proc.stdin.flush()
        await until(marker.exists, timeout=60, what="the merge's check to start")
        sleeper = int(marker.read_text())
        took = await _end(proc, end)
    finally:
        proc.kill()
        proc.wait()
    assert took < 1.0, f"the server took {took:.2f} s to end ({end}) while its merge check ran"
    assert not _running(sleeper), "the check outlived the server"


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.both_buses
async def test_a_fan_in_over_a_wave_longer_than_the_list_bound_is_served(bus):
    """The 1,000-entry bound is for words and keys; a fan-in names every flight of its wave. A
    fan-in over 2,000 flights was refused with that bound, and a client that waited on the
    wait's record for its answer waited forever."""
    n = 1_500
    ids = [f"flight-{i:05d}" for i in range(n)]
    await agents.register(bus, "orchestrator")
    for i in range(0, n, 100):
        await asyncio.gather(*(agents.register(bus, f, parent_id="orchestrator") for f in ids[i : i + 100]))
    for f in ids[:2]:
        await messages.send(bus, f, "orchestrator", f"REPORT {f}")
    async with mcp_client(bus, "--output-budget", "200000") as c:
        r = data(await c.call_tool("wait", {"timeout": 0, "from_agents": ids}))
    assert [x["agent_id"] for x in r["results"]] == ids
    assert [x["message"] for x in r["results"][:2]] == [f"REPORT {f}" for f in ids[:2]]
    assert {x["status"] for x in r["results"][2:]} == {"running"}, r["results"][2]
