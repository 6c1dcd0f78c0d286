"""A stopped flight's way on: the question it is asked (the files in conflict, or the check's
last lines), and, with `resolve_with`, a new flight that resolves a conflict in its worktree."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .. import messages, spawning, wait
from ..bus import Bus
from ..ids import check_name, new_id
from ..model import Agent, now
from ..spawning import SpawnRequest
from .outcome import FlightMerge
from .plan import Flight

QUESTION_FILES = 50  # conflicting files named in a question
RESOLVE_TIMEOUT = 3600.0  # seconds a resolving flight may take


async def ask_fix(
    bus: Bus, flight: Agent, out: FlightMerge, *, wave: str, target: str, check: str | None, caller: str
) -> Any:
    """Ask for the stopped flight's branch to be fixed (its parent, else the merge's caller)."""
    if out.status == "conflict":
        files = out.files or []
        more = f" and {len(files) - QUESTION_FILES} more" if len(files) > QUESTION_FILES else ""
        text = (
            f"merge: {out.branch} conflicts with {target} in {', '.join(files[:QUESTION_FILES])}{more}. "
            f"Merge {target} into {out.branch} and resolve them (or rebase it), commit, "
            f"then run `wavewait merge {wave}` again."
        )
    else:
        text = (
            f"merge: the check `{check}` failed with {out.branch} merged onto {target}; "
            f"fix it on {out.branch}, commit, then run `wavewait merge {wave}` again. "
            f"Its last lines:\n{out.output or ''}"
        )
    return await messages.ask_for(bus, flight, text, "merge", to=flight.parent_id or caller)


async def resolve_conflict(
    bus: Bus,
    f: Flight,
    files: list[str],
    *,
    wave: str,
    target: str,
    caller: str,
    preset: str,
    presets_file: str | None,
    started: Callable[[], Awaitable[None]],
) -> bool:
    """Hand the conflict to a new flight of `preset` in the branch's worktree (`started` once
    it runs) and wait for it to end; True when it ended (the branch is tried again)."""
    wt = f.agent.worktree
    assert wt is not None
    if not os.path.isdir(wt.path):
        return False
    prompt = (
        f"The git branch {wt.branch} (checked out here) conflicts with the branch {target} "
        f"in: {', '.join(files[:QUESTION_FILES])}. Run `git merge refs/heads/{target}`, resolve every "
        "conflict keeping the intent of both sides, and commit the merge. Do not push or switch branches."
    )
    fixer = await spawning.spawn(
        bus,
        SpawnRequest(
            name=check_name(f"{f.agent.name}-resolve"[:64], "name"),
            parent=caller,
            prompt=prompt,
            preset=preset,
            presets_file=presets_file,
            wave=f"{wave}-merge"[:64],
            worktree=False,
            cwd=wt.path,
        ),
    )
    f.result("pending", why=f"{fixer.name} ({fixer.id[:8]}) is resolving its conflict")
    await started()
    deadline = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now() + RESOLVE_TIMEOUT))
    got = await wait.wait_agent(
        bus,
        caller,
        id=new_id(),
        agent_id=fixer.id,
        kind="agent-closed",
        description=f"resolving the merge conflict of {f.agent.name}",
        timeout_at=deadline,
    )
    return got.resolution.status == "agent_closed" or fixer.id in (got.resolution.dead or [])
