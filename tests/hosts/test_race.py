"""A race of real Claude Code flights (docs/joins.md): three flights of one preset on one
prompt, each in its own worktree; one join with need 1, a check and stop_rest. The first to
report fails the check, the second passes, the third is stopped with its usage recorded.

The scripted model (tests/hosts/modelserver.py) decides the order: the second flight's first
request is held until the first one's report was checked, and the third flight's second
request is held until the test ends, so it is mid-run when the join stops it.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path

import pytest
from modelserver import Call, ModelServer, Say, Turn
from test_coding_wave import CWD, flight_of, open_bus, preset_project, user_setup

from wavewait.core import agents, flights, wait
from wavewait.core.proc import alive

from conftest import until

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(900)]
CHECK = "grep -q right result.txt || { echo 'result.txt is not right'; exit 1; }"


@pytest.mark.parametrize("bus_kind", ["file", "postgres"])
def test_three_claude_flights_race_the_losers_are_stopped_and_their_usage_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bus_kind: str
) -> None:
    home, repo, presets_file = preset_project(tmp_path, "claude")
    second_may_go, third_held, release = threading.Event(), threading.Event(), threading.Event()

    def script(turn: Turn) -> Call | Say:
        name = flight_of(turn)
        if name == "race-2" and not turn.results:
            second_may_go.wait(300)
        if name == "race-3" and turn.results:  # it edited; now it works on until it is stopped
            third_held.set()
            release.wait(300)
            return Say("too late")
        if not turn.results:
            cwd = CWD.search(json.dumps(turn.body))
            assert cwd, "Claude Code's request names no working directory"
            text = "right" if name == "race-2" else "wrong"
            return Call("Write", {"file_path": f"{cwd.group(1)}/result.txt", "content": f"{text}\n"})
        return Say(f"{name}: wrote result.txt.")

    with ModelServer(script) as m:
        env = user_setup(home, m.url)
        for k in ("WAVEWAIT_WORKTREES", "HOME"):
            monkeypatch.setenv(k, env[k])

        async def race() -> tuple[wait.FanIn, dict[str, object]]:
            async with open_bus(bus_kind, tmp_path / "bus") as bus:
                try:
                    await agents.register(bus, "orchestrator")
                    started = {}
                    for name in ("race-1", "race-2", "race-3"):
                        started[name] = await flights.start(
                            bus, name, parent_id="orchestrator", preset="claude", presets_file=str(presets_file),
                            prompt=f"FLIGHT<{name}> Make result.txt say right.", wave="race", cwd=str(repo),
                            env={**os.environ, **env, "WAVEWAIT_BUS": bus.url},
                        )  # fmt: skip
                    join = wait.Join(wave="race", need=1, check=CHECK, stop_rest=True)
                    task = asyncio.create_task(wait.wait_fan_in(bus, "orchestrator", 600, [], join=join))

                    async def first_checked() -> bool:
                        w = await bus.list_waits()
                        return bool(w) and "1/3 received" in w[0].progress and "checking" not in w[0].progress

                    await until(first_checked, 300, "race-1's report checked")
                    assert await asyncio.to_thread(third_held.wait, 300), "race-3 never reached its second request"
                    second_may_go.set()
                    fan = await task
                    records = {name: a.id for name, a in started.items()}

                    async def third_ended() -> bool:
                        a = await bus.get_agent(records["race-3"])
                        return a is not None and a.exit_code is not None

                    await until(third_ended, 120, "race-3's supervisor to record its end")
                    return fan, {name: await bus.get_agent(i) for name, i in records.items()}
                finally:
                    second_may_go.set()
                    release.set()

        fan, records = asyncio.run(race())
    assert not m.failures, m.failures
    assert fan.status == "complete" and (fan.need, fan.met) == (1, 1), fan.to_json()
    by = {e.name: e for e in fan.results}
    assert by["race-1"].status == "check_failed" and "result.txt is not right" in (by["race-1"].output or "")
    assert by["race-2"].status == "received" and by["race-2"].message == "race-2: wrote result.txt."
    third = records["race-3"]
    assert by["race-3"].status == "dead" and fan.stopped == [third.id], by["race-3"]
    assert third.status == "dead" and third.reason.startswith("stopped: the join's need was met"), third.reason
    assert not alive(third.pid, third.pid_start)
    answered = len([t for t in m.turns if flight_of(t) == "race-3"]) - 1  # all but the held request
    u = third.usage
    assert u is not None and (u.input_tokens, u.output_tokens) == (10 * answered, 5 * answered), (u, answered)
