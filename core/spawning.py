"""Spawn: the one verb that starts a flight, whichever face asked.

Each face turns its own words into one `SpawnRequest` (the CLI's and the TUI's flags through
wavewait/spawn_flags.py, `spawn_agent`'s arguments, a task of the queue, a merge's conflict)
and calls `spawn`, so a flight starts the same way from all of them: what is the wave's is
kept first (its budget, its limit of running flights), the spawner gets a record, then the
flight starts (core/flights.py: a preset's agent or a command, in its own worktree when
asked), queued past its wave's limit (core/admission.py).
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from . import agents, budgets, flights, waves
from .bus import Bus
from .errors import BadInput
from .ids import check_wave
from .model import Agent


class SpawnRequest(BaseModel):
    """Every option of a spawn, as a face parsed it; the core checks the values."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: str
    parent: str  # who spawns it: its reports and its death are told there
    command: list[str] | None = None  # the program and its arguments (none with a preset)
    prompt: str | None = None  # with a preset: the agent's task
    preset: str | None = None
    presets_file: str | None = None  # presets of one's own (None: $WAVEWAIT_PRESETS, else the built-in ones)
    model: str | None = None  # with a preset: the model its agent uses
    worktree: bool | None = None  # None: its own worktree for a preset in a repository
    base: str | None = None  # with a worktree: where its branch starts
    cwd: str | None = None  # where it runs, a folder the face found (None: this process's)
    env: dict[str, str] | None = None  # added to base_env
    base_env: dict[str, str] | None = None  # the environment it starts from (None: this process's)
    server_env: dict[str, str] | None = None  # for the MCP server a preset gives its agent (a task's binding)
    wave: str | None = None
    max_parallel: int | Literal["auto"] | None = None  # kept as the wave's limit (docs/admission.md)
    budget_tokens: int | None = None  # the wave's budget, kept for it (docs/budgets.md)
    budget_usd: float | None = None
    flight_budget_tokens: int | None = None  # this flight's own cap
    flight_budget_usd: float | None = None

    @field_validator("max_parallel", mode="before")
    @classmethod
    def _limit(cls, value: object) -> object:
        """`"3"` from a command line is the limit 3, as from a tool: one request either way."""
        return None if value is None else waves.parse_max_parallel(value)


async def spawn(bus: Bus, request: SpawnRequest, *, on_record: agents.OnRecord | None = None) -> Agent:
    """Start the flight `request` asks for; its record: running, or queued past its wave's limit.

    `on_record` is a step of the spawner, not an option of the flight (the queue runner names
    the flight in its task once its record is kept, `agents.recorded`), so it is no field."""
    r = request
    if r.wave is not None:
        check_wave(r.wave)  # one rule for a wave's name, limit or none (docs/admission.md)
    given = budgets.check(
        r.wave,
        budget_tokens=r.budget_tokens,
        budget_usd=r.budget_usd,
        flight_budget_tokens=r.flight_budget_tokens,
        flight_budget_usd=r.flight_budget_usd,
    )
    if r.max_parallel is not None:
        if r.wave is None:
            raise BadInput("{max_parallel}: caps a wave; give {wave} too", fields=("max_parallel", "wave"))
        await waves.set_settings(bus, r.wave, max_parallel=r.max_parallel)
    await agents.ensure_agent(bus, r.parent)
    env = None
    if r.env is not None or r.base_env is not None:
        env = {**(os.environ if r.base_env is None else r.base_env), **(r.env or {})}
    return await flights.start(
        bus,
        r.name,
        parent_id=r.parent,
        prompt=r.prompt,
        command=r.command,
        preset=r.preset,
        presets_file=r.presets_file,
        wave=r.wave,
        model=r.model,
        worktree=r.worktree,
        base=r.base,
        cwd=r.cwd,
        env=env,
        server_env=r.server_env,
        budget=given,
        on_record=on_record,
    )
