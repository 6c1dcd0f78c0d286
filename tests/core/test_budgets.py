"""Budgets (docs/budgets.md): a wave that spent its budget takes no more flights, and a flight
past its cap is stopped by its own supervisor, dead with reason `budget`.

The flights are real processes under real supervisors that print event lines captured from
Claude Code (replay_agent.py): each `assistant` line reports 10 tokens in and 1 out, the
final `result` line 20 in and 10 out. Their usage is what the supervisor reads from them.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from wavewait.core import admission, agents, budgets, flights, wait, waves
from wavewait.core.errors import BadInput, BudgetSpent
from wavewait.core.model import FlightBudget
from wavewait.core.proc import alive

from conftest import until

pytestmark = pytest.mark.anyio
REPLAY = str(Path(__file__).with_name("replay_agent.py"))
WHOLE_RUN = {"events": "claude-success.jsonl"}  # two model messages, then the result: 30 tokens, closed
ONE_MESSAGE_THEN_HOLD = {"events": "claude-success.jsonl", "lines": 2, "then": "block"}  # 11 tokens, runs on


@pytest.fixture
def preset_file(tmp_path: Path) -> str:
    f = tmp_path / "presets.toml"
    f.write_text(
        f'[presets.replay]\nprogram = {json.dumps(sys.executable)}\nargs = [{json.dumps(REPLAY)}, "{{prompt}}"]\n'
        'events = "claude"\nworktree = false\n'
    )
    return str(f)


async def start(bus, tmp_path: Path, preset_file: str, name: str, plan: dict, **kw):
    await agents.ensure_agent(bus, "orchestrator")
    return await flights.start(
        bus,
        name,
        parent_id="orchestrator",
        preset="replay",
        presets_file=preset_file,
        prompt=json.dumps(plan),
        cwd=str(tmp_path),
        **kw,
    )


async def ended(bus, agent_id: str):
    async def check() -> bool:
        a = await bus.get_agent(agent_id)
        return a.finished and a.exit_code is not None

    await until(check, 30, "the flight to end")
    return await bus.get_agent(agent_id)


async def test_a_flight_past_its_own_cap_is_stopped_and_dead_with_reason_budget(bus, tmp_path, preset_file):
    cap = budgets.check(None, flight_budget_tokens=10)
    a = await start(bus, tmp_path, preset_file, "spender", ONE_MESSAGE_THEN_HOLD, budget=cap)
    assert a.budget == FlightBudget(tokens=10)
    done = await ended(bus, a.id)
    assert done.status == "dead"
    assert done.reason.startswith("budget: its own cap of 10 tokens is spent (spent 11 tokens)"), done.reason
    assert not alive(done.pid, done.pid_start)  # its process was ended, not left to run on
    assert done.usage.input_tokens + done.usage.output_tokens == 11
    # the parent is told, and a fan-in on it says why
    event = await wait.wait_event(bus, "orchestrator", 5, ["agent_dead"])
    assert event.type == "agent_dead" and event.body.startswith("budget:")
    fan = await wait.wait_fan_in(bus, "orchestrator", 0, [a.id])
    assert fan.results[0].status == "dead" and fan.results[0].reason.startswith("budget: its own cap")
    assert agents.agent_view(done)["reason"].startswith("budget:")


async def test_a_wave_that_spent_its_budget_refuses_the_next_spawn_before_anything_starts(bus, tmp_path, preset_file):
    given = budgets.check("w1", budget_tokens=30)
    assert await bus.get_wave_doc("w1", waves.SETTINGS) is None  # checked, not kept yet
    first = await start(bus, tmp_path, preset_file, "first", WHOLE_RUN, wave="w1", budget=given)
    assert (await waves.get_settings(bus, "w1")).budget_tokens == 30  # kept by the spawn
    done = await ended(bus, first.id)
    assert done.status == "closed"  # it reached its budget with its last event: it ended, it is not stopped
    before = {a.id for a in await bus.list_agents()}
    with pytest.raises(BudgetSpent) as refused:
        await start(bus, tmp_path, preset_file, "second", WHOLE_RUN, wave="w1")
    said = str(refused.value)
    assert "wave 'w1' has spent its budget: 30 tokens of 30 tokens" in said and "nothing was started" in said
    assert {a.id for a in await bus.list_agents()} == before  # no record, no process
    with pytest.raises(BudgetSpent, match="30 tokens of 30 tokens"):  # a plain command too
        await admission.spawn(bus, "plain", [sys.executable, "-c", "pass"], wave="w1")
    with pytest.raises(BudgetSpent):  # with a cap of its own too
        await start(
            bus,
            tmp_path,
            preset_file,
            "third",
            WHOLE_RUN,
            wave="w1",
            budget=budgets.check("w1", flight_budget_tokens=5),
        )
    # another wave is not this one's; a raised budget lets the wave go on
    elsewhere = await start(bus, tmp_path, preset_file, "elsewhere", WHOLE_RUN, wave="w2")
    assert (await ended(bus, elsewhere.id)).status == "closed"
    raised = budgets.check("w1", budget_tokens=100)  # given again with a spawn, it replaces the one kept
    third = await start(bus, tmp_path, preset_file, "third", WHOLE_RUN, wave="w1", budget=raised)
    assert (await waves.get_settings(bus, "w1")).budget_tokens == 100
    assert (await ended(bus, third.id)).status == "closed"


async def test_a_running_flight_is_stopped_when_its_wave_spends_its_budget(bus, tmp_path, preset_file):
    await waves.set_settings(bus, "w1", budget_tokens=40)
    await ended(bus, (await start(bus, tmp_path, preset_file, "first", WHOLE_RUN, wave="w1")).id)  # 30 spent
    second = await start(bus, tmp_path, preset_file, "second", ONE_MESSAGE_THEN_HOLD, wave="w1")  # 30 < 40: admitted
    done = await ended(bus, second.id)
    assert done.status == "dead"
    assert done.reason.startswith(
        "budget: wave 'w1' has spent its budget of 40 tokens (spent 41 tokens by all its flights; this one 11 tokens)"
    ), done.reason
    assert not alive(done.pid, done.pid_start)


async def test_a_spawn_refused_for_another_reason_keeps_no_budget(bus, tmp_path, preset_file):
    with pytest.raises(BadInput, match="no preset 'nope'"):
        await flights.start(
            bus, "x", parent_id="orchestrator", preset="nope", presets_file=preset_file, prompt="p", wave="w1",
            budget=budgets.check("w1", budget_tokens=10),
        )  # fmt: skip
    assert await bus.get_wave_doc("w1", waves.SETTINGS) is None


@pytest.mark.parametrize(
    ("wave", "given", "words"),
    [
        (None, {"budget_tokens": 10}, "a budget is the wave's; give wave too"),
        ("w1", {"flight_budget_tokens": 0}, "flight_budget_tokens: give a whole number"),
        ("w1", {"flight_budget_tokens": True}, "flight_budget_tokens: give a whole number"),
        (None, {"flight_budget_usd": float("inf")}, "flight_budget_usd: give an amount"),
        ("w1", {"budget_usd": -1}, "budget_usd: give an amount"),
    ],
)
def test_budget_values_are_checked_before_any_work(wave, given, words):
    with pytest.raises(BadInput, match=words):
        budgets.check(wave, **given)


async def test_a_queued_flight_whose_wave_spent_its_budget_meanwhile_never_starts(bus, tmp_path, preset_file):
    """Budget and admission together: with one slot, the second flight is queued; the first
    spends the wave's budget and ends; the second is then refused its start (dead, budget)."""
    await waves.set_settings(bus, "capped", max_parallel=1)
    wave_budget = budgets.check("capped", budget_tokens=25)
    gate = tmp_path / "gate"
    os.mkfifo(gate)  # the first spends nothing until the second is queued behind it
    first = await start(
        bus, tmp_path, preset_file, "first", {**WHOLE_RUN, "gate": str(gate)}, wave="capped", budget=wave_budget
    )
    second = await start(bus, tmp_path, preset_file, "second", WHOLE_RUN, wave="capped")
    assert second.status == "queued"
    await asyncio.to_thread(gate.write_text, "go")  # opens once the first reads it
    done = await ended(bus, first.id)
    assert done.usage.input_tokens + done.usage.output_tokens >= 25

    async def refused() -> bool:
        return (await bus.get_agent(second.id)).finished

    await until(refused, 30, "the queued flight to be refused its start")
    never = await bus.get_agent(second.id)
    assert never.status == "dead" and never.reason.startswith("budget:"), never.reason
    assert never.pid is None and never.usage is None  # it never ran


