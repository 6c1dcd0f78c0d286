"""Scroll lock: the scrollback and the event log follow new lines only while at their end."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult

from wavewait.tui.widgets.followlog import FollowLog

from conftest import until
from tuitools import deterministic_textual  # noqa: F401

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("deterministic_textual")]


class LogApp(App[None]):
    def compose(self) -> ComposeResult:
        yield FollowLog(id="log")


async def test_follows_at_the_end_and_keeps_the_place_when_scrolled_up():
    app = LogApp()
    async with app.run_test(size=(40, 10)) as pilot:
        log = app.query_one(FollowLog)
        for i in range(50):
            log.write(f"line {i}")
        await until(lambda: log.max_scroll_y > 0 and log.is_vertical_scroll_end, what="following the end")
        assert not log.has_class("-locked")

        log.scroll_home(animate=False, immediate=True)
        await pilot.pause()
        log.write("arrived while reading")
        log.write("and another")
        await pilot.pause()
        assert log.scroll_y == 0  # the person's place is kept
        assert log.unread == 2 and "2 new below" in str(log.border_subtitle)
        assert log.has_class("-locked")

        log.scroll_end(animate=False, immediate=True)
        await until(lambda: not log.has_class("-locked"), what="the lock released at the end")
        assert log.unread == 0 and not log.border_subtitle
        log.write("followed again")
        await until(lambda: log.is_vertical_scroll_end, what="following again")
        assert log.lines[-1].text.startswith("followed again")


async def test_a_layout_that_shrinks_the_log_does_not_lock_it():
    """The wait's status layer appearing makes the log shorter: it must keep following."""
    app = LogApp()
    async with app.run_test(size=(40, 20)) as pilot:
        log = app.query_one(FollowLog)
        for i in range(50):
            log.write(f"line {i}")
        await until(lambda: log.max_scroll_y > 0 and log.is_vertical_scroll_end, what="following the end")
        log.styles.height = 6
        await until(lambda: log.size.height == 6, what="the log shrunk")
        # the newest lines stay in view, not hidden behind what took the room
        await until(lambda: log.is_vertical_scroll_end, what="the end kept in view")
        assert log.lines[-1].text.startswith("line 49")
        log.write("the result of the wait")
        await pilot.pause()
        assert log.is_vertical_scroll_end and not log.has_class("-locked")
        log.styles.height = "1fr"
        await until(lambda: log.size.height > 6, what="the log grown back")
        log.write("after")
        await pilot.pause()
        assert log.is_vertical_scroll_end and log.following
