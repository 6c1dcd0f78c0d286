"""The main screen: flights panel, mirror of other processes' waits, scrollback, command line."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static

from ..widgets.command import CommandLine
from ..widgets.eventlog import EventLog
from ..widgets.flights import FlightsTable
from ..widgets.followlog import FollowLog
from ..widgets.hints import CommandHints
from ..widgets.mirror import MirrorTable
from ..widgets.status import WaitStatus


class MainScreen(Screen[None]):
    CSS_PATH = "main.tcss"
    AUTO_FOCUS = "#command"
    HELP = """
## wavewait
Type `/help` for the commands. **Escape** interrupts your running wait and keeps what was
received. **F1** shows the help of the focused part.
"""
    BINDINGS = [
        # not a priority binding: the command palette keeps its own Escape
        Binding(
            "escape", "interrupt", "Interrupt wait", tooltip="Interrupt the running wait; partial results are kept"
        ),
        Binding("slash", "focus_command", "Command", show=False),  # from a panel: start a command
    ]

    def compose(self) -> ComposeResult:
        yield Static(id="summary")
        yield FlightsTable(id="flights")
        with Vertical(id="mirror-box"):
            yield Static("Waits by other processes  (select one, then i or Enter interrupts it)", id="mirror-title")
            yield MirrorTable(id="mirror")
        with Horizontal(id="lower"):
            yield FollowLog(id="scrollback", wrap=True, markup=False, highlight=False)
            yield EventLog(id="events")
        yield WaitStatus(id="status")
        yield CommandHints(self.app.flight_ids, id="hints")
        yield CommandLine(self.app.flight_ids, id="command")
        yield Footer()

    async def on_mount(self) -> None:
        self.run_worker(self.app.main_screen_ready(), exit_on_error=False, group="start")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "interrupt":
            return True if self.app.waiting else None
        return True

    def action_focus_command(self) -> None:
        self.app.prefill("/")

    def action_interrupt(self) -> None:
        self.app.interrupt_own_wait()

    def on_input_changed(self, event: Input.Changed) -> None:
        if isinstance(event.input, CommandLine):
            self.query_one(CommandHints).line = event.value

    def on_input_submitted(self, event: Input.Submitted) -> None:
        line = event.value.strip()
        cmd = self.query_one(CommandLine)
        cmd.value = ""
        if line:
            cmd.remember(line)
            self.app.run_command(line)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if isinstance(event.data_table, FlightsTable):
            self.app.open_flight(event.row_key.value)

    def on_mirror_table_interrupt_requested(self, event: MirrorTable.InterruptRequested) -> None:
        self.app.interrupt_other_wait(event.wait_id)