#: two model messages (22 tokens), then held; stopped, it prints its final `result` (30 tokens)
TWO_MESSAGES_THEN_FINISH_ON_TERM = {"events": "claude-success.jsonl", "lines": 4, "then": "block", "on_term": "finish"}


async def test_a_budget_stop_and_the_refusal_after_it_state_one_spend_and_its_final_event_is_its_last_message(
    bus, tmp_path, preset_file
):
    """Stopped at 22 tokens of a 20-token wave budget, the flight's run still reports its final
    event (30 tokens, its answer) as it ends: its reason, its record and the refused spawn
    after it all state that one count, and its answer is its last_message."""
    given = budgets.check("w1", budget_tokens=20)
    a = await start(bus, tmp_path, preset_file, "spender", TWO_MESSAGES_THEN_FINISH_ON_TERM, wave="w1", budget=given)
    done = await ended(bus, a.id)
    assert done.status == "dead" and not alive(done.pid, done.pid_start)
    log = Path(done.log_path).read_text()
    assert '"type":"result"' in log  # its final event is in its log, read after the stop
    spent = done.usage.input_tokens + done.usage.output_tokens
    assert spent == 30
    assert done.reason.startswith(
        "budget: wave 'w1' has spent its budget of 20 tokens (spent 30 tokens by all its flights; this one 30 tokens"
    ), done.reason
    with pytest.raises(BudgetSpent, match=r"spent its budget: 30 tokens of 20 tokens"):
        await start(bus, tmp_path, preset_file, "next", WHOLE_RUN, wave="w1")
    event = await wait.wait_event(bus, "orchestrator", 5, ["agent_dead"])
    assert event.body == done.reason  # the parent is told the same spend
    assert done.last_message == "Wrote hello.txt.\nAll done." and done.last_message_at is not None
    assert [i for i in await bus.peek("orchestrator") if i.sender == a.id] == []  # stopped: no report sent


async def test_a_flight_past_its_own_cap_states_the_spend_its_record_keeps(bus, tmp_path, preset_file):
    cap = budgets.check(None, flight_budget_tokens=20)
    a = await start(bus, tmp_path, preset_file, "spender", TWO_MESSAGES_THEN_FINISH_ON_TERM, budget=cap)
    done = await ended(bus, a.id)
    assert done.status == "dead"
    assert done.reason.startswith("budget: its own cap of 20 tokens is spent (spent 30 tokens)"), done.reason
    assert done.usage.input_tokens + done.usage.output_tokens == 30
    assert done.last_message == "Wrote hello.txt.\nAll done."
