"""A DataTable whose cost per frame and per layout change does not grow with its rows: the
one place that uses DataTable privates.

DataTable keys its render caches on a table-wide counter that every `update_cell` bumps, so
one changed cell re-renders every visible cell through Rich (~0.2 ms each, 25-65 ms a frame
with a full flights panel). Textual has no public hook to key those caches otherwise (nor
to update a cell without bumping the counter), so this class overrides the private
`_render_cell` and keeps its own cache keyed by the cell's content, position and look: a
frame re-renders only the cells that changed.

A table only appends columns, and adding one marks every row's cell to be measured; each
cell narrower than the column then measures the whole column again (O(rows²) a column:
1.93 million measurements for one layout change of 800 rows). Here a column of width 0
takes no room at all, not even its padding, so a table lays out all the columns it may
show once and `set_widths` shows, hides and resizes them in place, at a cost that does not
depend on the rows. Columns with a width are never sized by their cells, so rows added
are measured only where that is read (a row label, or an auto-width column).

Each `update_cell` also drops DataTable's map of screen lines to rows (keyed on the same
counter), which it builds again from every row: ~10 ms a frame at 10,000 rows. Rows here
are one line each, so line y is row y (after the header) and the map is not needed.

`tests/tui/test_cell_cache.py` pins what this relies on (the overrides are called by the
installed Textual, updating one cell does not re-render the others, a column of width 0
takes no room, setting widths and adding rows measure no cell, and lines find their rows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import Column, ColumnKey, RowKey

CACHED_CELLS = 4000  # a full panel's cells several times over


class HideableColumn(Column):
    """A column that takes no room, not even its padding, while its fixed width is 0."""

    def get_render_width(self, data_table: DataTable[Any]) -> int:
        if not self.auto_width and self.width == 0:
            return 0
        return super().get_render_width(data_table)


class ContentCachedTable(DataTable[Text]):
    """A table of one-line rows of `Text` cells whose renders are cached by content, not by
    update count."""

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
        if width == 0:  # a hidden column: no line has any of it
            return [[] for _ in range(self.header_height if row_index < 0 else 1)]
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

    def add_row(
        self,
        *cells: Text,
        height: int | None = 1,
        key: str | None = None,
        label: Text | str | None = None,
    ) -> RowKey:
        """DataTable's `add_row`, for one-line rows only (`_get_offsets` relies on it)."""
        if height != 1:
            raise ValueError(f"rows of this table are one line high, not {height}")
        return super().add_row(*cells, height=height, key=key, label=label)

    def _get_offsets(self, y: int) -> tuple[RowKey, int]:
        """The row at line `y` (and the line within it: 0), without DataTable's line map."""
        if self.show_header:
            if y < self.header_height:
                return self._header_row_key, y
            y -= self.header_height
        row_key = self._row_locations.get_key(y)
        if row_key is None:
            raise LookupError(f"no row at line {y}")
        return row_key, 0

    @property
    def _total_row_height(self) -> int:
        return self.row_count

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        """DataTable's dimensions update, measuring the rows added only where it is read: a
        row label, or a column sized by its content."""
        if not any(column.auto_width for column in self.columns.values()):
            rows = self.rows
            new_rows = [key for key in new_rows if key in rows and rows[key].label is not None]
        super()._update_dimensions(new_rows)

    def add_column(
        self,
        label: Text | str,
        *,
        width: int | None = None,
        key: str | None = None,
        default: Text | None = None,
    ) -> ColumnKey:
        """DataTable's `add_column`; with width 0 the column is hidden (see `set_widths`)."""
        column_key = super().add_column(label, width=width, key=key, default=default)
        self.columns[column_key] = HideableColumn(**vars(self.columns[column_key]))
        return column_key

    def set_widths(self, widths: Mapping[str, int]) -> None:
        """Give the columns keyed in `widths` those fixed widths (0: hidden), in place, at a
        cost that does not grow with the rows."""
        if not widths:
            return
        for key, width in widths.items():
            column = self.columns[ColumnKey(key)]
            column.width, column.auto_width = width, False
        self._update_count += 1  # the row and line render caches key on it
        self._require_update_dimensions = True  # the virtual width, on the next idle
        self.check_idle()
        self.refresh()

    def _clear_caches(self) -> None:
        super()._clear_caches()
        self._cells_rendered.clear()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cells_rendered.clear()
