"""The one wait entry of the faces: what a face parsed → the next message, or a fan-in.

The CLI's `wait`, the MCP `wait` tool and the TUI's `/wait` parse their own way (flags,
JSON arguments, a command line) and show the result their own way; which combinations are
refused, the join they make and which wait runs are decided here, once. A face that must
show the targets before the wait runs (the TUI) plans first and runs the plan; the others
call `wait_for`. A refusal names the caller's fields as `{field}` (core/errors.py, `BadInput`),
so each face says it in its own words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..bus import Bus
from ..checks import JOIN_TIMEOUT
from ..errors import BadInput
from ..model import Agent
from ..results import FanIn, NextMessage
from .engine import Control, ProgressFn, WaitSettings, check_timeout
from .fan_in import Join, Targets, read_targets, wait_fan_in
from .join_files import FilesTarget
from .next import wait_next

#: the fields a join adds to a fan-in, as a refusal names them
JOIN_FIELDS = ("need", "check", "check_timeout", "stop_rest")
#: the fields that name what a fan-in waits on
TARGET_FIELDS = ("from_agents", "wave", "files", "events")


@dataclass(frozen=True)
class WaitRequest:
    """A wait as a face parsed it. `files` hold absolute globs: each face resolves a relative
    one from where its person is (the CLI's and TUI's working directory, the MCP server's
    project). Without targets (ids, a wave, files, events) it is the next message; `ids` given
    empty (a tool's `from_agents: []`) asks a fan-in over nothing, which is refused, never
    taken for the next message."""

    timeout: float
    ids: Sequence[str] | None = None
    wave: str | None = None
    files: Sequence[FilesTarget] = ()
    events: Sequence[str] = ()
    need: int | Literal["all", "any"] = "all"
    check: str | None = None
    check_timeout: float = JOIN_TIMEOUT
    stop_rest: bool = False
    max_messages: int = 1

    @property
    def targeted(self) -> bool:
        return self.ids is not None or self.wave is not None or bool(self.files) or bool(self.events)


@dataclass(frozen=True)
class Plan:
    """A wait checked, and what it waits on read: `join` is None for the next message."""

    timeout: float
    join: Join | None = None
    targets: Targets | None = None
    ids: Sequence[str] = ()
    max_messages: int = 1

    @property
    def agents(self) -> list[Agent]:
        """The fan-in's flights, in the caller's order (none for the next message)."""
        return [] if self.targets is None else self.targets.agents


async def plan(bus: Bus, request: WaitRequest) -> Plan:
    """Check `request` whole (nothing is waited on yet) and read the fan-in's targets."""
    r = request
    timeout = check_timeout(r.timeout)
    join = Join(
        wave=r.wave,
        files=list(r.files),
        events=list(r.events),
        need=r.need,
        check=r.check,
        check_timeout=r.check_timeout,
        stop_rest=r.stop_rest,
    )
    if not r.targeted:
        if not join.plain:
            raise BadInput(
                "{need}, {check}, {check_timeout}, {stop_rest}: name the targets "
                "({from_agents}, {wave}, {files}, {events}) they apply to",
                fields=JOIN_FIELDS + TARGET_FIELDS,
            )
        return Plan(timeout, max_messages=r.max_messages)
    if r.max_messages != 1:
        raise BadInput(
            "{max_messages}: applies without {from_agents}; a fan-in takes one message per listed agent",
            fields=("max_messages", "from_agents"),
        )
    ids = list(r.ids or ())
    return Plan(timeout, join, await read_targets(bus, ids, join), ids)


async def run_plan(
    bus: Bus,
    caller: str,
    planned: Plan,
    *,
    control: Control | None = None,
    on_progress: ProgressFn | None = None,
    settings: WaitSettings | None = None,
    budget: int | None = None,
) -> NextMessage | FanIn:
    """Run the wait `plan` made: `budget` bounds the characters of its answer."""
    p = planned
    if p.join is None:
        return await wait_next(
            bus,
            caller,
            p.timeout,
            max_messages=p.max_messages,
            budget=budget,
            on_progress=on_progress,
            control=control,
            settings=settings,
        )
    return await wait_fan_in(
        bus,
        caller,
        p.timeout,
        p.ids,
        join=p.join,
        on_progress=on_progress,
        control=control,
        settings=settings,
        budget=budget,
        targets=p.targets,
    )


async def wait_for(
    bus: Bus,
    caller: str,
    request: WaitRequest,
    *,
    control: Control | None = None,
    on_progress: ProgressFn | None = None,
    settings: WaitSettings | None = None,
    budget: int | None = None,
) -> NextMessage | FanIn:
    """The wait `request` asks for, planned and run."""
    planned = await plan(bus, request)
    return await run_plan(
        bus, caller, planned, control=control, on_progress=on_progress, settings=settings, budget=budget
    )
