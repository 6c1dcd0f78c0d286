"""The queue's domain on both buses: enqueue and its guards, completion, handoffs, listing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from qtools import HANDOFF, guard_events, handoff, make_queue

from wavewait.core.bus import open_bus
from wavewait.core.errors import BadInput, BusError, ForgedSender
from wavewait.core.model import Agent, HandoffRecord
from wavewait.core.proc import hostname
from wavewait.core.tasks import (
    GuardTripped,
    TaskError,
    TaskQueue,
    check_handoff,
    complete_task,
    enqueue_task,
    list_tasks,
    parse_task_types,
    read_handoffs,
    render_prompt,
    task_prompt,
)

pytestmark = pytest.mark.anyio


async def seed(q: TaskQueue, topic: str = "auth", caller: str = "orchestrator", **kw) -> str:
    return (await enqueue_task(q, caller, type="research", inputs={"topic": topic}, reason="need it", **kw)).id


async def test_enqueue_returns_the_task_and_lists_it(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    r = await enqueue_task(q, "orchestrator", type="research", inputs={"topic": "auth"}, reason="start here")
    assert (r.type, r.depth, r.status) == ("research", 0, "queued")
    (task,) = (await list_tasks(q))["tasks"]
    assert task == {
        "id": r.id,
        "type": "research",
        "status": "queued",
        "depth": 0,
        "parent": None,
        "dependsOn": [],
        "attempts": 0,
        "inputs": {"topic": "auth"},
        "reason": "start here",
    }
    assert (await list_tasks(q, "done"))["tasks"] == []
    with pytest.raises(BadInput, match="status: must be one of queued, running"):
        await list_tasks(q, "finished")


async def test_a_bound_enqueue_is_a_child_one_level_deeper(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    root = await seed(q)
    child = await enqueue_task(
        q, "agent-1", type="fix", inputs={"file": "a.py"}, reason="found it", bound=root, depends_on=[root]
    )
    assert child.depth == 1
    tasks = {t["id"]: t for t in (await list_tasks(q))["tasks"]}
    assert tasks[child.id]["parent"] == root and tasks[child.id]["dependsOn"] == [root]


async def test_budget_counts_every_task_whatever_its_status(bus, tmp_path):
    q = make_queue(bus, tmp_path, max_tasks=3)
    ids = [await seed(q, f"t{i}") for i in range(3)]
    await complete_task(q, "orchestrator", task_id=ids[0], status="failed", handoff=HANDOFF)
    with pytest.raises(
        GuardTripped, match=r"budget: queue 'q1' already holds 3 tasks, the budget is 3 \(--max-tasks\)"
    ):
        await seed(q, "t3")
    assert len((await list_tasks(q))["tasks"]) == 3
    (event,) = await guard_events(bus)
    assert event["type"] == "guard_tripped"
    assert (event["guard"], event["task_type"]) == ("budget", "research")
    assert "--max-tasks" in event["reason"]


async def test_depth_cap_refuses_children_of_a_task_at_max_depth(bus, tmp_path):
    q = make_queue(bus, tmp_path, max_depth=1)
    root = await seed(q)
    child = (await enqueue_task(q, "a1", type="research", inputs={"topic": "x"}, reason="r", bound=root)).id
    with pytest.raises(GuardTripped, match=r"depth: task \w+ is at depth 1, the limit is 1 \(--max-depth\)") as e:
        await enqueue_task(q, "a2", type="research", inputs={"topic": "y"}, reason="r", bound=child)
    assert e.value.guard == "depth"
    (event,) = await guard_events(bus)  # to the owner of the branch, not the bound agent
    assert (event["guard"], event["task_type"], event["from"]) == ("depth", "research", "a2")


async def test_dedup_ignores_key_order_at_any_depth(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    first = await enqueue_task(
        q, "orchestrator", type="research", inputs={"topic": "auth", "scope": {"a": 1, "b": [1, 2]}}, reason="r"
    )
    with pytest.raises(GuardTripped, match=f"dedup: task {first.id} already has type 'research'"):
        await enqueue_task(
            q, "orchestrator", type="research", inputs={"scope": {"b": [1, 2], "a": 1}, "topic": "auth"}, reason="r"
        )
    # another type, or other inputs, is not a duplicate
    await enqueue_task(q, "orchestrator", type="research", inputs={"topic": "auth", "scope": {"a": 2}}, reason="r")
    await enqueue_task(q, "orchestrator", type="step", inputs={"name": "auth", "mode": "ok"}, reason="r")
    assert [e["guard"] for e in await guard_events(bus)] == ["dedup"]


async def test_dedup_lets_a_failed_task_be_enqueued_again_but_not_a_done_one(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    failed = await seed(q, "a")
    await complete_task(q, "orchestrator", task_id=failed, status="failed", handoff=HANDOFF)
    again = await seed(q, "a")
    assert again != failed
    await complete_task(q, "orchestrator", task_id=again, status="done", handoff=HANDOFF)
    with pytest.raises(GuardTripped, match=f"dedup: task {again}"):
        await seed(q, "a")


async def test_unknown_type_lists_the_valid_types(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    with pytest.raises(
        GuardTripped, match="unknown_type: no task type 'reserch'; the valid types are fix, research, step"
    ):
        await enqueue_task(q, "orchestrator", type="reserch", inputs={}, reason="r")
    (event,) = await guard_events(bus)
    assert (event["guard"], event["task_type"]) == ("unknown_type", "reserch")


async def test_unknown_dependency_names_the_id(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    known = await seed(q)
    with pytest.raises(GuardTripped, match=r"unknown_dependency: dependsOn\[1\]: no task 'nosuchtask'"):
        await seed(q, "b", depends_on=[known, "nosuchtask"])
    (event,) = await guard_events(bus)
    assert event["guard"] == "unknown_dependency" and "nosuchtask" in event["reason"]
    assert len((await list_tasks(q))["tasks"]) == 1


async def test_a_leaf_task_cannot_enqueue(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    leaf = (await enqueue_task(q, "orchestrator", type="fix", inputs={"file": "a.py"}, reason="r")).id
    with pytest.raises(GuardTripped, match=f"leaf: task {leaf} is of leaf type 'fix', which cannot enqueue"):
        await seed(q, "x", caller="leaf-agent", bound=leaf)
    (event,) = await guard_events(bus)
    assert (event["guard"], event["task_type"]) == ("leaf", "research")


async def test_the_owner_of_a_branch_hears_its_guard_trips(bus, tmp_path):
    q = make_queue(bus, tmp_path, max_tasks=2)
    root = await seed(q, caller="lead")  # an unbound enqueuer owns what grows from its tasks
    await seed(q, "b", caller="worker", bound=root)
    with pytest.raises(GuardTripped):
        await seed(q, "c", caller="worker", bound=root)
    assert await guard_events(bus, "orchestrator") == []
    assert [e["guard"] for e in await guard_events(bus, "lead")] == ["budget"]


async def test_plain_bad_input_changes_nothing_and_trips_no_guard(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    with pytest.raises(BadInput, match=r"inputs: the prompt of type 'research' uses \{topic\}; add 'topic'"):
        await enqueue_task(q, "orchestrator", type="research", inputs={"subject": "x"}, reason="r")
    with pytest.raises(BadInput, match="reason: say in a sentence"):
        await enqueue_task(q, "orchestrator", type="research", inputs={"topic": "x"}, reason=" ")
    with pytest.raises(BadInput, match="inputs: must be an object"):
        await enqueue_task(q, "orchestrator", type="research", inputs=["x"], reason="r")  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="WAVEWAIT_TASK_ID: no task 'gone'"):
        await seed(q, bound="gone")
    assert (await list_tasks(q))["tasks"] == [] and await guard_events(bus) == []


async def test_complete_stores_the_handoff_and_twice_is_an_error(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    tid = await seed(q)
    r = await complete_task(q, "orchestrator", task_id=tid, status="done", handoff=handoff(filesTouched=["a.py"]))
    assert r.model_dump(by_alias=True) == {"taskId": tid, "status": "done"}
    with pytest.raises(TaskError, match=f"taskId: task {tid} is already done; a task is completed once"):
        await complete_task(q, "orchestrator", task_id=tid, status="failed", handoff=HANDOFF)
    (h,) = (await read_handoffs(q, task_id=tid))["handoffs"]
    assert h == {"taskId": tid, "type": "research", "status": "done", **HANDOFF, "filesTouched": ["a.py"]}


async def test_a_bound_agent_completes_its_own_task_even_while_queued(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    tid = await seed(q)
    await complete_task(q, "agent-1", status="done", handoff=HANDOFF, bound=tid)
    assert (await list_tasks(q, "done"))["tasks"][0]["id"] == tid
    with pytest.raises(BadInput, match="taskId: this process is bound to no task"):
        await complete_task(q, "orchestrator", status="done", handoff=HANDOFF)
    with pytest.raises(TaskError, match="taskId: no task 'nosuch'"):
        await complete_task(q, "orchestrator", task_id="nosuch", status="done", handoff=HANDOFF)
    with pytest.raises(BadInput, match="status: must be 'done' or 'failed'"):
        await complete_task(q, "orchestrator", task_id=tid, status="success", handoff=HANDOFF)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"did": "x", "forNextAgent": "y"}, "handoff.goals: missing"),
        ({"goals": "x", "forNextAgent": "y"}, "handoff.did: missing"),
        ({"goals": "x", "did": "y"}, "handoff.forNextAgent: missing"),
        (HANDOFF | {"did": "  "}, "handoff.did: must be non-empty text"),
        (HANDOFF | {"goals": 3}, "handoff.goals: must be non-empty text"),
        (HANDOFF | {"forNextAgent": "é" * 8193}, r"handoff.forNextAgent: at most 16384 bytes \(16 KiB\), got 16386"),
        (HANDOFF | {"filesTouched": "a.py"}, "handoff.filesTouched: must be a list"),
        (HANDOFF | {"filesTouched": [""]}, r"handoff.filesTouched\[0\]: must be non-empty text"),
        (HANDOFF | {"notes": "x"}, "handoff: unknown field"),
        ("done", "handoff: must be an object"),
    ],
)
def test_every_handoff_text_field_is_required_non_empty_and_bounded(value, message):
    with pytest.raises(BadInput, match=message):
        check_handoff(value)


def test_a_handoff_text_of_exactly_16_kib_is_accepted():
    assert len(check_handoff(HANDOFF | {"did": "x" * 16384}).did) == 16384


async def test_the_stores_completion_holds_who_may_complete_in_its_compare_and_set(bus, tmp_path):
    """`run_by` completes only the task of that agent; `not_flight` only while no flight has
    that id: refused, the task is as it was and has no handoff (core/tasks.py, _complete_as)."""
    q = make_queue(bus, tmp_path)
    tid = await seed(q)
    await q.store.update(tid, ("queued",), status="running", agent_id="runner-1")
    flight = Agent(id="flight-1", name="flight-1", supervisor_pid=os.getpid(), host="elsewhere")
    await bus.put_agent(flight)
    await bus.put_agent(Agent(id="person", name="person"))  # an agent that is nobody's flight
    record = HandoffRecord.model_validate(HANDOFF | {"taskId": tid, "type": "", "status": "done"})
    assert await q.store.complete(tid, record, ("queued", "running"), run_by="runner-2") is None
    assert await q.store.complete(tid, record, ("queued", "running"), not_flight="flight-1") is None
    assert (await q.store.get(tid)).status == "running" and await q.store.handoff(tid) is None
    done = await q.store.complete(tid, record, ("queued", "running"), run_by="runner-1", not_flight="person")
    assert done is not None and done.status == "done" and (await q.store.get(tid)).status == "done"
    other = await seed(q, "db")
    done = await q.store.complete(other, record.model_copy(update={"task_id": other}), ("queued",), not_flight="nobody")
    assert done is not None and (await q.store.handoff(other)).type == "research"


async def test_a_process_in_no_flight_cannot_complete_as_a_flight_of_this_host(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    tid = await seed(q)
    await bus.put_agent(Agent(id="flight-1", name="flight-1", supervisor_pid=os.getpid(), host=hostname()))
    await q.store.update(tid, ("queued",), status="running", agent_id="flight-1")
    with pytest.raises(ForgedSender, match="is a flight supervised on this host"):
        await complete_task(q, "flight-1", task_id=tid, status="done", handoff=HANDOFF)
    assert (await q.store.get(tid)).status == "running" and await q.store.handoff(tid) is None


async def test_a_dedup_marker_that_cannot_be_written_refuses_the_enqueue_and_publishes_nothing(file_bus, tmp_path):
    q = make_queue(file_bus, tmp_path)
    first = await seed(q, "a")
    key = (await q.store.get(first)).dedup_key
    await complete_task(q, "orchestrator", task_id=first, status="failed", handoff=HANDOFF)
    marker = Path(file_bus.url) / "queues" / "q1" / "dedup" / key
    marker.mkdir()  # not a marker: a folder in its place
    with pytest.raises(BusError, match="could not write the dedup marker"):
        await seed(q, "a")
    assert [t.id for t in await q.store.tasks()] == [first]
    assert not list((marker.parent.parent / "tmp").iterdir())
    marker.rmdir()
    assert await seed(q, "a") != first


async def test_live_reads_the_queued_and_running_tasks_in_order_and_some_reads_by_id(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    ids = [await seed(q, t) for t in ("a", "b", "c", "d", "e")]
    await q.store.update(ids[1], ("queued",), status="running", agent_id="x")
    await complete_task(q, "orchestrator", task_id=ids[2], status="done", handoff=HANDOFF)
    await complete_task(q, "orchestrator", task_id=ids[3], status="failed", handoff=HANDOFF)
    await q.store.update(ids[4], ("queued",), status="skipped")
    assert [(t.id, t.status) for t in await q.store.live()] == [(ids[0], "queued"), (ids[1], "running")]
    found = await q.store.some([ids[2], ids[3], "no-such-task"])
    assert {i: t.status for i, t in found.items()} == {ids[2]: "done", ids[3]: "failed"}


async def test_dedup_markers_of_an_older_bus_plain_files_still_hold(file_bus, tmp_path):
    """Markers are symbolic links now; a marker an older bus wrote as a file still guards,
    and is replaced whole once its task failed."""
    q = make_queue(file_bus, tmp_path)
    tid = await seed(q, "a")
    store = q.store
    task = await store.get(tid)
    marker = Path(file_bus.url) / "queues" / "q1" / "dedup" / task.dedup_key
    assert os.readlink(marker) == tid
    marker.unlink()
    marker.write_text(tid + "\n")  # as an older bus wrote it
    with pytest.raises(GuardTripped, match=f"dedup: task {tid}"):
        await seed(q, "a")
    await complete_task(q, "orchestrator", task_id=tid, status="failed", handoff=HANDOFF)
    assert not marker.exists()  # a failed task's marker is dropped, file or link
    marker.write_text(tid)  # a leftover of a crashed writer, naming the failed task
    again = await seed(q, "a")
    assert os.readlink(marker) == again
    assert not list((marker.parent.parent / "tmp").iterdir())


async def test_a_bad_handoff_leaves_the_task_as_it_was(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    tid = await seed(q)
    with pytest.raises(BadInput, match=r"handoff\.did: missing"):
        await complete_task(q, "orchestrator", task_id=tid, status="done", handoff={"goals": "g", "forNextAgent": "n"})
    assert (await list_tasks(q))["tasks"][0]["status"] == "queued"
    assert (await read_handoffs(q, task_id=tid))["handoffs"] == []


async def test_handoff_file_is_well_formed_and_survives_reopening(file_bus, tmp_path):
    q = make_queue(file_bus, tmp_path)
    tid = await seed(q)
    await complete_task(q, "orchestrator", task_id=tid, status="done", handoff=handoff(filesTouched=["x.py"]))
    path = Path(file_bus.url) / "queues" / "q1" / "handoffs" / f"{tid}.json"
    data = json.loads(path.read_text())
    assert data["taskId"] == tid and data["status"] == "done" and data["type"] == "research"
    assert {k: data[k] for k in ("goals", "did", "forNextAgent", "filesTouched")} == HANDOFF | {
        "filesTouched": ["x.py"]
    }
    assert path.stat().st_mode & 0o777 == 0o600
    assert not list((path.parent.parent / "tmp").iterdir())  # nothing half-written left behind
    reopened = await open_bus(file_bus.url)
    try:
        q2 = TaskQueue.open(reopened, "q1", q.types)
        (h,) = (await read_handoffs(q2, task_id=tid))["handoffs"]
        assert h["did"] == HANDOFF["did"]
        assert (await list_tasks(q2))["tasks"][0]["status"] == "done"
    finally:
        await reopened.close()


async def test_handoffs_survive_reopening_the_bus(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    tid = await seed(q)
    await complete_task(q, "orchestrator", task_id=tid, status="failed", handoff=HANDOFF)
    reopened = await open_bus(bus.url)
    try:
        q2 = TaskQueue.open(reopened, "q1", q.types)
        assert (await read_handoffs(q2, type="research"))["handoffs"][0]["status"] == "failed"
        assert (await list_tasks(q2))["tasks"][0]["status"] == "failed"
    finally:
        await reopened.close()


async def test_read_handoffs_by_type_by_task_and_upstream_nearest_first(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    a = await seed(q, "a")
    b = await seed(q, "b", depends_on=[a])
    c = await seed(q, "c")
    d = await seed(q, "d", depends_on=[b, c])
    for tid in (a, b, c):
        await complete_task(q, "orchestrator", task_id=tid, status="done", handoff=handoff(did=f"did {tid}"))
    up = (await read_handoffs(q, bound=d))["handoffs"]
    assert [h["taskId"] for h in up] == [b, c, a]  # nearest first
    assert {h["taskId"] for h in (await read_handoffs(q, type="research"))["handoffs"]} == {a, b, c}
    assert (await read_handoffs(q, type="fix"))["handoffs"] == []
    with pytest.raises(BadInput, match="give type or taskId, not both"):
        await read_handoffs(q, type="research", task_id=a)
    with pytest.raises(BadInput, match="give type or taskId"):
        await read_handoffs(q)
    with pytest.raises(BadInput, match="type: no task type 'nope'"):
        await read_handoffs(q, type="nope")
    prompt = await task_prompt(q, await q.task(d))
    assert prompt.startswith("Research d.")
    assert prompt.index(f"did {b}") < prompt.index(f"did {c}") < prompt.index(f"did {a}")


def test_task_types_from_toml_and_their_errors():
    types = parse_task_types('[types.fix]\nprompt = "Fix {file} in {repo[name]}."\nleaf = true\n')
    assert types["fix"].leaf and types["fix"].fields == ("file", "repo")
    assert render_prompt(types["fix"], {"file": "a.py", "repo": {"name": "x"}}) == "Fix a.py in x."
    with pytest.raises(BadInput, match="cannot render the prompt of type 'fix'"):
        render_prompt(types["fix"], {"file": "a.py", "repo": "x"})
    for text, message in [
        ("types = 3", "no task types"),
        ("[types.x]\ndescription = 'd'", r"\[types.x\]: prompt is missing"),
        ("[types.x]\nprompt = 'a {0}'", "use named fields"),
        ("[types.x]\nprompt = 'a {'", "not a valid format string"),
        ("[types.x]\nprompt = 'a'\nleaf = 'yes'", "leaf must be true or false"),
        ("[types.x]\nprompt = 'a'\nmodel = 'm'", "unknown key"),
        ("[types", "not valid TOML"),
    ]:
        with pytest.raises(BadInput, match=message):
            parse_task_types(text)
