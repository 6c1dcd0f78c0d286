"""The demo's teardown ends what the demo started, even a supervisor that a busy machine slows
past the grace it is given to record its flight's end (its bus is removed next)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from wavewait.core import spawning
from wavewait.core.agents import register
from wavewait.core.bus.file import FileBus
from wavewait.core.proc import alive, pid_start
from wavewait.core.spawning import SpawnRequest
from wavewait.tui.demo import WAVE, Teardown

from conftest import until

pytestmark = [pytest.mark.anyio]


async def test_the_teardown_leaves_no_supervisor_even_one_too_slow_to_record(tmp_path: Path, monkeypatch):
    temp = tmp_path / "demo-bus"
    bus = FileBus(temp)
    monkeypatch.setenv("WAVEWAIT_BUS", bus.url)
    await register(bus, "orchestrator")
    command = [sys.executable, "-c", "import time; time.sleep(600)"]
    agent = await spawning.spawn(bus, SpawnRequest(name="slow", parent="orchestrator", command=command, wave=WAVE))

    async def supervised() -> bool:
        a = await bus.get_agent(agent.id)
        return a is not None and bool(a.supervisor_pid and a.pid)

    await until(supervised, 30, "the flight and its supervisor")
    a = await bus.get_agent(agent.id)
    await bus.close()
    sup = (a.supervisor_pid, pid_start(a.supervisor_pid))
    os.kill(sup[0], signal.SIGSTOP)  # a supervisor that does not get the CPU to record the end
    try:
        await anyio.to_thread.run_sync(Teardown(bus.url, "orchestrator", str(temp)))  # its own loop
        assert not alive(*sup), "the supervisor runs on after the demo left"
        assert not alive(a.pid, a.pid_start), "the flight runs on after the demo left"
        assert not temp.exists(), "the demo's bus is removed"
    finally:
        for pid, start in (sup, (a.pid, a.pid_start)):
            if alive(pid, start):
                os.kill(pid, signal.SIGKILL)
