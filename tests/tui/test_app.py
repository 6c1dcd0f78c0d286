"""Pilot tests of the TUI on a real bus, with real processes where the behaviour needs them.

What depends on the bus (the panel, waits, Escape, the mirror, spawn, kill, the demo) runs on
every backend; what is only the face (parsing, completion, help, palette) on the directory bus.
"""

from __future__ import annotations

import json
import subprocess

import anyio
import pytest
from textual import events

from wavewait.core import messages, wait, waves
from wavewait.core.agents import register
from wavewait.core.ids import short
from wavewait.tui.commands import COMMANDS
from wavewait.tui.palette import SlashProvider
from wavewait.tui.screens.flight import FlightScreen
from wavewait.tui.screens.help import HelpScreen
from wavewait.tui.terminal import POP_TITLE, PUSH_TITLE, window_title
from wavewait.tui.widgets.command import CommandLine
from wavewait.tui.widgets.eventlog import EventLog
from wavewait.tui.widgets.flights import FlightsTable
from wavewait.tui.widgets.mirror import MirrorTable

from conftest import Background, env_for, until, wavewait_cmd
from mcptools import data, mcp_client
from tuitools import (
    IDS,
    NOW,
    SIZE,
    deterministic_textual,  # noqa: F401  (a fixture, used by name)
    make_app,
    put_flight,
    running,
    screen_text,
    scrollback,
    started,
    type_command,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("deterministic_textual"), pytest.mark.one_bus]


async def test_command_line_has_focus_at_start(file_bus):
    async with running(file_bus) as (app, pilot):
        assert isinstance(app.focused, CommandLine)
        await pilot.press(*"/agents")
        assert app.focused.value == "/agents"


async def test_panel_shows_state_as_glyph_and_word_and_a_summary(bus):
    await put_flight(bus, "file-reader", 1)
    await put_flight(bus, "test-runner", 2)
    await put_flight(bus, "linter", 3, status="dead", reason="exited with code 1")
    await register(bus, "orchestrator")
    await messages.send(bus, IDS["file-reader"], "orchestrator", "found 3 issues")
    async with running(bus) as (app, pilot):
        await until(lambda: "1/3 reported" in screen_text(app), what="the summary")
        await until(
            lambda: all(n in screen_text(app) for n in ("file-reader", "test-runner", "linter")),
            what="the rows laid out",
        )
        text = screen_text(app)
        assert "1/3 reported · 1 dead · 2 running" in text
        rows = {line.split()[2]: line for line in text.splitlines() if "wave-1" in line and len(line.split()) > 3}
        # its word is its state, as everywhere; that it reported is the ✉ beside its message
        assert "running" in rows["file-reader"] and "✉ found 3 issues" in rows["file-reader"]
        assert "running" in rows["test-runner"]
        assert "✖ dead" in rows["linter"] and "exited with code 1" in rows["linter"]
        table = app.main.query_one(FlightsTable)
        assert set(table.rows) >= {IDS["file-reader"], IDS["test-runner"], IDS["linter"]}
        assert "orchestrator" not in {k.value for k in table.rows}  # the person is not a flight


async def test_panel_follows_every_change_and_the_clock(bus):
    """The table caches rendered cells: each change must still show, and nothing stale."""
    now = [NOW]
    async with running(bus, "file-reader", "test-runner", clock=lambda: now[0], sweep_every=0) as (app, pilot):

        def row(name: str) -> str:
            return next((line for line in screen_text(app).splitlines() if name in line), "")

        await until(lambda: "test-runner" in row("test-runner"), what="the row")
        for text in ("first step", "second step", "first step again"):
            await bus.update_agent(IDS["test-runner"], last_message=text, last_message_at=now[0])
            await until(lambda text=text: row("test-runner").rstrip().endswith(text), what=f"{text!r} in the row")
        assert "second step" not in screen_text(app)
        assert row("test-runner").split()[5] == "40s" and row("file-reader").split()[5] == "41s"
        table = app.main.query_one(FlightsTable)
        assert "dim" not in str(table.get_cell(IDS["test-runner"], "name").style)  # spoke just now
        now[0] += 65
        app.main.repaint()
        await until(lambda: row("test-runner").split()[5:7] == ["1m45s", "1m05s"], what="elapsed and quiet moved on")
        assert row("file-reader").split()[5:7] == ["1m46s", "—"]
        assert "dim" in str(table.get_cell(IDS["test-runner"], "name").style)  # silent 65 s: stalled
        table.focus()  # focused, the cursor row is drawn differently
        await until(lambda: app.focused is table, what="the table focused")
        await bus.update_agent(IDS["file-reader"], last_message="spoke at last", last_message_at=now[0])
        await until(lambda: "spoke at last" in row("file-reader"), what="the update under the cursor")
        assert "dim" not in str(table.get_cell(IDS["file-reader"], "name").style)


