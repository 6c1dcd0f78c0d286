"""A fan-in's answer is bounded by the output budget, whatever the number of flights, on both
buses: the reports it takes fit, the rest stay queued (`reported`, `more_waiting`), entries
past the budget are counted by status (`omitted`), and the wait still returns when its
condition holds, not when the budget fills (docs/tools.md, "Output budget")."""

from __future__ import annotations

import asyncio
import json

import anyio
import pytest

from wavewait.core import agents, messages, wait

from conftest import Background, has_progress, push_timers_out, register_crew, until

pytestmark = pytest.mark.anyio

BUDGET = 30_000


async def _wave(bus, n: int) -> list[str]:
    ids = [f"flight-{i:05d}" for i in range(n)]
    await agents.register(bus, "orchestrator")
    for i in range(0, n, 200):
        await asyncio.gather(*(agents.register(bus, f, parent_id="orchestrator") for f in ids[i : i + 200]))
    return ids


@pytest.mark.long
async def test_a_fan_in_over_2000_flights_answers_within_the_budget_and_the_rest_drains_once(bus):
    ids = await _wave(bus, 2_000)
    for i in range(0, len(ids), 200):
        await asyncio.gather(*(messages.send(bus, f, "orchestrator", f"REPORT {f}") for f in ids[i : i + 200]))
    r = await wait.wait_fan_in(bus, "orchestrator", 30, ids, budget=BUDGET)
    text = json.dumps(r.to_json(), separators=(",", ":"), ensure_ascii=False)
    got = [e for e in r.results if e.status == "received"]
    assert r.status == "partial" and 100 < len(got) < 500
    assert len(text) < BUDGET + 2_000, len(text)  # the entries within the budget, and the counts
    assert r.more_waiting == len(ids) - len(got)
    assert r.omitted is not None and len(r.results) + sum(r.omitted.values()) == len(ids)
    assert r.omitted.get("reported", 0) + sum(e.status == "reported" for e in r.results) == r.more_waiting
    positions = [ids.index(e.agent_id) for e in r.results]
    assert positions == sorted(positions)  # the caller's order
    assert all(e.message == f"REPORT {e.agent_id}" for e in got)
    assert r.summary() == f"fan-in partial: {len(got):,}/2,000 received, {r.more_waiting:,} more waiting"
    seen = [e.message for e in got]
    while True:  # what stayed queued comes once, each batch within the budget too
        nxt = await wait.wait_next(bus, "orchestrator", 0, max_messages=100, budget=BUDGET)
        if nxt.status != "received":
            break
        seen += [nxt.message, *(m.message for m in nxt.more or [])]
    assert sorted(seen) == [f"REPORT {f}" for f in ids]


async def _full_fan_in(bus, tg) -> Background:
    """A fan-in over a, b and c whose answer is full after a's report: b's stays queued, and
    it waits on c (its progress says so before this returns)."""
    await register_crew(bus, "a", "b", "c")
    await messages.send(bus, "a", "orchestrator", "A" * 900)
    await messages.send(bus, "b", "orchestrator", "B" * 900)
    bg = Background(tg)
    bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 30, ["a", "b", "c"], budget=1_000)
    line = "1/3 received: a · 1 more queued (the answer is full) · waiting on c"
    await until(lambda: has_progress(bus, line), 15, f"the wait's progress to read {line!r}")
    return bg


async def test_a_full_fan_in_keeps_waiting_for_its_flights_and_leaves_their_reports_queued(bus, monkeypatch):
    """Full after the first report, it does not return at once: it waits for the flight still
    running (woken by that flight's report alone: every timer is pushed an hour away), takes
    nothing more, and says which reports stay queued."""
    push_timers_out(monkeypatch)
    async with anyio.create_task_group() as tg:
        bg = await _full_fan_in(bus, tg)
        assert "fan" not in bg.results
        await messages.send(bus, "c", "orchestrator", "C")
        r = await bg.result("fan")
    assert r.status == "partial" and r.more_waiting == 2 and r.omitted is None
    assert [(e.agent_id, e.status, e.message) for e in r.results] == [
        ("a", "received", "A" * 900),
        ("b", "reported", None),
        ("c", "reported", None),
    ]
    assert [i.body for i in await bus.peek("orchestrator")] == ["B" * 900, "C"]  # at their place


async def test_a_timeout_of_a_full_fan_in_counts_what_stays_queued(bus):
    await register_crew(bus, "a", "b", "c")
    await messages.send(bus, "a", "orchestrator", "A" * 900)
    await messages.send(bus, "b", "orchestrator", "B" * 900)
    r = await wait.wait_fan_in(bus, "orchestrator", 0, ["a", "b", "c"], budget=1_000)
    assert r.status == "timeout" and r.more_waiting == 1
    assert [e.status for e in r.results] == ["received", "reported", "running"]


async def test_without_a_budget_every_target_has_its_entry(bus):
    ids = await _wave(bus, 300)
    for f in ids:
        await messages.send(bus, f, "orchestrator", f"REPORT {f}")
    r = await wait.wait_fan_in(bus, "orchestrator", 10, ids)
    assert r.status == "complete" and r.omitted is None and r.more_waiting is None
    assert [e.agent_id for e in r.results] == ids and {e.status for e in r.results} == {"received"}


async def test_flights_stopped_past_the_budget_are_counted_as_they_are_now(bus):
    """stop_rest after the need is met: the entries shown say dead, and so do the counts of
    those past the budget."""
    ids = await _wave(bus, 30)
    await messages.send(bus, ids[0], "orchestrator", "first")
    r = await wait.wait_fan_in(bus, "orchestrator", 10, ids, budget=200, join=wait.Join(need="any", stop_rest=True))
    assert r.status == "complete" and r.stopped is not None and len(r.stopped) == 29
    assert [e.status for e in r.results] == ["received", *["dead"] * 20]
    assert r.omitted == {"dead": 9}


async def test_a_question_that_comes_once_the_answer_is_full_is_taken_all_the_same(bus):
    async with anyio.create_task_group() as tg:
        bg = await _full_fan_in(bus, tg)
        await messages.ask(bus, "c", "may I push?", to="orchestrator")
        r = await bg.result("fan")
    assert r.status == "needs_input" and r.more_waiting == 1
    # a's report given back with the question (the same wait, run again, takes it again)
    assert [(e.agent_id, e.status) for e in r.results] == [("a", "reported"), ("b", "reported"), ("c", "needs_input")]
    # the question taken with the answer, whole; never left behind unseen, as a report past the budget would be
    assert r.results[2].message == "may I push?"
    assert [i.body for i in await bus.peek("orchestrator")] == ["A" * 900, "B" * 900]
