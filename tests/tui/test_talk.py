"""Talking to a flight from the TUI (docs/conversations.md): `t` on the panel starts `/tell ID`,
and the flight's screen shows its conversation live, tells it from its input line and
interrupts its turn with ctrl+s. The flight is real: the stand-in agent that speaks Claude
Code's stream-json (tests/talkagent.py), spawned through the core with its preset."""

from __future__ import annotations

import pytest
from textual.widgets import Input, Static

from wavewait.core import admission, flights
from wavewait.core.ids import short
from wavewait.tui.screens.flight import FlightScreen
from wavewait.tui.widgets.command import CommandLine
from wavewait.tui.widgets.flights import FlightsTable
from wavewait.tui.widgets.talklog import TalkLog

from conftest import until
from talktools import start_talker
from tuitools import deterministic_textual, make_app, scrollback, started  # noqa: F401

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("deterministic_textual"), pytest.mark.one_bus]
SIZE = (100, 30)
SLOW = 60  # seconds a test waits on a flight's process (a slow machine, another suite beside it)


def talk_text(app) -> str:
    return "\n".join(strip.text for strip in app.screen.query_one(TalkLog).lines)


def said(app) -> str:
    return str(app.screen.query_one("#talk-said", Static).render())


async def status(bus, agent_id: str, want: str, turn: int) -> bool:
    a = await bus.get_agent(agent_id)
    return a.status == want and a.turn == turn


async def select(app, pilot, agent_id: str) -> None:
    table = app.main.query_one(FlightsTable)
    await until(lambda: agent_id in table.rows, what="the flight's row")
    table.focus()
    table.move_cursor(row=table.get_row_index(agent_id))
    await pilot.pause()


@pytest.mark.both_buses
async def test_t_tells_the_selected_flight_and_its_screen_shows_the_told_text_and_the_answer(bus, tmp_path):
    talky = await start_talker(bus, tmp_path, "talky", "hello there")
    plain = await flights.start(bus, "plain", parent_id="orchestrator", command=["sleep", "120"])
    try:
        await until(lambda: status(bus, talky.id, "idle", 1), SLOW, "the prompt's turn to end")
        app = make_app(bus)
        async with app.run_test(size=SIZE) as pilot:
            await started(app)
            # t on a flight without a conversation: a notice that names /send, nothing typed
            await select(app, pilot, plain.id)
            await pilot.press("t")
            await until(lambda: any("/send" in n for n in app.notices), what="the notice")
            assert "plain holds no conversation" in app.notices[-1] and short(plain.id) in app.notices[-1]
            assert app.main.query_one(CommandLine).value == ""
            # t on one that holds a conversation: `/tell ID ` on the command line, then Enter tells it
            await select(app, pilot, talky.id)
            await pilot.press("t")
            line = app.main.query_one(CommandLine)
            assert line.value == f"/tell {short(talky.id)} " and line.has_focus
            await pilot.press(*"what next?", "enter")
            await until(lambda: "told talky as its next turn (turn 2)" in scrollback(app), SLOW, "the answer")
            # its screen: the conversation so far, who told what, the agent's answers
            await select(app, pilot, talky.id)
            await pilot.press("enter")
            await until(lambda: isinstance(app.screen, FlightScreen), what="the flight's screen")
            want = [
                "[1] prompt: hello there",
                "[2] told by orchestrator: what next?",
                "[2] agent: You said: what next?",
            ]
            await until(lambda: all(w in talk_text(app) for w in want), SLOW, "the conversation")
            assert "[1]   ↳ Bash echo hello" in talk_text(app) and "── turn 1 success · 60 tok" not in talk_text(app)
            assert "── turn 1 success · 30 tok $0.0003 so far" in talk_text(app)
            # its input line tells it; the answer above it, the agent's answer in the conversation
            assert app.screen.query_one("#talk-line", Input).has_focus
            await pilot.press(*"and then?", "enter")
            await until(lambda: "told talky as its next turn (turn 3)" in said(app), SLOW, "the tell's answer")
            await until(lambda: "[3] agent: You said: and then?" in talk_text(app), SLOW, "the agent's answer")
            assert talk_text(app).index("[3] told by orchestrator: and then?") < talk_text(app).index(
                "[3] agent: You said: and then?"
            )
    finally:
        await admission.kill(bus, await bus.get_agent(talky.id), by="orchestrator")
        await admission.kill(bus, await bus.get_agent(plain.id), by="orchestrator")


async def test_ctrl_s_interrupts_the_flights_running_turn_and_an_error_is_said(file_bus, tmp_path):
    bus = file_bus
    talky = await start_talker(bus, tmp_path, "talky", "hello")
    try:
        await until(lambda: status(bus, talky.id, "idle", 1), SLOW, "the prompt's turn to end")
        app = make_app(bus)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(app)
            await select(app, pilot, talky.id)
            await pilot.press("enter")
            await until(lambda: isinstance(app.screen, FlightScreen), what="the flight's screen")
            await until(lambda: "[1] agent: You said: hello" in talk_text(app), SLOW, "the first turn")
            # nothing runs: the key says so
            await pilot.press("ctrl+s")
            await until(lambda: "no turn of talky was running (it is at turn 1)" in said(app), SLOW, "the answer")
            # a long turn (the stand-in works on SLOW until it is interrupted), ended by the key
            await pilot.press(*"go SLOW", "enter")
            await until(lambda: status(bus, talky.id, "running", 2), SLOW, "the long turn")
            await until(lambda: "[2]   ↳ Bash echo go" in talk_text(app), SLOW, "its tool call")
            await pilot.press("ctrl+s")
            await until(lambda: "interrupted talky's turn 2" in said(app), SLOW, "the interrupt's answer")
            await until(lambda: "── turn 2 interrupted" in talk_text(app), SLOW, "the turn's end")
            assert "[2] · interrupted by orchestrator" in talk_text(app)
            assert (await bus.get_agent(talky.id)).status == "idle"
            # a tell the core refuses is said in its words: a flight closed with `close` takes no more
            await admission.close(bus, await bus.get_agent(talky.id))
            await until(lambda: _closed(bus, talky.id), SLOW, "the close")
            await pilot.press(*"more", "enter")
            await until(lambda: "was closed with `close`" in said(app), SLOW, "the refusal")
    finally:
        await admission.kill(bus, await bus.get_agent(talky.id), by="orchestrator")


async def _closed(bus, agent_id: str) -> bool:
    return (await bus.get_agent(agent_id)).closed_for_good
