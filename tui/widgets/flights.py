"""The flights panel: one row per flight, keyed by agent id, repainted from one timer."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.message import Message
from textual.widgets.data_table import CellDoesNotExist

from ...core.ids import short
from ..messages import Toast
from ..state import FlightView, role_styles
from .cell_cache import ContentCachedTable

Layout = tuple[tuple[str, int], ...]  # the columns shown: (label, width), in order
STATE, ID, ELAPSED, QUIET = ("state", 13), ("id", 8), ("elapsed", 7), ("quiet", 6)
NAME, NAME_NARROW = 14, 10  # the name column, and on a terminal too narrow for the coding facts
WAVE_MIN, WAVE_MAX, WAVE_NARROW = 4, 16, 8  # the wave column fits the longest wave shown, within these
CHANGES = ("changes", 13)  # a coding flight's `+12 −3 2f`, shown once a flight has some
COST = ("cost", 13)  # and its `1.2k $0.0123`
CHANGES_BRIEF, COST_BRIEF = 10, 7  # the same facts, narrow: `+12 −3` and `$0.01` (or its tokens)
DETAIL = "last message / reason"  # the one column whose width follows the screen
NARROW_BELOW = 100  # terminal columns under which the detail column is left out
DETAIL_MIN = 20
# every column a layout may show, in their order; those not shown have width 0 (no room)
COLUMNS = (STATE[0], "name", ID[0], "wave", ELAPSED[0], QUIET[0], CHANGES[0], COST[0], DETAIL)
KEYS = tuple(label.split()[0] for label in COLUMNS)


class FlightsTable(ContentCachedTable):
    """Flights with fixed column widths; only changed cells are updated.

    The wave column fits the longest wave name shown (within WAVE_MIN..WAVE_MAX). Once a
    coding flight shows changes or cost, a column each comes in before the detail column:
    whole (`+12 −3 2f`, `1.2k $0.0123`) where there is room, else brief (`+12 −3`,
    `$0.01`); on a terminal too narrow even for those, `quiet` is left out, then the name
    and wave columns narrow (and under 80 columns the id goes), so at 80 columns each
    flight still shows its state, name, id, changes and cost. The detail column takes the width the others leave (a wide terminal
    shows more of each message) and is left out below NARROW_BELOW columns, where it would
    only be cut off. The columns change when the terminal is resized, the first coding facts
    come (or the last go) or the longest wave name changes, never with the content otherwise;
    all of them are laid out once, and a change of layout only sets their widths (0: not
    shown), so it costs the same with 10,000 rows as with ten.
    """

    HELP = """
## Flights
One row per flight: state (glyph and word: queued, running, idle, needs input, closed, dead), name,
short id, wave, time since it started, time since its last message, for a coding flight
what it changed (`+12 −3 2f`: lines added, deleted, files) and what it cost (`1.2k $0.0123`:
tokens in and out, money where its agent reports it; `?` when it ended without saying), and
its last message (✉ once it reported to you), its open question, or why it died. On a
narrow terminal changes and cost are brief (`+12 −3`, `$0.01` or tokens), and the columns
that do not fit are left out: the message first, then the time since the last message.

