"""Seed 000 through the MCP server: `wave_wait_for_signal` on real files."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from conftest import PYTHON, Background, has_progress, until
from mcptools import data, error_text, mcp_client

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]

GLOB = "wavebus/wave-1/flights/*.done"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "proj" / "wavebus" / "wave-1" / "flights").mkdir(parents=True)
    return tmp_path / "proj"


def flights(project: Path) -> Path:
    return project / "wavebus" / "wave-1" / "flights"


def server(bus, project: Path, *flags: str):
    return mcp_client(bus, *flags, env={"WAVEWAIT_PROJECT_DIR": str(project)})


async def test_wave_wait_for_signal_matches_immediately(bus, project):
    for n in ("b", "a"):
        (flights(project) / f"{n}.done").touch()
    async with server(bus, project) as c:
        r = data(await c.call_tool("wave_wait_for_signal", {"signal_path": GLOB, "min_count": 2}))
    assert r["matched"] == [str(flights(project) / "a.done"), str(flights(project) / "b.done")]
    assert r["elapsed_sec"] < 5 and "timed_out" not in r


async def test_wave_wait_for_signal_polls_until_match(bus, project):
    async with server(bus, project) as c:
        async with anyio.create_task_group() as tg:
            bg = Background(tg)
            bg.start("signal", c.call_tool, "wave_wait_for_signal", {"signal_path": GLOB, "timeout_sec": 60})
            await until(lambda: _waiting(bus), what="the signal wait on the bus")
            # a flight drops its artifact the way a shell-only agent does: write, then rename
            await anyio.run_process(
                [
                    PYTHON,
                    "-c",
                    (
                        "import os,sys; d=sys.argv[1]; open(os.path.join(d,'.x.tmp'),'w').write('ok');"
                        "os.rename(os.path.join(d,'.x.tmp'), os.path.join(d,'x.done'))"
                    ),
                    str(flights(project)),
                ]
            )
    assert data(bg.results["signal"])["matched"] == [str(flights(project) / "x.done")]


async def _waiting(bus) -> bool:
    return any(w.tool == "wave_wait_for_signal" for w in await bus.list_waits())


async def test_wave_wait_for_signal_times_out(bus, project):
    async with server(bus, project) as c:
        r = data(await c.call_tool("wave_wait_for_signal", {"signal_path": GLOB, "timeout_sec": 1}))
    assert r["timed_out"] is True and r["partial_matches"] == []
    assert r["elapsed_sec"] >= 1 and "call again" in r["hint"].lower()


async def test_wave_wait_for_signal_partial_matches(bus, project):
    (flights(project) / "a.done").touch()
    (flights(project) / "a.log").touch()
    async with server(bus, project) as c:
        r = data(await c.call_tool("wave_wait_for_signal", {"signal_path": GLOB, "timeout_sec": 1, "min_count": 3}))
    assert r["timed_out"] is True and r["partial_matches"] == [str(flights(project) / "a.done")]
    assert "1/3" in r["hint"]


async def test_wave_wait_for_signal_interrupted_returns_partial_matches(bus, project):
    (flights(project) / "a.done").touch()
    async with server(bus, project) as c:
        async with anyio.create_task_group() as tg:
            bg = Background(tg)
            bg.start("signal", c.call_tool, "wave_wait_for_signal", {"signal_path": GLOB, "min_count": 2})
            await until(lambda: has_progress(bus, "1/2 files"), what="the signal wait's first sweep")
            (w,) = await bus.list_waits()
            assert w.waiter == "orchestrator" and w.targets == [str(project / GLOB)]
            await bus.interrupt(w.id)
    r = data(bg.results["signal"])
    assert r["interrupted"] is True and r["partial_matches"] == [str(flights(project) / "a.done")]


async def test_signal_paths_outside_the_project_and_bus_are_refused_unless_allowed(bus, project, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "z.done").touch()
    async with server(bus, project) as c:
        refused = [
            error_text(await c.call_tool("wave_wait_for_signal", {"signal_path": p, "timeout_sec": 1}))
            for p in (str(outside / "*.done"), "../elsewhere/*.done", "/etc/*.conf")
        ]
        empty = error_text(await c.call_tool("wave_wait_for_signal", {"signal_path": ""}))
        bad = error_text(
            await c.call_tool("wave_wait_for_signal", {"signal_path": GLOB, "timeout_sec": 0, "min_count": 1.5})
        )
    assert all("signal_path" in t and "--allow-path" in t for t in refused)
    assert "signal_path" in empty
    assert "timeout_sec" in bad and "min_count" in bad
    async with server(bus, project, "--allow-path", str(outside)) as c:
        r = data(await c.call_tool("wave_wait_for_signal", {"signal_path": "../elsewhere/*.done", "timeout_sec": 1}))
    assert r["matched"] == [str(outside / "z.done")]


async def test_claude_project_dir_is_used_when_wavewait_project_dir_is_unset(bus, project):
    (flights(project) / "a.done").touch()
    async with mcp_client(bus, env={"CLAUDE_PROJECT_DIR": str(project)}, cwd=os.sep) as c:
        r = data(await c.call_tool("wave_wait_for_signal", {"signal_path": GLOB, "timeout_sec": 1}))
    assert r["matched"] == [str(flights(project) / "a.done")]