async def test_the_detail_column_fills_the_width_and_goes_on_a_narrow_terminal(file_bus):
    message = "read 42 files; found 3 issues in src/provider/ and 2 in src/bus/, all minor"
    await put_flight(file_bus, "file-reader", 1, last_message=message, last_message_at=NOW)
    async with running(file_bus, size=(160, 30), frozen=True) as (app, pilot):
        await until(lambda: message in screen_text(app), what="the whole message on a wide terminal")
        await pilot.resize_terminal(80, 24)
        await until(lambda: "last message" not in screen_text(app), what="the detail column left out")
        row = next(line for line in screen_text(app).splitlines() if "file-reader" in line)
        assert "read 42" not in row and row.split()[5:7] == ["41s", "0s"], row  # the rest stays whole
        await pilot.resize_terminal(110, 30)
        await until(lambda: "last message" in screen_text(app), what="the detail column back")
        await until(lambda: "read 42 files; found" in screen_text(app), what="its cells filled again")
        assert message not in screen_text(app)  # cut to the room there is


async def test_states_take_the_themes_colours(file_bus):
    await put_flight(file_bus, "linter", 1, status="dead", reason="exited with code 1")
    async with running(file_bus) as (app, pilot):
        table = app.main.query_one(FlightsTable)

        def state_style() -> str:
            return str(table.get_cell(IDS["linter"], "state").style).lower() if table.row_count else ""

        dark = app.theme_variables["text-error"].lower()
        await until(lambda: dark in state_style(), what="the dark theme's error colour")
        app.theme = "textual-light"
        light = app.get_theme("textual-light").to_color_system().generate()["text-error"].lower()
        assert light != dark
        await until(lambda: light in state_style(), what="the light theme's error colour")
        assert "bold" in state_style()  # a word and a weight, never colour alone


async def test_wait_fan_in_completes_when_every_listed_flight_reports(bus):
    async with running(bus, "file-reader", "test-runner") as (app, pilot):
        await type_command(pilot, "/wait 30 a1b2 e5f6")
        await until(lambda: app.main.waiting, what="the wait to start")
        assert "Waiting for sub-agents:" in screen_text(app)
        await messages.send(bus, IDS["file-reader"], "orchestrator", "found 3 issues")
        await until(lambda: IDS["file-reader"] in app.main.own_wait.received, what="progress of the first")
        await until(lambda: "✓ received" in screen_text(app), what="the status line")
        await messages.send(bus, IDS["test-runner"], "orchestrator", "green")
        await until(lambda: not app.main.waiting, what="the wait to end")
        assert app.main.last_result.status == "complete"
        assert [r.message for r in app.main.last_result.results] == ["found 3 issues", "green"]
        assert "fan-in complete: 2/2 received" in scrollback(app)
        await pilot.press("ctrl+q")
    assert app.return_code == 0
    assert app.return_value["status"] == "complete"


async def test_wait_without_ids_takes_the_next_message(bus):
    async with running(bus, "file-reader") as (app, pilot):
        await type_command(pilot, "/wait 0")
        await until(lambda: "No messages." in scrollback(app), what="the instant check")
        await type_command(pilot, "/wait 30")
        await until(lambda: app.main.waiting)
        await messages.send(bus, IDS["file-reader"], "orchestrator", "hello there")
        await until(lambda: "hello there" in scrollback(app), what="the message")
        assert "From: file-reader (a1b2c3d4)" in scrollback(app)
        assert app.main.last_result.message == "hello there"


