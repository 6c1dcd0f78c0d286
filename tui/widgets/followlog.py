"""A log that follows new lines only while the person is at its end (scroll lock)."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from textual import events
from textual.widgets import RichLog


class FollowLog(RichLog):
    """RichLog with scroll lock: scrolled up to read, the person keeps their place.

    A plain RichLog jumps to the end on every line, so reading a result while flights keep
    reporting is impossible. Here, once the person scrolls up, lines that arrive stay below;
    the border counts them, and scrolling back to the end (End, or the mouse) follows again.
    The lock follows what the person did, not where the view happens to be: a layout change
    that shrinks the log (the wait's status appearing) must not stop it following.
    """

    DEFAULT_CSS = """
    FollowLog.-locked {
        border-bottom: solid $warning;
        border-subtitle-color: $warning;
    }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.following = True
        self.unread = 0

    def write(
        self,
        content: RenderableType | object,
        width: int | None = None,
        expand: bool = False,
        shrink: bool = True,
        scroll_end: bool | None = None,
        animate: bool = False,
    ) -> FollowLog:
        follow = self.following if scroll_end is None else scroll_end
        super().write(content, width, expand, shrink, scroll_end=False, animate=animate)
        if follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        else:
            self.unread += 1
            self.border_subtitle = f"scroll lock · {self.unread} new below · End follows"
            self.add_class("-locked")
        return self

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self.is_vertical_scroll_end:
            self._follow_again()
        elif new_value < old_value:  # the person scrolled up to read
            self.following = False

    def on_resize(self, event: events.Resize) -> None:
        """Shrunk (the wait's status appearing): the newest lines stay in view while following."""
        super().on_resize(event)
        if self.following:
            self.call_after_refresh(self._keep_end)

    def _keep_end(self) -> None:
        if self.following:  # the person may have scrolled up since the resize
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def clear(self) -> FollowLog:
        super().clear()
        self._follow_again()
        return self

    def _follow_again(self) -> None:
        self.following = True
        self.unread = 0
        self.border_subtitle = ""
        self.remove_class("-locked")
