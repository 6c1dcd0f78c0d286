"""Waits made by other processes (agents through `wavewait mcp`, the CLI), live."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable

from ..state import MirrorView

COLUMNS = (("wait", 8), ("caller", 10), ("tool", 10), ("targets", 20), ("left", 7), ("progress", 24))
PROGRESS_MIN = 8  # the last column takes the width left, so a narrow terminal cuts it with an ellipsis


class MirrorTable(DataTable[Text]):
    """One row per wait in progress elsewhere; `i` (or Enter) interrupts the selected one."""

    HELP = """
## Waits by other processes
Each wait that an agent makes through `wavewait mcp` (or `wavewait wait`) shows here with
its caller, tool, targets, time left and progress. A wait that runs as an MCP task says
**background task, agent idle**: the host (interactive Claude Code) got its answer at once
and moved the call to the background, so the agent spends nothing until the result wakes it;
the event log then shows **⏰ AGENT woken** with the task's result. (Claude Code run with
`CLAUDE_CODE_MCP_AUTO_BACKGROUND_MS=0` or `CLAUDE_CODE_DISABLE_MCP_TASK_BACKGROUND=1` polls
the task inline instead: the agent's call blocks; docs/hosts.md.)

- **i** or **Enter** interrupts the selected wait: the agent's call returns as interrupted,
  with its partial results.
"""
    BINDINGS = [Binding("i", "interrupt_selected", "Interrupt wait")]

    class InterruptRequested(Message):
        def __init__(self, wait_id: str) -> None:
            super().__init__()
            self.wait_id = wait_id

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", **kwargs)
        self._shown: dict[str, MirrorView] = {}

    def on_mount(self) -> None:
        for label, width in COLUMNS:
            self.add_column(label, width=width, key=label)

    def on_resize(self) -> None:
        """The progress column takes the width the others leave: never past the screen's edge."""
        fixed = sum(width + 2 * self.cell_padding for _, width in COLUMNS[:-1])
        room = self.size.width - int(self.styles.scrollbar_size_vertical) - fixed - 2 * self.cell_padding
        column = self.columns.get(COLUMNS[-1][0])  # type: ignore[call-overload]
        want = max(PROGRESS_MIN, room)
        if column is not None and room > 0 and column.width != want:
            column.width = want
            self._require_update_dimensions = True
            self._clear_caches()
            self.refresh()

    def show(self, views: Sequence[MirrorView]) -> None:
        keep = {v.id for v in views}
        for key in [k for k in self._shown if k not in keep]:
            self.remove_row(key)
            del self._shown[key]
        for v in views:
            old = self._shown.get(v.id)
            if old == v:
                continue
            cells = [Text(c, no_wrap=True, overflow="ellipsis") for c in v.cells()]
            cells[0].stylize("dim")
            if old is None:
                self.add_row(*cells, key=v.id)
            else:
                for (label, _), cell, a, b in zip(COLUMNS, cells, old.cells(), v.cells(), strict=False):
                    if a != b:
                        self.update_cell(v.id, label, cell)
            self._shown[v.id] = v

    def selected_id(self) -> str | None:
        if self.row_count == 0:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

    def action_interrupt_selected(self) -> None:
        wait_id = self.selected_id()
        if wait_id is not None:
            self.post_message(self.InterruptRequested(wait_id))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(self.InterruptRequested(event.row_key.value))
