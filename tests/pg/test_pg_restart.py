"""The server restarting under running waits (restarts the local PostgreSQL for real).

Marked `restarts_server`: every other session on the server loses its connections for a
moment (the wavewait bus itself retries; `-m "not restarts_server"` leaves it out).
"""

from __future__ import annotations

import json
import subprocess

import anyio
import pytest
from pg.pgtools import ensure_server_up, pg_bus, restart_server

from wavewait.core import messages, wait
from wavewait.core.agents import register

from conftest import Background, env_for, push_timers_out, until, wavewait_cmd

pytestmark = [pytest.mark.anyio, pytest.mark.restarts_server]


async def test_waits_survive_a_server_restart_and_return_the_right_result(monkeypatch):
    # only a change on the bus may wake the in-process wait: no timer re-reads behind our back
    push_timers_out(monkeypatch)
    try:
        async with pg_bus() as bus:
            for a in ("orchestrator", "reader", "runner", "other"):
                await register(bus, a)
            await messages.send(bus, "reader", "orchestrator", "reader-0")
            await messages.send(bus, "reader", "orchestrator", "reader-1")
            # a second waiter in its own process, with its own connections (and default timers)
            child = subprocess.Popen(
                wavewait_cmd("--agent", "other", "wait", "60"),
                env=env_for(bus),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            async with anyio.create_task_group() as tg:
                bg = Background(tg)
                bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 120, ["reader", "runner"])

                async def both_waiting() -> bool:
                    waits = await bus.list_waits()
                    return len(waits) == 2 and any(w.progress.startswith("1/2") for w in waits)

                await until(both_waiting, 20, "both waits to run, the fan-in holding reader-0")

                await anyio.to_thread.run_sync(restart_server)

                # after the restart, through new processes: the waits must hear of these
                for sender, to, body in (("runner", "orchestrator", "runner-0"), ("reader", "other", "for-other")):
                    sent = await anyio.run_process(
                        wavewait_cmd("--agent", sender, "send", to, body), env=env_for(bus), check=False
                    )
                    assert sent.returncode == 0, sent.stderr.decode()
                r = await bg.result("fan", 9)  # the fan-in wakes after the restart
            out, err = await anyio.to_thread.run_sync(lambda: child.communicate(timeout=30))
            assert child.returncode == 0, err
            assert json.loads(out)["message"] == "for-other"
            assert r.status == "complete"
            assert [(t.status, t.message) for t in r.results] == [("received", "reader-0"), ("received", "runner-0")]
            # nothing lost, nothing twice: reader-1 still queued once; the taken are in history once
            assert [i.body for i in await bus.peek("orchestrator")] == ["reader-1"]
            assert [i.body for i in await bus.history("orchestrator")] == ["reader-0", "runner-0"]
            assert [i.body for i in await bus.history("other")] == ["for-other"]
            assert await bus.list_waits() == []
    finally:
        ensure_server_up()
