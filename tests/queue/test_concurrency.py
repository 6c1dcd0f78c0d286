"""Concurrent enqueues from separate processes: the budget and dedup guards still hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from qtools import guard_events, make_queue, types_file

from wavewait.core.tasks import list_tasks

from conftest import env_for

pytestmark = pytest.mark.anyio
ENQUEUER = str(Path(__file__).with_name("enqueuer.py"))
PROCESSES = 6


async def race(bus, tmp_path: Path, prefixes: list[str], count: int, max_tasks: int) -> list[dict]:
    """Start one enqueuer per prefix, open their start gate at once, collect their counts."""
    env = env_for(bus, WAVEWAIT_TASK_TYPES=str(types_file(tmp_path)), WAVEWAIT_MAX_TASKS=str(max_tasks))
    procs = [
        subprocess.Popen(
            [sys.executable, ENQUEUER, p, str(count)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for p in prefixes
    ]
    try:
        with anyio.fail_after(60):
            for p in procs:
                assert await anyio.to_thread.run_sync(p.stdout.readline) == "ready\n"
            for p in procs:  # every process is ready: let them all go
                p.stdin.write("go\n")
                p.stdin.flush()
            out = [json.loads(await anyio.to_thread.run_sync(p.stdout.readline)) for p in procs]
            for p in procs:
                assert await anyio.to_thread.run_sync(p.wait) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return out


async def test_concurrent_enqueues_never_exceed_the_budget(bus, tmp_path):
    q = make_queue(bus, tmp_path, max_tasks=25)
    out = await race(bus, tmp_path, [f"p{i}" for i in range(PROCESSES)], 20, max_tasks=25)
    assert sum(o["enqueued"] for o in out) == 25
    assert sum(o["guards"].get("budget", 0) for o in out) == PROCESSES * 20 - 25
    assert len((await list_tasks(q))["tasks"]) == 25
    assert len(await guard_events(bus)) == PROCESSES * 20 - 25


async def test_concurrent_duplicates_are_enqueued_once(bus, tmp_path):
    q = make_queue(bus, tmp_path, max_tasks=1000)
    out = await race(bus, tmp_path, ["same"] * PROCESSES, 20, max_tasks=1000)
    assert sum(o["enqueued"] for o in out) == 20
    assert sum(o["guards"].get("dedup", 0) for o in out) == (PROCESSES - 1) * 20
    topics = sorted(t["inputs"]["topic"] for t in (await list_tasks(q))["tasks"])
    assert topics == sorted(f"same-{i}" for i in range(20))
