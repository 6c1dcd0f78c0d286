"""Budgets with a real Claude Code flight (docs/budgets.md): its own usage events, read by its
supervisor, take it past its cap mid-run, so it is stopped and dead with reason `budget`;
then its wave, whose budget that spend used up, refuses the next spawn.

Run with `python -m pytest -m hosts tests/hosts/test_host_budgets.py`. The model is
tests/hosts/modelserver.py, which reports 10 tokens in and at least 1 out per model message;
it holds the flight's second request, so the flight is still running when its first message's
usage arrives.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
from pathlib import Path

import pytest
from modelserver import Call, ModelServer, Say, Turn
from test_coding_wave import editor, git, preset_project, user_setup

from wavewait.core import agents, budgets, flights
from wavewait.core.bus.file import FileBus
from wavewait.core.errors import BudgetSpent
from wavewait.core.model import FlightBudget
from wavewait.core.proc import alive

from conftest import until

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(300)]


def test_a_real_flight_past_its_cap_is_stopped_and_its_spent_wave_refuses_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, repo, presets_file = preset_project(tmp_path)
    release = threading.Event()

    def script(turn: Turn) -> Call | Say:
        if turn.results:  # its second request: held until the test is done (it is stopped meanwhile)
            release.wait(120)
            return Say("too late")
        return editor(turn)

    name = "spender"
    with ModelServer(script) as m:
        env = user_setup(home, m.url)
        for k in ("WAVEWAIT_WORKTREES", "HOME"):
            monkeypatch.setenv(k, env[k])

        async def go():
            bus = FileBus(tmp_path / "bus")
            flight_env = {**os.environ, **env, "WAVEWAIT_BUS": bus.url}
            try:
                await agents.register(bus, "orchestrator")
                cap = budgets.check("capped", budget_tokens=10, flight_budget_tokens=10)
                a = await flights.start(
                    bus,
                    name,
                    parent_id="orchestrator",
                    preset="claude",
                    presets_file=str(presets_file),
                    prompt=f"FLIGHT<{name}> Write {name}.txt.",
                    wave="capped",
                    cwd=str(repo),
                    env=flight_env,
                    budget=cap,
                )
                assert a.budget == FlightBudget(tokens=10)

                async def ended() -> bool:
                    got = await bus.get_agent(a.id)
                    return got.finished and got.exit_code is not None

                await until(ended, timeout=120, what="the flight stopped by its budget")
                done = await bus.get_agent(a.id)
                with pytest.raises(BudgetSpent) as refused:
                    await flights.start(
                        bus,
                        "next",
                        parent_id="orchestrator",
                        preset="claude",
                        presets_file=str(presets_file),
                        prompt="FLIGHT<next> Write next.txt.",
                        wave="capped",
                        cwd=str(repo),
                        env=flight_env,
                    )
                return done, str(refused.value), [x.name for x in await bus.list_agents()]
            finally:
                release.set()
                await bus.close()

        done, refusal, names = asyncio.run(go())
    spent = done.usage.input_tokens + done.usage.output_tokens
    assert done.status == "dead", (done.status, done.reason)
    # the reason states the spend its record ends with (the whole usage of that message, read
    # from Claude Code's session file once the run ended), the count the refusal states too
    at_stop = re.match(r"budget: its own cap of 10 tokens is spent \(spent (\d+) tokens\)", done.reason)
    assert at_stop is not None, done.reason
    assert int(at_stop.group(1)) == spent
    assert spent >= 10 and len(m.turns) <= 2  # stopped on its first message's usage, before a second answer
    assert not alive(done.pid, done.pid_start)
    assert re.search(rf"wave 'capped' has spent its budget: {spent} tokens of 10 tokens", refusal), refusal
    assert "next" not in names  # refused before anything started
    assert git(repo, "branch", "--list", "wavewait/capped/next") == ""
