"""Messages that travel up from workers and widgets to the app (toad/posting style)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

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
