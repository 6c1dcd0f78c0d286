"""Budgets from a shell (docs/budgets.md): `spawn` and `run-queue` with --budget-* set the
wave's budget and --flight-budget-* each flight's cap; a spawn past the wave's budget exits 2
naming it, and a flight past its cap is dead with a `budget:` reason in `wavewait agents`.

The flights are real processes replaying Claude Code's event lines (tests/core/replay_agent.py):
a whole run reports 30 tokens, one model message then a held run 11 tokens."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wavewait.core import waves
from wavewait.core.model import FlightBudget
from wavewait.core.tasks import Limits, TaskQueue, enqueue_task, parse_task_types

from conftest import env_for, until, wavewait_cmd

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]
REPLAY = str(Path(__file__).parents[1] / "core" / "replay_agent.py")
WHOLE_RUN = "plan: " + json.dumps({"events": "claude-success.jsonl"})
ONE_MESSAGE_THEN_HOLD = "plan: " + json.dumps({"events": "claude-success.jsonl", "lines": 2, "then": "block"})


@pytest.fixture
def presets(tmp_path: Path) -> str:
    f = tmp_path / "presets.toml"
    f.write_text(
        f'[presets.replay]\nprogram = {json.dumps(sys.executable)}\nargs = [{json.dumps(REPLAY)}, "{{prompt}}"]\n'
        'events = "claude"\nworktree = false\n'
    )
    return str(f)


def run(bus, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        wavewait_cmd(*args), env=env_for(bus, **env), cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


async def ended(bus, agent_id: str):
    async def check() -> bool:
        a = await bus.get_agent(agent_id)
        return a.finished and a.exit_code is not None

    await until(check, 30, "the flight to end")
    return await bus.get_agent(agent_id)


async def test_spawn_sets_the_waves_budget_and_refuses_the_spawn_past_it(bus, tmp_path, presets):
    spawn = ("spawn", "--preset", "replay", "--presets", presets)
    r = run(bus, tmp_path, *spawn, "first", "--wave", "w", "--budget-tokens", "30", "--flight-budget-tokens", "500",
            "--", WHOLE_RUN)  # fmt: skip
    assert r.returncode == 0, r.stderr
    first = await ended(bus, json.loads(r.stdout)["agent_id"])
    assert (first.status, first.budget) == ("closed", FlightBudget(tokens=500))
    assert (await waves.get_settings(bus, "w")).budget_tokens == 30
    r = run(bus, tmp_path, *spawn, "second", "--wave", "w", "--", WHOLE_RUN)
    assert r.returncode == 2
    assert "wave 'w' has spent its budget: 30 tokens of 30 tokens, by its flights; nothing was started" in r.stderr
    assert [a.name for a in await bus.list_agents() if a.wave == "w"] == ["first"]


async def test_a_flight_past_its_cap_shows_dead_with_a_budget_reason_in_agents(bus, tmp_path, presets):
    r = run(bus, tmp_path, "spawn", "capped", "--preset", "replay", "--presets", presets,
            "--flight-budget-tokens", "10", "--", ONE_MESSAGE_THEN_HOLD)  # fmt: skip
    assert r.returncode == 0, r.stderr
    await ended(bus, json.loads(r.stdout)["agent_id"])
    listed = json.loads(run(bus, tmp_path, "agents").stdout)["agents"]
    capped = next(a for a in listed if a["name"] == "capped")
    assert capped["status"] == "dead"
    assert capped["reason"].startswith("budget: its own cap of 10 tokens is spent (spent 11 tokens)")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--budget-tokens", "5"], "--budget-tokens, --budget-usd: a budget is the wave's; give --wave too"),
        (["--wave", "w", "--budget-tokens", "0"], "--budget-tokens: must be a whole number ≥ 1"),
        (["--wave", "w", "--budget-usd", "nan"], "--budget-usd: must be an amount of US dollars above 0"),
        (["--flight-budget-usd", "-1"], "--flight-budget-usd: must be an amount of US dollars above 0"),
    ],
)
async def test_bad_budgets_are_refused_before_anything_starts(file_bus, tmp_path, args, words):
    """Checked by the command line itself, whatever the bus: the directory bus alone."""
    r = run(file_bus, tmp_path, "spawn", "x", *args, "--", "true")
    assert r.returncode == 2 and words in r.stderr, r.stderr
    assert all(a.name != "x" for a in await file_bus.list_agents())
    assert await file_bus.get_wave_doc("w", waves.SETTINGS) is None


TYPES = '[types.spend]\ndescription = "Spend tokens"\nprompt = "{plan}"\npreset = "replay"\n'


async def test_run_queue_sets_the_queues_budget_and_fails_the_tasks_it_cannot_start(bus, tmp_path, presets):
    types = tmp_path / "types.toml"
    types.write_text(TYPES)
    q = TaskQueue.open(bus, "qb", parse_task_types(TYPES), Limits())
    ids = [
        (await enqueue_task(q, "orchestrator", type="spend", inputs={"plan": WHOLE_RUN, "n": i}, reason=f"n{i}")).id
        for i in range(2)
    ]
    r = run(bus, tmp_path, "run-queue", "--queue", "qb", "--task-types", str(types), "--presets", presets,
            "--max-parallel", "1", "--max-attempts", "1", "--budget-tokens", "30", "--flight-budget-tokens", "500",
            "--json")  # fmt: skip
    assert r.returncode == 1, r.stderr  # not every task done
    summary = json.loads(r.stdout)
    assert summary["agentsStarted"] == 1
    notes = {t["id"]: t["note"] for t in summary["tasks"]}
    refused = [n for n in notes.values() if "spent its budget" in (n or "")]
    assert len(refused) == 1, notes
    assert "wave 'queue-qb' has spent its budget: 30 tokens of 30 tokens" in refused[0]
    assert (await waves.get_settings(bus, "queue-qb")).budget_tokens == 30
    ran = [await q.task(i) for i in ids]
    flight = await bus.get_agent(next(t.agent_id for t in ran if "spent its budget" not in (t.note or "")))
    assert flight.wave == "queue-qb" and flight.budget == FlightBudget(tokens=500)
