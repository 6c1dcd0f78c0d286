"""Pilot tests of the hint above the command line: fuzzy matches with usage, Tab, keys unchanged.

The hint is only the face of the command line, so it runs on the directory bus; the one test
that interrupts a real wait runs on every backend.
"""

from __future__ import annotations

import pytest

from wavewait.tui.widgets.command import CommandLine
from wavewait.tui.widgets.hints import CommandHints

from conftest import until
from tuitools import deterministic_textual, put_flight, running, screen_text, scrollback, type_command  # noqa: F401

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("deterministic_textual"), pytest.mark.one_bus]


def hints(app) -> CommandHints:
    return app.main.query_one(CommandHints)


def shown(app) -> str:
    """The hint's lines as a person sees them on screen; "" while it is hidden."""
    region = hints(app).region
    if not hints(app).display or not region.height:
        return ""
    return "\n".join(screen_text(app).splitlines()[region.y : region.bottom])


def rows(app) -> list[str]:
    return [line.strip() for line in shown(app).splitlines() if line.strip().strip("─")]


def marked(app, row: int) -> str:
    """The characters of one hint row drawn as matched (the match style underlines them)."""
    text = hints(app).render()
    start = sum(len(line) + 1 for line in text.plain.split("\n")[:row])
    end = start + len(text.plain.split("\n")[row])
    hit = {i for span in text.spans if span.style and span.style.underline for i in range(span.start, span.end)}
    return "".join(text.plain[i] for i in range(start, end) if i in hit)


async def test_fuzzy_matches_are_listed_best_first_with_usage_and_help(file_bus):
    async with running(file_bus) as (app, pilot):
        await pilot.press(*"/wt")
        await until(lambda: "/wait TIMEOUT [ID ...]" in shown(app), what="/wt to offer /wait")
        assert "wait for the next message" in shown(app)
        assert len(rows(app)) == 1 and marked(app, 0) == "/wt"
        await pilot.press("backspace", "backspace", *"kl")
        await until(lambda: "/kill ID" in shown(app), what="/kl to offer /kill")
        assert "kill a flight's process group" in shown(app) and "/wait" not in shown(app)
        assert marked(app, 0) == "/kl"
        await pilot.press("backspace", "backspace", "l")
        await until(lambda: rows(app) and rows(app)[0].startswith("› /log"), what="the matches for /l")
        assert [r.split()[0 if i else 1] for i, r in enumerate(rows(app))] == [
            "/log",
            "/reply",
            "/tell",
            "/kill",
            "/close",
            "+1",  # and /help, past the list's five rows
        ]
        await pilot.press("backspace", *"zq")
        await until(lambda: "no command matches /zq" in shown(app), what="the miss explained")


async def test_tab_completes_the_best_fuzzy_match_and_prefixes_still_suggest_inline(file_bus):
    async with running(file_bus, "file-reader", "test-runner") as (app, pilot):
        cmd = app.focused
        await pilot.press(*"/wt", "tab")
        assert cmd.value == "/wait "
        cmd.value = ""
        await pilot.press(*"/kl", "tab")
        assert cmd.value == "/kill "
        await pilot.press(*"a1", "tab")
        assert cmd.value == "/kill a1b2c3d4"  # ids after the command, as before
        cmd.value = ""
        await pilot.press(*"/kill test", "tab")
        assert cmd.value == "/kill e5f6a7b8"  # a name becomes its short id
        cmd.value = ""
        await pilot.press(*"/ag")
        await until(lambda: cmd._suggestion == "/agents ", what="the inline suggestion")
        await pilot.press("right")
        assert cmd.value == "/agents "


async def test_after_a_space_the_hint_shows_the_usage_then_the_flights_for_an_id(file_bus):
    async with running(file_bus, "file-reader", "test-runner") as (app, pilot):
        await pilot.press(*"/wait ")
        await until(
            lambda: "/wait TIMEOUT [ID ...] [--need K …] — wait for the next message" in shown(app),
            what="the usage of /wait",
        )
        assert "flights:" not in shown(app)  # a TIMEOUT comes first
        await pilot.press(*"5 ")
        await until(lambda: "flights:" in shown(app), what="the flights for an ID")
        assert "file-reader a1b2c3d4" in shown(app) and "test-runner e5f6a7b8" in shown(app)
        await pilot.press(*"te")
        await until(lambda: "file-reader" not in shown(app), what="the flights narrowed")
        assert "test-runner e5f6a7b8" in shown(app) and marked(app, 1) == "te"
        app.focused.value = ""
        await pilot.press(*"/send a1b2c3d4 hel")
        await until(lambda: "/send ID MESSAGE — send a message to a flight" in shown(app), what="/send's usage")
        assert "flights:" not in shown(app)  # the message is being typed


