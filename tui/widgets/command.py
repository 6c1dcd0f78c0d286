"""The command line: slash commands with completion (Tab, →) and ↑/↓ history."""

from __future__ import annotations

from collections.abc import Callable

from textual.binding import Binding
from textual.suggester import Suggester
from textual.widgets import Input

from ..commands import complete, expand_name

IdsFn = Callable[[], list[tuple[str, str]]]


class SlashSuggester(Suggester):
    """Completes command names, then flight ids (short form) for commands that take them."""

    def __init__(self, ids: IdsFn) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self._ids = ids

    async def get_suggestion(self, value: str) -> str | None:
        return complete(value, self._ids())


class CommandLine(Input):
    HELP = """
## Command line
Type a slash command and press Enter. **Tab** (or →) completes command names and flight
ids; a flight's name followed by Tab becomes its short id. **↑/↓** walk the history.
"""
    BINDINGS = [
        Binding("up", "history(-1)", "Previous command", show=False),
        Binding("down", "history(1)", "Next command", show=False),
        Binding("tab", "complete", "Complete", show=False),
    ]

    def __init__(self, ids: IdsFn, **kwargs) -> None:
        super().__init__(placeholder="/wait 60 ID …   /send ID MESSAGE   /help", suggester=SlashSuggester(ids),
                         select_on_focus=False, **kwargs)
        self._ids = ids
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
        new = complete(self.value, self._ids()) or expand_name(self.value, self._ids())
        if new:
            self.value = new
            self.cursor_position = len(new)
        elif not self.value:
            self.screen.focus_next()
