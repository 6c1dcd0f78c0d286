"""The header line: the flights' counts, each wave's spend, and who you are, fitted whole."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import Static

COUNT_SEP, GROUP_SEP = " · ", "  ·  "


@dataclass(frozen=True)
class Item:
    """One thing the header says, with the separator that comes before it on a line."""

    text: str
    style: str
    sep: str
    sep_style: str
    group: int  # adjacent pieces of one group and style are painted as one span


def fit(items: Sequence[Item], width: int, lines: int) -> list[list[Item]] | None:
    """Pack the items in order into at most `lines` lines of `width` cells, breaking only
    between items (a line starts without its separator); None when they do not fit."""
    out: list[list[Item]] = [[]]
    used = 0
    for item in items:
        need = cell_len(item.sep) + cell_len(item.text) if out[-1] else cell_len(item.text)
        if used + need > width:
            if len(out) == lines or cell_len(item.text) > width:
                return None
            out.append([])
            used, need = 0, cell_len(item.text)
        out[-1].append(item)
        used += need
    return out


class WaveHeader(Static):
    """Never cuts an item in two: at a narrow width the counts and waves drop whole from the
    right, and `you: NAME` is the last to go (a header that wraps mid-item, or loses who you
    are during a wait, reads wrong at 80 columns)."""

    DEFAULT_CSS = """
    WaveHeader {
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._items: list[Item] = []
        self._you: Item | None = None
        self._lines = 1

    def show(self, counts: Sequence[str], waves: Sequence[tuple[str, str]], me: str, lines: int = 1) -> None:
        """`counts` in bold, `waves` as (text, style), then `you: ME`; on at most `lines` lines."""
        items = [Item(c, "bold", COUNT_SEP, "bold", 0) for c in counts]
        items += [Item(w, style, GROUP_SEP if i == 0 else COUNT_SEP, "dim", 1) for i, (w, style) in enumerate(waves)]
        you = Item(f"you: {me}", "dim", GROUP_SEP, "dim", 2)
        if (items, you, lines) != (self._items, self._you, self._lines):
            self._items, self._you, self._lines = items, you, lines
            self._paint()

    def on_resize(self) -> None:
        self._paint()

    def _paint(self) -> None:
        width = self.content_size.width or self.app.size.width - 2
        items, you = self._items, self._you
        tries = [[*items[:k], you] for k in range(len(items), -1, -1)] if you is not None else []
        packed = next((p for p in (fit(t, width, self._lines) for t in tries) if p is not None), None)
        self.update(_text(packed) if packed is not None else _text([items[:1]]))


def _text(lines: list[list[Item]]) -> Text:
    """The lines as one Text; adjacent pieces of one group and style make one span."""
    out = Text()
    run, run_style, run_group = "", "", -1
    for n, line in enumerate(lines):
        if n:
            out.append(run, style=run_style)
            out.append("\n")
            run, run_style, run_group = "", "", -1
        for i, item in enumerate(line):
            for text, style in ((item.sep if i else "", item.sep_style), (item.text, item.style)):
                if not text:
                    continue
                if style != run_style or item.group != run_group:
                    out.append(run, style=run_style)
                    run, run_style, run_group = "", style, item.group
                run += text
    out.append(run, style=run_style)
    return out
