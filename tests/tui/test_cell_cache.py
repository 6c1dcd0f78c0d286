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
from textual.coordinate import Coordinate
from textual.geometry import Region
from textual.widgets.data_table import DuplicateKey

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


async def test_blank_rows_are_rows_like_any_other_and_filled_cell_by_cell() -> None:
    """`add_blank_rows` keeps what `add_row` keeps for a row (its place, its key, the cursor
    clamped to the rows), with cells blank until `update_cell`."""
    app = TableApp()
    async with app.run_test(size=(40, 10)):
        table = app.query_one(ContentCachedTable)
        await until(lambda: table.row_count == ROWS and table.size.height > ROWS, what="the rows")
        table.add_blank_rows([f"b{i}" for i in range(3)])
        assert table.row_count == ROWS + 3 and table.get_row_index("b1") == ROWS + 1
        assert table.get_cell("b1", "c0").plain == ""
        table.update_cell("b1", "c0", Text("filled"))
        await until(lambda: table.size.height > ROWS + 3, what="the table grown")
        lines = render_all(table).splitlines()
        assert lines[1 + ROWS + 1].split() == ["filled"]
        assert lines[1 + ROWS].strip() == ""  # b0: blank, not "None"
        with pytest.raises(DuplicateKey):
            table.add_blank_rows(["b2"])
        empty = ContentCachedTable(cursor_type="row")
        await app.mount(empty)
        empty.add_column("c", width=4, key="c")
        empty.add_blank_rows(["x"])
        assert empty.cursor_coordinate == (0, 0)


async def test_rows_and_regions_are_found_without_walking_the_rows_above() -> None:
    """DataTable walks every row above the cursor for its region, and lists every row again
    after each update for `ordered_rows` (a key press at the bottom of 100,000 rows); here a
    row's line is its index, and `ordered_rows` reads only the rows asked for."""
    app = TableApp()
    async with app.run_test(size=(40, 10)):
        table = app.query_one(ContentCachedTable)
        await until(lambda: table.row_count == ROWS, what="the rows")
        table.add_blank_rows([f"b{i}" for i in range(1000)])
        rows = table.ordered_rows
        assert len(rows) == ROWS + 1000 and rows[3].key.value == "r3" and rows[-1].key.value == "b999"
        assert [r.key.value for r in rows[ROWS - 1 : ROWS + 2]] == ["r4", "b0", "b1"]
        assert [r.key.value for r in rows[ROWS:][:2]] == ["b0", "b1"]
        with pytest.raises(IndexError):
            rows[ROWS + 1000]
        for index in (0, 1, 700):
            assert table._get_row_region(index).y == 1 + index  # under the header
            assert table._get_cell_region(Coordinate(index, 2)) == Region(16, 1 + index, 8, 1)
        assert table._get_row_region(ROWS + 1000) == Region(0, 0, 0, 0)
