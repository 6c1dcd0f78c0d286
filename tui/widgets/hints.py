"""The hint above the command line: which slash commands match, then what to type next."""

from __future__ import annotations

from typing import Any

from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ...core.ids import short
from ..commands import BY_NAME, match_commands
from ..slash import SlashCommand
from .command import IndexFn

MAX_COMMANDS = 5  # rows of matching commands; the rest are named on one more line
MAX_FLIGHTS = 4  # flights offered for an ID: about one line


def arg_slot(cmd: SlashCommand, index: int) -> str | None:
    """The usage placeholder (`TIMEOUT`, `ID`, …) for argument `index`; a final `...` repeats the one before.

    Read from the usage line itself, so the table stays the one place that says what comes next.
    """
    slots = [w.strip("[]") for w in cmd.usage.split()[1:]]
    if slots and slots[-1] == "...":
        slots.pop()
        index = min(index, len(slots) - 1)
    return slots[index] if index < len(slots) else None


class CommandHints(Widget):
    """What the line being typed can become: the matching commands, then the chosen one's usage.

    A view of the command line's value (`line`, set by the screen on every change). It is
    hidden unless the line starts with "/", and it never takes focus, so every key (Tab,
    ↑/↓, Escape) still goes to the command line and the screen exactly as without it.
    """

    DEFAULT_CSS = """
    CommandHints {
        display: none;
        height: auto;
        max-height: 8;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    CommandHints.-active {
        display: block;
    }
    CommandHints.-usage {
        text-wrap: wrap;
    }
    CommandHints > .command-hints--match {
        color: $text-accent;
        text-style: bold underline;
    }
    CommandHints > .command-hints--usage {
        text-style: bold;
    }
    CommandHints > .command-hints--help {
        color: $text-muted;
    }
    """
    COMPONENT_CLASSES = {"command-hints--match", "command-hints--usage", "command-hints--help"}

    line: reactive[str] = reactive("", layout=True)

    def __init__(self, flights: IndexFn, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._index = flights

    def watch_line(self, line: str) -> None:
        head, space, _ = line.partition(" ")
        self.set_class(line.startswith("/"), "-active")
        self.set_class(bool(space) and head in BY_NAME, "-usage")

    def render(self) -> Text:
        if not self.line.startswith("/"):
            return Text()
        head, space, rest = self.line.partition(" ")
        cmd = BY_NAME.get(head)
        if space and cmd is not None:
            return self._usage(cmd, rest)
        return self._matches(head)

    def _style(self, part: str) -> Style:
        return self.get_component_rich_style(f"command-hints--{part}")

    def _usage_text(self, cmd: SlashCommand, offsets: tuple[int, ...] = (), width: int = 0) -> Text:
        """The usage line with the command's name in the usage style and the matched letters marked."""
        text = Text(cmd.usage.ljust(width))
        text.stylize(self._style("usage"), 0, len(cmd.name))
        for offset in offsets:
            text.stylize(self._style("match"), offset, offset + 1)
        return text

    def _matches(self, word: str) -> Text:
        """One row per matching command, best first (the one Tab takes is marked)."""
        hits = match_commands(word)
        if not hits:
            return Text(f"no command matches {word}; /help lists them", style=self._style("help"))
        shown, more = hits[:MAX_COMMANDS], hits[MAX_COMMANDS:]
        width = max(len(m.command.usage) for m in shown)
        out = Text()
        for n, m in enumerate(shown):
            if n:
                out.append("\n")
            out.append("› " if n == 0 else "  ", style=self._style("usage"))
            out.append_text(self._usage_text(m.command, m.offsets, width))
            out.append("  ")
            out.append(m.command.help, style=self._style("help"))
        if more:
            out.append(f"\n  +{len(more)} more: " + "  ".join(m.command.name for m in more), style=self._style("help"))
        return out

    def _usage(self, cmd: SlashCommand, rest: str) -> Text:
        """The chosen command's usage and help; while an ID is typed, the flights it may be."""
        out = self._usage_text(cmd)
        out.append(" — " + cmd.help, style=self._style("help"))
        if cmd.takes_ids:
            words = rest.split()
            token = words[-1] if words and not rest.endswith(" ") else ""
            index = len(words) - 1 if token else len(words)
            if arg_slot(cmd, index) == "ID" and (flights := self._flights(token)):
                out.append("\n")
                out.append_text(flights)
        return out

    def _flights(self, token: str) -> Text | None:
        """Flights whose name or short id starts with `token` (what Tab can complete), name then id."""
        flights = self._index()
        if not len(flights):
            return None
        hits, count = flights.starting(token, MAX_FLIGHTS)
        help_style, match = self._style("help"), self._style("match")
        if not hits:
            return Text(f"  no flight's name or id starts with {token}", style=help_style)
        out = Text("  flights: ", style=help_style)
        for n, (agent_id, name) in enumerate(hits):
            if n:
                out.append(" · ", style=help_style)
            label = Text(name)
            sid = Text(short(agent_id), style=help_style)
            if token:
                for part in (label, sid):
                    if part.plain.startswith(token):
                        part.stylize(match, 0, len(token))
            out.append_text(label)
            out.append(" ")
            out.append_text(sid)
        if count > len(hits):
            out.append(f" · +{count - len(hits)} more", style=help_style)
        return out
