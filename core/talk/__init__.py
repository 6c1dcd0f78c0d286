"""Talking to a flight's agent on its host's own structured protocol (docs/conversations.md).

A `Driver` turns what wavewait wants (open the conversation, tell it something, interrupt
its turn) into the lines its host reads on stdin, and each line the host prints into what
happened: a turn started or ended, the agent said something, called a tool, got a result.
The supervisor (core/turns.py) owns the process and the pipes; a driver only translates,
so it is tested line by line without a process.

- `claude`: Claude Code's `-p --input-format stream-json --output-format stream-json`
  (talk/claude.py): user messages and control requests on stdin for as long as it is open.
- `codex`: Codex's `app-server`, JSON-RPC over stdio (talk/codex.py).
"""

from __future__ import annotations

from .base import Driver, Entry, Step, Told, TurnEnd
from .claude import ClaudeDriver
from .codex import CodexDriver

__all__ = ["Driver", "Entry", "Step", "Told", "TurnEnd", "driver_for"]


def driver_for(name: str, turn: int = 0) -> Driver:
    """The driver of a preset's `conversation` (core/presets.py)."""
    if name == "claude":
        return ClaudeDriver(turn)
    if name == "codex":
        return CodexDriver(turn)
    raise ValueError(f"no conversation driver {name!r}")
