"""Pins what `ContentCachedTable` relies on in the installed Textual (it overrides privates).

DataTable re-renders every visible cell after any `update_cell` (its caches key on a
table-wide counter); the adapter's cache, keyed by content, must leave that work to the
one cell that changed. Its layout work must not grow with the rows: a column of width 0
takes no room (so columns are shown and hidden by width, never removed and added), and
neither setting widths nor adding rows measures cells. Lines find their rows without
DataTable's line map. If a Textual upgrade stops calling what is overridden, or renames
it, these fail instead of the flights panel silently losing its frame time.
"""

from __future__ import annotations

import pytest
import textual.widgets._data_table as data_table_module
from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region

from wavewait.tui.widgets.cell_cache import ContentCachedTable

from conftest import until
from tuitools import deterministic_textual  # noqa: F401

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("deterministic_textual")]

ROWS, COLS = 5, 3


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ContentCachedTable(cursor_type="none")

    def on_mount(self) -> None:
        table = self.query_one(ContentCachedTable)
        for c in range(COLS):
            table.add_column(f"c{c}", width=6, key=f"c{c}")
        for r in range(ROWS):
            table.add_row(*(Text(f"{r}/{c}") for c in range(COLS)), key=f"r{r}")


def render_all(table: ContentCachedTable) -> str:
    """Render every line of the table, as a frame does."""
    strips = table.render_lines(Region(0, 0, table.size.width, table.size.height))
    return "\n".join(strip.text for strip in strips)


async def test_the_override_renders_every_cell_once_and_then_only_the_changed_one() -> None:
    app = TableApp()
    async with app.run_test(size=(40, 10)):
        table = app.query_one(ContentCachedTable)
        await until(lambda: table.row_count == ROWS and table.size.height > ROWS, what="the rows")
        text = render_all(table)
        cache = table._cells_rendered
        assert cache.misses >= ROWS * COLS, "Textual no longer calls DataTable._render_cell for body cells"
        assert "4/2" in text

        before = cache.misses
        table.update_cell("r2", "c1", Text("new"))
        text = render_all(table)
        assert "new" in text and "2/1" not in text
        assert cache.misses - before == 1, "updating one cell re-rendered others through Rich"
        assert cache.hits > 0


async def test_a_column_of_width_0_takes_no_room_and_comes_back_as_it_was() -> None:
    app = TableApp()
    async with app.run_test(size=(40, 10)):
        table = app.query_one(ContentCachedTable)
        await until(lambda: table.row_count == ROWS and table.size.height > ROWS, what="the rows")
        shown = render_all(table)
        table.set_widths({"c1": 0})
        hidden = render_all(table)
        assert "1/1" not in hidden and "c1" not in hidden
        assert hidden.splitlines()[2].rstrip() == shown.splitlines()[2].replace(" 1/1    ", "").rstrip()
        await until(lambda: table.virtual_size.width == 2 * 8, what="the width without the column")
        table.set_widths({"c1": 6})
        assert render_all(table) == shown
        await until(lambda: table.virtual_size.width == 3 * 8, what="the width with it")


async def test_setting_widths_and_adding_rows_measure_no_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    """DataTable measured every cell of every row added, and every cell of a column added (each
    narrower one the whole column again): O(rows²) for a layout change. Columns with a width
    are never sized by their cells, so nothing of them is measured."""
    app = TableApp()
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(ContentCachedTable)
        await until(lambda: table.row_count == ROWS, what="the rows")
        measured: list[object] = []
        measure = data_table_module.measure

        def counted(console, renderable, default, **kwargs):  # the real measure, counted
            measured.append(renderable)
            return measure(console, renderable, default, **kwargs)

        monkeypatch.setattr(data_table_module, "measure", counted)
        for r in range(ROWS, 200):
            table.add_row(*(Text(f"{r}/{c}") for c in range(COLS)), key=f"r{r}")
        table.set_widths({"c0": 0, "c2": 9})
        await until(lambda: table.virtual_size == (8 + 11, 200 + 1), what="the new dimensions")
        await pilot.pause()
        assert measured == []


async def test_lines_find_their_rows_after_one_is_removed_and_rows_are_one_line() -> None:
    app = TableApp()
    async with app.run_test(size=(40, 10)):
        table = app.query_one(ContentCachedTable)
        await until(lambda: table.row_count == ROWS and table.size.height > ROWS, what="the rows")
        table.remove_row("r1")
        lines = render_all(table).splitlines()
        assert [line.split()[0] for line in lines[1:ROWS]] == ["0/0", "2/0", "3/0", "4/0"]
        assert not table._offset_cache, "DataTable built its line map (O(rows) after each update)"
        with pytest.raises(ValueError, match="one line high"):
            table.add_row(Text("tall"), Text(""), Text(""), height=2)