@pytest.mark.both_buses
async def test_escape_interrupts_the_wait_and_keeps_what_was_received(bus):
    await put_flight(bus, "file-reader", 1)
    await put_flight(bus, "test-runner", 2)
    await register(bus, "orchestrator")
    await messages.send(bus, IDS["file-reader"], "orchestrator", "found 3 issues")
    async with running(bus) as (app, pilot):
        await type_command(pilot, "/wait 600 a1b2 e5f6")
        await until(lambda: IDS["file-reader"] in app.main.own_wait.received, what="the claim")
        assert app.screen.check_action("interrupt", ()) is True
        await pilot.press("escape")
        await until(lambda: not app.main.waiting, timeout=5, what="Escape to end the wait")
        result = app.main.last_result
        assert result.status == "interrupted"
        assert [(r.status, r.message) for r in result.results] == [("received", "found 3 issues"), ("running", None)]
        assert "interrupted: 1/2 received" in scrollback(app)
        assert app.screen.check_action("interrupt", ()) is False  # hidden again: nothing to interrupt
        await pilot.press("ctrl+q")
    assert app.return_code == 4
    assert app.return_value["status"] == "interrupted"
    # the received message was taken into history, not lost and not left queued
    history = await bus.history("orchestrator")
    assert [i.body for i in history] == ["found 3 issues"]
    assert await bus.pending("orchestrator") == []


async def test_escape_without_a_wait_does_nothing(file_bus):
    async with running(file_bus, "file-reader") as (app, pilot):
        assert app.screen.check_action("interrupt", ()) is False
        await pilot.press(*"/age")
        await pilot.press("escape")
        await pilot.pause()
        assert app.is_running and app.main.last_result is None
        assert app.focused.value == "/age"  # nothing cleared, nothing started
        await pilot.press("ctrl+q")
    assert app.return_code == 0 and app.return_value is None


async def test_ctrl_c_never_ends_a_wait_by_surprise(file_bus):
    async with running(file_bus, "file-reader") as (app, pilot):
        await type_command(pilot, "/wait 600 a1b2")
        await until(lambda: app.main.waiting, what="the wait")
        await pilot.press("ctrl+c")  # on the command line: copy
        app.main.query_one(FlightsTable).focus()
        await pilot.press("ctrl+c")  # elsewhere: Textual's "press ctrl+q to quit"
        await pilot.pause()
        assert app.is_running and app.main.waiting and app.return_code is None
        await pilot.press("escape")
        await until(lambda: app.main.last_result is not None, what="the interrupt")
        assert app.main.last_result.status == "interrupted"


async def test_quit_during_a_wait_interrupts_it_and_exits_4(bus):
    async with running(bus, "file-reader") as (app, pilot):
        await type_command(pilot, "/wait 600 a1b2")
        await until(lambda: app.main.waiting)
        await pilot.press("ctrl+q")
        await until(lambda: app.return_code is not None, what="the exit")
    assert app.return_code == 4
    assert app.return_value["results"][0]["status"] == "running"


async def test_away_from_the_terminal_a_death_also_notifies_the_desktop_and_flags_the_title(file_bus):
    """Unfocused, a toast goes unseen: OSC 9 (one per burst) and a title flag until focus returns."""
    await put_flight(file_bus, "linter", 1)
    await put_flight(file_bus, "test-runner", 2)
    app = make_app(file_bus)
    written: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        app.terminal_out = written.append
        await started(app)
        await file_bus.transition(IDS["linter"], "dead", ("running",), reason="exited with code 1")
        await until(lambda: any("linter" in n for n in app.notices), what="the death toast")
        assert written == []  # focused: the toast is enough
        app.post_message(events.AppBlur())
        await until(lambda: not app.app_focus, what="the terminal losing focus")
        await file_bus.transition(IDS["test-runner"], "dead", ("running",), reason="killed\x1b]2;evil\x07")
        await until(lambda: len(written) >= 3, what="the notification and the title")
        note, push, title = written[:3]
        assert note.startswith("\x1b]9;wavewait: test-runner") and "died" in note
        assert push == PUSH_TITLE and title.startswith("\x1b]2;● wavewait: test-runner")
        assert "\x1b]2;evil" not in "".join(written)  # agent text cannot carry its own sequences
        app.notice("fan-in complete: 2/2 received")
        assert written[3:] == [window_title("● wavewait: fan-in complete: 2/2 received (+1 more)")]
        app.post_message(events.AppFocus())
        await until(lambda: written[-1] == POP_TITLE, what="the title given back")
        await pilot.press("ctrl+q")


async def test_c_copies_the_selected_flights_last_message(file_bus):
    await put_flight(file_bus, "file-reader", 1, last_message="found 3 issues in src/", last_message_at=NOW)
    async with running(file_bus) as (app, pilot):
        table = app.main.query_one(FlightsTable)
        await until(lambda: table.row_count == 1, what="the row")
        table.focus()
        await pilot.press("c")
        await until(lambda: app.clipboard == "found 3 issues in src/", what="the copy")
        assert "copied the last message of file-reader" in app.notices


