"""The flights panel: one row per flight, keyed by agent id, repainted from one timer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.message import Message
from textual.widgets.data_table import CellDoesNotExist

from ..messages import Toast
from ..state import FlightView, role_styles
from .cell_cache import ContentCachedTable

COLUMNS = (
    ("state", 13),
    ("name", 14),
    ("id", 8),
    ("wave", 7),
    ("elapsed", 7),
    ("quiet", 6),
    ("last message / reason", 30),
)
DETAIL = len(COLUMNS) - 1  # the last message / reason: the one column whose width follows the screen
NARROW_BELOW = 100  # terminal columns under which the detail column is left out
DETAIL_MIN = 20


class FlightsTable(ContentCachedTable):
    """Flights with fixed column widths; only changed cells are updated, never widths.

    The detail column takes the width the others leave (a wide terminal shows more of each
    message) and is left out below NARROW_BELOW columns, where it would only be cut off.
    It changes only when the terminal is resized, never with the content.
    """

    HELP = """
## Flights
One row per flight: state (glyph and word: running, idle, needs input, closed, dead), name,
short id, wave, time since it started, time since its last message, and its last message
(✉ once it reported to you), its open question, or why it died.

- **Enter** (or a second click) opens the flight: its messages, events and output log;
  on a flight that needs input, it starts `/reply ID ` on the command line instead.
