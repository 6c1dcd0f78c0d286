"""A spawn's request, and the launch plan it resolves to once.

A face parses its words into one `SpawnRequest` (every option of a spawn). `flights.plan`
resolves it once, every check made and every question asked there (the name, the preset
and its argv, the worktree, the budgets, the wave's settings), into one `LaunchPlan`: the
flight's record as it will be kept, the environment it starts in, its wave's settings.
The layers below take the plan whole (core/flights.py makes its worktree, core/admission.py
queues it or lets it in, core/agents.py starts it) and decide nothing of it again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from .model import Agent, WorktreeInfo
from .waves import WaveSettings, parse_max_parallel


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
    keep_open: float | None = None  # seconds a conversation stays open between turns (None: 0)

    @field_validator("max_parallel", mode="before")
    @classmethod
    def _limit(cls, value: object) -> object:
        """`"3"` from a command line is the limit 3, as from a tool: one request either way."""
        return None if value is None else parse_max_parallel(value)


@dataclass(frozen=True)
class LaunchPlan:
    """A spawn resolved: what is started, where, with what, under which settings of its wave."""

    record: Agent  # the flight's record as it will be kept (id, name, wave, parent, argv, folder, cap)
    env: dict[str, str]  # the environment its command starts in (the bus's variables in it)
    settings: WaveSettings | None = None  # its wave's, read once (None: no wave, or none kept for it)
    worktree: bool = False  # a worktree of its own is still to be made (core/flights.py)
    base: str | None = None  # where that worktree's branch starts
    prompt: str | None = None  # a conversation's first user message, told once its record is kept

    @property
    def limit(self) -> int | Literal["auto"] | None:
        """Its wave's limit of running flights (None: none, so it starts at once)."""
        return self.settings.max_parallel if self.settings is not None else None

    def in_worktree(self, info: WorktreeInfo, run_dir: str) -> LaunchPlan:
        """The plan once its worktree is made: it runs in `run_dir` there."""
        return replace(self, record=self.record.model_copy(update={"worktree": info, "cwd": run_dir}), worktree=False)
