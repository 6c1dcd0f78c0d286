"""What a wait or a tool returned: the one vocabulary every face renders (docs/tools.md).

The MCP server returns these as structured content, the CLI prints them as JSON and exits
with `exit_code`, the TUI shows `summary()`; so every face gives the same answer. Wait
results drop empty fields (the seed shapes); plain tool results keep them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator

from .exits import Exit
from .model import Agent, ChangeSummary, Item, TargetStatus, Usage, WaitRecord, WorktreeInfo

Outcome = Literal["satisfied", "timeout", "interrupted", "needs_input", "unmet"]
EXIT_CODES: dict[Outcome, Exit] = {
    "satisfied": Exit.OK,
    "timeout": Exit.TIMEOUT,
    "interrupted": Exit.INTERRUPTED,
    "needs_input": Exit.NEEDS_INPUT,
    "unmet": Exit.UNMET,
}


def iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


class Result(BaseModel):
    """A result: its outcome (and so the CLI's exit code), a one-line summary, and a hint."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)
    drop_none: ClassVar[bool] = True

    hint: str | None = Field(
        default=None,
        description="What to do next (for example: call again with only the pending agents).",
    )

    def outcome(self) -> Outcome:
        return "satisfied"

    @property
    def exit_code(self) -> Exit:
        """The CLI's exit code: OK, TIMEOUT or INTERRUPTED (core/exits.py)."""
        return EXIT_CODES[self.outcome()]

    def summary(self) -> str:
        """One line for people, e.g. `fan-in timed out: 4/6 received`."""
        return self.outcome()

    def to_json(self) -> dict[str, Any]:
        exclude = {"hint"} if self.hint is None else None
        return self.model_dump(mode="json", exclude_none=self.drop_none, exclude=exclude, by_alias=True)


class QueuedMessage(BaseModel):
    """One message of a batched `wait` (`max_messages` > 1), after the first."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    sender: str = Field(validation_alias="from", serialization_alias="from")
    name: str
    message: str
    message_id: str
    sent_at: str | None = None
    type: str


class NextMessage(Result):
    """`wait` without `from_agents`: the oldest message, or why none came."""

    status: Literal["received", "timeout", "interrupted"]
    sender: str | None = Field(default=None, validation_alias="from", serialization_alias="from")
    name: str | None = None
    message: str | None = None
    message_id: str | None = Field(
        default=None, description="The message's id: a duplicate (see docs/reliability.md) has the same one."
    )
    sent_at: str | None = None
    type: str | None = None
    more: list[QueuedMessage] | None = Field(
        default=None,
        description="With max_messages > 1: the messages queued behind the first, oldest first.",
    )
    elapsed_sec: float = 0.0

    def outcome(self) -> Outcome:
        return "satisfied" if self.status == "received" else self.status

    def summary(self) -> str:
        if self.status == "received":
            if self.more:
                names = dict.fromkeys([self.name, *(m.name for m in self.more)])
                return f"{1 + len(self.more)} messages from {', '.join(str(n) for n in names)}"
            return f"message from {self.name}"
        return "timed out: no message" if self.status == "timeout" else "interrupted: no message"


#: about the characters of an entry's JSON without its values, and of one more field's key
ENTRY_CHARS = 37
FIELD_CHARS = 16


class TargetResult(BaseModel):
    agent_id: str
    name: str
    status: TargetStatus
    message: str | None = None
    message_id: str | None = None  # the message's id: a duplicate has the same one
    reason: str | None = None  # why a target is dead, for people
    output: str | None = None  # a join's check that failed: its last lines
    turn: int | None = None  # the conversation's turn this report ends (docs/conversations.md)
    # a coding flight's (docs/coding-waves.md): its branch, what it changed, what it spent
    branch: str | None = None
    changes: ChangeSummary | None = None
    usage: Usage | None = None

    def chars(self) -> int:
        """About the characters of this entry's JSON: what an output budget counts. Summed
        from the values, not dumped, as a fan-in over 100,000 flights sizes many."""
        n = ENTRY_CHARS + len(self.agent_id) + len(self.name) + len(self.status)
        for text in (self.message, self.message_id, self.reason, self.output, self.branch):
            if text is not None:
                n += FIELD_CHARS + len(text)
        for fact in (self.changes, self.usage):
            if fact is not None:
                n += FIELD_CHARS + len(fact.model_dump_json())
        return n + (FIELD_CHARS if self.turn is not None else 0)


def flight_facts(agent: Agent) -> dict[str, Any]:
    """What a fan-in entry and a listing show of a coding flight: branch, changes, usage."""
    return {
        "branch": agent.worktree.branch if agent.worktree else None,
        "changes": agent.changes,
        "usage": agent.usage,
    }


class FileEntry(BaseModel):
    """A join's file target (`--files GLOB[:N]`): met once `min_count` files match."""

    glob: str
    min_count: int
    status: Literal["met", "pending"]
    matched: int
    files: list[str]


class EventEntry(BaseModel):
    """A join's event target (`--event TYPE`): met by one event of that type, taken with the result."""

    type: str
    status: Literal["met", "pending"]
    event: dict[str, Any] | None = None


class FanIn(Result):
    """`wait` over flights (`from_agents`, a wave), files and events: a join (docs/joins.md).
    `results` has one entry per flight in request order, `files` and `events` one per target."""

    status: Literal["complete", "partial", "needs_input", "unmet", "timeout", "interrupted"]
    results: list[TargetResult]
    elapsed_sec: float
    need: int | None = Field(default=None, description="How many targets must be met (all of them unless `need`).")
    met: int | None = Field(
        default=None,
        description="How many are met: reported (and passed the check), or found; with need all and no "
        "check, settled (reported or ended, as each entry says).",
    )
    files: list[FileEntry] | None = None
    events: list[EventEntry] | None = None
    stopped: list[str] | None = Field(
        default=None, description="Flights stopped once the need was met (stop_rest): dead, with the reason."
    )
    more_waiting: int | None = Field(
        default=None,
        description="Listed agents whose message is queued but was not taken: it did not fit this "
        "result's output budget. Call wait again to get them.",
    )
    omitted: dict[str, int] | None = Field(
        default=None,
        description="Targets without an entry in `results`, by status: their entries did not fit the "
        "output budget (a message taken always has its entry).",
    )

    def outcome(self) -> Outcome:
        if self.status == "partial":  # not satisfied yet: call again for the rest
            return "timeout"
        return "satisfied" if self.status == "complete" else self.status

    def summary(self) -> str:
        word = {
            "complete": "fan-in complete",
            "partial": "fan-in partial",
            "needs_input": "a flight needs your answer",
            "unmet": "need can no longer be met",
            "timeout": "fan-in timed out",
            "interrupted": "interrupted",
        }
        more = f", {self.more_waiting:,} more waiting" if self.more_waiting else ""
        flights = len(self.results) + sum((self.omitted or {}).values())
        if self.files or self.events or (self.need is not None and self.need != flights):
            return f"{word[self.status]}: met {self.met}/{self.need}{more}"
        got = sum(r.status == "received" for r in self.results) + (self.omitted or {}).get("received", 0)
        return f"{word[self.status]}: {got:,}/{flights:,} received{more}"


class WaitResult(RootModel[NextMessage | FanIn]):
    """What the `wait` tool returns: one of its two modes."""

    model_config = ConfigDict(json_schema_extra={"type": "object"})


class Event(Result):
    """`wait_for_event`: one event, or `{type: "timeout"}` / `{type: "interrupted"}`."""

    model_config = ConfigDict(extra="allow")
    type: str
    event_id: str | None = None

    def outcome(self) -> Outcome:
        return self.type if self.type in ("timeout", "interrupted") else "satisfied"  # type: ignore[return-value]

    def summary(self) -> str:
        return {"timeout": "timed out: no event", "interrupted": "interrupted: no event"}.get(
            self.type, f"event: {self.type}"
        )


class Signal(Result):
    """`wave_wait_for_signal`: the matched files, or the partial matches on timeout."""

    matched: list[str] | None = None
    timed_out: bool | None = None
    interrupted: bool | None = None
    partial_matches: list[str] | None = None
    elapsed_sec: float

    def outcome(self) -> Outcome:
        if self.interrupted:
            return "interrupted"
        return "timeout" if self.timed_out else "satisfied"

    def summary(self) -> str:
        if self.matched is not None:
            return f"signal: {len(self.matched)} file(s) matched"
        word = "interrupted" if self.interrupted else "signal timed out"
        return f"{word}: {len(self.partial_matches or [])} file(s) so far"


class Resolution(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)
    status: Literal["agent_closed", "agent_idle", "agent_dead", "timed_out", "interrupted"]
    resolved: list[str] = Field(validation_alias="resolvedAgentIds", serialization_alias="resolvedAgentIds")
    pending: list[str] = Field(validation_alias="pendingAgentIds", serialization_alias="pendingAgentIds")
    dead: list[str] = Field(default_factory=list, validation_alias="deadAgentIds", serialization_alias="deadAgentIds")
    timeout_at: str | None = Field(default=None, validation_alias="timeoutAt", serialization_alias="timeoutAt")


class AgentWait(Result):
    """`wait_agent`: which agents resolved, which are pending or dead; `resolution.status` says how it ended."""

    wait_id: str = Field(validation_alias="waitId", serialization_alias="waitId")
    agent_id: str = Field(validation_alias="agentId", serialization_alias="agentId")
    status: Literal["resolved", "pending"] = "resolved"
    kind: Literal["agent-closed", "agent-idle"]
    match: Literal["any", "all"]
    resolution: Resolution

    @model_validator(mode="after")
    def _pending_unless_resolved(self) -> AgentWait:
        """A wait that timed out or was interrupted is not resolved: say so at the top too."""
        if self.resolution.status in ("timed_out", "interrupted"):
            self.status = "pending"
        return self

    def outcome(self) -> Outcome:
        s = self.resolution.status
        return "timeout" if s == "timed_out" else "interrupted" if s == "interrupted" else "satisfied"

    def summary(self) -> str:
        r = self.resolution
        done = len(r.resolved)
        return f"{r.status.replace('_', ' ')}: {done}/{done + len(r.pending) + len(r.dead)} resolved"


# --------------------------------------------------------------------------- plain tool results
class ToolResult(Result):
    """A tool that does not wait: always satisfied, and it keeps its empty fields."""

    drop_none: ClassVar[bool] = False


class SendResult(ToolResult):
    message_id: str

    def summary(self) -> str:
        return f"sent {self.message_id}"


class NotifyResult(ToolResult):
    success: bool
    event_id: str

    def summary(self) -> str:
        return f"completion reported ({self.event_id})"


class SpawnResult(ToolResult):
    agent_id: str
    name: str
    pid: int | None = None
    status: str = Field(
        default="running",
        description="running, or queued: its wave is at its limit of running flights (max_parallel) and it "
        "starts when one ends (its pid is null until then)",
    )
    reason: str | None = Field(default=None, description="why a queued flight waits, e.g. for memory")

    def summary(self) -> str:
        if self.status == "queued":
            return f"queued {self.name} ({self.agent_id}): {self.reason or 'its wave is at its limit'}"
        return f"spawned {self.name} ({self.agent_id}, pid {self.pid})"


class AgentInfo(BaseModel):
    """One agent as `list_agents` and `wavewait agents` show it."""

    id: str
    name: str
    wave: str | None = None
    status: str = Field(description="queued | running | idle | closed | dead")
    state: str = Field(default="running", description="queued | running | idle | needs_input | closed | dead")
    question: str | None = Field(default=None, description="the open question while it needs input")
    age_sec: float
    last_message: str | None = None
    last_message_at: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    reason: str | None = Field(default=None, description="why it is dead or closed, or why it is still queued")
    parent_id: str | None = None
    preset: str | None = Field(default=None, description="the agent preset it runs (claude, codex, …)")
    conversation: str | None = Field(
        default=None, description="the host protocol `tell` talks to it on (claude, codex); none: it cannot be told"
    )
    session_id: str | None = Field(default=None, description="its agent's own session: a tell resumes it")
    turn: int = Field(default=0, description="the number of its latest turn")
    closed_for_good: bool = Field(default=False, description="`close` ended its conversation: no more tells")
    worktree: WorktreeInfo | None = Field(default=None, description="its own git worktree: path, branch, base")
    changes: ChangeSummary | None = Field(
        default=None, description="files and lines +/- against its base (final once it ended)"
    )
    usage: Usage | None = Field(default=None, description="tokens in and out, and cost where the agent reports it")


class PruneResult(ToolResult):
    """`wavewait prune`: the ended flights' worktrees removed or kept, their branches deleted or kept."""

    removed: list[dict[str, str]]
    kept: list[dict[str, str]]
    branches_deleted: list[dict[str, str]]
    branches_kept: list[dict[str, str]]

    def summary(self) -> str:
        return (
            f"{len(self.removed)} worktree(s) removed, {len(self.kept)} kept; "
            f"{len(self.branches_deleted)} branch(es) deleted, {len(self.branches_kept)} kept"
        )


class DiffStat(ToolResult):
    """`wavewait diff ID --stat`: what a flight changed against its base, counted now."""

    agent_id: str
    name: str
    worktree: WorktreeInfo
    changes: ChangeSummary

    def summary(self) -> str:
        c = self.changes
        return f"{self.name}: {c.files} file(s), +{c.added} -{c.deleted}"


class OutputResult(ToolResult):
    """`read_output` / `wavewait output`: the last lines of a flight's stdout and stderr."""

    agent_id: str
    name: str
    state: str
    lines: list[str]

    def summary(self) -> str:
        return f"{len(self.lines)} line(s) of output from {self.name}"


class TellResult(ToolResult):
    """`tell` in every face: where the message went (docs/conversations.md)."""

    agent_id: str
    name: str
    told: str  # in_turn | next_turn | resumed
    turn: int  # the number of the turn that takes it

    def summary(self) -> str:
        where = {"in_turn": "into its running turn", "next_turn": "as its next turn", "resumed": "resumed"}
        return f"told {self.name} {where.get(self.told, self.told)} (turn {self.turn})"


class TranscriptResult(ToolResult):
    """`transcript`: a flight's conversation, its last entries (paged back by `before`)."""

    agent_id: str
    name: str
    state: str
    turn: int
    entries: list[dict[str, Any]]
    more: bool  # older entries are kept: page back with before = the first entry's seq

    def summary(self) -> str:
        return f"{len(self.entries)} entr(ies) of {self.name}'s conversation (turn {self.turn})"


class AgentList(ToolResult):
    agents: list[AgentInfo]

    def summary(self) -> str:
        return f"{len(self.agents)} agent(s)"


class CloseResult(ToolResult):
    agentId: str  # the close_agent tool's spelling (the seed's); the CLI's `close` says AgentStatus
    status: str

    def summary(self) -> str:
        return f"{self.agentId} {self.status}"


class AgentStatus(ToolResult):
    """An agent's id and status after a verb on it: the CLI's `kill` and `close` say it alike."""

    agent_id: str
    status: str

    def summary(self) -> str:
        return f"{self.agent_id} {self.status}"


class KillResult(AgentStatus):
    pass


class InterruptResult(ToolResult):
    wait_id: str
    interrupted: bool

    def summary(self) -> str:
        return f"interrupted wait {self.wait_id}"


class WaitList(ToolResult):
    waits: list[WaitRecord]

    def summary(self) -> str:
        return f"{len(self.waits)} wait(s) in progress"


def event_view(item: Item) -> dict[str, Any]:
    """The seed 004 shape of an inbox item."""
    base = {"event_id": item.id, "type": item.type}
    if item.type == "worker_complete":
        return base | {
            "worker_id": item.sender,
            "status": item.data.get("status", "success"),
            "changes": item.data.get("changes", []),
            "message": item.body,
        }
    if item.type == "question":
        return base | {"from": item.sender, "question_id": item.data.get("question_id", item.id), "body": item.body}
    if item.type == "message":
        return base | {"from": item.sender, "body": item.body}
    return base | {"from": item.sender, "body": item.body} | {k: v for k, v in item.data.items() if k not in base}
