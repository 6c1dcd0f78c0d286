"""A real Claude Code or Codex session run as a flight (under wavewait's supervisor): its MCP server
and its Stop hook send as that flight, and nothing it does sends as its sibling.

Run with `python -m pytest -m hosts tests/hosts -k sender`.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from hostkit import CLAUDE, HOSTS, VENV_BIN, Host, Project, calls, drain, driver, install, make_project
from modelserver import ModelServer

from wavewait.core import admission
from wavewait.core.agents import register
from wavewait.core.bus.file import FileBus

from conftest import until, warm_settings

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(900)]


def flight_env(p: Project) -> dict[str, str]:
    """What `Project.run` gives the host, for a flight started by the supervisor instead."""
    (p.home / "tmp").mkdir(exist_ok=True)
    return (
        {
            "HOME": str(p.home),
            "PATH": os.pathsep.join([str(VENV_BIN), "/usr/local/bin", "/usr/bin", "/bin"]),
            "LANG": "C.UTF-8",
            "TMPDIR": str(p.home / "tmp"),
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        | warm_settings()
        | p.env
    )


async def spawn_sibling(bus_path: Path) -> str:
    bus = FileBus(bus_path)
    try:
        await register(bus, "orchestrator")
        sib = await admission.spawn(bus, "sibling", ["sh", "-c", "wavewait wait 600"], parent_id="orchestrator")
        return sib.id
    finally:
        await bus.close()


async def run_as_flight(p: Project, prompt: str, timeout: float = 240) -> str:
    """Start the host as a flight and wait (with a deadline) until it has ended."""
    bus = FileBus(p.bus)
    try:
        exe = str(install(p.host))
        cmd = (
            [exe, "-p", prompt, *p.args]
            if p.host is CLAUDE
            else [exe, "exec", "--skip-git-repo-check", *p.args, prompt]
        )
        f = await admission.spawn(bus, "host-flight", cmd, env=flight_env(p), cwd=str(p.root), parent_id="orchestrator")

        async def ended() -> bool:
            return (await bus.get_agent(f.id)).finished

        await until(ended, timeout, "the host flight to end")
        return f.id
    finally:
        await bus.close()


async def end(bus_path: Path, agent_id: str) -> None:
    bus = FileBus(bus_path)
    try:
        await admission.kill(bus, await bus.get_agent(agent_id))
    finally:
        await bus.close()


@pytest.fixture(params=HOSTS, ids=lambda h: h.name)
def host(request: pytest.FixtureRequest) -> Host:
    return request.param


def test_a_host_run_as_a_flight_sends_as_itself_never_as_its_sibling(host: Host, tmp_path: Path) -> None:
    """Claude Code with its Stop hook; Codex, which starts its MCP servers with a bare
    environment (the server's caller is then the flight it runs in)."""
    p = make_project(host, tmp_path)
    p.hooks = host is CLAUDE  # the Stop hook: `wavewait notify`, run by Claude Code inside the flight
    sibling = asyncio.run(spawn_sibling(p.bus))
    try:
        plan = calls(
            ("send", {"to": "orchestrator", "message": "REPORT<flight> my own"}),
            ("notify_completion", {"status": "success", "message": "all tests pass", "worker_id": sibling}),
        )
        with ModelServer(driver(plan)) as m:
            p.configure(m.url)
            flight = asyncio.run(run_as_flight(p, "Do the task and report."))
        assert not m.failures, m.failures
        last = m.turns[-1]
        ours = [(r, e) for c, r, e in zip(last.called, last.results, last.errors, strict=True) if "wavewait" in c]
        reports = drain(p.bus)
        senders = [(x.get("from"), x.get("message")) for x in reports]
        assert len(ours) == 2, ours
        (own, own_error), (forged, forged_error) = ours
        assert not own_error and "error" not in own.lower(), own
        assert forged_error in (True, None) and flight in forged and sibling in forged, forged
        assert "nothing was sent" in forged, forged
        stopped = [(flight, "session stopped")] if host is CLAUDE else []
        assert senders == [(flight, "REPORT<flight> my own"), *stopped], senders
    finally:
        asyncio.run(end(p.bus, sibling))
