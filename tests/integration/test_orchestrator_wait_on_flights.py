"""The canonical scene (seed 000, docs/wave-pattern-orchestration.md): an orchestrator
dispatches a wave of flights through the MCP server, then sits still in one call instead of
a sleep or a polling loop. The flights are real processes that drop `.done` files and report
completion at different times; one dies without reporting; one is slower than the wait.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from conftest import PYTHON
from mcptools import data, server_env

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]


@asynccontextmanager
async def orchestrator(bus, project: Path) -> AsyncIterator[Client]:
    """`wavewait mcp` set up as --print-config does: the bus named only in the environment."""
    params = StdioServerParameters(
        command=PYTHON, args=["-m", "wavewait", "mcp"], env=server_env(bus, WAVEWAIT_PROJECT_DIR=str(project))
    )
    async with Client(params) as client:
        yield client


async def call(client: Client, tool: str, args: dict) -> dict:
    return data(await client.call_tool(tool, args))


def flight(delay: float, name: str, *, report: bool = True, exit_code: int = 0, gate: str | None = None) -> list[str]:
    """A shell-only flight: work, report through the CLI, then drop its signal file by rename
    (so a signal seen means its report is on the bus, however long the CLI took to start).
    With `gate`, its work lasts until that file exists (the test decides, not the clock)."""
    ww = f"{shlex.quote(sys.executable)} -m wavewait"
    done = f"wavebus/wave-1/flights/{name}.done"
    work = f"while [ ! -e {shlex.quote(gate)} ]; do sleep 0.05; done" if gate else f"sleep {delay}"
    steps = [work, f"echo ok > {done}.tmp", f"mv {done}.tmp {done}"]
    if report:
        notify = f"{ww} notify --status success --message {shlex.quote(name + ' finished')} --change src/{name}.py"
        steps.insert(1, notify)
    else:
        steps = [f"sleep {delay}", f"exit {exit_code}"]
    return ["sh", "-c", " && ".join(steps)]


@pytest.mark.both_buses
async def test_orchestrator_dispatches_a_wave_and_waits_once_for_its_flights(bus, tmp_path):
    project = tmp_path / "proj"
    (project / "wavebus" / "wave-1" / "flights").mkdir(parents=True)
    async with orchestrator(bus, project) as o:
        ids = {}
        for name, cmd in (
            ("file-reader", flight(0.2, "file-reader")),
            ("test-runner", flight(0.8, "test-runner")),
            ("linter", flight(0.4, "linter", report=False, exit_code=3)),
        ):
            ids[name] = (await call(o, "spawn_agent", {"name": name, "command": cmd, "wave": "wave-1"}))["agent_id"]

        # one call sits still until both signal files are there
        sig = await call(
            o,
            "wave_wait_for_signal",
            {"signal_path": "wavebus/wave-1/flights/*.done", "min_count": 2, "timeout_sec": 60},
        )
        assert [Path(p).name for p in sig["matched"]] == ["file-reader.done", "test-runner.done"]

        # one fan-in call collects every report and ends early on the dead flight
        fan = await call(o, "wait", {"timeout": 60, "from_agents": list(ids.values())})
        assert fan["status"] == "complete"
        by_name = {r["name"]: r for r in fan["results"]}
        assert [r["name"] for r in fan["results"]] == ["file-reader", "test-runner", "linter"]
        assert by_name["file-reader"]["status"] == "received"
        assert by_name["file-reader"]["message"] == "file-reader finished"
        assert by_name["test-runner"]["status"] == "received"
        assert by_name["linter"]["status"] == "dead" and "3" in by_name["linter"]["reason"]
        assert "linter" in fan["hint"]

        # the orchestrator also got told of the death as an event
        ev = await call(o, "wait_for_event", {"types": ["agent_dead"], "timeout_secs": 10})
        assert ev["from"] == ids["linter"]


async def test_a_timeout_returns_partial_results_and_a_rewait_on_the_pending_flight_finishes(bus, tmp_path):
    project = tmp_path / "proj"
    (project / "wavebus" / "wave-1" / "flights").mkdir(parents=True)
    async with orchestrator(bus, project) as o:
        fast = (await call(o, "spawn_agent", {"name": "fast", "command": flight(0.1, "fast")}))["agent_id"]
        gate = project / "slow.go"
        slow = (await call(o, "spawn_agent", {"name": "slow", "command": flight(0, "slow", gate=str(gate))}))[
            "agent_id"
        ]
        sig = await call(
            o, "wave_wait_for_signal", {"signal_path": "wavebus/wave-1/flights/fast.done", "timeout_sec": 60}
        )
        assert sig["matched"]
        first = await call(o, "wait", {"timeout": 1, "from_agents": [fast, slow]})
        assert first["status"] == "timeout"
        assert [(r["name"], r["status"]) for r in first["results"]] == [("fast", "received"), ("slow", "running")]
        assert f'from_agents=["{slow}"]' in first["hint"]  # the flight keeps running; wait only on it
        gate.write_text("go")
        second = await call(o, "wait", {"timeout": 60, "from_agents": [slow]})
        assert second["status"] == "complete" and second["results"][0]["message"] == "slow finished"
