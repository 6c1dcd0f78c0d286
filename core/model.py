"""Records that cross a process boundary: agents, inbox items, wait records, MCP tasks,
the task queue's tasks and handoffs.

Every record carries `v`, its schema version, so a newer reader can tell an old file
from a foreign one (foreign and malformed files go to quarantine, never into a wait).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

#: `queued`: spawned into a wave at its limit of running flights (core/admission.py); it
#: starts, as `running`, when a slot frees, or ends (killed, closed) without ever running
AgentStatus = Literal["queued", "running", "idle", "closed", "dead"]
#: a wait result's word for one flight; `reported`: its report is queued in your inbox, not
#: taken (it did not fit the result's output budget)
TargetStatus = Literal[
    "received", "reported", "queued", "running", "idle", "dead", "closed", "needs_input", "check_failed"
]
#: a flight's one word in every face (panel, CLI, MCP results, docs): its lifecycle status,
#: or `needs_input` while a question it asked is unanswered (`Agent.state`)
FlightState = Literal["queued", "running", "idle", "needs_input", "closed", "dead"]
WaitKind = Literal["next", "fan_in", "agent", "signal", "event"]

#: Items that agents send: a flight's reports (`is_report`); `wait` takes these. System
#: events are only for `wait_for_event`.
AGENT_ITEM_TYPES = frozenset({"message", "worker_complete", "question"})
SYSTEM_ITEM_TYPES = frozenset({"agent_dead", "guard_tripped", "item_quarantined"})
SYSTEM_EVENTS_KEPT = 1000

AGENT_VERSION = 1
ITEM_VERSION = 1
WAIT_VERSION = 1


def now() -> float:
    return time.time()


def is_report(item_type: str) -> bool:
    """Whether an item of this type is a flight's report (docs/words.md, "reported"): a
    message, its completion or a question. The one test: waits take these, the panel's
    `N/M reported` counts them, and a flight's first one stamps its `reported_at`
    (core/messages.py), which the merge queue reads (core/merge/plan.py)."""
    return item_type in AGENT_ITEM_TYPES


class Record(BaseModel):
    model_config = ConfigDict(extra="ignore")


class WorktreeInfo(Record):
    """Where a flight works: its own git worktree on its own branch (core/worktrees.py)."""

    path: str  # the worktree's folder (the flight's cwd is this, or a subfolder of it)
    branch: str  # wavewait/<wave>/<name>: the flight's result once it ended
    base: str  # the commit it started from (what its changes are counted against)
    base_ref: str = "HEAD"  # what the spawner named as the base
    repo: str  # the main worktree of the repository


class FileChange(Record):
    path: str
    added: int | None = None  # None for a binary file
    deleted: int | None = None


class ChangeSummary(Record):
    """What a flight changed against its base: files and lines (core/changes.py)."""

    files: int = 0
    added: int = 0
    deleted: int = 0
    paths: list[FileChange] = Field(default_factory=list)  # the first CHANGES_KEPT of them
    at: float = Field(default_factory=now)
    final: bool = False  # counted after the flight ended (and its leftovers were committed)


class Usage(Record):
    """Tokens and money one flight spent, as its agent's own events report them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    cost_usd: float | None = None  # only where the agent reports it (Claude Code)
    turns: int | None = None


class FlightBudget(Record):
    """One flight's own cap (core/budgets.py): past either, its supervisor stops it."""

    tokens: int | None = None  # input + output tokens
    usd: float | None = None  # money, where its agent reports it


