"""The task queue up close: its tasks as a tree by parent, live, and a task's handoff on Enter.

Every line says the task's status in words (`skipped` and `failed` are never drawn as
running), its type, id, depth and attempts. The screen follows the queue's change stream
(`TaskStore.subscribe`): it reads again when the bus says something changed, never on a timer.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static, Tree
from textual.widgets.tree import TreeNode

from ...core.bus import Bus
from ...core.ids import short
from ...core.tasks import Task, TaskStore, task_store
from ..host import host_of

READ_EVERY = 0.1  # a burst of changes is read at most ten times a second
GLYPHS = {"queued": "·", "running": "▶", "done": "✓", "failed": "✗", "skipped": "⤼"}
ROLE = {"queued": "closed", "running": "running", "done": "good", "failed": "bad", "skipped": "warn"}


class TasksScreen(ModalScreen[None]):
    CSS_PATH = "tasks.tcss"
    BINDINGS = [Binding("escape,q", "dismiss", "Close")]

    def __init__(self, bus: Bus, queue: str) -> None:
        super().__init__()
        self.bus, self.queue = bus, queue
        self.store: TaskStore = task_store(bus, queue)
        self.tasks: dict[str, Task] = {}
        self.read_count = 0
        self.shown: str | None = None  # the task whose handoff is open

    def compose(self) -> ComposeResult:
        with Vertical(id="tasks-box"):
            yield Static(id="tasks-title")
            tree: Tree[str] = Tree(f"queue {self.queue}", id="tasks-tree")
            tree.show_root = False
            tree.auto_expand = False  # Enter opens the handoff; it does not fold the branch
            yield tree
            yield Static("Enter on a task opens its handoff", id="tasks-handoff")

    def on_mount(self) -> None:
        self.follow()

    @work(exclusive=True, group="tasks", exit_on_error=False)
    async def follow(self) -> None:
        """Subscribe, then read; read again after every change (coalesced)."""
        changes = await self.store.subscribe()
        try:
            while True:
                started = time.monotonic()
                self.show(await self.store.tasks())
                if self.shown is not None:
                    await self.show_handoff(self.shown)
                await changes.wait()
                await asyncio.sleep(max(0.0, READ_EVERY - (time.monotonic() - started)))
        finally:
            changes.close()

    def label(self, t: Task) -> Text:
        roles = host_of(self.app).roles
        line = Text()
        line.append(f"{GLYPHS[t.status]} {t.status:<8}", style=roles[ROLE[t.status]])
        line.append(f" {t.type:<10}", style="bold")
        line.append(f" {short(t.id)}", style="dim")
        line.append(f"  depth {t.depth} · attempts {t.attempts}")
        if t.depends_on:
            line.append(f" · after {', '.join(short(d) for d in t.depends_on)}", style="dim")
        if t.note and t.status in ("failed", "skipped"):
            line.append(f" · {t.note}", style=roles[ROLE[t.status]])
        return line

    def show(self, tasks: list[Task]) -> None:
        """Rebuild the tree (children under their parent, in enqueue order), keeping the cursor."""
        self.tasks = {t.id: t for t in tasks}
        self.read_count += 1
        children: dict[str | None, list[Task]] = defaultdict(list)
        for t in tasks:
            children[t.parent if t.parent in self.tasks else None].append(t)
        tree = self.query_one("#tasks-tree", Tree)
        at = tree.cursor_node.data if tree.cursor_node is not None else None
        tree.clear()
        keep: TreeNode[str] | None = None

        def add(node: TreeNode[str], parent: str | None) -> None:
            nonlocal keep
            for t in children.get(parent, []):
                kids = children.get(t.id)
                child = (
                    node.add(self.label(t), data=t.id, expand=True) if kids else node.add_leaf(self.label(t), data=t.id)
                )
                if t.id == at:
                    keep = child
                add(child, t.id)

        add(tree.root, None)
        if keep is not None:
            tree.move_cursor(keep)
        counts = {s: sum(1 for t in tasks if t.status == s) for s in GLYPHS}
        title = Text(f"Tasks of queue {self.queue}: ", style="bold")
        title.append(" · ".join(f"{n} {s}" for s, n in counts.items() if n) or "no tasks yet")
        self.query_one("#tasks-title", Static).update(title)

    def on_tree_node_selected(self, event: Tree.NodeSelected[str]) -> None:
        if event.node.data is not None:
            self.shown = event.node.data
            self.run_worker(self.show_handoff(event.node.data), group="handoff", exclusive=True)

    async def show_handoff(self, task_id: str) -> None:
        pane = self.query_one("#tasks-handoff", Static)
        task = self.tasks.get(task_id)
        h = await self.store.handoff(task_id)
        text = Text()
        text.append(f"{task.type if task else '?'} {task_id}", style="bold")
        if task is not None:
            text.append(f"  {task.status}", style=host_of(self.app).roles[ROLE[task.status]])
            text.append(f"\nreason: {task.reason}", style="dim")
        if h is None:
            why = task.note if task is not None and task.note else "it has not been completed"
            text.append(f"\nno handoff yet: {why}")
        else:
            text.append(f"\ngoals: {h.goals}\ndid: {h.did}\nfor the next agent: {h.for_next_agent}")
            if h.files_touched:
                text.append(f"\nfiles touched: {', '.join(h.files_touched)}")
        pane.update(text)


async def follow_guard_trips(bus: Bus, me: str, notice: Callable[[str], None], since: float) -> None:
    """Toast each `guard_tripped` event sent to `me` at or after `since`, once. It peeks and
    never takes: the events are the orchestrator's to read with `wait_for_event`."""
    seen: set[str] = set()
    changes = await bus.subscribe(inboxes=[me])
    try:
        while True:
            for item in await bus.history(me, 200) + await bus.peek(me):
                if item.type == "guard_tripped" and item.sent_at >= since and item.id not in seen:
                    seen.add(item.id)
                    d = item.data
                    notice(f"guard {d.get('guard')} tripped ({d.get('task_type')}): {d.get('reason')}")
            await changes.wait()
    finally:
        changes.close()
