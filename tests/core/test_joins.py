"""Joins (docs/joins.md): one wait over flights, a wave, files and events, met by all, any or K;
a flight counted once its report passes a check; the flights left stopped.

Reports come from registered flights through the real bus; the race runs real coding flights
(tests/core/replay_agent.py under a preset) in real git worktrees, each held at a gate (a
named pipe) the test opens, so the order of reports is the test's, not the clock's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

from wavewait.core import agents, flights, messages, wait
from wavewait.core.errors import BadInput
from wavewait.core.proc import alive

from conftest import has_progress, has_waits, register_crew, until
from gittools import make_repo
from mergetools import preset_file

pytestmark = [pytest.mark.anyio, pytest.mark.both_buses]

FIVE = ("r1", "r2", "r3", "r4", "r5")


async def test_need_k_of_five_returns_at_the_kth_report_with_the_rest_as_they_stand(bus):
    await register_crew(bus, *FIVE)
    got: dict[str, object] = {}

    async def join() -> None:
        got["r"] = await wait.wait_fan_in(bus, "orchestrator", 60, list(FIVE), join=wait.Join(need=3))

    async with anyio.create_task_group() as tg:
        tg.start_soon(join)
        await until(lambda: has_waits(bus, 1), what="the join on the bus")
        for name in ("r4", "r1"):
            await messages.send(bus, name, "orchestrator", f"review {name}")
        await until(lambda: has_progress(bus, "met 2 / need 3"), what="two of three met")
        assert "r" not in got
        await messages.send(bus, "r2", "orchestrator", "review r2")
        await messages.send(bus, "r3", "orchestrator", "review r3, late")
    r = got["r"]
    assert r.status == "complete" and (r.need, r.met) == (3, 3), r
    by = {e.agent_id: e for e in r.results}
    assert [e.agent_id for e in r.results] == list(FIVE)  # in the order asked
    # the first three reports: r3's, later, is not taken (it stays queued for the next call)
    assert {a for a, e in by.items() if e.status == "received"} == {"r1", "r2", "r4"}
    assert by["r3"].status == "running" and by["r5"].status == "running"
    assert [i.body for i in await bus.peek("orchestrator")] == ["review r3, late"]


async def test_a_join_without_targets_or_with_a_need_beyond_them_is_refused(bus):
    await register_crew(bus, *FIVE)
    with pytest.raises(BadInput, match="from_agents"):
        await wait.wait_fan_in(bus, "orchestrator", 1, [], join=wait.Join(need=1))
    with pytest.raises(BadInput, match=r"need: .* from 1 to 5"):
        await wait.wait_fan_in(bus, "orchestrator", 1, list(FIVE), join=wait.Join(need=6))
    with pytest.raises(BadInput, match="wave: nowhere has no flights"):
        await wait.wait_fan_in(bus, "orchestrator", 1, [], join=wait.Join(wave="nowhere"))


async def test_a_need_that_can_no_longer_be_met_ends_the_join_as_unmet(bus):
    await register_crew(bus, *FIVE)
    await messages.send(bus, "r1", "orchestrator", "review r1")
    for name in ("r2", "r3", "r4"):
        await agents.mark_dead(bus, name, "exited with code 1")
    r = await wait.wait_fan_in(bus, "orchestrator", 60, list(FIVE), join=wait.Join(need=3))
    assert r.status == "unmet" and (r.need, r.met) == (3, 1), r
    assert r.exit_code == 8


async def test_files_and_flights_all_then_any(bus, tmp_path):
    await register_crew(bus, "builder-a", "builder-b")
    artifact = str(tmp_path / "dist" / "*.whl")
    (tmp_path / "dist").mkdir()
    join = wait.Join(files=[wait.FilesTarget(glob=artifact)])
    got: dict[str, object] = {}

    async def all_of_them() -> None:
        got["r"] = await wait.wait_fan_in(bus, "orchestrator", 60, ["builder-a", "builder-b"], join=join)

    async with anyio.create_task_group() as tg:
        tg.start_soon(all_of_them)
        await until(lambda: has_waits(bus, 1), what="the join on the bus")
        await messages.send(bus, "builder-a", "orchestrator", "built a")
        await messages.send(bus, "builder-b", "orchestrator", "built b")
        await until(lambda: has_progress(bus, "met 2 / need 3"), what="both builders met")
        assert "r" not in got  # the artifact is still missing
        (tmp_path / "dist" / "pkg-1.0.whl").write_text("wheel")
    r = got["r"]
    assert r.status == "complete" and (r.need, r.met) == (3, 3), r
    assert r.files is not None and r.files[0].status == "met" and r.files[0].matched == 1
    assert r.files[0].files == [str(tmp_path / "dist" / "pkg-1.0.whl")]

    # any: the file is there already, the builders have nothing new to say
    any_ = join.model_copy(update={"need": "any"})
    r = await wait.wait_fan_in(bus, "orchestrator", 60, ["builder-a", "builder-b"], join=any_)
    assert r.status == "complete" and (r.need, r.met) == (1, 1) and r.files[0].status == "met", r
    assert [e.status for e in r.results] == ["running", "running"]


async def test_an_event_target_is_taken_only_with_the_join_it_met(bus):
    await register_crew(bus, "builder")
    await messages.send(bus, "builder", "orchestrator", "the docs are built", type="docs_built")
    await messages.send(bus, "builder", "orchestrator", "the wheel is built", type="wheel_built")
    join = wait.Join(events=["docs_built", "wheel_built"], need="any")
    r = await wait.wait_fan_in(bus, "orchestrator", 10, [], join=join)
    assert r.status == "complete" and r.met == 1, r
    assert r.events is not None and [e.status for e in r.events] == ["met", "pending"]
    assert r.events[0].event is not None and r.events[0].event["body"] == "the docs are built"
    # the other event was not taken: the next join gets it
    assert [i.type for i in await bus.peek("orchestrator")] == ["wheel_built"]


async def test_a_flight_that_asks_ends_the_join_at_once_and_the_same_join_goes_on_after_the_answer(bus):
    """The join gives back the reports it took when it returns `needs_input`: run again after
    the answer, the same join takes them again and counts them."""
    await register_crew(bus, "r1", "r2", "r3")
    await messages.send(bus, "r1", "orchestrator", "review r1")
    await messages.ask(bus, "r2", "May I delete the fixtures?", to="orchestrator")
    r = await wait.wait_fan_in(bus, "orchestrator", 60, ["r1", "r2", "r3"], join=wait.Join(need=3))
    assert r.status == "needs_input" and r.exit_code == 6, r
    by = {e.agent_id: e for e in r.results}
    assert by["r1"].status == "reported" and by["r2"].status == "needs_input" and by["r3"].status == "running"
    assert by["r2"].message == "May I delete the fixtures?"
    assert [i.body for i in await bus.peek("orchestrator")] == ["review r1"]  # given back, the question taken

    await messages.answer(bus, "orchestrator", "r2", "yes")
    got: dict[str, object] = {}

    async def again() -> None:
        got["r"] = await wait.wait_fan_in(bus, "orchestrator", 60, ["r1", "r2", "r3"], join=wait.Join(need=3))

    async with anyio.create_task_group() as tg:
        tg.start_soon(again)
        await until(lambda: has_waits(bus, 1), what="the join on the bus again")
        await messages.send(bus, "r2", "orchestrator", "review r2")
        await messages.send(bus, "r3", "orchestrator", "review r3")
    r = got["r"]
    assert r.status == "complete" and (r.need, r.met) == (3, 3), r
    assert [e.message for e in r.results] == ["review r1", "review r2", "review r3"]


async def test_a_question_seen_on_the_record_is_in_the_entry_and_once_answered_never_comes_back(bus):
    """A flight marked asking whose question the join did not take (asked of someone else, or
    not in the inbox yet) has its question in its entry; a question answered before a join took
    it is taken without ending that join."""
    await register_crew(bus, "r1", "r2")
    await bus.update_agent("r2", question="Strict or lenient?", question_id="q-r2")  # marked, not delivered yet
    r = await wait.wait_fan_in(bus, "orchestrator", 60, ["r1", "r2"])
    assert r.status == "needs_input", r
    assert (r.results[1].status, r.results[1].message, r.results[1].message_id) == (
        "needs_input",
        "Strict or lenient?",
        "q-r2",
    )
    await bus.update_agent("r2", question=None, question_id=None)
    await messages.ask(bus, "r2", "Strict or lenient?", to="orchestrator")  # now delivered ...
    await messages.answer(bus, "orchestrator", "r2", "strict")  # ... and answered before any join took it
    await messages.send(bus, "r1", "orchestrator", "review r1")
    await messages.send(bus, "r2", "orchestrator", "review r2")
    r = await wait.wait_fan_in(bus, "orchestrator", 60, ["r1", "r2"])
    assert r.status == "complete" and [e.message for e in r.results] == ["review r1", "review r2"], r
    assert await bus.peek("orchestrator") == []  # the answered question went with the join


async def test_need_all_with_a_check_counts_only_passed_checks_and_without_one_counts_what_settled(bus, tmp_path):
    await register_crew(bus, "a", "b", "c")
    for name in ("a", "b"):
        await bus.update_agent(name, cwd=str(tmp_path))
        await messages.send(bus, name, "orchestrator", f"{name} done")
    r = await wait.wait_fan_in(bus, "orchestrator", 60, ["a", "b"], join=wait.Join(check="exit 1"))
    assert r.status == "unmet" and r.exit_code == 8 and (r.need, r.met) == (2, 0), r
    # unmet as soon as one check failed: the other's report, if its check still ran, is given back
    assert "check_failed" in [e.status for e in r.results], r

    await messages.send(bus, "a", "orchestrator", "a again")
    await agents.mark_dead(bus, "c", "exited with code 7")
    r = await wait.wait_fan_in(bus, "orchestrator", 60, ["a", "c"])
    assert r.status == "complete" and r.exit_code == 0 and (r.need, r.met) == (2, 2), r  # both settled
    assert [e.status for e in r.results] == ["received", "dead"]


# --------------------------------------------------------------------------- checks and races
def _plan(gate: Path | None, write: dict[str, str]) -> str:
    """A replay agent's plan: write, wait at its gate (a named pipe), then print its events; with
    no gate, it prints its first two and runs until it is stopped (TERM), then prints the
    rest, its usage among them, as a CLI that reports its run when stopped."""
    plan = {"events": "claude-success.jsonl", "write": write}
    if gate is None:
        return json.dumps(plan | {"lines": 2, "then": "block", "on_term": "finish"})
    os.mkfifo(gate)
    return json.dumps(plan | {"gate": str(gate)})


async def _open(gate: Path) -> None:
    """Let a gated flight go on (its replay agent reads the pipe until it is closed)."""
    await anyio.to_thread.run_sync(lambda: gate.write_text("go"))


async def test_a_race_the_first_fails_its_check_the_second_passes_the_third_is_stopped(bus, tmp_path, monkeypatch):
    """Three coding flights of one preset, each in its own worktree: `need 1`, a check, stop_rest."""
    repo = make_repo(tmp_path / "repo", monkeypatch)
    presets = preset_file(tmp_path)
    await agents.register(bus, "orchestrator")
    plans = {"att1": {"result.txt": "wrong\n"}, "att2": {"result.txt": "right\n"}, "att3": {"result.txt": "slow\n"}}
    started = {}
    for name, write in plans.items():
        prompt = _plan(None if name == "att3" else tmp_path / f"{name}.gate", write)
        started[name] = await flights.start(
            bus, name, parent_id="orchestrator", preset="replay", presets_file=presets,
            prompt=prompt, cwd=str(repo), wave="race",
        )  # fmt: skip
    join = wait.Join(
        wave="race",
        need=1,
        check="grep -q right result.txt || { echo 'result.txt is not right'; exit 1; }",
        stop_rest=True,
    )
    got: dict[str, object] = {}

    async def race() -> None:
        got["r"] = await wait.wait_fan_in(bus, "orchestrator", 120, [], join=join)

    async with anyio.create_task_group() as tg:
        tg.start_soon(race)
        await until(lambda: has_waits(bus, 1), 30, "the race's join on the bus")
        await _open(tmp_path / "att1.gate")
        await until(lambda: has_progress(bus, "met 0 / need 1"), 30, "the join under way")

        async def att1_failed() -> bool:
            w = await bus.list_waits()
            return bool(w) and "1/3 received" in w[0].progress and "checking" not in w[0].progress

        await until(att1_failed, 60, "att1's report checked (and failed)")
        assert "r" not in got
        await _open(tmp_path / "att2.gate")
    r = got["r"]
    assert r.status == "complete" and (r.need, r.met) == (1, 1), r
    by = {e.name: e for e in r.results}
    assert by["att1"].status == "check_failed" and "result.txt is not right" in (by["att1"].output or ""), by
    assert by["att2"].status == "received", by
    assert by["att3"].status == "dead" and by["att3"].reason.startswith("stopped: the join's need was met"), by
    assert r.stopped == [started["att3"].id]
    att3 = await bus.get_agent(started["att3"].id)
    assert att3 is not None and att3.status == "dead"
    await until(lambda: not alive(att3.pid, att3.pid_start), 30, "att3's process gone")

    async def usage_kept() -> bool:
        a = await bus.get_agent(att3.id)
        return a is not None and a.usage is not None

    await until(usage_kept, 30, "att3's usage recorded (its last event, printed on TERM)")


async def test_a_join_that_ends_with_a_check_running_stops_it_and_gives_the_report_back(bus, tmp_path):
    """Timeout, then interrupt, each while a check runs: the check's process is ended and the
    flight's report goes back to the inbox (the next join gets it)."""
    await register_crew(bus, "slow")
    folder = tmp_path / "slow"
    folder.mkdir()
    await bus.update_agent("slow", cwd=str(folder))
    pidfile = folder / "check.pid"
    check = f"echo $$ > {pidfile}; exec sleep 300"
    await messages.send(bus, "slow", "orchestrator", "done, check me")

    r = await wait.wait_fan_in(bus, "orchestrator", 1.0, ["slow"], join=wait.Join(check=check))
    assert r.status == "timeout", r
    assert r.results[0].status == "running" and "its check was still running" in (r.results[0].reason or "")
    pid = int(pidfile.read_text())
    assert not alive(pid)
    assert [i.body for i in await bus.peek("orchestrator")] == ["done, check me"]

    pidfile.unlink()
    control = wait.Control()
    got: dict[str, object] = {}

    async def interrupted() -> None:
        got["r"] = await wait.wait_fan_in(
            bus, "orchestrator", 120, ["slow"], join=wait.Join(check=check), control=control
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(interrupted)
        await until(pidfile.exists, 30, "the check started")
        control.interrupt()
    assert got["r"].status == "interrupted", got["r"]
    assert not alive(int(pidfile.read_text()))
    assert [i.body for i in await bus.peek("orchestrator")] == ["done, check me"]


async def test_stop_rest_stops_the_losers_at_once_and_a_stop_that_fails_is_named_in_its_entry(bus, monkeypatch):
    """Each stop waits until all three are under way (one at a time, the first would wait
    forever); one of them fails: the join still returns, that flight's entry says why."""
    await register_crew(bus, "winner", "l1", "l2", "l3")
    await messages.send(bus, "winner", "orchestrator", "done first")
    under_way: list[str] = []
    all_there = anyio.Event()

    async def stop(bus_, agent, reason):
        under_way.append(agent.id)
        if len(under_way) == 3:
            all_there.set()
        with anyio.fail_after(20):
            await all_there.wait()
        if agent.id == "l2":
            raise OSError("the process group could not be signalled")
        return await agents.mark_dead(bus_, agent.id, reason)

    monkeypatch.setattr(agents, "stop", stop)
    flights = ["winner", "l1", "l2", "l3"]
    r = await wait.wait_fan_in(bus, "orchestrator", 60, flights, join=wait.Join(need=1, stop_rest=True))
    assert r.status == "complete" and sorted(under_way) == ["l1", "l2", "l3"], r
    assert r.stopped == ["l1", "l3"], r
    by = {e.agent_id: e for e in r.results}
    assert by["l1"].status == "dead" and by["l3"].status == "dead", r
    assert by["l2"].status == "running" and "could not be signalled" in (by["l2"].reason or ""), r
