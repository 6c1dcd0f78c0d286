"""A wave's merge, live: each flight's branch in merge order with its status as it changes
(merged, conflict, check failed, skipped, pending), the overlap found before anything moved,
and the selected flight's conflicting files or its check's last lines (docs/merging.md).

The merge itself runs in the main screen's worker (`/merge`), so closing this view does not
stop it; the view only shows the results the merge reports after each step. With `/merge
WAVE --watch` the view runs nothing: it follows the wave's merge document on the bus, so a
merge run anywhere (`wavewait merge` in another terminal, an agent's `merge_wave`) shows live.
"""

from __future__ import annotations

import asyncio
import time

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.widgets import DataTable, Static

from ...core import merge
from ...core.bus import Bus
from ...core.merge import FlightMerge, MergeResult
from ..host import host_of

GLYPHS = {"merged": "✔", "conflict": "✖", "check_failed": "✖", "skipped": "⤼", "pending": "·"}
ROLE = {
    "merged": "good",
    "conflict": "needs_input",
    "check_failed": "needs_input",
    "skipped": "warn",
    "pending": "closed",
}
READ_EVERY = 0.1  # a burst of changes is read at most ten times a second
DETAIL_MIN = 20  # columns of the detail column at least (it takes what the terminal has left)
NAVIGATION = {"up", "down", "pageup", "pagedown", "home", "end"}
HEADLINE = {
    "merged": "merged",
    "needs_input": "stopped: flights need input",
    "nothing_merged": "nothing merged: every flight was skipped",
    "planned": "planned (dry run)",
}
TONE = {"needs_input": "needs_input", "nothing_merged": "warn"}  # the headline's role once done (else good)