- **Enter** (or a second click) opens the flight: its messages, events and output log;
  on a flight that needs input, it starts `/reply ID ` on the command line instead (on one
  the merge queue stopped, it opens its wave's merge view).
- **Shift+Tab** / **Tab** move between the command line and this panel.
- **c** copies the flight's last message.
- **a** / **d** on a flight that needs input (a Claude flight's permission request): allow it
  at once, or start `/reply ID deny ` so you can say why.
- **m** opens the merge view of the flight's wave (`/merge WAVE --watch`).
- **t** tells a Claude Code or Codex flight something: it starts `/tell ID ` on the command
  line (a flight without a conversation takes `/send ID MESSAGE` instead); Enter on it shows
  its conversation live, with a line to tell it at the foot.
"""
    BINDINGS = [
        Binding("c", "copy_last", "Copy message", show=False),
        Binding("a", "answer('allow')", "Allow", show=False),
        Binding("d", "answer('deny')", "Deny", show=False),
        Binding("m", "merge_view", "Merge view", show=False),
        Binding("t", "tell", "Tell", tooltip="Tell the selected flight something (/tell ID …)"),
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
        self._painted: dict[str, dict[str, tuple[str, str]]] = {}  # what each row's cells hold
        self._coding: set[str] = set()  # the flights shown with changes or cost
        self._waves: Counter[int] = Counter()  # the widths of the wave names shown, and how many of each
        self._layout: Layout = (STATE, ("name", NAME), ID, ("wave", WAVE_MIN), ELAPSED, QUIET)
        self._t = 0.0  # the time the rows were last painted for

    def on_mount(self) -> None:
        widths = _widths(self._layout)
        for label, key in zip(COLUMNS, KEYS, strict=True):
            self.add_column(label, width=widths[key], key=key)

    def on_resize(self) -> None:
        self._fit()
        self.spin(self._t)  # a taller table shows rows that may not be up to date

    def _want(self) -> Layout:
        """The columns the width allows, the first layout that fits of: (once a coding flight is
        shown) changes and cost whole, then brief, each with the detail (from NARROW_BELOW
        columns on) and then without it; brief without `quiet`; brief with the name and wave
        narrowed; then without the id. Without coding facts (or room for them): the detail
        with the width left."""
        pad = 2 * self.cell_padding
        width = self.size.width - int(self.styles.scrollbar_size_vertical)
        wave = min(WAVE_MAX, max(WAVE_MIN, max(self._waves, default=0)))
        wide = self.app.size.width >= NARROW_BELOW

        def base(name: int = NAME, wave: int = wave, quiet: bool = True) -> Layout:
            return (STATE, ("name", name), ID, ("wave", wave), ELAPSED) + ((QUIET,) if quiet else ())

        def room(cols: Layout) -> int:
            return width - sum(w + pad for _, w in cols)

        def with_detail(cols: Layout) -> Layout | None:
            left = room(cols) - pad
            return (*cols, (DETAIL, left)) if wide and left >= DETAIL_MIN else None

        if self._coding:
            whole, brief = (CHANGES, COST), (("changes", CHANGES_BRIEF), ("cost", COST_BRIEF))
            for cols in (base() + whole, base() + brief):
                if fits := with_detail(cols):
                    return fits
            narrow = base(NAME_NARROW, min(wave, WAVE_NARROW), quiet=False)
            no_id = tuple(c for c in narrow if c != ID)  # under 80 columns: the id is in notices and /reply
            for cols in (base() + whole, base() + brief, base(quiet=False) + brief, narrow + brief, no_id + brief):
                if room(cols) >= 0:
                    return cols
        return with_detail(base()) or base()  # changes and cost, if any, lead the detail

    def _fit(self) -> None:
        """Lay out the columns again if they should change: their widths are set in place, at
        a cost that does not grow with the rows. When changes and cost come, go or narrow, the
        cells whose text follows (theirs, and the detail's lead) are repainted on the rows on
        screen by `spin`, which every caller runs next, and on the others as they scroll into
        view (`watch_scroll_y`)."""
        want = self._want()
        if want == self._layout:
            return
        widths, old = _widths(want), _widths(self._layout)
        resized = {key: width for key, width in widths.items() if width != old[key]}
        self._layout = want
        self.set_widths(resized)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        """Rows scrolled into view are brought up to date at once (their cells may be left
        from before a layout change, and their clocks from the last repaint of them)."""
        super().watch_scroll_y(old_value, new_value)
        if round(old_value) != round(new_value) and self._shown:
            self.spin(self._t)

    def show(self, views: Sequence[FlightView], t: float) -> None:
        """Make the table show `views` (in order) at time `t`.

        A row whose view is the one already shown has changed only in its clocks (elapsed,
        quiet, spinner), and only rows on screen get those: with 1,000 flights the clocks
        would otherwise touch 2,000 cells every second for nothing anyone can see. A row
        scrolled into view gets its clocks at once (`watch_scroll_y`).
        """
        keep = {v.id for v in views}
        for key in [k for k in self._shown if k not in keep]:
            self.remove_row(key)
            self._note_wave(self._shown.pop(key), -1)
            del self._painted[key]
            self._coding.discard(key)
        added = []
        for v in views:
            old = self._shown.get(v.id)
            if old is v:
                continue
            self._hold(v, old)
            if old == v:  # read again, unchanged (a new flight makes every view anew): as painted
                continue
            if old is None:
                added.append(v.id)
            else:
                self._paint(v, t)
        self._add(added)
        self._fit()
        self.spin(t)

    def show_changed(self, views: Sequence[FlightView], t: float) -> None:
        """Repaint the rows of `views` shown, and add those of new ones after them (`show`
        adds, removes and orders rows); then bring the clocks on screen to `t`."""
        added = []
        for v in views:
            old = self._shown.get(v.id)
            self._hold(v, old)
            if old is None:
                added.append(v.id)
            else:
                self._paint(v, t)
        self._add(added)
        self._fit()
        self.spin(t)

    def _add(self, ids: Sequence[str]) -> None:
        """Rows for the flights `ids` (held already), after the others, blank: a row's cells
        are made when it comes on screen (`spin`, which every caller runs next, and
        `watch_scroll_y`) or its flight changes, so a wave of 100,000 flights costs its rows
        on screen, not 900,000 cells, at its first frame."""
        for agent_id in ids:
            self._painted[agent_id] = {}  # before the rows: adding them may scroll
        self.add_blank_rows(ids)

    def _hold(self, v: FlightView, old: FlightView | None) -> None:
        """Note `v` as the view shown in its row (in place of `old`), and what the layout
        reads of it: its wave name's width, and whether it has coding facts."""
        if old is not None:
            self._note_wave(old, -1)
        self._note_wave(v, 1)
        self._shown[v.id] = v
        if v.changed or v.spent:
            self._coding.add(v.id)
        else:
            self._coding.discard(v.id)

    def _note_wave(self, v: FlightView, n: int) -> None:
        width = cell_len(v.wave or "—")
        self._waves[width] += n
        if not self._waves[width]:
            del self._waves[width]

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
        for key in KEYS:
            look = _look(cells[key])
            if painted.get(key) != look:
                self.update_cell(v.id, key, cells[key])
                painted[key] = look

    def _visible_keys(self) -> set[str]:
        """Keys of the rows on screen (cheap: `ordered_rows` would build all 1,000)."""
        first = int(self.scroll_y)
        last = min(self.row_count, first + max(1, self.size.height))
        keys = (self.coordinate_to_cell_key(Coordinate(i, 0)).row_key.value for i in range(first, last))
        return {k for k in keys if k is not None}

    def _cells(self, v: FlightView, t: float) -> dict[str, Text]:
        stalled = v.stalled(t)
        dim = " dim" if stalled else ""
        state, name, sid, wave, elapsed, quiet, changed, spent, detail = v.cells(t)
        shown = dict(self._layout)
        if shown.get(CHANGES[0], CHANGES[1]) < CHANGES[1]:
            changed = v.changed_brief
        if shown.get(COST[0], COST[1]) < COST[1]:
            spent = v.spent_brief
        lead = [fact for fact, label in ((changed, CHANGES[0]), (spent, COST[0])) if fact and label not in shown]
        if lead:  # no room for their columns: the detail says them first
            detail = " · ".join([*lead, detail]) if detail else " · ".join(lead)
        roles = self.roles
        detail_style = roles["bad"] if v.state == "dead" else ("dim" if stalled else "")
        return {
            "state": Text(state, style=roles.get(v.state, "")),
            "name": Text(name, style=("bold" + dim).strip(), no_wrap=True, overflow="ellipsis"),
            "id": Text(sid, style="dim"),
            "wave": Text(wave, style=dim.strip(), no_wrap=True, overflow="ellipsis"),
            "elapsed": Text(elapsed, justify="right"),
            "quiet": Text(quiet, justify="right", style=roles["warn"] if stalled else ""),
            "changes": Text(changed, justify="right", no_wrap=True, overflow="ellipsis"),
            "cost": Text(spent, justify="right", no_wrap=True, overflow="ellipsis"),
            "last": Text(detail, style=detail_style, no_wrap=True, overflow="ellipsis"),
        }

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

    class TellRequested(Message):
        """t on a flight that holds a conversation: the screen starts `/tell ID ` for it."""

        def __init__(self, agent_id: str) -> None:
            super().__init__()
            self.agent_id = agent_id

    def action_tell(self) -> None:
        """t: tell the selected flight; one without a conversation is sent messages instead."""
        agent_id = self.selected_id()
        v = self._shown.get(agent_id) if agent_id else None
        if v is None:
            self.post_message(Toast("select a flight to tell it something", severity="warning"))
        elif v.talk == "open":
            self.post_message(self.TellRequested(v.id))
        else:
            why = "was closed with /close: its conversation ended" if v.talk else "holds no conversation"
            self.post_message(
                Toast(
                    f"{v.name} {why}, so it cannot be told; /send {short(v.id)} MESSAGE puts a message in its inbox",
                    severity="warning",
                )
            )

    class MergeViewRequested(Message):
        def __init__(self, wave: str) -> None:
            super().__init__()
            self.wave = wave

    def action_merge_view(self) -> None:
        """m: the merge view of the selected flight's wave (what its merge did, live)."""
        agent_id = self.selected_id()
        v = self._shown.get(agent_id) if agent_id else None
        if v is None or not v.wave:
            self.post_message(Toast("select a flight of a wave to see its merge", severity="warning"))
            return
        self.post_message(self.MergeViewRequested(v.wave))

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


def _widths(layout: Layout) -> dict[str, int]:
    """The width of every column for `layout`: 0 for those it does not show."""
    return dict.fromkeys(KEYS, 0) | {_key(label): width for label, width in layout}
