"""Scroll lock: the scrollback and the event log follow new lines only while at their end."""

from __future__ import annotations

import pytest
from conftest import until
from textual.app import App, ComposeResult
from tuitools import deterministic_textual  # noqa: F401

from wavewait.tui.widgets.followlog import FollowLog

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