async def test_send_delivers_a_message_to_the_flight(bus):
    async with running(bus, "file-reader") as (app, pilot):
        await type_command(pilot, "/send a1b2 please also check tests/")
        await until(lambda: "sent to file-reader" in scrollback(app), what="the send")
    items = await bus.peek(IDS["file-reader"])
    assert [(i.sender, i.body) for i in items] == [("orchestrator", "please also check tests/")]


async def test_spawn_runs_a_supervised_process_and_its_death_shows(bus):
    async with running(bus) as (app, pilot):
        await type_command(pilot, "/spawn crasher --wave w2 -- sh -c 'echo working; exit 7'")
        await until(lambda: "spawned crasher" in scrollback(app), what="the spawn")
        await until(lambda: "exited with code 7" in screen_text(app), what="the death in the panel")
        agent = next(a for a in await bus.list_agents() if a.name == "crasher")
        assert agent.status == "dead" and agent.wave == "w2" and agent.parent_id == "orchestrator"
        assert any("crasher" in n and "died" in n for n in app.notices)


async def test_spawn_takes_the_flags_of_wavewait_spawn(file_bus, tmp_path):
    """/spawn parses the CLI's flags (wavewait/spawn_flags.py), so it takes every one of them:
    the wave keeps the budget and the limit given, the flight runs in --cwd with --env set."""
    where = (tmp_path / "elsewhere").resolve()
    where.mkdir()
    line = (
        f"/spawn envy --wave w --budget-tokens 5000 --max-parallel 3 --cwd {where} --env WORD=hello "
        "-- sh -c 'echo \"$WORD\" > said.txt'"
    )
    async with running(file_bus) as (app, pilot):
        app.main.query_one(CommandLine).value = line
        await pilot.press("enter")
        await until(lambda: "spawned envy" in scrollback(app), what="the spawn")
        said = where / "said.txt"
        await until(lambda: said.is_file() and said.read_text() == "hello\n", 20, what="the flight's file")
    settings = await waves.get_settings(file_bus, "w")
    assert (settings.budget_tokens, settings.max_parallel) == (5000, 3)
    (flight,) = [a for a in await file_bus.list_agents() if a.name == "envy"]
    assert (flight.cwd, flight.wave, flight.parent_id) == (str(where), "w", "orchestrator")


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        ("--budget-tokens 0", "--budget-tokens: must be a whole number ≥ 1"),
        ("--max-parallel 3", "--max-parallel: caps a wave; give --wave too"),
        ("--cwd /no/such/dir", "--cwd: '/no/such/dir' is not a directory"),
        ("--env novalue", "--env: give NAME=value"),
    ],
)
async def test_spawn_refuses_a_bad_flag_as_wavewait_spawn_does(file_bus, flags, why):
    async with running(file_bus) as (app, pilot):
        app.main.query_one(CommandLine).value = f"/spawn x {flags} -- true"
        await pilot.press("enter")
        await until(lambda: why in scrollback(app), what="the refusal")
    assert [a.name for a in await file_bus.list_agents() if a.name == "x"] == []


async def test_kill_ends_the_process_and_marks_the_flight_dead(bus):
    async with running(bus) as (app, pilot):
        await type_command(pilot, "/spawn sleeper -- sleep 60")
        await until(lambda: "spawned sleeper" in scrollback(app))
        agent = next(a for a in await bus.list_agents() if a.name == "sleeper")
        await type_command(pilot, f"/kill {short(agent.id)}")
        await until(lambda: "sleeper" in scrollback(app) and " is dead" in scrollback(app), what="the kill")
    agent = await bus.get_agent(agent.id)
    assert agent.status == "dead" and agent.reason == "killed by orchestrator"


async def test_close_marks_the_flight_closed(bus):
    async with running(bus, "file-reader") as (app, pilot):
        await type_command(pilot, "/close a1b2")
        await until(lambda: "file-reader (a1b2c3d4) is closed" in scrollback(app))
        await until(lambda: "■ closed" in screen_text(app), what="the panel")
    assert (await bus.get_agent(IDS["file-reader"])).status == "closed"


async def test_agents_lists_every_agent(file_bus):
    await put_flight(file_bus, "file-reader", 1, last_message="found 3 issues")
    await put_flight(file_bus, "linter", 2, status="dead", reason="exited with code 1")
    async with running(file_bus) as (app, pilot):
        await type_command(pilot, "/agents")
        await until(lambda: "linter" in scrollback(app))
        out = scrollback(app)
        assert "file-reader" in out and "found 3 issues" in out and "exited with code 1" in out


