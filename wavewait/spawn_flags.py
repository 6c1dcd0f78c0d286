"""`spawn`'s flags, for the faces that take them as words: `wavewait spawn` and the TUI's `/spawn`.

One table (`add_spawn_flags`) that both parse, and one reading of it (`spawn_request`), so a
flag means the same in both and reaches the core's one verb (core/spawning.py) the same way.
Standard library and core only: the TUI imports it without the CLI.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable

from .core.errors import BadInput
from .core.limits import check_env, check_path, shown
from .core.spawning import SpawnRequest


def at_least(lo: int) -> Callable[[str], int]:
    """An argparse type: a whole number ≥ `lo`."""

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            n = lo - 1
        if n < lo:
            raise argparse.ArgumentTypeError(f"must be a whole number ≥ {lo}, got {value!r}")
        return n

    return parse


def seconds(value: str) -> float:
    """An argparse type: seconds, 0 or more."""
    try:
        n = float(value)
    except ValueError:
        n = -1.0
    if not math.isfinite(n) or n < 0:
        raise argparse.ArgumentTypeError(f"must be seconds, 0 or more, got {value!r}")
    return n


def amount(value: str) -> float:
    """An argparse type: an amount of US dollars above 0."""
    try:
        usd = float(value)
    except ValueError:
        usd = -1.0
    if not math.isfinite(usd) or usd <= 0:
        raise argparse.ArgumentTypeError(f"must be an amount of US dollars above 0, got {value!r}")
    return usd


def add_budget_flags(p: argparse.ArgumentParser) -> None:
    """The wave's budget and a flight's own cap (docs/budgets.md), on spawn and run-queue."""
    p.add_argument(
        "--budget-tokens",
        type=at_least(1),
        metavar="N",
        help="the wave's budget: tokens its flights may spend together",
    )
    p.add_argument("--budget-usd", type=amount, metavar="X", help="the wave's budget in US dollars")
    p.add_argument(
        "--flight-budget-tokens", type=at_least(1), metavar="N", help="no one flight may spend more tokens than this"
    )
    p.add_argument("--flight-budget-usd", type=amount, metavar="X", help="no one flight may spend more US dollars")


def add_spawn_flags(p: argparse.ArgumentParser) -> None:
    """NAME, every option of a spawn, then the command or the prompt (the words after --)."""
    p.add_argument("name")
    p.add_argument("--wave")
    p.add_argument(
        "--max-parallel",
        metavar="N|auto",
        help="with --wave: at most N of its flights run at once, or auto (as the machine's cores, free memory and "
        "load allow); past it a spawn is queued and starts when one ends (docs/admission.md). Kept for the wave",
    )
    p.add_argument("--preset", help="run this agent preset (claude, codex, or one of --presets) on the prompt after --")
    p.add_argument(
        "--presets", metavar="FILE", help="a TOML file that changes or adds presets (default: $WAVEWAIT_PRESETS)"
    )
    p.add_argument("--model", help="with --preset: the model the agent uses (default: the CLI's own set-up)")
    p.add_argument(
        "--worktree",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="its own git worktree on a new branch wavewait/<wave>/<name> (default: on for a preset in a repository)",
    )
    p.add_argument(
        "--base", metavar="REF", help="with a worktree: the commit, branch or tag it starts from (default HEAD)"
    )
    p.add_argument("--cwd", metavar="DIR", help="where it runs (in a worktree: the same folder of it; default: here)")
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="add to its environment (repeatable)")
    p.add_argument(
        "--keep-open",
        type=seconds,
        metavar="SECONDS",
        help="with a preset that holds a conversation: how long its agent stays open, idle, after a turn "
        "(default 0: it ends, and a tell resumes it; docs/conversations.md)",
    )
    add_budget_flags(p)
    p.add_argument("cmd", nargs="*", help="the command, or a preset's prompt (everything after --)")


def spawn_request(args: argparse.Namespace, parent: str) -> SpawnRequest:
    """The request the flags ask for, spawned by `parent`: --env's pairs, --cwd's folder (from
    this process's folder), and the words after -- as the command or, with --preset, the prompt."""
    env = None
    if args.env:
        if any("=" not in e for e in args.env):
            raise BadInput("--env: give NAME=value")
        env = check_env(dict(e.partition("=")[::2] for e in args.env), "--env")
    cwd = os.path.realpath(os.path.expanduser(check_path(args.cwd, "--cwd"))) if args.cwd else os.getcwd()
    if not os.path.isdir(cwd):
        raise BadInput(f"--cwd: {shown(args.cwd, 300)} is not a directory")
    return SpawnRequest(
        name=args.name,
        parent=parent,
        command=None if args.preset else list(args.cmd),
        prompt=" ".join(args.cmd) if args.preset else None,
        preset=args.preset,
        presets_file=args.presets,
        model=args.model,
        worktree=args.worktree,
        base=args.base,
        cwd=cwd,
        env=env,
        wave=args.wave,
        max_parallel=args.max_parallel,
        budget_tokens=args.budget_tokens,
        budget_usd=args.budget_usd,
        flight_budget_tokens=args.flight_budget_tokens,
        flight_budget_usd=args.flight_budget_usd,
        keep_open=args.keep_open,
    )
