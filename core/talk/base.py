"""What every host's driver gives the supervisor: the lines to write, and what a line said."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ..model import Usage

#: where a tell went (docs/words.md): into the running turn, the next turn, or a resumed flight
Told = Literal["in_turn", "next_turn", "resumed"]
#: the kinds of a transcript's entries (core/transcript.py)
EntryKind = Literal["user", "agent", "tool", "result", "turn", "note"]
TEXT_KEPT = 4000  # characters of an agent's message kept in one entry
RESULT_KEPT = 400  # characters of a tool's result kept: a transcript says what happened, the log has it all


def short(text: str, n: int) -> str:
    text = text.strip()
    return text if len(text) <= n else text[: n - 1] + "…"


@dataclass(frozen=True)
class Entry:
    """One line of a flight's conversation, as its transcript keeps it."""

    kind: EntryKind
    text: str
    turn: int
    by: str | None = None  # who told a user message (the spawner for the prompt)
    data: dict[str, Any] = field(default_factory=dict)  # a tool's name, a turn's usage


@dataclass(frozen=True)
class TurnEnd:
    """A turn ended: its final message is the flight's report, unless it was interrupted."""

    turn: int
    status: Literal["success", "error", "max_turns", "interrupted"]
    text: str
    usage: Usage  # this turn's tokens (and the session's money so far, where the host says it)
    error: str | None = None


@dataclass
class Step:
    """What one line from the host said (all optional)."""

    write: list[bytes] = field(default_factory=list)  # lines to write back (a JSON-RPC answer)
    entries: list[Entry] = field(default_factory=list)
    started: int | None = None  # the number of a turn that started
    ended: TurnEnd | None = None
    session_id: str | None = None  # the host's own session (Claude Code) or thread (Codex)
    failed: str | None = None  # the host refused what we wrote (a bad session, a turn it cannot steer)


class Driver(Protocol):
    """One host's protocol. `turn` is the number of the latest turn (the flight's count, kept
    across resumes); `running` whether a turn is under way."""

    name: str
    turn: int
    running: bool

    @property
    def unanswered(self) -> int:
        """Tells written into the running turn that the host has not yet taken or refused
        (Codex answers each `turn/steer`; Claude Code takes a mid-turn message silently: 0)."""
        ...

    def open(self, session_id: str | None, cwd: str) -> list[bytes]:
        """The lines that start the conversation (a new one, or `session_id` resumed)."""
        ...

    def tell(self, text: str) -> tuple[list[bytes], Told]:
        """The lines that give the agent `text` as a user message, and where it goes."""
        ...

    def interrupt(self) -> list[bytes]:
        """The lines that end the running turn (nothing when none runs)."""
        ...

    def feed(self, line: bytes) -> Step:
        """Read one line the host printed."""
        ...
