"""The task queue: typed tasks that agents enqueue, complete with a handoff, and read back.

A queue lives on the bus (a folder per queue, or rows in PostgreSQL; each bus hands out its
own store, `Bus.tasks`: `bus/file_tasks.py` and `bus/pg_tasks.py`; their records are in
`model.py`), so the runner, every task agent's MCP server, the CLI and the TUI
see one graph. Dynamic enqueue is held in by guards, each an error that names it and a
`guard_tripped` event in the queue owner's inbox (`wait_for_event types=["guard_tripped"]`):
`budget`, `depth`, `dedup`, `unknown_type`, `unknown_dependency`, `leaf`.

A process whose environment names `WAVEWAIT_TASK_ID` is that task's agent ("bound"): its
enqueues are the task's children and `complete_task` defaults to it.
"""

from __future__ import annotations

import json
import os
import string
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# The records live in model.py and the store's protocol in bus/ (the stores, below this
# module, read them there); the queue's users know them by this module: re-exported.
from .bus import Bus
from .bus import TaskStore as TaskStore
from .errors import BadInput, ForgedSender
from .identity import check_sender, flight_of_process
from .ids import check_id, new_id
from .limits import MAX_ID_LEN, shown
from .model import FINISHED as FINISHED
from .model import STATUSES as STATUSES
from .model import Agent, Item
from .model import Handoff as Handoff
from .model import HandoffRecord as HandoffRecord
from .model import Task as Task
from .model import TaskStatus as TaskStatus

Guard = Literal["budget", "depth", "dedup", "unknown_type", "unknown_dependency", "leaf"]

DEFAULT_MAX_TASKS = 25
DEFAULT_MAX_DEPTH = 4
DEFAULT_MAX_ATTEMPTS = 2
MAX_TEXT = 16 * 1024  # bytes (UTF-8) of each handoff text field
MAX_FILES_TOUCHED = 1000
MAX_INPUTS = 64 * 1024  # bytes of a task's inputs as JSON
MAX_REASON = 4 * 1024
MAX_DEPENDS = 100
MAX_TYPES_FILE = 1024 * 1024


class TaskError(BadInput):
    """A queue operation that is not allowed (unknown task, completed twice, ...)."""


class GuardTripped(TaskError):
    """An enqueue refused by a guard; the owner was told with a `guard_tripped` event."""

    def __init__(self, guard: Guard, task_type: str, reason: str) -> None:
        super().__init__(f"{guard}: {reason}")
        self.guard = guard
        self.task_type = task_type
        self.reason = reason


