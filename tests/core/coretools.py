"""Helpers for the core tests: separate processes acting on the same bus, a small crew."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio

from wavewait.core.bus import Bus

from conftest import PYTHON, env_for, register_crew

ACTOR = str(Path(__file__).with_name("actor.py"))
FLIGHTS = ("file-reader", "test-runner", "linter")


def actor_cmd(*args: str) -> list[str]:
    return [PYTHON, ACTOR, *args]


async def run_actor(bus: Bus, *args: str, timeout: float = 90, **env: str) -> subprocess.CompletedProcess[bytes]:
    """Run actor.py to completion in its own process; fail the test if it fails."""
    with anyio.fail_after(timeout):
        done = await anyio.run_process(actor_cmd(*args), env=env_for(bus) | env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done


async def crew(bus: Bus) -> None:
    """An orchestrator and three registered flights (ids are their names)."""
    await register_crew(bus, *FLIGHTS)


async def waits_of(bus: Bus, kind: str | None = None) -> list:
    return [w for w in await bus.list_waits() if kind is None or w.kind == kind]
