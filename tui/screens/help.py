"""The help screen: commands, keys and the panel's rule, from the same table as /help."""

from __future__ import annotations

from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..commands import COMMANDS
from ..state import __doc__ as PANEL_RULE

KEYS = (
    ("Enter", "run the command line · open the selected flight · interrupt the selected mirrored wait"),
    ("Escape", "interrupt your running wait (what was received is kept)"),
    ("Shift+Tab", "from the command line to the flights panel (Tab goes on, / comes back)"),
    ("Tab, →", "complete a command or a flight id (a name + Tab becomes its id)"),
    ("↑ / ↓", "command history"),
    ("i", "interrupt the selected wait of another process"),
    ("c", "copy the selected flight's last message"),
    ("t", "tell the selected flight something: starts /tell ID on the command line"),
    ("ctrl+s", "on a flight's screen: interrupt its running turn (its input line tells it)"),
    ("ctrl+l", "show or hide the event log"),
    ("ctrl+p", "command palette (every slash command is there)"),
    ("F1", "help for the focused part, beside it (F1 again hides it); /help shows this page"),
    ("ctrl+q", "quit: prints the last wait's result as JSON, exit code 0 / 3 / 4"),
)


def _stacked(rows: tuple[tuple[str, str], ...]) -> list[Padding]:
    """A command's usage on a line of its own, its text below it at the full width: a usage
    is long, and beside it the text would wrap to a word a line at 80 columns."""
    out = []
    for usage, text in rows:
        out.append(Padding(Text(usage, style="bold"), (0, 0, 0, 2)))
        out.append(Padding(Text(text), (0, 0, 0, 6)))
    return out


def _two_columns(rows: tuple[tuple[str, str], ...]) -> Table:
    """Name and text side by side; a long text wraps within its column (a hanging indent).
    For short names (keys): the first column is as wide as the widest name."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(ratio=1)
    for name, text in rows:
        table.add_row(name, text)
    return table


def _panel_rule() -> list[Text]:
    """The panel's rule (state.py's docstring), each bullet one paragraph that wraps to the width."""
    rule = (PANEL_RULE or "").split("\n\n", 1)[-1].strip().replace("`", "")
    bullets = [" ".join(line.strip() for line in b.splitlines()) for b in rule.split("\n* ")]
    return [Text("• " + b.removeprefix("* ")) for b in bullets]


def help_text() -> Group:
    commands = tuple((c.usage, c.help) for c in COMMANDS)
    return Group(
        Text("Commands", style="bold underline"),
        *_stacked(commands),
        Text("\nKeys", style="bold underline"),
        Padding(_two_columns(KEYS), (0, 0, 0, 2)),
        Text("\nThe flights panel", style="bold underline"),
        *(Padding(t, (0, 0, 0, 2)) for t in _panel_rule()),
    )


class HelpScreen(ModalScreen[None]):
    CSS_PATH = "help.tcss"
    BINDINGS = [Binding("escape,q,f1", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body"):
            yield Static(help_text())
