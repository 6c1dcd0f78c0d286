"""Output shapes of the tools and the JSON schemas they publish as `outputSchema`.

The wait results are the core's models (`core/results.py`), so the CLI and the MCP server
answer alike. The small shapes of the other tools live here. Every result may carry a
`hint`: a sentence for the model on what to do next (call again, wait only on what is
pending); it is extra, so callers written against the seed shapes are not disturbed.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, Field

from ..core.results import AgentWait, Event, FanIn, NextMessage, Signal

HINT = {
    "type": "string",
    "description": "What to do next (for example: call again with only the pending agents).",
}


class SendResult(BaseModel):
    message_id: str


class NotifyResult(BaseModel):
    success: bool
    event_id: str


class SpawnResult(BaseModel):
    agent_id: str
    name: str
    pid: int | None = None


class AgentInfo(BaseModel):
    id: str
    name: str
    wave: str | None = None
    status: str = Field(description="running | idle | closed | dead")
    age_sec: float
    last_message: str | None = None
    last_message_at: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    reason: str | None = Field(default=None, description="why it is dead or closed")
    parent_id: str | None = None


class AgentList(BaseModel):
    agents: list[AgentInfo]


class CloseResult(BaseModel):
    agentId: str
    status: str


class KillResult(BaseModel):
    agent_id: str
    status: str


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema(by_alias=True, mode="serialization")


def schema_of(*models: type[BaseModel]) -> dict[str, Any]:
    """An object schema for one model, or for any of several (the `wait` tool's two modes)."""
    if len(models) == 1:
        out = copy.deepcopy(_schema(models[0]))
    else:
        defs: dict[str, Any] = {}
        branches = []
        for m in models:
            s = copy.deepcopy(_schema(m))
            defs.update(s.pop("$defs", {}))
            branches.append(s)
        out = {"type": "object", "anyOf": branches}
        if defs:
            out["$defs"] = defs
    out.setdefault("properties", {})["hint"] = HINT
    return out


OUTPUT_SCHEMAS: dict[str, dict[str, Any]] = {
    "wait": schema_of(NextMessage, FanIn),
    "wave_wait_for_signal": schema_of(Signal),
    "wait_agent": schema_of(AgentWait),
    "wait_for_event": schema_of(Event),
    "notify_completion": schema_of(NotifyResult),
    "send": schema_of(SendResult),
    "spawn_agent": schema_of(SpawnResult),
    "list_agents": schema_of(AgentList),
    "close_agent": schema_of(CloseResult),
    "kill_agent": schema_of(KillResult),
}