class MergeScreen(Screen[None]):
    CSS_PATH = "merge.tcss"
    BINDINGS = [Binding("escape,q", "dismiss", "Close")]

    def __init__(self, what: str, *, watch: Bus | None = None) -> None:
        super().__init__()
        self.what = what
        self.watching = watch  # follow the wave's merge document on this bus (run nothing)  # the wave as asked (or "the wave"), until the first result names it
        self.result: MergeResult | None = None
        self.done = False
        self.failed: str | None = None
        self.shows = 0  # results shown so far (tests wait on it)
        self.picked = False  # the person moved the cursor: the detail follows it

    def compose(self) -> ComposeResult:
        with Vertical(id="merge-box"):
            yield Static(id="merge-title")
            yield Static(id="merge-overlap")
            table: DataTable[Text] = DataTable(id="merge-flights", cursor_type="row", zebra_stripes=False)
            yield table
            yield Static(id="merge-detail")

    def on_mount(self) -> None:
        table = self.query_one("#merge-flights", DataTable)
        widths = {"#": 3, "flight": 14, "branch": 24, "status": 15}
        rest = max(DETAIL_MIN, self.app.size.width - sum(widths.values()) - 2 * (len(widths) + 1) - 4)
        for label, width in (*widths.items(), ("detail", rest)):
            table.add_column(label, width=width, key=label)
        self.query_one("#merge-title", Static).update(Text(f"Merging {self.what}…", style="bold"))
        if self.watching is not None:
            self.query_one("#merge-title", Static).update(Text(f"No merge of {self.what} yet", style="bold"))
            self.follow(self.watching)

    @work(exclusive=True, group="merge-watch", exit_on_error=False)
    async def follow(self, bus: Bus) -> None:
        """Subscribe, then read; read again after every change of the wave's documents."""
        changes = await bus.subscribe_waves(self.what)
        try:
            while True:
                started = time.monotonic()
                doc = await merge.stored(bus, self.what)
                if doc is not None and isinstance(doc.get("result"), dict):
                    kept = doc["result"]
                    self.show(MergeResult.model_validate(kept), done=bool(kept.get("done")))
                    if kept.get("error"):
                        self.show_error(str(kept["error"]))
                await changes.wait()
                await asyncio.sleep(max(0.0, READ_EVERY - (time.monotonic() - started)))
        finally:
            changes.close()

    def show(self, result: MergeResult, *, done: bool = False) -> None:
        """Show the merge as it stands (called by the merge after every step, and at its end)."""
        self.result, self.done = result, done if self.watching is not None else done or self.done
        self.shows += 1
        if not self.is_attached:
            return
        roles = host_of(self.app).roles
        title = Text(f"Merge {result.wave} into {result.target}", style="bold")
        title.append(f"  ·  {result.method}" + (f"  ·  check: {result.check}" if result.check else ""), style="dim")
        counts = {s: sum(1 for f in result.flights if f.status == s) for s in GLYPHS}
        title.append("\n")
        state = HEADLINE[result.status] if self.done else "merging…"
        title.append(state, style=roles[TONE.get(result.status, "good") if self.done else "good"])
        title.append("  " + " · ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items() if n))
        self.query_one("#merge-title", Static).update(title)
        overlap = Text("overlap: ", style="bold")
        if result.overlap:
            overlap.append("; ".join(f"{o.path} ({', '.join(o.flights)})" for o in result.overlap))
        else:
            overlap.append("no file touched by two flights", style="dim")
        self.query_one("#merge-overlap", Static).update(overlap)
        self._rows(result.flights)
        self._detail()

    def show_error(self, message: str) -> None:
        self.failed, self.done = message, True
        if self.is_attached:
            bad = host_of(self.app).roles["bad"]
            self.query_one("#merge-title", Static).update(Text(f"Merge of {self.what} stopped: {message}", style=bad))

    def _rows(self, flights: list[FlightMerge]) -> None:
        roles = host_of(self.app).roles
        table = self.query_one("#merge-flights", DataTable)
        with self.app.batch_update():
            for i, f in enumerate(flights, 1):
                status = Text(f"{GLYPHS[f.status]} {f.status.replace('_', ' ')}", style=roles[ROLE[f.status]])
                cells = [Text(str(i)), Text(f.name), Text(f.branch or "—", style="dim"), status, Text(_detail(f))]
                if f.agent_id in table.rows:
                    for key, cell in zip(("#", "flight", "branch", "status", "detail"), cells, strict=True):
                        table.update_cell(f.agent_id, key, cell)
                else:
                    table.add_row(*cells, key=f.agent_id)

    def on_key(self, event: events.Key) -> None:
        if event.key in NAVIGATION:  # from now on the detail follows the cursor
            self.picked = True

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._detail()

    def _detail(self) -> None:
        """The highlighted flight's files or check output (at first: the first that stopped)."""
        if self.result is None:
            return
        table = self.query_one("#merge-flights", DataTable)
        by_id = {f.agent_id: f for f in self.result.flights}
        chosen = None
        if self.picked and table.row_count:
            key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
            chosen = by_id.get(str(key))
        if chosen is None:
            stopped = [f for f in self.result.flights if f.status in ("conflict", "check_failed")]
            chosen = stopped[0] if stopped else None
        pane = self.query_one("#merge-detail", Static)
        if chosen is None:
            pane.update(Text("↑/↓ picks a flight: its files, or its check's last lines", style="dim"))
            return
        text = Text(f"{chosen.name}: {chosen.status.replace('_', ' ')}", style="bold")
        if chosen.why:
            text.append(f" ({chosen.why})")
        if chosen.files:
            text.append(
                ("\nconflicting files: " if chosen.status == "conflict" else "\nfiles: ") + ", ".join(chosen.files)
            )
        if chosen.output:
            text.append("\n" + chosen.output)
        if chosen.status in ("conflict", "check_failed"):
            text.append(f"\nfix {chosen.branch} (commit on it), then /merge {self.result.wave} again", style="dim")
        pane.update(text)


def _detail(f: FlightMerge) -> str:
    if f.status == "conflict":
        return "in " + ", ".join(f.files or [])
    if f.status == "check_failed":
        last = (f.output or "").strip().splitlines()
        return last[-1] if last else (f.why or "")
    return f.why or ""
