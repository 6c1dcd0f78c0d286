"""Messages that travel up from workers and widgets to the app (toad/posting style)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message
from textual.notifications import SeverityLevel

from ..core.results import Result


@dataclass
class WaitProgressed(Message):
    """The running wait reported progress (its message and what it received so far)."""

    message: str
    received: list[str]


@dataclass
class WaitEnded(Message):
    """The running wait returned (complete, timeout or interrupted), or failed (no result)."""

    line: str
    result: Result | None


@dataclass
class Toast(Message):
    """A widget has something to tell the person; the app shows it (and keeps it) as a notice."""

    message: str
    severity: SeverityLevel = "information"
