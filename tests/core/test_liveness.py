"""The liveness sweep of a process's waits (core/wait/liveness.py): one sweep for all of them,
each flight once, and a flight whose process vanished is dead to every wait on it."""

from __future__ import annotations

import anyio
import pytest

from wavewait.core import wait
from wavewait.core.proc import hostname, pid_start
from wavewait.core.wait import liveness

from conftest import Background, has_waits, until
from coretools import crew

pytestmark = pytest.mark.anyio


async def test_held_waits_share_one_sweep_and_all_see_a_vanished_flight_dead(bus, monkeypatch):
    await crew(bus)
    sleeper = await anyio.open_process(["sleep", "300"])
    await bus.update_agent("linter", pid=sleeper.pid, pid_start=pid_start(sleeper.pid), host=hostname())
    swept: list[list[str]] = []
    real = liveness.sweep

    async def counting(bus, flights):
        flights = list(flights)
        swept.append(sorted(a.id for a in flights))
        return await real(bus, flights)

    monkeypatch.setattr(liveness, "sweep", counting)
    often = wait.WaitSettings(sweep_every=0.05)
    try:
        async with anyio.create_task_group() as tg:
            bg = Background(tg)
            # a wait with an hour between its sweeps first: the sweeper's sleep, cut for the others
            bg.start(
                "hour",
                wait.wait_fan_in,
                bus,
                "orchestrator",
                60,
                ["test-runner"],
                settings=wait.WaitSettings(sweep_every=3600),
            )
            await until(lambda: has_waits(bus, 1), 20, "the first wait to be held")
            for n in range(20):  # ten on the linter alone, ten on it and the test runner
                flights = ["linter"] if n % 2 else ["linter", "test-runner"]
                bg.start(f"w{n}", wait.wait_fan_in, bus, "orchestrator", 60, flights, settings=often)
            await until(lambda: has_waits(bus, 21), 20, "the twenty waits to be held")
            held = len(swept)
            await until(lambda: len(swept) >= held + 3, 20, "three sweeps of the held waits")
            assert swept[-1] == ["linter", "test-runner"], swept[-3:]  # each flight once, for all twenty
            sleeper.kill()
            await sleeper.wait()  # reaped: its pid names no process now
            ones = [await bg.result(f"w{n}", 20) for n in range(1, 20, 2)]
            assert all([(t.agent_id, t.status) for t in r.results] == [("linter", "dead")] for r in ones)
            assert (await bus.get_agent("linter")).reason == "process vanished"
            tg.cancel_scope.cancel()  # the eleven on the test runner too
    finally:
        if sleeper.returncode is None:
            sleeper.kill()
    await until(lambda: bus not in liveness._sweepers, 10, "every wait to leave the sweeper, and it to go")
