"""Slash commands: one table that feeds parsing, usage, completion, /help, the palette and
the dispatch (each command names its handler in `slash.py`)."""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass
from typing import NoReturn

from textual.fuzzy import FuzzySearch

from ..core.ids import short
from ..spawn_flags import add_spawn_flags
from . import slash
from .flight_index import FlightIndex
from .slash import Parsed, SlashCommand, Usage

COMMANDS: tuple[SlashCommand, ...] = (
    SlashCommand(
        "/wait",
        "/wait TIMEOUT [ID ...] [--need K …]",
        "wait for the next message, or for one message from each listed flight (fan-in); Escape "
        "interrupts with partial results. A join: --wave W, --files GLOB[:N], --event T, --need "
        "all|any|K, --check CMD, --check-timeout S, --stop-rest (docs/joins.md)",
        takes_ids=True,
        run=slash.wait,
    ),
    SlashCommand("/send", "/send ID MESSAGE", "send a message to a flight", takes_ids=True, run=slash.send),
    SlashCommand(
        "/reply",
        "/reply ID ANSWER",
        "answer the open question of a flight that needs input (Enter on it starts this)",
        takes_ids=True,
        run=slash.reply,
    ),
    SlashCommand(
        "/tell",
        "/tell ID MESSAGE",
        "tell a Claude Code or Codex flight something: into its running turn, as its next turn, or "
        "resumed after it ended (--now first interrupts its turn; docs/conversations.md)",
        takes_ids=True,
        run=slash.tell,
    ),
    SlashCommand(
        "/spawn",
        "/spawn NAME [--wave W] [--preset P] -- CMD ... | PROMPT",
        "run a command or agent as a flight; every flag of 'wavewait spawn' (--cwd, --env K=V, "
        "--max-parallel, --budget-tokens, …)",
        run=slash.spawn,
    ),
    SlashCommand("/kill", "/kill ID", "kill a flight's process group and mark it dead", takes_ids=True, run=slash.kill),
    SlashCommand("/close", "/close ID", "mark a flight closed (done for good)", takes_ids=True, run=slash.close),
    SlashCommand(
        "/interrupt",
        "/interrupt WAIT",
        "interrupt a wait made by another process (see the mirror panel)",
        run=slash.interrupt,
    ),
    SlashCommand(
        "/log",
        "/log [ID]",
        "show the event log, only for one flight when ID is given",
        takes_ids=True,
        runs_bare=True,
        run=slash.show_log,
    ),
    SlashCommand(
        "/agents", "/agents", "list every agent on the bus in the scrollback", runs_bare=True, run=slash.agents
    ),
    SlashCommand(
        "/tasks",
        "/tasks",
        "open the task queue's view (Ctrl+T; start with --queue NAME to have one)",
        runs_bare=True,
        run=slash.tasks,
    ),
    SlashCommand(
        "/merge",
        "/merge [WAVE] [--check CMD] [--into B] [--dry-run]",
        "merge a wave's branches in order, a check after each, and watch it live; --resolve-with claude|codex "
        "hands conflicts to a flight; --watch follows a merge run elsewhere (docs/merging.md)",
        runs_bare=True,
        run=slash.merge_wave,
    ),
    SlashCommand("/help", "/help", "show commands and keys", runs_bare=True, run=slash.show_help),
)
BY_NAME = {c.name: c for c in COMMANDS}


def usage_error(cmd: SlashCommand, why: str) -> Usage:
    return Usage(f"{why}\nusage: {cmd.usage}")


def parse(line: str) -> Parsed:
    """Split a command line and check its shape (values are checked by the core)."""
    line = line.strip()
    if not line.startswith("/"):
        raise Usage("commands start with '/'; try /help")
    head = line.split(maxsplit=1)[0]
    cmd = BY_NAME.get(head)
    if cmd is None:
        known = ", ".join(c.name for c in COMMANDS)
        raise Usage(f"unknown command {head!r}; commands: {known}")
    body = line[len(head) :].strip()
    if cmd.name in ("/send", "/reply", "/tell"):
        parts = body.split(maxsplit=1)
        if len(parts) < 2:
            raise usage_error(cmd, "give a flight id, then the " + ("answer" if cmd.name == "/reply" else "message"))
        return Parsed(cmd, [parts[0], parts[1]])
    try:
        words = shlex.split(body)
    except ValueError as e:
        raise usage_error(cmd, f"cannot split the arguments: {e}") from None
    if cmd.name == "/spawn":
        return _parse_spawn(cmd, words)
    if cmd.name == "/wait":
        return _parse_wait(cmd, words)
    if cmd.name in ("/kill", "/close", "/interrupt"):
        if len(words) != 1:
            raise usage_error(cmd, "give exactly one id")
        return Parsed(cmd, words)
    if cmd.name == "/merge":
        return _parse_merge(cmd, words)
    if cmd.name == "/log":
        if len(words) > 1:
            raise usage_error(cmd, "give at most one flight id")
        return Parsed(cmd, words)
    if words:
        raise usage_error(cmd, f"{cmd.name} takes no arguments")
    return Parsed(cmd)


