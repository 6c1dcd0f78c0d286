"""The demo's guide: what to do now, in a fixed place above the command line (`demo_story.py`)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class DemoGuide(Static):
    """Two lines at most; shown only in `wavewait demo`. Given its text (attributes down)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self.text = ""

    def show(self, text: str) -> None:
        if text != self.text:
            self.text = text
            self.update(Text(text))