class Agent(Record):
    v: int = AGENT_VERSION
    id: str
    name: str
    wave: str | None = None
    parent_id: str | None = None
    status: AgentStatus = "running"
    created_at: float = Field(default_factory=now)
    updated_at: float = Field(default_factory=now)
    host: str | None = None
    pid: int | None = None
    pid_start: str | None = None  # /proc start time, so a reused pid is not taken for ours
    supervisor_pid: int | None = None
    supervisor_start: str | None = None  # its /proc start time: the ancestor a flight's processes have
    secret_hash: str | None = None  # SHA-256 of the flight's credential (identity.py), never the secret
    command: list[str] | None = None
    log_path: str | None = None
    exit_code: int | None = None
    ended_at: float | None = None
    reason: str | None = None  # why it is dead or closed, for people
    lease_expires_at: float | None = None  # agents not spawned here keep a lease
    last_message: str | None = None  # last item this agent sent (shortened)
    last_message_at: float | None = None
    question: str | None = None  # an open question this agent asked (shortened); None once answered
    question_id: str | None = None
    question_to: str | None = None  # whose inbox the question went to: a join there takes it whole
    #: who asked `question` for the flight: None (the flight itself) or `merge` (the merge queue
    #: stopped on its branch, core/merge/); a merge question keeps an ended flight `needs_input`
    asked_by: str | None = None
    reported_at: float | None = None  # when it sent its first report (`is_report`): the merge order
    # coding flights (docs/coding-waves.md); absent on records written before them
    preset: str | None = None  # the agent preset it runs (core/presets.py)
    events: str | None = None  # the format of its machine-readable events (core/agent_events.py)
    worktree: WorktreeInfo | None = None
    changes: ChangeSummary | None = None
    usage: Usage | None = None
    budget: FlightBudget | None = None  # its own cap; its wave's budget is the wave's (core/waves.py)
    # admission (docs/admission.md): where and how it starts, kept so that any process can
    # start a queued flight as its spawner would have; `launch_env` only until it starts
    cwd: str | None = None
    launch_env: dict[str, str] | None = None
    started_at: float | None = None  # when its supervisor was started (None while queued)
    # a conversation (docs/conversations.md): the host protocol its agent is talked to on
    # (core/talk/), the host's own session id (resumed by a tell once its process ended), the
    # number of its latest turn, how long it stays open between turns, and whether `close`
    # ended it for good (a later tell is refused)
    conversation: str | None = None
    session_id: str | None = None
    turn: int = 0
    keep_open: float = 0.0
    resume_args: list[str] | None = None  # added to `command` to resume `{session}`
    #: the environment its agent was started in (as `launch_env`, its credential never in it),
    #: kept while it can be resumed: the resumed CLI finds its session by HOME, CLAUDE_CONFIG_DIR
    #: or CODEX_HOME and talks to the same model as before, whoever tells it; gone at `close`
    resume_env: dict[str, str] | None = None
    closed_for_good: bool = False

    @property
    def finished(self) -> bool:
        return self.status in ("closed", "dead")

    @property
    def pending(self) -> bool:
        """Queued or running: it may still report, so a wait on it keeps waiting."""
        return self.status in ("queued", "running")

    @property
    def state(self) -> FlightState:
        """The word every face shows: `needs_input` while it waits for an answer, else its status."""
        if self.question_id and (not self.finished or (self.asked_by and self.status == "closed")):
            return "needs_input"
        return self.status


class Item(Record):
    """One inbox entry: a message, a completion, a question or a system event."""

    v: int = ITEM_VERSION
    id: str
    seq: int = 0
    type: str
    to: str
    sender: str
    body: str = ""
    sent_at: float = Field(default_factory=now)
    data: dict[str, Any] = Field(default_factory=dict)
    taken_by: str | None = None
    taken_at: float | None = None


@dataclass(frozen=True, slots=True)
class ItemRef:
    """What a wait needs to pick an item without reading its body.

    A plain dataclass: a wait builds one per queued item on every wake, so it must be cheap.
    """

    seq: int
    type: str
    sender: str
    id: str


