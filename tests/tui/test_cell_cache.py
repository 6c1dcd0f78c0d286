"""Pins what `ContentCachedTable` relies on in the installed Textual (it overrides a private).

DataTable re-renders every visible cell after any `update_cell` (its caches key on a
table-wide counter); the adapter's cache, keyed by content, must leave that work to the
one cell that changed. If a Textual upgrade stops calling `_render_cell`, or renames it,
these fail instead of the flights panel silently losing its frame time.
"""

from __future__ import annotations

import pytest
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
