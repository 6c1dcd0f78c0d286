"""Results of the waits, shaped as the seed designs give them (DESIGN: MCP tools).

The CLI prints these as JSON and the MCP server returns them as structured content, so
both faces give the same answer. `outcome` maps to the CLI's exit codes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .model import TargetStatus

Outcome = Literal["satisfied", "timeout", "interrupted"]


def iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


class Result(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    def outcome(self) -> Outcome:
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True, by_alias=True)


class NextMessage(Result):
    """`wait` without `from_agents`: the oldest message, or why none came."""

    status: Literal["received", "timeout", "interrupted"]
    sender: str | None = Field(default=None, alias="from")
    name: str | None = None
    message: str | None = None
    sent_at: str | None = None
    type: str | None = None
    elapsed_sec: float = 0.0

    def outcome(self) -> Outcome:
        return "satisfied" if self.status == "received" else self.status


class TargetResult(BaseModel):
    agent_id: str
    name: str
    status: TargetStatus
    message: str | None = None
    reason: str | None = None  # why a target is dead, for people


class FanIn(Result):
    """`wait` with `from_agents`: one entry per requested agent, in request order."""

    status: Literal["complete", "timeout", "interrupted"]
    results: list[TargetResult]
    elapsed_sec: float

    def outcome(self) -> Outcome:
        return "satisfied" if self.status == "complete" else self.status


class Event(Result):
    """`wait_for_event`: one event, or `{type: "timeout"}` / `{type: "interrupted"}`."""

    model_config = ConfigDict(extra="allow")
    type: str
    event_id: str | None = None

    def outcome(self) -> Outcome:
        return self.type if self.type in ("timeout", "interrupted") else "satisfied"  # type: ignore[return-value]


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


class Resolution(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)
    status: Literal["agent_closed", "agent_idle", "agent_dead", "timed_out", "interrupted"]
    resolved: list[str] = Field(alias="resolvedAgentIds")
    pending: list[str] = Field(alias="pendingAgentIds")
    dead: list[str] = Field(default_factory=list, alias="deadAgentIds")
    timeout_at: str | None = Field(default=None, alias="timeoutAt")


class AgentWait(Result):
    """`wait_agent`: the seed 001 shape; `resolution.status` says how it ended."""

    wait_id: str = Field(alias="waitId")
    agent_id: str = Field(alias="agentId")
    status: Literal["resolved"] = "resolved"
    kind: Literal["agent-closed", "agent-idle"]
    match: Literal["any", "all"]
    resolution: Resolution

    def outcome(self) -> Outcome:
        s = self.resolution.status
        return "timeout" if s == "timed_out" else "interrupted" if s == "interrupted" else "satisfied"
