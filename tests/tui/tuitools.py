"""Helpers for the TUI tests: a deterministic app, fixed records, reading the screen."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from textual import constants, events
from textual.pilot import Pilot
from textual.widgets import Input

from wavewait.core.bus import Bus
from wavewait.tui.app import WaveApp
from wavewait.tui.scenes import IDS, NOW, put_flight  # noqa: F401  (the fixed records tests share)
from wavewait.tui.widgets.followlog import FollowLog

from conftest import until

SIZE = (100, 30)


@pytest.fixture
def deterministic_textual(monkeypatch: pytest.MonkeyPatch) -> None:
    """No animations, no cursor blink, no theme from the developer's shell."""
    monkeypatch.setattr(constants, "TEXTUAL_ANIMATIONS", "none")
    monkeypatch.setattr(Input, "_toggle_cursor", lambda self: None)
    monkeypatch.delenv("TEXTUAL_THEME", raising=False)


def make_app(bus: Bus, *, frozen: bool = False, **kwargs) -> WaveApp:
    """The app as tests drive it: repaint on every read (no timer), fixed label and theme."""
    opts = dict(me="orchestrator", animate=False, bus_label="test-bus", sweep_every=0.5)
    if frozen:
        opts |= dict(clock=lambda: NOW, sweep_every=0)
    app = WaveApp(bus, **(opts | kwargs))
    app.theme = "textual-dark"
    return app


async def started(app: WaveApp) -> None:
    await until(lambda: app.main.read_count > 0, what="the first read of the bus")


@asynccontextmanager
async def running(
    bus: Bus, *flights: str, size: tuple[int, int] = SIZE, **options
) -> AsyncIterator[tuple[WaveApp, Pilot]]:
    """Put these flights (the fixed records, in this order), make the app, run it until its first read."""
    for i, name in enumerate(flights, 1):
        await put_flight(bus, name, i)
    app = make_app(bus, **options)
    async with app.run_test(size=size) as pilot:
        await started(app)
        yield app, pilot


async def type_command(pilot: Pilot, line: str) -> None:
    """Put a line on the command line and press Enter, as a person who pastes it does.

    Its first key is pressed (from a panel, "/" moves to the command line), the rest arrives
    as a terminal's bracketed paste does, one `Paste` event through the driver: Pilot waits
    for the app to be idle after every key, about 85 ms each, and a `/spawn` with a path in
    it took 20 s to type. Tests of what a keystroke does (hints, completion, history) press
    their keys."""
    await pilot.press(line[0])
    paste = events.Paste(line[1:])
    paste.set_sender(pilot.app)
    assert pilot.app._driver is not None
    pilot.app._driver.send_message(paste)
    await pilot.press("enter")


def screen_text(app: WaveApp) -> str:
    """What a person sees, as plain text (the compositor's full frame)."""
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    return "\n".join("".join(seg.text for strip in line for seg in strip) for line in update.strips)


def scrollback(app: WaveApp) -> str:
    log = app.main.query_one("#scrollback", FollowLog)
    return "\n".join(strip.text for strip in log.lines)
