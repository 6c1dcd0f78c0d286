"""The command line: slash commands with fuzzy completion (Tab, →) and ↑/↓ history."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.binding import Binding
from textual.suggester import Suggester
from textual.widgets import Input

from ..commands import complete, expand_name, match_commands
from ..flight_index import FlightIndex

#: the flights' index as the screen has it now (made again only when a flight came or went)
IndexFn = Callable[[], FlightIndex]
NO_FLIGHTS = FlightIndex()


class SlashSuggester(Suggester):
    """Completes command names, then flight ids (short form) for commands that take them."""

    def __init__(self, flights: IndexFn) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self._flights = flights

    async def get_suggestion(self, value: str) -> str | None:
        # only a command's argument completes to a flight
        return complete(value, self._flights() if value.startswith("/") and " " in value else NO_FLIGHTS)


def complete_command(value: str) -> str | None:
    """The best fuzzy match for a command word being typed (`/wt` → `/wait `), as the hint lists it first."""
    if not value.startswith("/") or " " in value:
        return None
    hits = match_commands(value)
    return hits[0].command.name + " " if hits else None


class CommandLine(Input):
    HELP = """
## Command line
Type a slash command and press Enter. While you type, the hint above lists the commands
that match (letters in order: `/wt` finds `/wait`), then the chosen command's usage.
**Tab** completes the first of them, and flight ids after it (→ takes the inline
suggestion); a flight's name followed by Tab becomes its short id. **↑/↓** walk the history.
"""
    BINDINGS = [
        Binding("up", "history(-1)", "Previous command", show=False),
        Binding("down", "history(1)", "Next command", show=False),
        Binding("tab", "complete", "Complete", show=False),
    ]

    def __init__(self, flights: IndexFn, **kwargs: Any) -> None:
        super().__init__(
            placeholder="/wait 60 ID …   /send ID MESSAGE   /help",
            suggester=SlashSuggester(flights),
            select_on_focus=False,
            **kwargs,
        )
        self._flights = flights
        self.history: list[str] = []
        self._pos = 0

    def remember(self, line: str) -> None:
        if line and (not self.history or self.history[-1] != line):
            self.history.append(line)
        self._pos = len(self.history)

    def action_history(self, step: int) -> None:
        if not self.history:
            return
        self._pos = max(0, min(len(self.history), self._pos + step))
        self.value = self.history[self._pos] if self._pos < len(self.history) else ""
        self.cursor_position = len(self.value)

    def action_complete(self) -> None:
        """Complete; with nothing to complete, Tab moves focus on (to the panels) as usual."""
        flights = self._flights()
        new = complete(self.value, flights) or complete_command(self.value) or expand_name(self.value, flights)
        if new:
            self.value = new
            self.cursor_position = len(new)
        elif not self.value:
            self.screen.focus_next()
