"""The help screen: commands, keys and the panel's rule, from the same table as /help."""

from __future__ import annotations

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
    ("Tab, →", "complete a command or a flight id (a name + Tab becomes its id)"),
    ("↑ / ↓", "command history"),
    ("i", "interrupt the selected wait of another process"),
    ("c", "copy the selected flight's last message"),
    ("ctrl+l", "show or hide the event log"),
    ("ctrl+p", "command palette (every slash command is there)"),
    ("F1", "this help"),
    ("ctrl+q", "quit: prints the last wait's result as JSON, exit code 0 / 3 / 4"),
)


def help_text() -> Text:
    out = Text()
    out.append("Commands\n", style="bold underline")
    width = max(len(c.usage) for c in COMMANDS)
    for c in COMMANDS:
        out.append(f"  {c.usage:<{width}}  ", style="bold")
        out.append(c.help + "\n")
    out.append("\nKeys\n", style="bold underline")
    for key, what in KEYS:
        out.append(f"  {key:<8}  ", style="bold")
        out.append(what + "\n")
    out.append("\nThe flights panel\n", style="bold underline")
    rule = (PANEL_RULE or "").split("\n\n", 1)[-1].strip()
    out.append(rule.replace("`", ""))
    return out


class HelpScreen(ModalScreen[None]):
    CSS_PATH = "help.tcss"
    BINDINGS = [Binding("escape,q,f1", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body"):
            yield Static(help_text())
