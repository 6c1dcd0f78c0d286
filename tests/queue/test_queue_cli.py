"""The queue from a shell, as real subprocesses on both buses: enqueue, complete, handoffs,
tasks (the tools' JSON, exit 2 on bad input or a guard), and `wavewait run-queue` running a
graph of six tasks with real agents, SIGKILLed mid-run and started again."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import threading
from pathlib import Path

import anyio
import pytest
from qtools import HANDOFF, guard_events, make_queue, types_file
from test_runner import AGENT, agent_env, agent_log, assert_nothing_ran_after_it_was_done, step

from wavewait.core import messages, waves

from conftest import env_for, until, wavewait_cmd

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]


def run(bus, tmp_path: Path, *args: str, **env: str) -> tuple[int, dict | None, str]:
    """`wavewait ARGS` with the queue named in the environment: exit code, JSON out, stderr."""
    env = env_for(bus, WAVEWAIT_QUEUE="q1", WAVEWAIT_TASK_TYPES=str(types_file(tmp_path)), **env)
    p = subprocess.run(wavewait_cmd(*args), env=env, capture_output=True, text=True, timeout=60)
    return p.returncode, json.loads(p.stdout) if p.stdout.strip() else None, p.stderr


async def test_enqueue_tasks_complete_and_handoffs_print_the_tools_json(bus, tmp_path):
    code, a, _ = run(bus, tmp_path, "enqueue", "research", "--input", "topic=auth", "--reason", "start here")
    assert code == 0 and (a["type"], a["depth"], a["status"]) == ("research", 0, "queued")
    code, b, _ = run(
        bus,
        tmp_path,
        "enqueue",
        "step",
        "--inputs-json",
        '{"name": "n"}',
        "--input",
        "mode=ok",
        "--depends-on",
        a["id"],
        "--reason",
        "after",
        "--model",
        "small",
    )
    assert code == 0
    code, out, _ = run(bus, tmp_path, "tasks")
    assert code == 0 and [(t["id"], t["inputs"], t["dependsOn"]) for t in out["tasks"]] == [
        (a["id"], {"topic": "auth"}, []),
        (b["id"], {"name": "n", "mode": "ok"}, [a["id"]]),
    ]
    code, out, _ = run(
        bus,
        tmp_path,
        "complete",
        a["id"],
        "--status",
        "done",
        "--goals",
        HANDOFF["goals"],
        "--did",
        HANDOFF["did"],
        "--for-next-agent",
        HANDOFF["forNextAgent"],
        "--file",
        "auth.py",
        "--file",
        "b.py",
    )
    assert code == 0 and out == {"taskId": a["id"], "status": "done"}
    code, out, _ = run(bus, tmp_path, "handoffs", "--task-id", a["id"])
    assert out["handoffs"] == [
        {"taskId": a["id"], "type": "research", "status": "done", **HANDOFF, "filesTouched": ["auth.py", "b.py"]}
    ]
    # bound by WAVEWAIT_TASK_ID: handoffs of its dependencies, and completing its own task
    code, out, _ = run(bus, tmp_path, "handoffs", WAVEWAIT_TASK_ID=b["id"])
    assert code == 0 and [h["taskId"] for h in out["handoffs"]] == [a["id"]]
    code, out, _ = run(
        bus,
        tmp_path,
        "complete",
        "--status",
        "failed",
        "--goals",
        "g",
        "--did",
        "d",
        "--for-next-agent",
        "n",
        WAVEWAIT_TASK_ID=b["id"],
    )
    assert code == 0 and out == {"taskId": b["id"], "status": "failed"}
    code, out, _ = run(bus, tmp_path, "tasks", "--status", "failed")
    assert code == 0 and [t["id"] for t in out["tasks"]] == [b["id"]]


@pytest.mark.long
async def test_errors_and_guards_exit_2_and_say_what_to_fix(bus, tmp_path):
    code, a, _ = run(bus, tmp_path, "enqueue", "research", "--input", "topic=a", "--reason", "r")
    assert code == 0
    for args, expected in [
        (("enqueue", "research", "--input", "topic=a", "--reason", "r"), "dedup: task"),
        (("enqueue", "reserch", "--reason", "r"), "unknown_type: no task type 'reserch'; the valid types are"),
        (
            ("enqueue", "research", "--input", "topic=b", "--reason", "r", "--depends-on", "nosuch"),
            "unknown_dependency",
        ),
        (("enqueue", "research", "--input", "topic", "--reason", "r"), "--input: give KEY=VALUE"),
        (("enqueue", "research", "--inputs-json", "[1]", "--reason", "r"), "--inputs-json: must be a JSON object"),
        (("enqueue", "research", "--input", "topic=c"), "--reason"),
        (
            ("complete", "--status", "done", "--goals", "g", "--did", "d", "--for-next-agent", "n"),
            "TASK_ID: this process is bound to no task (WAVEWAIT_TASK_ID is unset); pass TASK_ID",
        ),
        (
            ("complete", a["id"], "--status", "done", "--goals", "g", "--did", " ", "--for-next-agent", "n"),
            "handoff.did",
        ),
        (("complete", a["id"], "--status", "ok", "--goals", "g", "--did", "d", "--for-next-agent", "n"), "--status"),
        (("handoffs",), "give type or taskId"),
        (("tasks", "--status", "finished"), "--status"),
        (("run-queue",), "--agent-command"),
    ]:
        code, out, err = run(bus, tmp_path, *args)
        assert (code, out) == (2, None) and expected in err, (args, err)
    code, _, err = run(bus, tmp_path, "enqueue", "research", "--input", "topic=z", "--reason", "r", "--max-tasks", "1")
    assert code == 2 and "budget: queue 'q1' already holds 1 tasks, the budget is 1 (--max-tasks)" in err
    assert [e["guard"] for e in await guard_events(bus)] == ["dedup", "unknown_type", "unknown_dependency", "budget"]
    p = subprocess.run(wavewait_cmd("tasks"), env=env_for(bus), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "pass --queue NAME or set WAVEWAIT_QUEUE" in p.stderr


async def test_run_queue_prints_a_summary_and_exits_0_when_every_task_is_done(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    await step(q, "only")
    env = agent_env(bus, tmp_path, WAVEWAIT_QUEUE="q1", WAVEWAIT_TASK_TYPES=str(types_file(tmp_path)))
    p = subprocess.run(
        wavewait_cmd("run-queue", "--agent-command", shlex.join(AGENT)), env=env, capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("queue q1: 1 done, 0 failed, 0 skipped; 1 agent(s) started\n")
    assert "started agent" in p.stderr


async def test_run_queue_killed_mid_run_and_started_again_finishes_a_graph_of_six(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    a = await step(q, "a")
    b = await step(q, "b")
    c = await step(q, "c", after=[a, b])  # gets both handoffs
    d = await step(q, "d", "fail")
    e = await step(q, "e", after=[d])  # skipped: its dependency failed
    f = await step(q, "f", "gate", after=[c])  # still running when the runner is killed
    env = agent_env(bus, tmp_path)
    argv = wavewait_cmd(
        "run-queue",
        "--queue",
        "q1",
        "--task-types",
        str(types_file(tmp_path)),
        "--agent-command",
        shlex.join(AGENT),
        "--max-parallel",
        "3",
        "--max-attempts",
        "2",
        "--json",
    )
    first = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        await until(lambda: ("start", "f", "1") in agent_log(tmp_path), 90, "f's agent to start")
        os.kill(first.pid, signal.SIGKILL)
        assert await anyio.to_thread.run_sync(first.wait) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()
    tasks = {t.id: t for t in await q.store.tasks()}
    assert {x: tasks[x].status for x in (a, b, c, d, f)} == {
        a: "done",
        b: "done",
        c: "done",
        d: "failed",
        f: "running",
    }
    second = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        await messages.send(bus, "orchestrator", tasks[f].agent_id, "go on")  # open f's gate
        with anyio.fail_after(90):
            code = await anyio.to_thread.run_sync(second.wait)
        summary = json.loads(second.stdout.read())
    finally:
        if second.poll() is None:
            second.kill()
    assert code == 1 and summary["ok"] is False  # d failed: not every task is done
    final = {t["id"]: (t["status"], t["attempts"]) for t in summary["tasks"]}
    assert final == {
        a: ("done", 1),
        b: ("done", 1),
        c: ("done", 1),
        d: ("failed", 1),
        e: ("skipped", 0),
        f: ("done", 1),
    }
    assert (summary["done"], summary["failed"], summary["skipped"]) == (4, 1, 1)
    log = agent_log(tmp_path)
    assert sorted(x[1] for x in log if x[0] == "start") == ["a", "b", "c", "d", "f"]  # none run twice
    assert_nothing_ran_after_it_was_done(log)
    prompt = (tmp_path / "prompts" / "c.prompt").read_text()
    assert prompt.startswith("Do step c (ok).") and "did step a" in prompt and "did step b" in prompt


async def test_ctrl_c_on_run_queue_says_where_it_stopped_and_leaves_the_agents_running(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    g = await step(q, "g", "gate")
    env = agent_env(bus, tmp_path, WAVEWAIT_QUEUE="q1", WAVEWAIT_TASK_TYPES=str(types_file(tmp_path)))
    p = subprocess.Popen(
        wavewait_cmd("run-queue", "--agent-command", shlex.join(AGENT)),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await until(lambda: ("start", "g", "1") in agent_log(tmp_path), 90, "g's agent to start")
        p.send_signal(signal.SIGINT)
        out, err = await anyio.to_thread.run_sync(lambda: p.communicate(timeout=30))
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 4, err  # interrupted, as every wait Ctrl+C ends
    assert "interrupted; agents already started keep running" in err and "Traceback" not in err
    assert out.startswith("queue q1: 0 done") and "running" in out
    task = await q.store.get(g)
    assert task is not None and task.status == "running"
    await messages.send(bus, "orchestrator", task.agent_id, "go on")  # the agent finishes its task alone
    await until(lambda: _status(q, g, "done"), 60, "g done by its agent after the runner stopped")


async def _status(q, task_id: str, status: str) -> bool:
    t = await q.store.get(task_id)
    return t is not None and t.status == status


@pytest.mark.both_buses
async def test_two_run_queue_processes_on_one_queue_start_every_task_exactly_once(bus, tmp_path):
    """Two `wavewait run-queue` processes on one queue race for every task: each is started once.

    Both runners are up and watching (each says so on stderr) while a gate task holds back
    eight others; when the gate's agent completes it, both wake together and try to start
    all eight at once.
    """
    q = make_queue(bus, tmp_path)
    gate = await step(q, "gate", "gate")
    names = [f"s{i}" for i in range(8)]
    for name in names:
        await step(q, name, after=[gate])
    env = agent_env(bus, tmp_path, WAVEWAIT_QUEUE="q1", WAVEWAIT_TASK_TYPES=str(types_file(tmp_path)))
    argv = wavewait_cmd("run-queue", "--agent-command", shlex.join(AGENT), "--max-parallel", "8", "--json")
    runners = [
        subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    errs: list[list[str]] = [[], []]

    def read(p: subprocess.Popen[str], lines: list[str]) -> None:
        for line in p.stderr or ():
            lines.append(line)

    readers = [threading.Thread(target=read, args=pe, daemon=True) for pe in zip(runners, errs, strict=True)]
    for r in readers:
        r.start()
    try:
        for e in errs:
            await until(lambda e=e: any("watching for changes" in line for line in e), 90, "both runners watching")
        await until(lambda: _agent_of(q, gate), 30, "the gate's agent")
        task = await q.store.get(gate)
        assert task is not None and task.agent_id
        await messages.send(bus, "orchestrator", task.agent_id, "go on")  # open the gate: both race
        with anyio.fail_after(120):
            outs = [await anyio.to_thread.run_sync(p.stdout.read) for p in runners]
            codes = [await anyio.to_thread.run_sync(p.wait) for p in runners]
        for r in readers:
            r.join(10)
    finally:
        for p in runners:
            if p.poll() is None:
                p.kill()
    assert codes == [0, 0], errs
    summaries = [json.loads(out) for out in outs]
    assert sum(s["agentsStarted"] for s in summaries) == len(names) + 1, errs
    starts = sorted(x[1] for x in agent_log(tmp_path) if x[0] == "start")
    assert starts == sorted(["gate", *names]), errs  # every task started once, none twice
    assert {(t["status"], t["attempts"]) for t in summaries[-1]["tasks"]} == {("done", 1)}


async def _agent_of(q, task_id: str) -> bool:
    t = await q.store.get(task_id)
    return t is not None and t.status == "running" and t.agent_id is not None


async def test_run_queue_max_parallel_auto_caps_the_queues_wave_and_every_task_still_runs(bus, tmp_path):
    """`--max-parallel auto` is the limit of the queue's wave, kept on the bus: the runner
    spawns every runnable task's agent and admission starts them as the machine allows."""
    q = make_queue(bus, tmp_path)
    names = [await step(q, f"t{i}") for i in range(3)]
    env = agent_env(
        bus,
        tmp_path,
        WAVEWAIT_QUEUE="q1",
        WAVEWAIT_TASK_TYPES=str(types_file(tmp_path)),
        WAVEWAIT_ADMIT_LOAD_PER_CORE="1000",  # about the wave's limit, not this machine's load
        WAVEWAIT_ADMIT_FLIGHT_MEM="16M",
        WAVEWAIT_ADMIT_RESERVE="16M",
    )
    argv = wavewait_cmd("run-queue", "--agent-command", shlex.join(AGENT), "--max-parallel", "auto", "--json")
    p = await anyio.run_process(argv, env=env, check=False)
    assert p.returncode == 0, p.stderr.decode()
    summary = json.loads(p.stdout)
    assert summary["ok"] and summary["done"] == 3
    assert (await waves.get_settings(bus, "queue-q1")).max_parallel == "auto"
    flights = [a for a in await bus.list_agents() if a.wave == "queue-q1"]
    assert len(flights) == len(names) and all(a.started_at for a in flights)