async def test_the_hint_is_gone_after_enter_and_on_an_empty_line(file_bus):
    async with running(file_bus, "file-reader", frozen=True) as (app, pilot):
        await until(lambda: "file-reader" in screen_text(app), what="the row")
        before = screen_text(app)
        assert shown(app) == ""
        await pilot.press(*"/ag")
        await until(lambda: "/agents" in shown(app), what="the hint")
        await pilot.press("backspace", "backspace", "backspace")
        await until(lambda: shown(app) == "", what="the hint gone on an empty line")
        assert screen_text(app) == before  # an empty line looks as it did
        await pilot.press(*"hello")
        await pilot.pause()
        assert shown(app) == ""  # not a command: no hint
        app.focused.value = ""
        await pilot.press(*"/agents")
        await until(lambda: "› /agents" in shown(app), what="the match")
        await pilot.press("enter")
        await until(lambda: "> /agents" in scrollback(app), what="the command to run")
        await until(lambda: shown(app) == "", what="the hint gone after Enter")


async def test_escape_still_interrupts_the_running_wait_while_the_hint_shows(bus):
    async with running(bus, "file-reader", "test-runner") as (app, pilot):
        await type_command(pilot, "/wait 600 a1b2 e5f6")
        await until(lambda: app.main.waiting, what="the wait to start")
        await pilot.press(*"/wt")
        await until(lambda: "/wait TIMEOUT" in shown(app), what="the hint")
        await pilot.press("escape")
        await until(lambda: not app.main.waiting, timeout=5, what="Escape to end the wait")
        assert app.main.last_result.status == "interrupted"
        assert "interrupted: 0/2 received" in scrollback(app)
        assert isinstance(app.focused, CommandLine) and app.focused.value == "/wt"  # the line is kept
        assert "/wait TIMEOUT" in shown(app)


async def test_up_and_down_still_walk_the_history_and_the_hint_follows(file_bus):
    async with running(file_bus) as (app, pilot):
        cmd = app.focused
        await type_command(pilot, "/agents")
        await type_command(pilot, "/wait 0")
        await until(lambda: "No messages." in scrollback(app), what="the instant check")
        await pilot.press(*"/wt")
        await until(lambda: "/wait" in shown(app), what="the hint")
        await pilot.press("up")
        assert cmd.value == "/wait 0"
        await until(lambda: "/wait TIMEOUT [ID ...] [--need K …] —" in shown(app), what="the hint of the recalled line")
        await pilot.press("up")
        assert cmd.value == "/agents"
        await pilot.press("down", "down")
        assert cmd.value == ""
        await until(lambda: shown(app) == "", what="the hint gone")
        assert app.focused is cmd and not hints(app).can_focus


async def test_a_flight_that_comes_after_the_index_was_made_is_offered_and_completed(file_bus):
    """The command line's index of flights is made once, then kept up: a flight put on the bus
    while the app runs is offered for an ID and completed by Tab."""
    async with running(file_bus, "file-reader", "test-runner") as (app, pilot):
        await pilot.press(*"/kill ")
        await until(lambda: "file-reader a1b2c3d4" in shown(app), what="the flights for an ID")
        await put_flight(file_bus, "linter", 3)
        await until(lambda: "linter" in screen_text(app), what="the linter's row")
        await pilot.press(*"li")
        await until(lambda: "linter c3d4e5f6" in shown(app), what="the linter offered by its name")
        assert "file-reader" not in shown(app)
        await pilot.press("tab")
        assert app.focused.value == "/kill c3d4e5f6"  # a name becomes its short id
        app.focused.value = "/kill c3"
        await pilot.press("tab")
        assert app.focused.value == "/kill c3d4e5f6"
