"""The flights panel: one row per flight, keyed by agent id, repainted from one timer."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from ..state import STATE_STYLE, FlightView, state_label

COLUMNS = (("state", 10), ("name", 16), ("id", 8), ("wave", 7), ("elapsed", 7),
           ("quiet", 6), ("last message / reason", 30))


class FlightsTable(DataTable):
    """Flights with fixed column widths; only changed cells are updated, never widths."""

    HELP = """
## Flights
One row per flight: state (glyph and word), name, short id, wave, time since it started,
time since its last message, and its last message (or why it died).

- **Enter** (or a second click) opens the flight: its messages, events and output log.
- **c** copies the flight's last message.
"""
    BINDINGS = [Binding("c", "copy_last", "Copy message", show=False)]

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._shown: dict[str, FlightView] = {}
        self._stale: set[str] = set()  # rows off screen whose clocks were not repainted
        self._frame_t: float = 0.0

    def on_mount(self) -> None:
        for label, width in COLUMNS:
            self.add_column(label, width=width, key=label.split()[0])

    def show(self, views: Sequence[FlightView], t: float) -> int:
        """Make the table show `views` (in order); return how many cells changed.

        Rows off screen whose only change is a clock (elapsed, quiet) are left until they
        scroll into view (the next repaint, within a second): with 1,000 flights the clocks
        would otherwise touch 2,000 cells every second for nothing anyone can see.
        """
        changed = 0
        keep = {v.id for v in views}
        for key in [k for k in self._shown if k not in keep]:
            self.remove_row(key)
            del self._shown[key]
            self._stale.discard(key)
            changed += 1
        visible = self._visible_keys()
        for v in views:
            old = self._shown.get(v.id)
            if old == v and v.id not in self._stale:
                continue
            if old is None:
                self.add_row(*self._cells(v, t), key=v.id)
                self._shown[v.id] = v
                changed += len(COLUMNS)
                continue
            clocks_only = old is not None and (old.state, old.name, old.detail, old.wave) == \
                (v.state, v.name, v.detail, v.wave)
            if clocks_only and v.id not in visible:
                self._stale.add(v.id)
                self._shown[v.id] = v
                continue
            self._stale.discard(v.id)
            restyle = (old.state, old.stalled) != (v.state, v.stalled)
            for (label, _), cell, a, b in zip(COLUMNS, self._cells(v, t), old.cells(t), v.cells(t)):
                if restyle or a != b:  # only the cells that changed: each update costs a refresh
                    self.update_cell(v.id, label.split()[0], cell)
                    changed += 1
            self._shown[v.id] = v
        self._frame_t = t
        return changed

    def _visible_keys(self) -> set[str]:
        """Keys of the rows on screen (cheap: `ordered_rows` would build all 1,000)."""
        first = int(self.scroll_y)
        last = min(self.row_count, first + max(1, self.size.height))
        return {self.coordinate_to_cell_key(Coordinate(i, 0)).row_key.value for i in range(first, last)}

    def spin(self, t: float) -> int:
        """Advance the spinner of running rows that are on screen; return cells touched."""
        if not self._shown:
            return 0
        frame = state_label("running", t)
        if frame == state_label("running", self._frame_t):
            return 0
        self._frame_t = t
        touched = 0
        cell = Text(frame, style=STATE_STYLE["running"])
        for key in self._visible_keys():
            v = self._shown.get(key)
            if v is not None and v.state == "running":
                self.update_cell(key, "state", cell)
                touched += 1
        return touched

    def _cells(self, v: FlightView, t: float) -> list[Text]:
        dim = " dim" if v.stalled else ""
        state, name, sid, wave, elapsed, quiet, detail = v.cells(t)
        detail_style = "red" if v.state == "dead" else ("dim" if v.stalled else "")
        return [
            Text(state, style=STATE_STYLE.get(v.state, "")),
            Text(name, style=("bold" + dim).strip(), no_wrap=True, overflow="ellipsis"),
            Text(sid, style="dim"),
            Text(wave, style=dim.strip()),
            Text(elapsed, justify="right"),
            Text(quiet, justify="right", style="yellow" if v.stalled else ""),
            Text(detail, style=detail_style, no_wrap=True, overflow="ellipsis"),
        ]

    def selected_id(self) -> str | None:
        if not self._shown or self.row_count == 0:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None

    def view_of(self, agent_id: str) -> FlightView | None:
        return self._shown.get(agent_id)

    def action_copy_last(self) -> None:
        agent_id = self.selected_id()
        v = self._shown.get(agent_id) if agent_id else None
        if v is None or not v.detail:
            self.app.notify("nothing to copy", severity="warning", markup=False)
            return
        self.app.copy_to_clipboard(v.detail)
        self.app.notify(f"copied the last message of {v.name}", markup=False)
