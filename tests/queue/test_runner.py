"""The runner with real processes as agents, on both buses: a graph run to the end, retries,
skips, handoffs in prompts, and a runner killed mid-run and started again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from qtools import make_queue, types_file

from wavewait.core import admission, agents, messages
from wavewait.core import runner as runner_module
from wavewait.core.runner import Runner
from wavewait.core.tasks import TaskQueue, enqueue_task

from conftest import env_for, until

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]
HERE = Path(__file__).parent
AGENT = [sys.executable, str(HERE / "task_agent.py")]
RUN_QUEUE = [sys.executable, str(HERE / "run_queue.py")]


async def step(q: TaskQueue, name: str, mode: str = "ok", after: list[str] | None = None) -> str:
    r = await enqueue_task(
        q, "orchestrator", type="step", inputs={"name": name, "mode": mode}, reason=f"step {name}", depends_on=after
    )
    return r.id


def agent_env(bus, tmp_path: Path, **extra: str) -> dict[str, str]:
    (tmp_path / "prompts").mkdir(exist_ok=True)
    return env_for(
        bus,
        QTEST_LOG=str(tmp_path / "agents.log"),
        QTEST_DIR=str(tmp_path / "prompts"),
        WAVEWAIT_LOG_DIR=str(tmp_path / "logs"),
        **extra,
    )


def agent_log(tmp_path: Path) -> list[tuple[str, ...]]:
    path = tmp_path / "agents.log"
    return [tuple(line.split()) for line in path.read_text().splitlines()] if path.exists() else []


def assert_nothing_ran_after_it_was_done(log: list[tuple[str, ...]]) -> None:
    done: set[str] = set()
    for entry in log:
        if entry[0] == "done":
            done.add(entry[1])
        else:
            assert entry[1] not in done, f"step {entry[1]} started again after it was done: {log}"


async def test_a_graph_of_six_runs_with_a_failure_skipped_dependent_and_both_handoffs(bus, tmp_path, monkeypatch):
    # every timer of the runner an hour away: only the bus's change stream can move it on
    monkeypatch.setattr(agents, "SWEEP_INTERVAL", 3600.0)
    monkeypatch.setattr(runner_module, "RESCAN_EVERY", 3600.0)
    q = make_queue(bus, tmp_path)
    a = await step(q, "a")
    b = await step(q, "b")
    c = await step(q, "c", after=[a, b])
    d = await step(q, "d", "fail")
    e = await step(q, "e", after=[d])
    f = await step(q, "f", "flaky", after=[c])
    runner = Runner(q, AGENT, max_parallel=3, task_types_file=str(types_file(tmp_path)), env=agent_env(bus, tmp_path))
    with anyio.fail_after(120):
        summary = await runner.run()
    status = {t.id: (t.status, t.attempts) for t in summary.tasks}
    assert status == {
        a: ("done", 1),
        b: ("done", 1),
        c: ("done", 1),
        d: ("failed", 1),  # completed as failed by its agent: final, no retry
        e: ("skipped", 0),  # its dependency failed: it never ran
        f: ("done", 2),  # exited without completing once, then completed
    }
    assert (summary.ok, summary.done, summary.failed, summary.skipped) == (False, 4, 1, 1)
    assert summary.agents_started == 6
    log = agent_log(tmp_path)
    assert sorted(x[1] for x in log if x[0] == "start") == ["a", "b", "c", "d", "f", "f"]
    assert_nothing_ran_after_it_was_done(log)
    prompt = (tmp_path / "prompts" / "c.prompt").read_text()
    assert prompt.startswith("Do step c (ok).")
    assert "did step a" in prompt and "did step b" in prompt
    prompt_f = (tmp_path / "prompts" / "f.prompt").read_text()  # transitive, nearest first
    assert prompt_f.index("did step c") < prompt_f.index("did step a") and "did step b" in prompt_f
    assert "Handoff" not in (tmp_path / "prompts" / "a.prompt").read_text()


async def test_an_agent_that_never_completes_fails_after_max_attempts_and_its_dependents_are_skipped(bus, tmp_path):
    q = make_queue(bus, tmp_path, max_attempts=3)
    bad = await step(q, "bad", "crash")
    after = await step(q, "after", after=[bad])
    later = await step(q, "later", after=[after])
    env = agent_env(bus, tmp_path)
    with anyio.fail_after(120):
        summary = await Runner(q, AGENT, task_types_file=str(types_file(tmp_path)), env=env).run()
    status = {t.id: (t.status, t.attempts) for t in summary.tasks}
    assert status == {bad: ("failed", 3), after: ("skipped", 0), later: ("skipped", 0)}
    notes = {t.id: t.note for t in summary.tasks}
    assert "after 3 attempt(s) (--max-attempts)" in notes[bad]
    assert f"dependency {bad} failed" in notes[after] and f"dependency {after} skipped" in notes[later]
    assert [x[1] for x in agent_log(tmp_path)] == ["bad"] * 3


async def test_an_agent_command_that_cannot_start_fails_the_task_with_why(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    tid = await step(q, "x")
    with anyio.fail_after(60):
        summary = await Runner(q, ["/nonexistent/agent"], env=agent_env(bus, tmp_path)).run()
    (t,) = summary.tasks
    assert (t.id, t.status, t.attempts) == (tid, "failed", 2)
    assert "cannot start its agent" in (t.note or "")


@pytest.mark.long
@pytest.mark.both_buses
async def test_a_killed_runner_started_again_finishes_the_graph_without_rerunning_done_tasks(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    a = await step(q, "a")
    b = await step(q, "b", "gate", after=[a])  # its agent will be killed while the runner is down
    b2 = await step(q, "b2", "gate", after=[a])  # its agent outlives the runner and is left to finish
    c = await step(q, "c", after=[b, b2])
    env = agent_env(bus, tmp_path, WAVEWAIT_QUEUE="q1", WAVEWAIT_TASK_TYPES=str(types_file(tmp_path)))

    async def started(*names: str) -> bool:
        return all(("start", n, "1") in agent_log(tmp_path) for n in names)

    first = subprocess.Popen([*RUN_QUEUE, *AGENT], env=env, stdout=subprocess.PIPE)
    try:
        await until(lambda: started("b", "b2"), 60, "the gated agents to start")
        os.kill(first.pid, signal.SIGKILL)
        assert await anyio.to_thread.run_sync(first.wait) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()
    tasks = {t.id: t for t in await q.store.tasks()}
    assert tasks[a].status == "done"
    assert (tasks[b].status, tasks[b2].status, tasks[c].status) == ("running", "running", "queued")
    b_agent = await bus.get_agent(tasks[b].agent_id)
    await admission.kill(bus, b_agent, by="test")  # gone while no runner watched it

    second = subprocess.Popen([*RUN_QUEUE, *AGENT], env=env, stdout=subprocess.PIPE)
    try:
        await until(lambda: ("done", "b") in agent_log(tmp_path), 60, "b to be retried and done")
        await messages.send(bus, "orchestrator", tasks[b2].agent_id, "go on")  # open b2's gate
        with anyio.fail_after(60):
            code = await anyio.to_thread.run_sync(second.wait)
        summary = json.loads(second.stdout.read())
    finally:
        if second.poll() is None:
            second.kill()
    assert code == 0 and summary["ok"] is True
    final = {t["id"]: (t["status"], t["attempts"]) for t in summary["tasks"]}
    assert final == {a: ("done", 1), b: ("done", 2), b2: ("done", 1), c: ("done", 1)}
    log = agent_log(tmp_path)
    assert [x[1] for x in log if x[0] == "start"].count("a") == 1
    assert [x[1] for x in log if x[0] == "start"].count("b2") == 1  # left running, not started again
    assert_nothing_ran_after_it_was_done(log)


@pytest.mark.both_buses
async def test_two_runners_on_one_queue_start_each_task_once(bus, tmp_path):
    """Two `run-queue`s on the same queue (a person started a second one): every task runs
    once; a task the other runner is starting (marked running, its agent not yet recorded)
    is never taken for one whose agent is gone."""
    q = make_queue(bus, tmp_path)
    ids = [await step(q, f"s{i}") for i in range(8)]
    env = agent_env(bus, tmp_path)
    tf = str(types_file(tmp_path))
    runners = [Runner(q, AGENT, max_parallel=8, runner_id=f"runner-{n}", task_types_file=tf, env=env) for n in (1, 2)]
    summaries = []
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for r in runners:

                async def go(r: Runner = r) -> None:
                    summaries.append(await r.run())

                tg.start_soon(go)
    assert all(s.ok for s in summaries), [(t.status, t.attempts, t.note) for s in summaries for t in s.tasks]
    assert sum(r.started for r in runners) == len(ids)
    starts = sorted(x[1] for x in agent_log(tmp_path) if x[0] == "start")
    assert starts == sorted(f"s{i}" for i in range(8))
    assert {t.attempts for t in summaries[-1].tasks} == {1}


@pytest.mark.both_buses
async def test_a_reader_never_meets_a_running_task_whose_agent_is_not_recorded(bus, tmp_path):
    """Whoever reads the queue while the runner starts tasks (the TUI's tasks view, another
    process) finds the agent each running task names: the record is kept before the task
    names it. The reader is its own process and reads as fast as it can; each agent exits at
    once without completing, so every task is started twice (then fails): 8 starts."""
    q = make_queue(bus, tmp_path, max_attempts=2)
    for i in range(4):
        await step(q, f"r{i}")
    reader = subprocess.Popen(
        [sys.executable, str(HERE / "task_reader.py"), q.name, "4"],
        env=env_for(bus),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None
        assert await anyio.to_thread.run_sync(reader.stdout.readline) == "ready\n"
        runner = Runner(q, ["sh", "-c", "exit 0"], max_parallel=4, env=agent_env(bus, tmp_path))
        with anyio.fail_after(120):
            summary = await runner.run()
            code = await anyio.to_thread.run_sync(reader.wait)
        said = reader.stdout.read()
    finally:
        if reader.poll() is None:
            reader.kill()
    assert code == 0, said  # "missing TASK AGENT": a running task named an agent not on the bus
    assert runner.started == 8 and {(t.status, t.attempts) for t in summary.tasks} == {("failed", 2)}
    reads, running = map(int, said.split()[1:])
    assert running > 0, f"the reader never read a running task in {reads} reads"


async def test_an_agent_a_dead_runner_recorded_but_never_started_is_dead_and_its_task_retried(bus, tmp_path):
    """A runner that died between recording a task's agent and starting it left the task
    running and the agent running without a process: past STARTING_GRACE, the next runner
    marks the agent dead, never started, and runs the task again."""
    q = make_queue(bus, tmp_path, max_attempts=2)
    tid = await step(q, "x")
    agent, _ = agents.prepare(bus, "step-x", ["true"], parent_id="gone-runner")
    agent = agent.model_copy(update={"started_at": agent.created_at - runner_module.STARTING_GRACE - 1})
    await bus.put_agent(agent)
    assert await q.store.update(tid, ("queued",), status="running", attempts=1, agent_id=agent.id) is not None
    with anyio.fail_after(60):
        summary = await Runner(q, ["sh", "-c", "exit 0"], env=agent_env(bus, tmp_path)).run()
    ((task_id, status, attempts),) = [(t.id, t.status, t.attempts) for t in summary.tasks]
    assert (task_id, status, attempts) == (tid, "failed", 2)  # started once more, by this runner
    left = await bus.get_agent(agent.id)
    assert left is not None and (left.status, left.reason) == (
        "dead",
        "never started: the runner starting it ended first",
    )