async def test_help_opens_the_help_screen_with_every_command(file_bus):
    async with running(file_bus) as (app, pilot):
        await type_command(pilot, "/help")
        await until(lambda: isinstance(app.screen, HelpScreen), what="the help screen")
        await until(lambda: "/send ID MESSAGE" in screen_text(app), what="the help text drawn")
        text = screen_text(app)
        assert "/wait TIMEOUT [ID ...]" in text and "/send ID MESSAGE" in text
        await pilot.press("escape")
        await until(lambda: not isinstance(app.screen, HelpScreen))
        assert app.is_running


@pytest.mark.parametrize(
    "line, why",
    [
        ("/wait", "give a timeout"),
        ("/wait soon a1b2", "TIMEOUT: must be a"),
        ("/wait -1", "TIMEOUT: must be a"),
        ("/wait 60 zzzz9", "no agent matches"),
        ("/send a1b2", "give a flight id, then the message"),
        ("/send zzzz9 hello", "no agent matches"),
        ("/spawn x", "put the command after --"),
        ("/spawn a b -- true", "give one NAME"),
        ("/kill", "give exactly one id"),
        ("/close a1b2 e5f6", "give exactly one id"),
        ("/agents now", "takes no arguments"),
        ("/bogus", "unknown command"),
    ],
)
async def test_bad_input_prints_the_usage_and_starts_nothing(file_bus, line, why):
    async with running(file_bus, "file-reader") as (app, pilot):
        await type_command(pilot, line)
        await until(lambda: why in scrollback(app), what=f"the error for {line!r}")
        if not line.startswith("/bogus"):
            assert "usage: /" in scrollback(app)
        assert not app.main.waiting
        assert await file_bus.list_waits() == []
        assert sorted(a.name for a in await file_bus.list_agents()) == ["file-reader", "orchestrator"]


async def test_every_slash_command_is_in_the_command_palette(file_bus):
    async with running(file_bus) as (app, pilot):
        await pilot.press("ctrl+p")
        await pilot.press(*"/agents")
        await until(lambda: "/agents" in screen_text(app), what="the palette hit")
        text = screen_text(app)
        assert "list every agent" in text
        await pilot.press("enter")
        await until(lambda: "> /agents" in scrollback(app), what="the palette to run /agents")
        provider = SlashProvider(app.screen)  # every slash command is offered, with its help
        offered = [hit.display async for hit in provider.discover()]
        assert offered == [cmd.usage for cmd in COMMANDS]


async def test_completion_and_history(file_bus):
    async with running(file_bus, "file-reader", "test-runner") as (app, pilot):
        cmd = app.focused
        await pilot.press(*"/wa", "tab")
        assert cmd.value == "/wait "
        await pilot.press(*"5 a1", "tab")
        assert cmd.value == "/wait 5 a1b2c3d4"
        await pilot.press(*" test", "tab")
        assert cmd.value == "/wait 5 a1b2c3d4 e5f6a7b8"  # a name becomes its short id
        await pilot.press("enter")
        await until(lambda: app.main.waiting)
        await pilot.press("escape")
        await until(lambda: not app.main.waiting)
        await type_command(pilot, "/agents")
        await pilot.press("up")
        assert cmd.value == "/agents"
        await pilot.press("up")
        assert cmd.value == "/wait 5 a1b2c3d4 e5f6a7b8"
        await pilot.press("down", "down")
        assert cmd.value == ""


async def test_enter_on_a_flight_shows_its_messages_and_output_log(bus):
    async with running(bus) as (app, pilot):
        # the flight sends its own message: only its processes may send as it (core/identity.py)
        await type_command(
            pilot,
            "/spawn talker -- sh -c 'echo step one; echo step two; wavewait send orchestrator \"all done\"; sleep 30'",
        )
        await until(lambda: "spawned talker" in scrollback(app), what="the spawn")
        talker = next(a for a in await bus.list_agents() if a.name == "talker")
        await until(lambda: "1/1 reported" in screen_text(app), what="the flight's message")
        table = app.main.query_one(FlightsTable)
        table.focus()
        await pilot.press("enter")
        await until(lambda: isinstance(app.screen, FlightScreen), what="the flight screen")
        await until(lambda: "step two" in screen_text(app), what="the output log")
        await until(lambda: "all done" in screen_text(app), what="the message")
        text = screen_text(app)
        assert "talker" in text and "message → you (queued)" in text
        await pilot.press("escape")
        await until(lambda: not isinstance(app.screen, FlightScreen))
        await type_command(pilot, f"/kill {talker.id[:8]}")  # leave no process behind
        await until(lambda: " is dead" in scrollback(app), what="the talker to end")


