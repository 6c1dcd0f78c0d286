"""A flight that asks: `? needs input` in the panel, a notice, and a reply from the TUI."""

from __future__ import annotations

import pytest
from textual.widgets import HelpPanel

from wavewait.core import messages
from wavewait.core.agents import register
from wavewait.tui.widgets.command import CommandLine
from wavewait.tui.widgets.flights import FlightsTable

from conftest import until
from tuitools import IDS, put_flight, running, screen_text, scrollback, type_command

pytestmark = pytest.mark.anyio


async def test_a_question_shows_needs_input_raises_a_notice_and_enter_offers_a_reply(file_bus):
    await register(file_bus, "orchestrator")
    await put_flight(file_bus, "doc-writer", 1)
    async with running(file_bus) as (app, pilot):
        await messages.ask(file_bus, IDS["doc-writer"], "docs/ or wiki?")
        await until(lambda: "? needs input" in screen_text(app), what="the panel's word")
        assert "asks: docs/ or wiki?" in screen_text(app)
        assert "1 needs input" in screen_text(app)
        await until(lambda: any("needs input: docs/ or wiki?" in n for n in app.notices), what="the notice")
        table = app.main.query_one(FlightsTable)
        table.focus()
        await pilot.press("enter")
        cmd = app.main.query_one(CommandLine)
        await until(lambda: cmd.value == "/reply f1e2d3c4 ", what="the reply offered")
        await pilot.press(*"the wiki", "enter")
        await until(lambda: "answered doc-writer" in scrollback(app), what="the answer sent")
        await until(lambda: "? needs input" not in screen_text(app), what="the state cleared")
    answers = [i for i in await file_bus.peek(IDS["doc-writer"]) if i.type == messages.ANSWER]
    assert [a.body for a in answers] == ["the wiki"]


async def test_reply_to_a_flight_without_a_question_says_so(file_bus):
    async with running(file_bus, "file-reader") as (app, pilot):
        await type_command(pilot, "/reply a1b2 yes")
        await until(lambda: "has no open question" in scrollback(app), what="the refusal")


async def test_f1_shows_the_focused_parts_help_and_hides_it_again(file_bus):
    async with running(file_bus, "file-reader") as (app, pilot):
        await pilot.press("f1")
        await until(lambda: bool(app.screen.query(HelpPanel)), what="the help panel")
        await pilot.press("f1")
        await until(lambda: not app.screen.query(HelpPanel), what="the panel hidden")


async def test_after_a_reply_the_next_wait_on_the_wave_does_not_return_with_the_answered_question(file_bus):
    """The demo's path: a flight asks, the question is answered from the panel before any wait
    took it; the next `/wait --wave` waits for the reports, not for the answered question."""
    await register(file_bus, "orchestrator")
    await put_flight(file_bus, "file-reader", 1)
    await put_flight(file_bus, "doc-writer", 2)
    async with running(file_bus) as (app, pilot):
        await messages.ask(file_bus, IDS["doc-writer"], "docs/ or wiki?")
        await until(lambda: "? needs input" in screen_text(app), what="the panel's word")
        await type_command(pilot, f"/reply {IDS['doc-writer'][:8]} docs/ please")
        await until(lambda: "answered doc-writer" in scrollback(app), what="the answer sent")
        await messages.send(file_bus, IDS["file-reader"], "orchestrator", "read 42 files")
        await messages.send(file_bus, IDS["doc-writer"], "orchestrator", "docs written")
        await type_command(pilot, "/wait 60 --wave wave-1")
        await until(lambda: "fan-in complete" in scrollback(app) or "needs your answer" in scrollback(app), 30)
        assert "needs your answer" not in scrollback(app), scrollback(app)
        assert "docs written" in scrollback(app), scrollback(app)
