"""Agents idle or closed: all or any of them, a resolution stored under the wait's id."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal, cast

from ..agents import ensure_registered, resolve_agents
from ..bus import Bus
from ..errors import BadInput
from ..ids import check_id
from ..limits import MAX_NAME_LEN, shown
from ..model import Agent, now
from ..results import (
    AgentWait,
    Resolution,
    iso,
)
from .engine import (
    AgentKind,
    Condition,
    Control,
    Ending,
    Match,
    ProgressFn,
    Waiting,
    WaitSettings,
    run,
)


class AgentCondition(Condition[AgentWait]):
    """Until the targets are idle (or closed) / closed; `match` any or all (seed 001)."""

    kind = "agent"
    tool = "wait_agent"

    def __init__(
        self,
        wait_id: str,
        targets: Sequence[Agent],
        kind: AgentKind,
        match: Match,
        description: str,
        deadline_ts: float | None,
    ) -> None:
        super().__init__(description, targets)
        self.wait_id, self.wait_kind, self.match, self.deadline_ts = wait_id, kind, match, deadline_ts
        self.state: dict[str, Agent] = {a.id: a for a in targets}
        self.wanted = ("idle", "closed") if kind == "agent-idle" else ("closed",)

    def _split(self) -> tuple[list[str], list[str], list[str]]:
        ok = [a for a, s in self.state.items() if s.status in self.wanted]
        dead = [a for a, s in self.state.items() if s.status == "dead"]
        pending = [a for a in self.state if a not in ok and a not in dead]
        return ok, pending, dead

    async def step(self, w: Waiting) -> AgentWait | None:
        changed = w.agents_changed(self.state)
        if not changed and w.changed is not None:
            return None  # nothing it depends on changed since the last step said "not yet"
        self.state.update(await w.bus.get_agents(changed))
        self.targets = list(self.state.values())
        ok, pending, dead = self._split()
        if pending and (self.match == "all" or not ok):
            return None
        satisfied = bool(ok) if self.match == "any" else not dead
        if not satisfied:
            return self._result("agent_dead")
        return self._result("agent_idle" if self.wait_kind == "agent-idle" else "agent_closed")

    def progress(self) -> str:
        ok, _pending, dead = self._split()
        msg = f"{len(ok)}/{len(self.state)} {self.wait_kind.removeprefix('agent-')}"
        if dead:
            msg += f" · dead: {', '.join(self.state[a].name for a in dead)}"
        return msg

    def ended(self, why: Ending, w: Waiting) -> AgentWait:
        return self._result("timed_out" if why == "timeout" else "interrupted")

    def _result(
        self, status: Literal["agent_closed", "agent_idle", "agent_dead", "timed_out", "interrupted"]
    ) -> AgentWait:
        ok, pending, dead = self._split()
        return AgentWait(
            wait_id=self.wait_id,
            agent_id=next(iter(self.state)),
            kind=self.wait_kind,
            match=self.match,
            resolution=Resolution(
                status=status, resolved=ok, pending=pending, dead=dead, timeout_at=iso(self.deadline_ts)
            ),
        )


async def wait_agent(
    bus: Bus,
    caller: str,
    *,
    id: str,
    agent_id: str,
    agent_ids: Sequence[str] = (),
    kind: str,
    description: str,
    match: str = "all",
    timeout_at: str | None = None,
    on_progress: ProgressFn | None = None,
    control: Control | None = None,
    settings: WaitSettings | None = None,
) -> AgentWait:
    """Until the agents are idle (or closed) / closed; `match` any or all (seed 001).

    A wait that resolved is stored under its `id`: asking again gives the same answer.
    """
    check_id(id, "id")
    if kind not in ("agent-idle", "agent-closed"):
        raise BadInput(f"kind: must be 'agent-idle' or 'agent-closed', got {kind!r}")
    if match not in ("any", "all"):
        raise BadInput(f"match: must be 'any' or 'all', got {match!r}")
    if not isinstance(description, str) or not description.strip() or len(description) > 10 * MAX_NAME_LEN:
        raise BadInput(
            f"description: say in a few words (at most {10 * MAX_NAME_LEN:,} characters) what is being waited for"
        )
    deadline_ts = parse_deadline(timeout_at)
    key = f"wait_agent.{caller}.{id}"
    stored = await bus.get_resolution(key)
    if stored is not None:
        return AgentWait.model_validate(stored)
    targets = await resolve_agents(bus, [agent_id, *agent_ids], "agentIds")
    await ensure_registered(bus, caller)
    timeout = None if deadline_ts is None else max(0.0, deadline_ts - now())
    # both checked above
    condition = AgentCondition(id, targets, cast(AgentKind, kind), cast(Match, match), description, deadline_ts)
    result = await run(
        bus, caller, condition, timeout=timeout, on_progress=on_progress, control=control, settings=settings
    )
    if result.resolution.status not in ("timed_out", "interrupted"):
        await bus.put_resolution(key, result.to_json())
    return result


def parse_deadline(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        if len(value) > MAX_NAME_LEN:
            raise ValueError
        dt = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise BadInput(f"timeoutAt: {shown(value)} is not an ISO-8601 time such as 2026-01-31T12:00:00Z") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()
