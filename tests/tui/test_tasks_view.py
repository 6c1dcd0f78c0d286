"""The tasks view: a tree by parent with status, type, depth and attempts, live from the
queue's change stream; Enter opens a task's handoff; guard trips as notifications."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.widgets import Static, Tree

from wavewait.core.bus import Bus
from wavewait.core.bus.file import FileBus
from wavewait.core.tasks import GuardTripped, HandoffRecord, Task, TaskQueue, enqueue_task, parse_task_types, task_store
from wavewait.tui import scenes
from wavewait.tui.screens.tasks import TasksScreen

from conftest import until
from tuitools import SIZE, deterministic_textual, make_app, screen_text, type_command  # noqa: F401

pytestmark = pytest.mark.usefixtures("deterministic_textual")
TYPES = '[types.research]\nprompt = "Research {topic}."\n[types.fix]\nprompt = "Fix {file}."\nleaf = true\n'


def tid(n: int) -> str:
    return f"{n}{n}{n}{n}a5c{n:025d}"  # short ids that differ


async def seed_graph(bus: Bus) -> None:
    """Six tasks with fixed ids, one of each status, a child under its parent."""
    store = task_store(bus, "q1")

    async def put(n: int, kind: str, status: str, **fields) -> None:
        task = Task(id=tid(n), queue="q1", type=kind, reason=f"reason {n}", created_at=scenes.T0 + n, **fields)
        assert await store.add(task, 100) is None
        if status in ("done", "failed"):
            record = HandoffRecord(
                taskId=task.id,
                type=kind,
                status=status,
                goals=f"goal {n}",
                did=f"did {n}",
                forNextAgent=f"next {n}",
                filesTouched=[f"src/f{n}.py"],
            )
            await store.complete(task.id, record, ("queued", "running"))
        elif status != "queued":
            await store.update(
                task.id, ("queued",), status=status, **({"note": "dependency failed"} if status == "skipped" else {})
            )
        if status == "running" or n == 1:
            await store.update(task.id, (status,), attempts=1 if n == 1 else 2)

    await put(1, "research", "done", inputs={"topic": "auth"})
    await put(2, "fix", "running", inputs={"file": "a.py"}, parent=tid(1), depth=1, depends_on=[tid(1)])
    await put(3, "fix", "failed", inputs={"file": "b.py"}, parent=tid(1), depth=1)
    await put(4, "research", "skipped", inputs={"topic": "after b"}, depends_on=[tid(3)])
    await put(5, "research", "queued", inputs={"topic": "later"}, depends_on=[tid(2)])


def tree_lines(screen: TasksScreen) -> list[str]:
    tree = screen.query_one("#tasks-tree", Tree)
    return [str(tree.get_node_at_line(i).label) for i in range(tree.last_line + 1)]


async def open_tasks(pilot) -> TasksScreen:
    app = pilot.app
    await until(lambda: app.main.read_count > 0, what="the first read")
    await pilot.press("ctrl+t")
    await until(lambda: isinstance(app.screen, TasksScreen) and app.screen.read_count > 0, what="the tasks view")
    await pilot.pause()
    return app.screen


async def tasks_with_handoff(pilot) -> None:
    screen = await open_tasks(pilot)
    screen.query_one("#tasks-tree", Tree).focus()
    await pilot.press("down", "enter")  # the first task: done, with a handoff
    await until(lambda: "goal 1" in str(screen.query_one("#tasks-handoff", Static).render()), what="the handoff")
    await pilot.pause()


def test_tasks_view_snapshot(snap_compare, tmp_path: Path, monkeypatch):
    monkeypatch.delenv("WAVEWAIT_AGENT_ID", raising=False)
    bus = FileBus(tmp_path / "bus")
    asyncio.run(seed_graph(bus))
    app = scenes.frozen_app(bus, queue="q1")
    assert snap_compare(app, run_before=tasks_with_handoff, terminal_size=SIZE)


@pytest.mark.anyio
async def test_the_tree_is_by_parent_says_every_status_and_follows_changes(bus, tmp_path):
    await seed_graph(bus)
    app = make_app(bus, queue="q1")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_tasks(pilot)
        lines = tree_lines(screen)
        assert [line.split()[1] for line in lines] == ["done", "running", "failed", "skipped", "queued"]
        assert lines[1].startswith("▶ running  fix") and "depth 1 · attempts 2" in lines[1]
        assert "skipped" in lines[3] and "dependency failed" in lines[3] and "running" not in lines[3]
        tree = screen.query_one("#tasks-tree", Tree)
        assert [str(n.data) for n in tree.root.children] == [tid(1), tid(4), tid(5)]  # roots
        assert [str(n.data) for n in tree.root.children[0].children] == [tid(2), tid(3)]  # children of 1
        # a change on the bus shows without any timer of the view
        await task_store(bus, "q1").update(tid(5), ("queued",), status="running", attempts=1)
        await until(lambda: tree_lines(screen)[4].split()[1] == "running", what="the change")
        # Enter on a task with no handoff says why
        tree.focus()
        await pilot.press("down", "down", "down", "down", "enter")
        pane = screen.query_one("#tasks-handoff", Static)
        await until(lambda: "no handoff yet: dependency failed" in str(pane.render()), what="the skipped task")


@pytest.mark.anyio
async def test_a_guard_trip_is_a_notification_and_the_event_stays_for_the_orchestrator(file_bus):
    q = TaskQueue.open(file_bus, "q1", parse_task_types(TYPES))
    await enqueue_task(q, "orchestrator", type="research", inputs={"topic": "a"}, reason="r")
    app = make_app(file_bus, queue="q1")
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.read_count > 0, what="the first read")
        await pilot.pause()
        with pytest.raises(GuardTripped):
            await enqueue_task(q, "orchestrator", type="research", inputs={"topic": "a"}, reason="r")
        await until(lambda: any(n.startswith("guard dedup tripped (research)") for n in app.notices), what="toast")
    assert [i.type for i in await file_bus.peek("orchestrator")] == ["guard_tripped"]  # not taken


@pytest.mark.anyio
async def test_without_a_queue_there_is_no_tasks_view(file_bus):
    app = make_app(file_bus)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.read_count > 0, what="the first read")
        assert app.check_action("tasks", ()) is False  # not offered in the footer either
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert not isinstance(app.screen, TasksScreen)


@pytest.mark.anyio
async def test_the_tasks_command_opens_the_view_or_says_how_to_have_one(file_bus):
    app = make_app(file_bus, queue="q1")
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.read_count > 0, what="the first read")
        await type_command(pilot, "/tasks")
        await until(lambda: isinstance(app.screen, TasksScreen), what="the tasks view")
    bare = make_app(file_bus)
    async with bare.run_test(size=SIZE) as pilot:
        await until(lambda: bare.main.read_count > 0, what="the first read")
        await type_command(pilot, "/tasks")
        await until(lambda: "no task queue here: start wavewait with --queue NAME" in screen_text(bare), what="why")
        assert not isinstance(bare.screen, TasksScreen)


@pytest.mark.anyio
async def test_the_palette_entry_of_tasks_opens_the_view(file_bus):
    app = make_app(file_bus, queue="q1")
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.read_count > 0, what="the first read")
        await pilot.press("ctrl+p")
        await pilot.press(*"/tasks")
        await until(lambda: "open the task queue's view" in screen_text(app), what="the palette hit")
        await pilot.press("enter")
        await until(lambda: isinstance(app.screen, TasksScreen), what="the tasks view from the palette")


@pytest.mark.anyio
async def test_the_queue_demo_runs_a_graph_with_one_failure_in_the_tasks_view(file_bus, tmp_path, monkeypatch):
    monkeypatch.setenv("WAVEWAIT_LOG_DIR", str(tmp_path / "logs"))
    app = make_app(file_bus, queue_demo=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: any(n.startswith("queue demo finished") for n in app.notices), 120, "the demo's end")
        assert "queue demo finished: 5 done, 1 failed, 1 skipped" in app.notices
        assert any(n.startswith("guard dedup tripped (research)") for n in app.notices)
        screen = app.screen
        assert isinstance(screen, TasksScreen)
        await until(lambda: sum(t.status == "done" for t in screen.tasks.values()) == 5, what="the view's last read")
        statuses = sorted(line.split()[1] for line in tree_lines(screen))
        assert statuses == ["done"] * 5 + ["failed", "skipped"]
        grown = [t for t in screen.tasks.values() if t.parent is not None]
        assert len(grown) == 1 and grown[0].depth == 1  # an agent grew the graph
        await pilot.pause()
