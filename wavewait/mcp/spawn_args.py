"""`spawn_agent`'s arguments: their types (each with the description the tool shows) and their
reading into the core's one `SpawnRequest`, as wavewait/spawn_flags.py is for the CLI's and
the TUI's flags: `cwd` from the project directory, `env` checked, a prompt without a preset
run by the server's agent command."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from typing import Annotated, Any

import anyio
from pydantic import Field

from ..core import presets
from ..core.errors import BadInput
from ..core.limits import check_argv, check_env, check_path, shown
from ..core.spawning import SpawnRequest
from .settings import Settings

SpawnCwd = Annotated[
    str | None,
    Field(description="Working directory for the flight (relative to the project directory); default: it."),
]
SpawnEnv = Annotated[
    dict[str, str] | None,
    Field(description="Extra environment variables for the flight, added to the server's environment."),
]


SpawnPreset = Annotated[
    str | None,
    Field(
        description="Run a coding agent on prompt with this preset: 'claude' (Claude Code) or 'codex' "
        "(Codex), or one of the server's --presets file. It gets wavewait's tools for this bus and reports "
        "by itself when its run ends (its final answer, changed files, tokens)."
    ),
]
SpawnModel = Annotated[
    str | None, Field(description="With preset: the model the agent uses (default: its own set-up).")
]
SpawnWorktree = Annotated[
    bool | None,
    Field(
        description="Run it in its own git worktree on a new branch wavewait/<wave>/<name> (default: yes for a "
        "preset in a git repository, no for a command). Its branch is its result."
    ),
]
SpawnBase = Annotated[
    str | None, Field(description="With a worktree: the commit, branch or tag it starts from (HEAD).")
]


BudgetTokens = Annotated[
    int | None,
    Field(
        gt=0,
        description="The wave's budget in tokens (in and out, all its flights together); needs wave. Kept for the "
        "wave: a spawn once it is spent is refused, a flight still spending then is stopped.",
    ),
]
BudgetUsd = Annotated[
    float | None, Field(gt=0, description="The wave's budget in US dollars (where the agents report money).")
]
FlightBudgetTokens = Annotated[
    int | None, Field(gt=0, description="This flight's own cap in tokens: past it, it is stopped (dead, budget).")
]
FlightBudgetUsd = Annotated[float | None, Field(gt=0, description="This flight's own cap in US dollars.")]


async def spawn_place(s: Settings, cwd: str | None, env: dict[str, str] | None) -> tuple[str, dict[str, str] | None]:
    """`spawn_agent`'s cwd and env, checked: an existing directory; at most 100 plain names.

    Both are bounded first; the folder is looked up (one `lstat` a level) in a worker thread.
    The variables are returned as given: the core adds them to the server's environment."""
    if env is not None:
        check_env(env)
    where = s.project_dir if not cwd else await anyio.to_thread.run_sync(_folder, s, check_path(cwd, "cwd"))
    return where, env


def _folder(s: Settings, cwd: str) -> str:
    where = os.path.realpath(os.path.join(s.project_dir, os.path.expanduser(cwd)))
    if not os.path.isdir(where):
        raise BadInput(f"cwd: {shown(cwd, 300)} is not a directory (relative paths start at {s.project_dir})")
    return where


async def spawn_request(
    s: Settings,
    name: str,
    *,
    command: list[str] | None = None,
    prompt: str | None = None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    preset: str | None = None,
    **options: Any,
) -> SpawnRequest:
    """`spawn_agent`'s arguments as the core's request: `cwd` from the project directory, `env`
    checked, a prompt without a preset run by the server's agent command; `options` as given."""
    where, added = await spawn_place(s, cwd, env)
    argv = spawn_argv(s, command, prompt) if preset is None else None  # checked before the budget is kept
    return SpawnRequest(
        name=name,
        parent=s.caller,
        command=command if preset is not None else argv,
        prompt=prompt if preset is not None else None,
        preset=preset,
        presets_file=s.presets,
        cwd=where,
        env=added,
        **options,
    )


def spawn_argv(s: Settings, command: Sequence[str] | None, prompt: str | None) -> list[str]:
    if (command is None) == (prompt is None):
        raise BadInput("command, prompt: give exactly one: command (an argv list) or prompt (a task text)")
    if command is not None:
        return check_argv(command)
    if not prompt or not prompt.strip():
        raise BadInput("prompt: must be a non-empty string")
    presets.check_prompt(prompt)  # one word of the agent's command line
    if not s.agent_command:
        raise BadInput(
            "prompt: this server has no agent command to run a prompt with; start it with "
            "--agent-command 'claude -p' (or set WAVEWAIT_AGENT_COMMAND), or pass command as an argv list"
        )
    return [*shlex.split(s.agent_command), prompt]