# --------------------------------------------------------------------------- task types
class TaskType(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    prompt: str
    leaf: bool = False
    fields: tuple[str, ...] = ()  # the input names the prompt uses
    preset: str | None = None  # an agent preset (core/presets.py) the runner starts for it, not --agent-command


def _prompt_fields(prompt: str, where: str) -> tuple[str, ...]:
    try:
        parsed = list(string.Formatter().parse(prompt))
    except ValueError as e:
        raise BadInput(f"{where}: not a valid format string ({e}); write {{{{ and }}}} for literal braces") from e
    names: list[str] = []
    for _, field, _, _ in parsed:
        if field is None:
            continue
        root = field.split(".", 1)[0].split("[", 1)[0]
        if not root or root.isdigit():
            raise BadInput(f"{where}: use named fields such as {{topic}}, not {{{field}}}")
        if root not in names:
            names.append(root)
    return tuple(names)


def parse_task_types(text: str, source: str = "task types") -> dict[str, TaskType]:
    """Task types from TOML text: `[types.NAME]` tables with `prompt`, `description`, `leaf`, `preset`."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{source}: not valid TOML ({e})") from e
    tables = data.get("types")
    if not isinstance(tables, dict) or not tables:
        raise BadInput(f'{source}: no task types; add tables like [types.research] with prompt = "Research {{topic}}."')
    types: dict[str, TaskType] = {}
    for name, table in tables.items():
        where = f"{source}: [types.{name}]"
        if not isinstance(table, dict):
            raise BadInput(f"{where} must be a table with prompt, description and leaf")
        check_id(name, where)
        unknown = set(table) - {"prompt", "description", "leaf", "preset"}
        if unknown:
            raise BadInput(
                f"{where}: unknown key(s) {', '.join(sorted(unknown))}; the keys are prompt, description, leaf, preset"
            )
        preset = table.get("preset")
        if preset is not None and (not isinstance(preset, str) or not preset):
            raise BadInput(f'{where}: preset must be the name of an agent preset, e.g. "claude" or "codex"')
        prompt, description, leaf = table.get("prompt"), table.get("description", ""), table.get("leaf", False)
        if not isinstance(prompt, str) or not prompt.strip():
            raise BadInput(f'{where}: prompt is missing; give the text the agent gets, e.g. "Fix {{file}}."')
        if not isinstance(description, str):
            raise BadInput(f"{where}: description must be a string")
        if not isinstance(leaf, bool):
            raise BadInput(f"{where}: leaf must be true or false")
        fields = _prompt_fields(prompt, f"{where} prompt")
        types[name] = TaskType(
            name=name, description=description, prompt=prompt, leaf=leaf, fields=fields, preset=preset
        )
    return types


def queue_name(explicit: str | None = None) -> str | None:
    """`--queue NAME`, else `WAVEWAIT_QUEUE`; None when no queue is named (the queue tools are off)."""
    value = explicit or os.environ.get("WAVEWAIT_QUEUE") or None
    return None if value is None else check_queue(value)


def task_types_path(explicit: str | None = None) -> str | None:
    """`--task-types FILE`, else `WAVEWAIT_TASK_TYPES`."""
    return explicit or os.environ.get("WAVEWAIT_TASK_TYPES") or None


def load_task_types(path: str | os.PathLike[str]) -> dict[str, TaskType]:
    """Read the task types TOML file (`--task-types` / `WAVEWAIT_TASK_TYPES`)."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_TYPES_FILE:
            raise BadInput(f"task types {p}: larger than {MAX_TYPES_FILE} bytes; is it the right file?")
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise BadInput(f"task types {p}: cannot read it ({e.strerror}); pass --task-types FILE") from e
    except UnicodeDecodeError as e:
        raise BadInput(f"task types {p}: not UTF-8 text") from e
    return parse_task_types(text, f"task types {p}")


def render_prompt(task_type: TaskType, inputs: dict[str, Any]) -> str:
    """The type's prompt, `str.format` over the task's inputs."""
    missing = [f for f in task_type.fields if f not in inputs]
    if missing:
        raise BadInput(
            f"inputs: the prompt of type {task_type.name!r} uses "
            + ", ".join("{" + f + "}" for f in missing)
            + f"; add {', '.join(repr(f) for f in missing)} to inputs"
        )
    try:
        return task_type.prompt.format(**inputs)
    except (KeyError, IndexError, AttributeError, ValueError, TypeError) as e:
        raise BadInput(f"inputs: cannot render the prompt of type {task_type.name!r}: {e!r}; check the inputs") from e


# --------------------------------------------------------------------------- records
class Limits(BaseModel):
    """The guards' limits: flags of `wavewait mcp` and `run-queue`, passed on to task agents."""

    model_config = ConfigDict(frozen=True)

    max_tasks: int = Field(default=DEFAULT_MAX_TASKS, ge=1, le=1_000_000)
    max_depth: int = Field(default=DEFAULT_MAX_DEPTH, ge=0, le=1000)
    max_attempts: int = Field(default=DEFAULT_MAX_ATTEMPTS, ge=1, le=100)

    @classmethod
    def from_env(cls, **explicit: int | None) -> Limits:
        """Flags given, else `WAVEWAIT_MAX_TASKS` / `_MAX_DEPTH` / `_MAX_ATTEMPTS`, else defaults."""
        values: dict[str, int] = {}
        for name in cls.model_fields:
            value = explicit.get(name)
            if value is None and (raw := os.environ.get(f"WAVEWAIT_{name.upper()}")):
                try:
                    value = int(raw)
                except ValueError:
                    raise BadInput(f"WAVEWAIT_{name.upper()}: must be a whole number, got {raw!r}") from None
            if value is not None:
                values[name] = value
        try:
            return cls(**values)
        except ValueError as e:
            raise BadInput(f"limits: {e}") from None

    def env(self) -> dict[str, str]:
        return {f"WAVEWAIT_{name.upper()}": str(getattr(self, name)) for name in type(self).model_fields}


_HANDOFF_TEXT = ("goals", "did", "forNextAgent")
_HANDOFF_HELP = (
    "give handoff as {goals: what the task was asked to achieve, did: what you did, "
    "forNextAgent: what the next agent should know, filesTouched?: [paths]}"
)


def _check_text(value: object, field: str) -> str:
    if value is None:
        raise BadInput(f"{field}: missing; every handoff text field is required")
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"{field}: must be non-empty text")
    size = len(value.encode())
    if size > MAX_TEXT:
        raise BadInput(f"{field}: at most {MAX_TEXT} bytes (16 KiB), got {size}; shorten it")
    return value