- **Shift+Tab** / **Tab** move between the command line and this panel.
- **c** copies the flight's last message.
- **a** / **d** on a flight that needs input (a Claude flight's permission request): allow it
  at once, or start `/reply ID deny ` so you can say why.
"""
    BINDINGS = [
        Binding("c", "copy_last", "Copy message", show=False),
        Binding("a", "answer('allow')", "Allow", show=False),
        Binding("d", "answer('deny')", "Deny", show=False),
    ]

    class AnswerRequested(Message):
        """a / d on a flight that needs input: the screen answers it (or offers the reply)."""

        def __init__(self, agent_id: str, answer: str) -> None:
            super().__init__()
            self.agent_id = agent_id
            self.answer = answer

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self.roles: Mapping[str, str] = role_styles({})  # the theme's styles by role, set by the screen
        self._shown: dict[str, FlightView] = {}
        self._painted: dict[str, list[tuple[str, str]]] = {}  # what each row's cells hold
        self._detail_width: int | None = COLUMNS[DETAIL][1]  # None: the column is left out
        self._t = 0.0  # the time the rows were last painted for

    def on_mount(self) -> None:
        for label, width in COLUMNS:
            self.add_column(label, width=width, key=_key(label))

    def on_resize(self) -> None:
        self._fit_detail()

    def _fit_detail(self) -> None:
        """Give the detail column the width left, or leave it out on a narrow terminal."""
        if self.app.size.width < NARROW_BELOW:
            want = None
        else:
            fixed = sum(width + 2 * self.cell_padding for _, width in COLUMNS[:DETAIL])
            room = self.size.width - int(self.styles.scrollbar_size_vertical) - fixed - 2 * self.cell_padding
            want = max(DETAIL_MIN, room)
        if want == self._detail_width:
            return
        key = _key(COLUMNS[DETAIL][0])
        if self._detail_width is not None:
            self.remove_column(key)
        self._detail_width = want
        if want is None:
            return
        self.add_column(COLUMNS[DETAIL][0], width=want, key=key, default=Text(""))
        for v in self._shown.values():
            self._painted[v.id][DETAIL] = ("", "")
            self._paint(v, self._t)

    def show(self, views: Sequence[FlightView], t: float) -> None:
        """Make the table show `views` (in order) at time `t`.

        A row whose view is the one already shown has changed only in its clocks (elapsed,
        quiet, spinner), and only rows on screen get those: with 1,000 flights the clocks
        would otherwise touch 2,000 cells every second for nothing anyone can see. A row
        scrolled into view gets its clocks on the next tick.
        """
        keep = {v.id for v in views}
        for key in [k for k in self._shown if k not in keep]:
            self.remove_row(key)
            del self._shown[key]
            del self._painted[key]
        for v in views:
            old = self._shown.get(v.id)
            if old is v:
                continue
            self._shown[v.id] = v
            if old is None:
                cells = self._cells(v, t)
                self.add_row(*cells[: len(self.columns)], key=v.id)
                self._painted[v.id] = [_look(c) for c in cells]
            else:
                self._paint(v, t)
        self.spin(t)

    def show_changed(self, views: Sequence[FlightView], t: float) -> None:
        """Repaint the rows of `views`, already shown in their places (`show` adds, removes
        and orders rows); then bring the clocks on screen to `t`."""
        for v in views:
            if v.id in self._shown:
                self._shown[v.id] = v
                self._paint(v, t)
        self.spin(t)

    def spin(self, t: float) -> None:
        """Bring the clocks and spinners of the rows on screen to time `t`."""
        self._t = t
        for key in self._visible_keys():
            if key in self._shown:
                self._paint(self._shown[key], t)

    def _paint(self, v: FlightView, t: float) -> None:
        """Update the cells of `v`'s row that differ from what they hold (each costs a refresh)."""
        painted = self._painted[v.id]
        cells = self._cells(v, t)
        for i, ((label, _), cell) in enumerate(zip(COLUMNS, cells[: len(self.columns)], strict=False)):
            look = _look(cell)
            if painted[i] != look:
                self.update_cell(v.id, _key(label), cell)
                painted[i] = look

    def _visible_keys(self) -> set[str]:
        """Keys of the rows on screen (cheap: `ordered_rows` would build all 1,000)."""
        first = int(self.scroll_y)
        last = min(self.row_count, first + max(1, self.size.height))
        keys = (self.coordinate_to_cell_key(Coordinate(i, 0)).row_key.value for i in range(first, last))
        return {k for k in keys if k is not None}

    def _cells(self, v: FlightView, t: float) -> list[Text]:
        stalled = v.stalled(t)
        dim = " dim" if stalled else ""
        state, name, sid, wave, elapsed, quiet, detail = v.cells(t)
        roles = self.roles
        detail_style = roles["bad"] if v.state == "dead" else ("dim" if stalled else "")
        return [
            Text(state, style=roles.get(v.state, "")),
            Text(name, style=("bold" + dim).strip(), no_wrap=True, overflow="ellipsis"),
            Text(sid, style="dim"),
            Text(wave, style=dim.strip()),
            Text(elapsed, justify="right"),
            Text(quiet, justify="right", style=roles["warn"] if stalled else ""),
            Text(detail, style=detail_style, no_wrap=True, overflow="ellipsis"),
        ]

    def selected_id(self) -> str | None:
        if not self._shown or self.row_count == 0:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except CellDoesNotExist:  # the cursor is past the rows (they were just removed)
            return None

    def action_answer(self, answer: str) -> None:
        agent_id = self.selected_id()
        v = self._shown.get(agent_id) if agent_id else None
        if v is None or v.state != "needs_input":
            self.post_message(Toast("select a flight that needs input to allow or deny", severity="warning"))
            return
        self.post_message(self.AnswerRequested(v.id, answer))

    def action_copy_last(self) -> None:
        agent_id = self.selected_id()
        v = self._shown.get(agent_id) if agent_id else None
        if v is None or not v.detail:
            self.post_message(Toast("nothing to copy", severity="warning"))
            return
        self.app.copy_to_clipboard(v.detail)
        self.post_message(Toast(f"copied the last message of {v.name}"))


def _look(cell: Text) -> tuple[str, str]:
    """What a cell shows: its text and style (panel cells carry one style and no spans)."""
    return cell.plain, str(cell.style)


def _key(label: str) -> str:
    return label.split()[0]
