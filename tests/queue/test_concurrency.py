"""Concurrent enqueues from separate processes, and many at once in each (sharing statements
on PostgreSQL, worker threads on the directory bus): the budget and dedup guards still hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from qtools import guard_events, handoff, make_queue, types_file

from wavewait.core.model import HandoffRecord
from wavewait.core.tasks import TaskError, complete_task, enqueue_task, list_tasks

from conftest import env_for

pytestmark = pytest.mark.anyio
ENQUEUER = str(Path(__file__).with_name("enqueuer.py"))
PROCESSES = 6


async def race(bus, tmp_path: Path, prefixes: list[str], count: int, max_tasks: int, at_once: int = 1) -> list[dict]:
    """Start one enqueuer per prefix, open their start gate at once, collect their counts."""
    env = env_for(bus, WAVEWAIT_TASK_TYPES=str(types_file(tmp_path)), WAVEWAIT_MAX_TASKS=str(max_tasks))
    procs = [
        subprocess.Popen(
            [sys.executable, ENQUEUER, p, str(count), str(at_once)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for p in prefixes
    ]
    try:
        with anyio.fail_after(60):
            for p in procs:
                assert await anyio.to_thread.run_sync(p.stdout.readline) == "ready\n"
            for p in procs:  # every process is ready: let them all go
                p.stdin.write("go\n")
                p.stdin.flush()
            out = [json.loads(await anyio.to_thread.run_sync(p.stdout.readline)) for p in procs]
            for p in procs:
                assert await anyio.to_thread.run_sync(p.wait) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return out


@pytest.mark.parametrize("at_once", [1, 10])
async def test_concurrent_enqueues_never_exceed_the_budget(bus, tmp_path, at_once):
    q = make_queue(bus, tmp_path, max_tasks=25)
    out = await race(bus, tmp_path, [f"p{i}" for i in range(PROCESSES)], 20, max_tasks=25, at_once=at_once)
    assert sum(o["enqueued"] for o in out) == 25
    assert sum(o["guards"].get("budget", 0) for o in out) == PROCESSES * 20 - 25
    assert len((await list_tasks(q))["tasks"]) == 25
    assert len(await guard_events(bus)) == PROCESSES * 20 - 25


@pytest.mark.parametrize("at_once", [1, 10])
async def test_concurrent_duplicates_are_enqueued_once(bus, tmp_path, at_once):
    q = make_queue(bus, tmp_path, max_tasks=1000)
    out = await race(bus, tmp_path, ["same"] * PROCESSES, 20, max_tasks=1000, at_once=at_once)
    assert sum(o["enqueued"] for o in out) == 20
    assert sum(o["guards"].get("dedup", 0) for o in out) == (PROCESSES - 1) * 20
    topics = sorted(t["inputs"]["topic"] for t in (await list_tasks(q))["tasks"])
    assert topics == sorted(f"same-{i}" for i in range(20))


async def test_completions_at_once_each_get_their_own_answer(bus, tmp_path):
    """Completions of one process that share a statement (PostgreSQL) are each a
    compare-and-set of their own: a task finished already, a task of another agent and a
    missing one are refused, the others stored, each handoff under its own task."""
    q = make_queue(bus, tmp_path, max_tasks=100)
    ids = [
        (await enqueue_task(q, "orchestrator", type="research", inputs={"topic": f"t{i}"}, reason="r")).id
        for i in range(20)
    ]
    await q.store.update(ids[1], ("queued",), status="running", agent_id="someone")
    assert await q.store.complete(ids[2], HandoffRecord.model_validate(_record(ids[2], "first")), ("queued",))
    answers: dict[str, object] = {}

    async def one(tid: str, run_by: str | None) -> None:
        record = HandoffRecord.model_validate(_record(tid, f"did {tid}"))
        answers[tid] = await q.store.complete(tid, record, ("queued", "running"), run_by=run_by)

    async with anyio.create_task_group() as tg:
        for tid in [*ids, "no-such-task"]:
            tg.start_soon(one, tid, "someone-else" if tid == ids[1] else None)
    refused = {tid for tid, a in answers.items() if a is None}
    assert refused == {ids[1], ids[2], "no-such-task"}
    for tid in set(ids) - refused:
        h = await q.store.handoff(tid)
        assert h is not None and (h.did, h.type) == (f"did {tid}", "research") and answers[tid].id == tid
    assert (await q.store.handoff(ids[2])).did == "first" and await q.store.handoff(ids[1]) is None
    assert {t.id: t.status for t in await q.store.tasks()} == {
        tid: "running" if tid == ids[1] else "done" for tid in ids
    }


def _record(task_id: str, did: str) -> dict[str, object]:
    return handoff(did=did) | {"taskId": task_id, "type": "", "status": "done"}


async def test_concurrent_claims_and_completions_of_one_task_each_succeed_once(bus, tmp_path):
    """Writes that arrive together (worker threads on the directory bus, pooled connections
    on PostgreSQL): of eight claims of one queued task one marks it running; of eight
    completions one stores its handoff, and the task takes that handoff's status."""
    q = make_queue(bus, tmp_path)
    tid = (await enqueue_task(q, "orchestrator", type="research", inputs={"topic": "x"}, reason="r")).id

    claims: list[object] = []
    completions: list[str] = []

    async def claim(n: int) -> None:
        claims.append(await q.store.update(tid, ("queued",), status="running", agent_id=f"agent-{n}"))

    async def complete(n: int) -> None:
        try:
            await complete_task(q, "orchestrator", task_id=tid, status="done", handoff=handoff(did=f"did {n}"))
        except TaskError as e:
            assert "is already done; a task is completed once" in str(e)
        else:
            completions.append(f"did {n}")

    async with anyio.create_task_group() as tg:
        for n in range(8):
            tg.start_soon(claim, n)
    won = [c for c in claims if c is not None]
    assert len(claims) == 8 and len(won) == 1
    task = await q.store.get(tid)
    assert task is not None and (task.status, task.agent_id) == ("running", won[0].agent_id)

    async with anyio.create_task_group() as tg:
        for n in range(8):
            tg.start_soon(complete, n)
    assert len(completions) == 1
    task = await q.store.get(tid)
    h = await q.store.handoff(tid)
    assert task is not None and task.status == "done"
    assert h is not None and (h.did, h.type, h.status) == (completions[0], "research", "done")
    assert await q.store.update(tid, ("running",), status="queued") is None  # a done task stays done