def _parse_wait(cmd: SlashCommand, words: list[str]) -> Parsed:
    """TIMEOUT [ID ...], then a join's flags as the CLI's `wait` takes them (docs/joins.md)."""
    if not words or words[0].startswith("--"):
        raise usage_error(cmd, "give a timeout in seconds (0 is an instant check)")
    args = [words[0]]
    options: dict[str, object] = {}
    repeated: dict[str, list[str]] = {}
    i = 1
    while i < len(words):
        w = words[i]
        if w == "--stop-rest":
            options["stop_rest"] = True
        elif w in ("--wave", "--need", "--check", "--check-timeout", "--files", "--event"):
            if i + 1 >= len(words):
                raise usage_error(cmd, f"give a value after {w}")
            key = w[2:].replace("-", "_")
            if w in ("--files", "--event"):
                repeated.setdefault(key, []).append(words[i + 1])
            else:
                options[key] = words[i + 1]
            i += 1
        elif w.startswith("--"):
            raise usage_error(cmd, f"unexpected {w!r}")
        else:
            args.append(w)
        i += 1
    return Parsed(cmd, args, options=options, repeated=repeated)


def _parse_merge(cmd: SlashCommand, words: list[str]) -> Parsed:
    """[WAVE], then --into B, --check CMD (quoted if it has spaces), --dry-run, --resolve-with P."""
    options: dict[str, object] = {}
    args: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("--dry-run", "--watch"):
            options[w[2:].replace("-", "_")] = True
        elif w in ("--into", "--check", "--resolve-with"):
            if i + 1 >= len(words):
                raise usage_error(cmd, f"give a value after {w}")
            options[w[2:].replace("-", "_")] = words[i + 1]
            i += 1
        elif w.startswith("--") or args:
            raise usage_error(cmd, f"unexpected {w!r}")
        else:
            args.append(w)
        i += 1
    return Parsed(cmd, args, options=options)


class _SpawnParser(argparse.ArgumentParser):
    """`wavewait spawn`'s flags (wavewait/spawn_flags.py); a fault is a Usage, never an exit."""

    def error(self, message: str) -> NoReturn:
        raise Usage(message)


_SPAWN = _SpawnParser(prog="/spawn", add_help=False)
add_spawn_flags(_SPAWN)
_SPAWN_FIELDS = ("name", "cmd", "wave", "preset")  # Parsed's own fields: the rest are its options


def _parse_spawn(cmd: SlashCommand, words: list[str]) -> Parsed:
    """NAME, then the flags of `wavewait spawn` in any order, then `--` and the command (or,
    with a preset, the prompt, with or without `--`)."""
    if not words or words[0].startswith("-"):
        raise usage_error(cmd, "give one NAME (quote it if it has spaces) first")
    cut = words.index("--") if "--" in words else len(words)
    head, tail, dashes = words[:cut], words[cut + 1 :], cut < len(words)
    try:
        args = _SPAWN.parse_intermixed_args(head)
    except Usage as e:
        flag = re.fullmatch(r"argument (\S+): expected one argument", str(e))
        raise usage_error(cmd, f"give a value after {flag[1]}" if flag else str(e)) from None
    if args.preset is None and (args.cmd or not dashes):  # a command only after --
        why = (
            "give one NAME (quote it if it has spaces), then -- and the command"
            if dashes
            else "put the command after --"
        )
        raise usage_error(cmd, why)
    args.cmd = [*args.cmd, *tail]
    if not args.cmd:
        raise usage_error(cmd, "give the prompt" if args.preset else "give the command to run after --")
    given = {k: v for k, v in vars(args).items() if k not in _SPAWN_FIELDS and v not in (None, [])}
    return Parsed(cmd, [args.name], args.cmd, args.wave, args.preset, given, spawn=args)


def complete(value: str, flights: FlightIndex) -> str | None:
    """The completed command line for `value`, or None (a flight's short id for an ID)."""
    if not value.startswith("/"):
        return None
    if " " not in value:
        hits = [c.name for c in COMMANDS if c.name.startswith(value) and c.name != value]
        return hits[0] + " " if hits else None
    head = value.split(maxsplit=1)[0]
    cmd = BY_NAME.get(head)
    if cmd is None or not cmd.takes_ids or value.endswith(" "):
        return None
    token = value.rsplit(" ", 1)[1]
    cand = flights.complete_id(token)
    return value[: len(value) - len(token)] + cand if cand is not None else None


def expand_name(value: str, flights: FlightIndex) -> str | None:
    """Replace a last word that starts exactly one flight's name by that flight's short id."""
    head, _, token = value.rpartition(" ")
    if not head or not token:
        return None
    hit = flights.only_name(token)
    return f"{head} {short(hit)}" if hit is not None else None


_FUZZY = FuzzySearch()


@dataclass(frozen=True)
class CommandMatch:
    command: SlashCommand
    offsets: tuple[int, ...]  # the positions in the command's name that matched, to highlight


def match_commands(word: str) -> list[CommandMatch]:
    """Commands whose name holds `word`'s letters in order (fuzzy, as the palette matches), best first.

    Prefix matches come first (an exact name, then table order, as `complete` picks them), so
    the hint's first row, Tab and the inline suggestion always agree; the rest follow by score.
    """
    scored = []
    for i, cmd in enumerate(COMMANDS):
        score, offsets = _FUZZY.match(word, cmd.name)
        if score > 0:
            scored.append((not cmd.name.startswith(word.lower()), -score, i, CommandMatch(cmd, tuple(offsets))))
    return [m for *_, m in sorted(scored, key=lambda s: s[:3])]