def check_handoff(value: object) -> Handoff:
    """A handoff from outside, checked field by field so the error names what to fix."""
    if isinstance(value, Handoff):
        value = value.model_dump(by_alias=True)
    if not isinstance(value, dict):
        raise BadInput(f"handoff: must be an object; {_HANDOFF_HELP}")
    unknown = set(value) - {*_HANDOFF_TEXT, "filesTouched"}
    if unknown:
        raise BadInput(f"handoff: unknown field(s) {', '.join(sorted(map(str, unknown)))}; {_HANDOFF_HELP}")
    texts = {f: _check_text(value.get(f), f"handoff.{f}") for f in _HANDOFF_TEXT}
    files = value.get("filesTouched")
    if files is None:
        files = []
    if not isinstance(files, list):
        raise BadInput("handoff.filesTouched: must be a list of paths")
    if len(files) > MAX_FILES_TOUCHED:
        raise BadInput(f"handoff.filesTouched: at most {MAX_FILES_TOUCHED} paths, got {len(files)}")
    files = [_check_text(f, f"handoff.filesTouched[{i}]") for i, f in enumerate(files)]
    return Handoff.model_validate(texts | {"filesTouched": files})


# --------------------------------------------------------------------------- results
class Enqueued(BaseModel):
    """`enqueue_task`: the new task."""

    id: str
    type: str
    depth: int
    status: Literal["queued"] = "queued"


class Completed(BaseModel):
    """`complete_task`: the task and how it ended."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    task_id: str = Field(alias="taskId")
    status: Literal["done", "failed"]


class TaskInfo(BaseModel):
    """One task as `list_tasks` and `wavewait tasks` show it."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    id: str
    type: str
    status: TaskStatus
    depth: int
    parent: str | None = None
    depends_on: list[str] = Field(default_factory=list, alias="dependsOn")
    attempts: int = 0
    inputs: dict[str, Any] = Field(default_factory=dict)
    reason: str = ""


class TaskList(BaseModel):
    """`list_tasks`: the queue's tasks in enqueue order."""

    tasks: list[TaskInfo]


class HandoffInfo(BaseModel):
    """One handoff as `read_handoffs` and `wavewait handoffs` show it."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    task_id: str = Field(alias="taskId")
    type: str
    status: Literal["done", "failed"]
    goals: str
    did: str
    for_next_agent: str = Field(alias="forNextAgent")
    files_touched: list[str] = Field(default_factory=list, alias="filesTouched")


class HandoffList(BaseModel):
    """`read_handoffs`: nearest first when they are the bound task's dependencies'."""

    handoffs: list[HandoffInfo]


def result_json(result: BaseModel) -> dict[str, Any]:
    """A queue result as the tools and the CLI give it (camelCase names)."""
    return result.model_dump(mode="json", by_alias=True)


def task_view(task: Task) -> dict[str, Any]:
    """A task as `list_tasks` and `wavewait tasks` show it."""
    return {
        "id": task.id,
        "type": task.type,
        "status": task.status,
        "depth": task.depth,
        "parent": task.parent,
        "dependsOn": list(task.depends_on),
        "attempts": task.attempts,
        "inputs": task.inputs,
        "reason": task.reason,
    }


# --------------------------------------------------------------------------- storage
def check_queue(name: object) -> str:
    return check_id(name, "queue")


def task_store(bus: Bus, queue: str) -> TaskStore:
    """The store of `queue` on `bus` (each bus hands out its own)."""
    return bus.tasks(check_queue(queue))


# --------------------------------------------------------------------------- the queue
@dataclass
class TaskQueue:
    """A queue as a face uses it: the bus, its store, the task types and the limits."""

    bus: Bus
    name: str
    types: dict[str, TaskType]
    limits: Limits
    store: TaskStore

    @classmethod
    def open(cls, bus: Bus, name: str, types: dict[str, TaskType], limits: Limits | None = None) -> TaskQueue:
        return cls(bus, check_queue(name), types, limits or Limits(), task_store(bus, name))

    def type_of(self, name: str) -> TaskType:
        t = self.types.get(name)
        if t is None:
            raise BadInput(f"type: no task type {shown(name)}; the valid types are {', '.join(sorted(self.types))}")
        return t

    async def task(self, task_id: str, field: str = "taskId") -> Task:
        check_id(task_id, field)
        task = await self.store.get(task_id)
        if task is None:
            raise TaskError(f"{field}: no task {task_id!r} in queue {self.name!r}; list_tasks shows the ids")
        return task


def is_leaf(q: TaskQueue, task: Task) -> bool:
    """Whether the task's type is a leaf (its agent cannot enqueue; the MCP face hides the tool)."""
    t = q.types.get(task.type)
    return t is not None and t.leaf