async def test_a_click_highlights_a_flight_and_a_second_click_opens_it(file_bus):
    async with running(file_bus, "file-reader", "test-runner", frozen=True) as (app, pilot):
        table = app.main.query_one(FlightsTable)
        await until(lambda: table.row_count == 2, what="the rows")
        await pilot.click(FlightsTable, offset=(20, 2))  # the second row (the header is line 0)
        await until(lambda: table.selected_id() == IDS["test-runner"], what="the row highlighted")
        assert not isinstance(app.screen, FlightScreen)
        await pilot.click(FlightsTable, offset=(20, 2))
        await until(lambda: isinstance(app.screen, FlightScreen), what="the flight opened")
        assert "test-runner" in screen_text(app)


async def test_event_log_streams_bus_events_with_a_per_flight_filter(file_bus):
    async with running(file_bus, "file-reader", "test-runner") as (app, pilot):
        event_log = app.main.query_one(EventLog)
        await messages.send(file_bus, IDS["file-reader"], "orchestrator", "first finding")
        await messages.send(file_bus, IDS["test-runner"], "orchestrator", "tests green")
        await until(lambda: len(event_log.shown()) >= 2, what="two events")
        await type_command(pilot, "/log e5f6")
        await until(lambda: event_log.only == IDS["test-runner"])
        assert event_log.display  # /log shows the pane
        shown = "\n".join(event_log.shown())
        assert "tests green" in shown and "first finding" not in shown
        await until(lambda: any("tests green" in s.text for s in event_log.lines), what="the pane to show it")
        await type_command(pilot, "/log")
        await until(lambda: event_log.only is None)
        shown = "\n".join(event_log.shown())
        assert "tests green" in shown and "first finding" in shown
        await until(lambda: any("first finding" in s.text for s in event_log.lines), what="the pane to show all")


