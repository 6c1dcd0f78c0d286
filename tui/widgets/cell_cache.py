"""A DataTable whose cell renders are cached by content: the one use of a DataTable private.

DataTable keys its render caches on a table-wide counter that every `update_cell` bumps, so
one changed cell re-renders every visible cell through Rich (~0.2 ms each, 25-65 ms a frame
with a full flights panel). Textual has no public hook to key those caches otherwise (nor
to update a cell without bumping the counter), so this class overrides the private
`_render_cell` and keeps its own cache keyed by the cell's content, position and look: a
frame re-renders only the cells that changed. `tests/tui/test_cell_cache.py` pins what
this relies on (the override is called by the installed Textual, and updating one cell
does not re-render the others).
"""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.coordinate import Coordinate
from textual.widgets import DataTable

CACHED_CELLS = 4000  # a full panel's cells several times over


class ContentCachedTable(DataTable[Text]):
    """A table of `Text` cells whose renders are cached by content, not by update count."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._cells_rendered: LRUCache[tuple[object, ...], list[list[Segment]]] = LRUCache(CACHED_CELLS)

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> list[list[Segment]]:
        """DataTable's cell render, cached by everything DataTable's own key holds but the counter."""
        if row_index < 0 or column_index < 0:  # the header and row labels: DataTable's own caching
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        cell = self.get_cell_at(Coordinate(row_index, column_index))
        key = (
            row_index,  # DataTable adds the position to the style's meta (clicks find the cell)
            column_index,
            cell.plain,
            cell.style,
            cell.justify,
            cell.overflow,
            cell.no_wrap,
            tuple(cell.spans),
            base_style,
            width,
            cursor,
            hover,
            self._show_hover_cursor,
            self._pseudo_class_state,
        )
        lines = self._cells_rendered.get(key)
        if lines is None:
            lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
            self._cells_rendered[key] = lines
        return lines

    def _clear_caches(self) -> None:
        super()._clear_caches()
        self._cells_rendered.clear()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cells_rendered.clear()
