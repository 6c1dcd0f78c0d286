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

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.coordinate import Coordinate
from textual.geometry import Region
from textual.widgets import DataTable
from textual.widgets.data_table import Column, ColumnKey, DuplicateKey, Row, RowKey

CACHED_CELLS = 4000  # a full panel's cells several times over
BLANK = Text("")  # the cell of a row not yet filled (`add_blank_rows`); never changed in place


class HideableColumn(Column):
    """A column that takes no room, not even its padding, while its fixed width is 0."""

    def get_render_width(self, data_table: DataTable[Any]) -> int:
        if not self.auto_width and self.width == 0:
            return 0
        return super().get_render_width(data_table)


class RowsInOrder(Sequence[Row]):
    """Rows start..stop-1 of a table in their order, each looked up when read (a slice is
    another such view): what `ordered_rows` gives, at the cost of the rows read."""

    def __init__(self, table: DataTable[Any], start: int, stop: int) -> None:
        self._table, self._start, self._stop = table, start, max(start, stop)

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, index: int) -> Row: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Row]: ...
    def __getitem__(self, index: int | slice) -> Row | Sequence[Row]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return RowsInOrder(self._table, self._start + start, self._start + stop)
        i = index + len(self) if index < 0 else index
        if not 0 <= i < len(self):
            raise IndexError(index)
        table = self._table
        key = table._row_locations.get_key(self._start + i)
        if key is None:  # the table lost rows since this view was made
            raise IndexError(index)
        return table.rows[key]

    def __iter__(self) -> Iterator[Row]:
        for i in range(len(self)):
            yield self[i]


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

    def add_blank_rows(self, keys: Sequence[str]) -> None:
        """One-line rows keyed `keys`, after the others, each cell blank until `update_cell`
        fills it: what DataTable's `add_row` does for each row, at the cost of a few dict
        entries a row. `add_row` sets the cursor (a reactive, with its watchers) and builds the
        list of columns for every row: ~0.5 ms a row, 50 s for a wave of 100,000 flights,
        whose rows a table then fills only as they come on screen."""
        if not keys:
            return
        columns = [column.key for column in self.ordered_columns]
        blank = dict.fromkeys(columns, BLANK)  # copied for each row: a copy hashes no key again
        had_rows = self.row_count > 0
        index = self.row_count
        locations, data, rows = self._row_locations, self._data, self.rows
        for key in keys:
            row_key = RowKey(key)
            if row_key in rows:
                raise DuplicateKey(f"The row key {row_key!r} already exists.")
            locations[row_key] = index
            index += 1
            data[row_key] = blank.copy()
            rows[row_key] = Row(row_key, 1, None, False)
        # not among `_new_rows`: a row without a label and with blank cells widens nothing
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate  # clamped to the rows, as add_row does
        if not had_rows and columns and self.show_cursor and self.cursor_type != "none":
            self._highlight_cursor()  # a cell for the cursor where there was none
        self._update_count += 1
        self.check_idle()

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

    @property
    def ordered_rows(self) -> Sequence[Row]:  # type: ignore[override]
        """The rows in order, each found when it is read: DataTable builds the list of all of
        them again after every `update_cell` (its cache keys on the counter), and a cursor
        move or a page down reads it: 100,000 rows walked for a key press."""
        return RowsInOrder(self, 0, self.row_count)

    def _get_row_region(self, row_index: int) -> Region:
        """DataTable's, where a row's line is its index (one-line rows), not a sum over the rows above."""
        if row_index <= 0 or not self.is_valid_row_index(row_index):
            return super()._get_row_region(row_index)
        first = super()._get_row_region(0)
        return first._replace(y=first.y + row_index)

    def _get_cell_region(self, coordinate: Coordinate) -> Region:
        """DataTable's, where a row's line is its index (one-line rows), not a sum over the rows above."""
        if coordinate.row == 0 or not self.is_valid_coordinate(coordinate):
            return super()._get_cell_region(coordinate)
        first = super()._get_cell_region(Coordinate(0, coordinate.column))
        return first._replace(y=first.y + coordinate.row)

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