class WaitRecord(Record):
    """A wait in progress, on the bus so other processes can mirror and interrupt it."""

    v: int = WAIT_VERSION
    id: str
    waiter: str
    kind: WaitKind
    tool: str
    targets: list[str] = Field(default_factory=list)
    target_names: list[str] = Field(default_factory=list)
    description: str = ""
    started_at: float = Field(default_factory=now)
    deadline: float | None = None
    progress: str = ""
    host: str | None = None
    pid: int | None = None
    pid_start: str | None = None
    #: the MCP task this wait runs as (tasks_ext.py): the host got its answer at once, and an
    #: interactive Claude Code moved it to the background, the agent idle until the task's result wakes it
    task_id: str | None = None


MCP_TASK_VERSION = 1
#: `cancelling`: a cancel was asked for and the process running the wait has not settled it
#: yet; clients see it as `working` (the Tasks extension has no such status)
McpTaskStatus = Literal["working", "cancelling", "completed", "failed", "cancelled"]
MCP_TASK_TERMINAL = frozenset({"completed", "failed", "cancelled"})


class McpTask(Record):
    """A wait run as a task of the MCP Tasks extension, kept on the bus so any process on
    it can answer for it: its status, and once settled its result (or error).

    The record is the carrier of a consuming wait's result: its items leave the inbox
    once the result is stored here (core/delivery.py, wavewait/mcp/tasks_ext.py)."""

    v: int = MCP_TASK_VERSION
    id: str
    caller: str  # who created it; only the same caller may read or cancel it
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    status: McpTaskStatus = "working"
    status_message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    created_at: float = Field(default_factory=now)
    updated_at: float = Field(default_factory=now)
    ttl_ms: int | None = None
    wait_id: str | None = None  # the wait running it, for an interrupt from another process
    host: str | None = None
    pid: int | None = None
    pid_start: str | None = None


# --------------------------------------------------------------------------- the task queue
TaskStatus = Literal["queued", "running", "done", "failed", "skipped"]
STATUSES: tuple[TaskStatus, ...] = ("queued", "running", "done", "failed", "skipped")
FINISHED: tuple[TaskStatus, ...] = ("done", "failed", "skipped")
TASK_VERSION = 1
DEFAULT_OWNER = "orchestrator"


class Task(Record):
    """One task of a queue, as its store keeps it (`core/tasks.py` is the queue itself)."""

    v: int = TASK_VERSION
    id: str
    queue: str
    seq: int = 0  # enqueue order within the queue
    type: str
    inputs: dict[str, Any] = Field(default_factory=dict)
    status: TaskStatus = "queued"
    depth: int = 0
    parent: str | None = None
    depends_on: list[str] = Field(default_factory=list)
    model: str | None = None
    reason: str = ""
    owner: str = DEFAULT_OWNER  # who hears this branch's guard trips
    attempts: int = 0
    agent_id: str | None = None  # the agent of the current or last attempt
    note: str | None = None  # why it failed or was skipped, for people
    created_at: float = Field(default_factory=now)
    updated_at: float = Field(default_factory=now)

    @property
    def dedup_key(self) -> str:
        return dedup_key(self.type, self.inputs)


def dedup_key(task_type: str, inputs: dict[str, Any]) -> str:
    """Equal for the same type and equal inputs, whatever their key order (at any depth)."""
    canonical = json.dumps([task_type, inputs], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class Handoff(BaseModel):
    """What a finished task leaves for the agents after it."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True, frozen=True)

    goals: str
    did: str
    for_next_agent: str = Field(alias="forNextAgent")
    files_touched: list[str] = Field(default_factory=list, alias="filesTouched")


class HandoffRecord(Handoff):
    """A handoff as stored: with its task, that task's type and how it ended."""

    task_id: str = Field(alias="taskId")
    type: str
    status: Literal["done", "failed"]
    completed_at: float = Field(default_factory=now, alias="completedAt")

    def view(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude={"completed_at"})


@dataclass(frozen=True, slots=True)
class Conflict:
    """Why a store refused an enqueue: the budget is spent, or an equal task exists."""

    guard: Literal["budget", "dedup"]
    count: int = 0  # tasks in the queue (budget)
    existing: str | None = None  # the equal task's id (dedup)