def bound_task_id(explicit: str | None = None) -> str | None:
    """The task this process is the agent of: given, else `WAVEWAIT_TASK_ID`."""
    value = explicit or os.environ.get("WAVEWAIT_TASK_ID") or None
    return None if value is None else check_id(value, "WAVEWAIT_TASK_ID")


async def _trip(q: TaskQueue, caller: str, owner: str, guard: Guard, task_type: str, reason: str) -> GuardTripped:
    """Tell the queue owner (a `guard_tripped` event) and give back the error to raise."""
    await q.bus.deliver(
        Item(
            id=new_id(),
            type="guard_tripped",
            to=owner,
            sender=caller,
            body=f"{guard}: {reason}",
            data={"guard": guard, "task_type": task_type, "reason": reason, "queue": q.name},
        )
    )
    return GuardTripped(guard, task_type, reason)


def _check_inputs(inputs: object) -> dict[str, Any]:
    if not isinstance(inputs, dict):
        raise BadInput('inputs: must be an object of the values the type\'s prompt uses, e.g. {"topic": "auth"}')
    try:
        encoded = json.dumps(inputs, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise BadInput(f"inputs: must be plain JSON (strings, numbers, lists, objects): {e}") from e
    if len(encoded.encode()) > MAX_INPUTS:
        raise BadInput(f"inputs: at most {MAX_INPUTS} bytes as JSON; pass a path to a file instead of its content")
    return dict(json.loads(encoded))


def _check_depends(depends_on: object) -> list[str]:
    if depends_on is None:
        return []
    if isinstance(depends_on, str) or not isinstance(depends_on, list):
        raise BadInput("dependsOn: must be a list of task ids")
    if len(depends_on) > MAX_DEPENDS:
        raise BadInput(f"dependsOn: at most {MAX_DEPENDS} tasks")
    out: list[str] = []
    for i, d in enumerate(depends_on):
        if check_id(d, f"dependsOn[{i}]") not in out:
            out.append(d)
    return out


async def enqueue_task(
    q: TaskQueue,
    caller: str,
    *,
    type: str,
    inputs: dict[str, Any],
    reason: str,
    depends_on: list[str] | None = None,
    model: str | None = None,
    bound: str | None = None,
) -> Enqueued:
    """Add a task. `bound` (the caller's own task) makes it that task's child, one level deeper.

    Plain bad input changes nothing and tells nobody; a guard also sends `guard_tripped` to
    the queue owner (the unbound enqueuer, or the owner of the bound task's branch).
    """
    if not q.types:
        raise BadInput("type: this queue has no task types; pass --task-types FILE or set WAVEWAIT_TASK_TYPES")
    if not isinstance(type, str) or not type or len(type) > MAX_ID_LEN:  # a type's name is an id (load_task_types)
        raise BadInput(f"type: must be the name of a task type; the valid types are {', '.join(sorted(q.types))}")
    inputs = _check_inputs(inputs)
    deps = _check_depends(depends_on)
    if not isinstance(reason, str) or not reason.strip():
        raise BadInput("reason: say in a sentence why this task is needed")
    if len(reason) > MAX_REASON:
        raise BadInput(f"reason: at most {MAX_REASON} characters")
    if model is not None and (not isinstance(model, str) or not model.strip() or len(model) > 200):
        raise BadInput("model: must be a model name (non-empty, at most 200 characters), or omitted")
    parent = await q.task(bound, "WAVEWAIT_TASK_ID") if bound else None
    owner = parent.owner if parent else caller
    depth = parent.depth + 1 if parent else 0
    task_type = q.types.get(type)
    if task_type is None:
        raise await _trip(
            q, caller, owner, "unknown_type", type,
            f"no task type {type!r}; the valid types are {', '.join(sorted(q.types))}",
        )  # fmt: skip
    if parent is not None and is_leaf(q, parent):
        raise await _trip(
            q, caller, owner, "leaf", type,
            f"task {parent.id} is of leaf type {parent.type!r}, which cannot enqueue; finish it with complete_task "
            "and say in forNextAgent what else is needed",
        )  # fmt: skip
    if parent is not None and parent.depth >= q.limits.max_depth:
        raise await _trip(
            q, caller, owner, "depth", type,
            f"task {parent.id} is at depth {parent.depth}, the limit is {q.limits.max_depth} (--max-depth); do "
            "the work in this task, or say in forNextAgent what is left",
        )  # fmt: skip
    found = await q.store.some(deps) if deps else {}  # one read for all of them
    for i, dep in enumerate(deps):
        if dep not in found:
            raise await _trip(
                q, caller, owner, "unknown_dependency", type,
                f"dependsOn[{i}]: no task {dep!r} in queue {q.name!r}; list_tasks shows the ids",
            )  # fmt: skip
    render_prompt(task_type, inputs)  # inputs the prompt cannot use are bad input, not a guard
    task = Task(
        id=new_id(),
        queue=q.name,
        type=type,
        inputs=inputs,
        depth=depth,
        parent=parent.id if parent else None,
        depends_on=deps,
        model=model,
        reason=reason,
        owner=owner,
    )
    conflict = await q.store.add(task, q.limits.max_tasks)
    if conflict is not None and conflict.guard == "budget":
        raise await _trip(
            q, caller, owner, "budget", type,
            f"queue {q.name!r} already holds {conflict.count} tasks, the budget is {q.limits.max_tasks} "
            "(--max-tasks); do the work in an existing task instead",
        )  # fmt: skip
    if conflict is not None:
        raise await _trip(
            q, caller, owner, "dedup", type,
            f"task {conflict.existing} already has type {type!r} and the same inputs; read its handoff "
            "(read_handoffs taskId) instead of enqueueing it again",
        )  # fmt: skip
    return Enqueued(id=task.id, type=task.type, depth=task.depth)


async def complete_task(
    q: TaskQueue,
    caller: str,
    *,
    status: str,
    handoff: object,
    task_id: str | None = None,
    bound: str | None = None,
) -> Completed:
    """Finish a task (the bound one by default) with its handoff; a task is completed once."""
    if status not in ("done", "failed"):
        raise BadInput(f"status: must be 'done' or 'failed', got {status!r}")
    checked = check_handoff(handoff)
    target = task_id or bound
    if not target:
        raise BadInput(
            "{taskId}: this process is bound to no task (WAVEWAIT_TASK_ID is unset); pass {taskId}", fields=("taskId",)
        )
    check_id(target, "taskId")
    check_id(caller, "agent")
    # one compare-and-set, no read before it: the store files the handoff under the task's type
    record = HandoffRecord.model_validate(
        checked.model_dump(by_alias=True) | {"taskId": target, "type": "", "status": status}
    )
    done = await _complete_as(q, caller, target, record)
    if done is None:
        current = await q.task(target)  # no such task, or finished already
        raise TaskError(f"taskId: task {current.id} is already {current.status}; a task is completed once")
    if bound == done.id:  # the task's own agent finished its job: idle (docs/words.md)
        await q.bus.transition(caller, "idle", ("running",))
    return Completed(task_id=done.id, status=record.status)


_OPEN: tuple[TaskStatus, ...] = ("queued", "running")


async def _complete_as(q: TaskQueue, caller: str, target: str, record: HandoffRecord) -> Task | None:
    """Complete `target` as `caller`, who must back the claim (`check_sender`), and, if it is
    a flight, complete only its own task. The common cases cost the one compare-and-set, with
    who may complete as its conditions: this process's flight is known without a read
    (`flight_of_process`, cached), and "`caller` is no flight" is checked by the store in the
    same step. Only when that step refuses is the caller's record read, to say why."""
    mine = await flight_of_process(q.bus)
    if mine is not None and mine.id == caller:  # one of the flight's own processes
        done = await q.store.complete(target, record, _OPEN, run_by=caller)
        if done is None:
            await _own_task(q, mine, target)
        return done
    if mine is None:  # a process inside no flight: as anyone who is no flight, at once
        done = await q.store.complete(target, record, _OPEN, not_flight=caller)
        if done is not None:
            return done
    me = await q.bus.get_agent(caller)
    await check_sender(q.bus, caller, me)  # refuses a claim this process cannot back
    if me is None or me.supervisor_pid is None:
        return None  # no flight: the compare-and-set found the task missing or finished
    await _own_task(q, me, target)  # a flight on another host, with its credential
    return await q.store.complete(target, record, _OPEN, run_by=caller)


async def _own_task(q: TaskQueue, flight: Agent, target: str) -> None:
    """Refuse (`ForgedSender`) a flight completing a task that is not the one it runs."""
    task = await q.task(target)
    if task.agent_id != flight.id:
        raise ForgedSender(
            f"taskId: task {task.id} is not the task of flight {flight.name} ({flight.id})"
            + (f" but of {task.agent_id}" if task.agent_id else "")
            + "; a flight completes only the task it runs; nothing was changed"
        )


async def upstream(q: TaskQueue, task: Task, known: dict[str, Task] | None = None) -> list[Task]:
    """The task's dependencies, transitively, nearest first (breadth first, each once).
    `known` (the queue as the caller just read it) saves reading each dependency."""
    seen: set[str] = {task.id}
    order: list[Task] = []
    level = list(task.depends_on)
    while level:
        nxt: list[str] = []
        for dep_id in level:
            if dep_id in seen:
                continue
            seen.add(dep_id)
            dep = known.get(dep_id) if known is not None else None
            if dep is None:
                dep = await q.store.get(dep_id)
            if dep is None:
                continue
            order.append(dep)
            nxt.extend(dep.depends_on)
        level = nxt
    return order


async def upstream_handoffs(q: TaskQueue, task: Task, known: dict[str, Task] | None = None) -> list[HandoffRecord]:
    deps = await upstream(q, task, known)
    found = await q.store.handoffs_of([d.id for d in deps]) if deps else {}
    return [found[d.id] for d in deps if d.id in found]


async def read_handoffs(
    q: TaskQueue,
    *,
    type: str | None = None,
    task_id: str | None = None,
    bound: str | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Handoffs of a type, of one task, or (neither) of the bound task's dependencies."""
    if type is not None and task_id is not None:
        raise BadInput("give type or taskId, not both")
    if task_id is not None:
        task = await q.task(task_id)
        h = await q.store.handoff(task.id)
        found = [h] if h is not None else []
    elif type is not None:
        q.type_of(type)
        found = [h for h in await q.store.handoffs() if h.type == type]
    elif bound:
        found = await upstream_handoffs(q, await q.task(bound, "WAVEWAIT_TASK_ID"))
    else:
        raise BadInput("give type or taskId (this process is bound to no task: WAVEWAIT_TASK_ID is unset)")
    return {"handoffs": [h.view() for h in found]}


async def list_tasks(q: TaskQueue, status: str | None = None) -> dict[str, list[dict[str, Any]]]:
    if status is not None and status not in STATUSES:
        raise BadInput(f"status: must be one of {', '.join(STATUSES)}, got {status!r}")
    return {"tasks": [task_view(t) for t in await q.store.tasks() if status in (None, t.status)]}


def handoff_text(handoffs: Sequence[HandoffRecord]) -> str:
    """Handoffs as the runner appends them to a prompt (nearest first)."""
    blocks = []
    for h in handoffs:
        lines = [
            f"## Handoff from task {h.task_id} ({h.type}, {h.status})",
            f"Goals: {h.goals}",
            f"Did: {h.did}",
            f"For the next agent: {h.for_next_agent}",
        ]
        if h.files_touched:
            lines.append(f"Files touched: {', '.join(h.files_touched)}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


async def task_prompt(q: TaskQueue, task: Task, known: dict[str, Task] | None = None) -> str:
    """The prompt a task's agent gets: its rendered prompt, then its dependencies' handoffs."""
    prompt = render_prompt(q.type_of(task.type), task.inputs)
    handoffs = await upstream_handoffs(q, task, known)
    if not handoffs:
        return prompt
    return f"{prompt}\n\n# Handoffs of the tasks before this one (nearest first)\n\n{handoff_text(handoffs)}"
