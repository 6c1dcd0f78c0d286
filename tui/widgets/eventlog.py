"""The log pane: bus events as they happen, optionally only those of one flight."""

from __future__ import annotations

from collections import deque
from typing import Any

from rich.text import Text

from .followlog import FollowLog

KEPT = 2000


class EventLog(FollowLog):
    HELP = """
## Event log
Bus events as the TUI sees them: flights spawned, messages, state changes, deaths, waits.
`/log ID` shows one flight only; `/log` shows all again. **ctrl+l** hides or shows it.
"""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(wrap=False, markup=False, highlight=False, max_lines=KEPT, **kwargs)
        self._lines: deque[tuple[str | None, Text]] = deque(maxlen=KEPT)
        self.only: str | None = None

    def add(self, agent_id: str | None, line: Text) -> None:
        self._lines.append((agent_id, line))
        if self.only is None or agent_id == self.only:
            self.write(line)

    def filter(self, agent_id: str | None) -> None:
        self.only = agent_id
        self.clear()
        for a, line in self._lines:
            if agent_id is None or a == agent_id:
                self.write(line)

    def follow_from_end(self) -> None:
        """Opened (it was hidden, so nothing scrolled it): show its end and follow from there."""
        self._follow_again()
        self.call_after_refresh(self.scroll_end, animate=False, immediate=True, x_axis=False)

    def shown(self) -> list[str]:
        """The lines the pane shows under its filter (also while it is hidden)."""
        return [t.plain for a, t in self._lines if self.only is None or a == self.only]