async def test_mirror_shows_a_cli_wait_and_interrupting_it_returns_interrupted(bus):
    await put_flight(bus, "file-reader", 1)
    await register(bus, "planner")
    proc = subprocess.Popen(
        wavewait_cmd("--agent", "planner", "wait", "60", "a1b2"),
        env=env_for(bus),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        async with running(bus) as (app, pilot):
            # a cold `wavewait wait` (about 0.5 s of CPU to import and register its wait) on a
            # machine at load 10 or more, then the app's next read: 3-7 s at load 12-14 on 2
            # cores; 15 s was too short for a full suite run under load
            await until(
                lambda: "planner" in screen_text(app) and "left" in screen_text(app),
                timeout=60,
                what="the mirrored wait",
            )
            text = screen_text(app)
            assert "Waits by other processes" in text and "file-reader" in text
            mirror = app.main.query_one(MirrorTable)
            mirror.focus()
            await pilot.press("i")
            await until(lambda: "interrupted wait" in scrollback(app), what="the interrupt")
            out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 4, err
    result = json.loads(out)
    assert result["status"] == "interrupted"
    assert result["results"] == [{"agent_id": IDS["file-reader"], "name": "file-reader", "status": "running"}]


async def test_interrupting_a_mirrored_mcp_wait_makes_the_agents_call_return_interrupted(bus):
    """A planner agent calls `wait` through a real `wavewait mcp` over stdio; the person interrupts it."""
    await put_flight(bus, "file-reader", 1)
    await put_flight(bus, "test-runner", 2)
    await register(bus, "planner")
    await messages.send(bus, IDS["file-reader"], "planner", "found 3 issues")
    async with mcp_client(bus, env={"WAVEWAIT_AGENT_ID": "planner"}) as client:
        async with running(bus) as (app, pilot), anyio.create_task_group() as tg:
            bg = Background(tg)
            bg.start("planner", client.call_tool, "wait", {"timeout": 60, "from_agents": ["a1b2", "e5f6"]})
            await until(
                lambda: any(w.waiter == "planner" for w in app.main.waits),
                timeout=20,
                what="the agent's wait in the mirror",
            )
            # the targets column is cut with an ellipsis at this width
            await until(lambda: "planner" in screen_text(app) and "file-reader, test-r…" in screen_text(app))
            mirror = app.main.query_one(MirrorTable)
            mirror.focus()
            await pilot.press("enter")  # Enter on a mirrored wait interrupts it
            r = data(await bg.result("planner", 20))
    assert r["status"] == "interrupted"
    assert [(x["name"], x["status"]) for x in r["results"]] == [("file-reader", "received"), ("test-runner", "running")]
    assert r["results"][0]["message"] == "found 3 issues"


@pytest.mark.long
@pytest.mark.both_buses
async def test_demo_spawns_a_real_wave_and_fans_in_on_it(bus):
    """A short demo wave: reports, a death, and a slow flight whose own wait the person interrupts."""
    from wavewait.tui.demo import DemoFlight, DemoPlan

    demo = DemoPlan(
        seed=1,
        timeout=60,
        flights=(
            DemoFlight("file-reader", "report", 0.2, "found 3 issues"),
            DemoFlight("test-runner", "report-cli", 0.3, "120 tests pass"),
            DemoFlight("linter", "die", 0.2, "ruff crashed"),
            DemoFlight("migrator", "slow", 0.1, "waiting for a go-ahead"),
        ),
    )
    async with running(bus, demo=demo) as (app, pilot):
        await until(
            lambda: app.main.waiting and len(app.main.own_wait.targets) == 4, timeout=30, what="the demo's fan-in"
        )
        await until(
            lambda: any(w.waiter not in ("orchestrator",) for w in app.main.waits),
            timeout=30,
            what="migrator's own wait in the mirror",
        )
        other = next(w for w in app.main.waits if w.id not in app.main.own_waits)
        await type_command(pilot, f"/interrupt {other.id[:8]}")
        await until(lambda: not app.main.waiting, timeout=30, what="the fan-in to finish")
        result = app.main.last_result
        assert result.status == "complete"
        by_name = {r.name: r for r in result.results}
        assert by_name["file-reader"].message == "found 3 issues"
        assert by_name["test-runner"].message == "120 tests pass"
        assert by_name["linter"].status == "dead"
        # a death says its exit code and what the flight last wrote
        assert by_name["linter"].reason.startswith("exited with code 1; last output:")
        assert by_name["linter"].reason.endswith("RuntimeError: ruff crashed")
        assert by_name["migrator"].status == "received"
        assert "interrupted" in by_name["migrator"].message
        await pilot.press("ctrl+q")
    assert app.return_code == 0 and app.return_value["status"] == "complete"


def test_demo_plan_is_repeatable_with_a_seed():
    from wavewait.tui.demo import plan

    assert plan(7) == plan(7)
    assert plan(7) != plan(8)
    roles = sorted(f.role for f in plan(7).flights)
    assert roles == ["ask", "die", "report", "report", "report-cli", "slow"]


async def test_a_wake_reads_only_what_changed_and_the_summary_follows(bus, monkeypatch):
    """With a big wave a wake must not re-read every record: after the first read, the panel
    follows changes (a state, a new flight, a report) by the keys the bus names."""
    for i, name in enumerate(("file-reader", "test-runner", "linter")):
        await put_flight(bus, name, i + 1)
    full_reads = 0
    list_agents = bus.list_agents

    async def counted():
        nonlocal full_reads
        full_reads += 1
        return await list_agents()

    monkeypatch.setattr(bus, "list_agents", counted)
    async with running(bus, sweep_every=0) as (app, pilot):
        await until(lambda: "0/3 reported · 3 running" in screen_text(app), what="the first read")
        first = full_reads
        await bus.transition(IDS["linter"], "dead", ("running",), reason="exited with code 1")
        await until(lambda: "0/3 reported · 1 dead · 2 running" in screen_text(app), what="the death")
        await put_flight(bus, "doc-writer", 4)
        await until(lambda: "0/4 reported · 1 dead · 3 running" in screen_text(app), what="the new flight")
        await messages.send(bus, IDS["file-reader"], "orchestrator", "found 3 issues")
        await until(lambda: "1/4 reported" in screen_text(app), what="the report")
        assert [v.name for v in app.main.flight_views()] == ["file-reader", "test-runner", "linter", "doc-writer"]
    assert full_reads == first  # every wake after the first read only what it was told changed


async def test_what_a_wait_took_into_the_history_still_counts_as_reported(bus):
    """A report taken by a wait of another process leaves the inbox for its history; the
    panel must still count it, though it reads the inbox only when told it changed."""
    for i, name in enumerate(("file-reader", "test-runner")):
        await put_flight(bus, name, i + 1)
    async with running(bus, sweep_every=0) as (app, pilot):
        await until(lambda: "0/2 reported" in screen_text(app), what="the first read")
        await messages.ask(bus, IDS["test-runner"], "which database?")
        r = await wait.wait_fan_in(bus, "orchestrator", 5, [IDS["test-runner"]])
        assert [t.status for t in r.results] == ["needs_input"]
        await until(lambda: "1/2 reported · 1 needs input" in screen_text(app), what="the question counted")


async def test_a_change_read_but_not_yet_painted_is_painted_even_if_the_views_were_asked_for(bus):
    """With the timed repaint, asking for the views between a read and the next tick (Enter
    on a flight does) must not take the changed rows away from that tick."""
    async with running(bus, "file-reader", "test-runner", animate=True) as (app, pilot):
        table = app.main.query_one(FlightsTable)
        await until(lambda: IDS["test-runner"] in {k.value for k in table.rows}, what="the rows")
        await bus.update_agent(IDS["test-runner"], last_message="step two", last_message_at=NOW)
        await app.main.read_bus({f"a:{IDS['test-runner']}"})  # read; the timer repaints later
        app.main.flight_views()  # before that tick, with no await in between
        await until(lambda: "step two" in screen_text(app), what="the changed row painted")


async def test_the_mirror_says_a_wait_runs_as_a_background_task_and_the_log_shows_the_wake(bus):
    """An agent's host called `wait` declaring the MCP Tasks extension (interactive Claude Code):
    the call was answered with a task at once and the agent idles. The mirror says so; when the
    flight reports, the event log shows the agent woken with the task's result."""
    await put_flight(bus, "file-reader", 1)
    await register(bus, "planner")
    tasks = "io.modelcontextprotocol/tasks"
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "wait",
            "arguments": {"timeout": 60, "from_agents": ["a1b2"]},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "host", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {tasks: {}}},
            },
        },
    }
    server = subprocess.Popen(
        wavewait_cmd("mcp"),
        env=env_for(bus, WAVEWAIT_AGENT_ID="planner"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        server.stdin.write((json.dumps(call) + "\n").encode())
        server.stdin.flush()
        answer = json.loads(await anyio.to_thread.run_sync(server.stdout.readline))
        assert answer["result"]["resultType"] == "task", answer
        async with running(bus) as (app, pilot):
            await until(lambda: any(w.task_id for w in app.main.waits), timeout=20, what="the task's wait mirrored")
            await until(lambda: "background task, agent idle" in screen_text(app), what="the mirror saying so")
            await messages.send(bus, IDS["file-reader"], "planner", "found 3 issues")
            event_log = app.main.query_one(EventLog)
            await until(lambda: any("planner woken: task" in s for s in event_log.shown()), timeout=20, what="the wake")
            woke = next(s for s in event_log.shown() if "planner woken" in s)
    finally:
        server.stdin.close()
        server.wait(20)
    assert "1/1 received" in woke or "complete" in woke, woke


async def test_wait_as_a_join_shows_met_and_need_and_the_flight_being_checked(bus, tmp_path):
    """`/wait` takes the CLI's join flags; the status layer says `met M / need K` and which
    flight's check runs."""
    gate = tmp_path / "gate"
    check = f"while [ ! -e {gate} ]; do sleep 0.05; done"  # the test decides when it passes
    async with running(bus, "file-reader", "test-runner", "linter") as (app, pilot):
        await bus.update_agent(IDS["file-reader"], cwd=str(tmp_path))
        await type_command(pilot, f"/wait 60 a1b2 e5f6 --need 1 --check '{check}' --stop-rest")
        await until(lambda: app.main.waiting, what="the join to start")
        await until(lambda: "met 0 / need 1" in screen_text(app), what="met and need on the status layer")
        await messages.send(bus, IDS["file-reader"], "orchestrator", "found 3 issues")
        await until(lambda: "checking file-reader" in screen_text(app), what="the check shown")
        gate.write_text("pass")
        await until(lambda: not app.main.waiting, what="the join to end")
        r = app.main.last_result
        assert r.status == "complete" and (r.need, r.met) == (1, 1), r
        assert [e.status for e in r.results] == ["received", "dead"] and r.stopped == [IDS["test-runner"]]
        await pilot.press("ctrl+q")
    assert app.return_code == 0
