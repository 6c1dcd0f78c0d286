"""The task-queue tools: enqueue_task, complete_task, read_handoffs, list_tasks.

They exist only on a server started with a queue (`--queue NAME` or `WAVEWAIT_QUEUE`). A
server whose caller is a task's agent (`WAVEWAIT_TASK_ID`) is bound to it: its enqueues are
that task's children and `complete_task` defaults to it. Bound to a leaf task, the server
leaves `enqueue_task` out of `tools/list`, and a call is refused by the `leaf` guard.
Each tool is a typed function over the core (`core/tasks.py`), like those in `tools.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from ..core import tasks
from ..core.bus import Bus
from ..core.tasks import Completed, Enqueued, HandoffList, Task, TaskList, TaskQueue
from .settings import Settings
from .toolkit import declare, structured

ENQUEUE_DOC = (
    "Add a task to the queue: a fresh agent will be started for it once every task in dependsOn is "
    "done, with the type's prompt rendered from inputs and the handoffs of its dependencies. "
    "Returns {id, type, depth, status: 'queued'}. Enqueue only work that is needed and not already "
    "queued; guards refuse, as an error that names the guard: budget (the queue holds --max-tasks "
    "tasks), depth (this task is at --max-depth), dedup (a task of the same type with equal inputs "
    "exists and has not failed: read its handoff instead), unknown_type (the error lists the valid "
    "types), unknown_dependency, leaf (leaf tasks cannot enqueue). The queue owner is told of every "
    "guard trip with a guard_tripped event (wait_for_event types=['guard_tripped']). "
)
COMPLETE_DOC = (
    "Finish a task with its handoff: what it was asked (goals), what you did (did), and what the "
    "next agent should know (forNextAgent), plus filesTouched. Every text field is required, "
    "non-empty and at most 16 KiB. status 'done' lets the tasks that depend on it start; 'failed' "
    "is final (no retry) and its dependents are skipped. taskId defaults to the task this process "
    "is the agent of. A task is completed once. Returns {taskId, status}."
)
HANDOFFS_DOC = (
    "Read handoffs: of every task of a type (type), of one task (taskId), or with neither, of the "
    "tasks this task depends on, transitively, nearest first. Returns {handoffs: [{taskId, type, "
    "status, goals, did, forNextAgent, filesTouched}]}."
)
LIST_DOC = (
    "The queue's tasks in enqueue order: {tasks: [{id, type, status, depth, parent, dependsOn, "
    "attempts, inputs, reason}]}. Statuses: queued, running, done, failed, skipped (a dependency "
    "failed: it will never run)."
)

HANDOFF_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "goals": {"type": "string", "description": "What the task was asked to achieve."},
        "did": {"type": "string", "description": "What you did, and what came of it."},
        "forNextAgent": {"type": "string", "description": "What the agents after you need to know."},
        "filesTouched": {"type": "array", "items": {"type": "string"}, "description": "Paths you changed."},
    },
    "required": ["goals", "did", "forNextAgent"],
    "additionalProperties": False,
}
TaskId = Annotated[str | None, Field(description="A task id (from enqueue_task or list_tasks).")]


def reply(result: BaseModel) -> CallToolResult:
    """A queue result as every tool answers (toolkit.structured)."""
    return structured(tasks.result_json(result))


@dataclass(frozen=True)
class QueueSetup:
    """The queue a server serves, and the task its caller is bound to (if any)."""

    queue: TaskQueue
    bound: Task | None = None

    @property
    def leaf(self) -> bool:
        return self.bound is not None and tasks.is_leaf(self.queue, self.bound)


async def open_queue(bus: Bus, s: Settings) -> QueueSetup:
    """The settings' queue on `bus`; a bound task that does not exist is an error (exit 2)."""
    assert s.queue
    types = tasks.load_task_types(s.task_types) if s.task_types else {}
    q = TaskQueue.open(bus, s.queue, types, s.limits)
    bound = await q.task(s.task_id, "WAVEWAIT_TASK_ID") if s.task_id else None
    return QueueSetup(q, bound)


def register_queue_tools(server: MCPServer, bus: Bus, s: Settings, setup: QueueSetup) -> frozenset[str]:
    """The four queue tools on `setup.queue`, acting as `s.caller` (bound to `setup.bound`).

    Returns the tools to leave out of `tools/list` (still refused by their guard when called):
    `enqueue_task` when bound to a leaf task.
    """
    q, bound = setup.queue, setup.bound.id if setup.bound else None
    tool = declare(server)

    @tool("enqueue_task", ENQUEUE_DOC, "Add a task to the queue", read_only=False)
    async def enqueue_task(
        type: Annotated[str, Field(description="A task type of the queue, e.g. 'research'.")],
        inputs: Annotated[
            dict[str, Any], Field(description="The values the type's prompt uses, e.g. {'topic': 'auth'}.")
        ],
        reason: Annotated[str, Field(description="In a sentence, why this task is needed.")],
        dependsOn: Annotated[
            list[str] | None, Field(description="Ids of tasks that must be done before this one starts.")
        ] = None,
        model: Annotated[str | None, Field(description="A model for the task's agent, if it may choose.")] = None,
    ) -> Annotated[CallToolResult, Enqueued]:
        r = await tasks.enqueue_task(
            q, s.caller, type=type, inputs=inputs, reason=reason, depends_on=dependsOn, model=model, bound=bound
        )
        return reply(r)

    @tool("complete_task", COMPLETE_DOC, "Finish a task with its handoff", read_only=False)
    async def complete_task(
        status: Annotated[Literal["done", "failed"], Field(description="done, or failed (final: no retry).")],
        handoff: Annotated[
            dict[str, Any],
            Field(description="{goals, did, forNextAgent, filesTouched?}", json_schema_extra=HANDOFF_SCHEMA),
        ],
        taskId: TaskId = None,
    ) -> Annotated[CallToolResult, Completed]:
        r = await tasks.complete_task(q, s.caller, status=status, handoff=handoff, task_id=taskId, bound=bound)
        return reply(r)

    @tool("read_handoffs", HANDOFFS_DOC, "Read the handoffs of tasks", read_only=True, idempotent=True)
    async def read_handoffs(
        type: Annotated[str | None, Field(description="Every handoff of tasks of this type.")] = None,
        taskId: TaskId = None,
    ) -> Annotated[CallToolResult, HandoffList]:
        found = HandoffList.model_validate(await tasks.read_handoffs(q, type=type, task_id=taskId, bound=bound))
        return reply(found)

    @tool("list_tasks", LIST_DOC, "List the queue's tasks", read_only=True, idempotent=True)
    async def list_tasks(
        status: Annotated[
            Literal["queued", "running", "done", "failed", "skipped"] | None,
            Field(description="Only tasks with this status."),
        ] = None,
    ) -> Annotated[CallToolResult, TaskList]:
        found = TaskList.model_validate(await tasks.list_tasks(q, status))
        return reply(found)

    return frozenset({"enqueue_task"}) if setup.leaf else frozenset()
