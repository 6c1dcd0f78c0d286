"""What trips a new user at 80x24: flights out of view during a wait, a header cut mid-item,
toasts on the mirror, and Shift+Tab landing elsewhere than its label says."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.text import Text

from wavewait.core.bus.file import FileBus
from wavewait.tui import scenes
from wavewait.tui.widgets.command import CommandLine
from wavewait.tui.widgets.flights import FlightsTable
from wavewait.tui.widgets.followlog import FollowLog
from wavewait.tui.widgets.header import WaveHeader
from wavewait.tui.widgets.mirror import MirrorTable
from wavewait.tui.widgets.status import WaitStatus

from conftest import until
from tuitools import deterministic_textual, screen_text  # noqa: F401

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("deterministic_textual")]


@pytest.fixture
def bus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FileBus:
    monkeypatch.delenv("WAVEWAIT_AGENT_ID", raising=False)
    return FileBus(tmp_path / "bus")


@pytest.mark.long
@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=["80x24", "200x50"])
async def test_five_flights_stay_in_view_during_a_wait_with_the_mirror(bus: FileBus, size: tuple[int, int]) -> None:
    """The demo's moment: seven flights, a wait on five, another process's wait mirrored, a
    death and a question. The wait's status gives way (it summarises at 80x24), the panel
    keeps five rows, and the toasts stay off the panel, the mirror and the command line."""
    setup, steps = scenes.SCENES["demo-at-80x24"]
    assert setup is not None
    await setup(bus)
    app = scenes.frozen_app(bus)
    async with app.run_test(size=size, notifications=True) as pilot:
        await steps(pilot)
        main = app.main
        table, status, command = main.query_one(FlightsTable), main.query_one(WaitStatus), main.query_one(CommandLine)
        mirror = main.query_one("#mirror-box")
        await until(lambda: table.region.height - table.header_height >= 5, what="five flight rows in view")
        screen = app.screen.region
        for widget in (table, mirror, status, command):
            assert widget.region.height and screen.contains_region(widget.region), (widget.id, widget.region)
        text = screen_text(app)
        assert all(name in text for name in ("file-reader", "test-runner", "linter", "schema-check", "doc-writer"))
        if size == (80, 24):  # no room for a line per target: those waited on, and a count
            assert "✓ 2 of 5 received" in str(status.content), status.content
        else:
            assert "migrator" in str(status.content) and "of 5 received" not in str(status.content)
        toasts = scenes.toasts(app)
        assert len(toasts) == 2, app.notices
        for toast in toasts:
            for widget in (table, mirror, command):
                assert not toast.region.overlaps(widget.region), (toast.region, widget.id, widget.region)


async def test_the_header_drops_items_whole_and_keeps_who_you_are(bus: FileBus) -> None:
    setup, steps = scenes.SCENES["demo-at-80x24"]
    assert setup is not None
    await setup(bus)
    app = scenes.frozen_app(bus)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await steps(pilot)
        head = app.main.query_one(WaveHeader).content
        assert isinstance(head, Text)
        assert head.plain == "3/7 reported · 1 needs input · 2 dead · 4 running  ·  you: orchestrator"  # wave-1 dropped
        await pilot.resize_terminal(200, 24)
        await until(lambda: "wave-1" in str(app.main.query_one(WaveHeader).content), what="the wave, with room")


def test_a_header_item_is_never_cut_in_two() -> None:
    """The coding wave at 80 columns: the waves' totals go on the second line whole."""
    from wavewait.tui.widgets.header import COUNT_SEP, GROUP_SEP, Item, fit

    counts = [Item(c, "bold", COUNT_SEP, "bold", 0) for c in ("0/6 reported", "1 needs input", "1 dead", "2 running")]
    waves = [Item("lint 1.1k tok $0.0050", "dim", GROUP_SEP, "dim", 1)]
    waves += [Item("refactor 74.0k tok $0.2957", "dim", COUNT_SEP, "dim", 1)]
    you = Item("you: orchestrator", "dim", GROUP_SEP, "dim", 2)
    lines = fit([*counts, *waves, you], 78, 2)
    assert lines is not None
    assert [[i.text for i in line] for line in lines] == [
        ["0/6 reported", "1 needs input", "1 dead", "2 running", "lint 1.1k tok $0.0050"],
        ["refactor 74.0k tok $0.2957", "you: orchestrator"],
    ]
    assert fit([*counts, *waves, you], 78, 1) is None  # one line: the caller drops items from the right
    assert fit([Item("x" * 20, "", " · ", "", 0)], 10, 2) is None  # an item wider than a line never fits


async def test_shift_tab_reaches_the_flights_panel_in_one_press_with_mirrored_waits(bus: FileBus) -> None:
    setup, steps = scenes.SCENES["mirror"]
    assert setup is not None
    await setup(bus)
    app = scenes.frozen_app(bus)
    async with app.run_test(size=(80, 24)) as pilot:
        await steps(pilot)
        main = app.main
        assert isinstance(app.focused, CommandLine)
        assert main.active_bindings["shift+tab"].binding.description == "Flights"
        await pilot.press("shift+tab")
        assert isinstance(app.focused, FlightsTable)
        assert main.active_bindings["shift+tab"].binding.description == "Command line"
        await pilot.press("shift+tab")
        assert isinstance(app.focused, CommandLine)
        main.query_one(FollowLog).focus()  # from the scrollback, as from anywhere: one press
        await pilot.press("shift+tab")
        assert isinstance(app.focused, FlightsTable)
        await pilot.press("tab")  # Tab still walks every part
        assert isinstance(app.focused, MirrorTable)


@pytest.mark.parametrize("where", [FollowLog, MirrorTable])
async def test_panel_keys_pressed_elsewhere_say_where_to_press_them(bus: FileBus, where: type) -> None:
    await scenes.put_mirror(bus)
    await scenes.put_question_of(bus)
    app = scenes.frozen_app(bus)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await scenes.mirror(pilot)
        app.main.query_one(where).focus()
        keys = ("a", "d") if where is MirrorTable else ("a", "d", "enter")  # Enter in the mirror interrupts
        for key in keys:
            before = len(app.notices)
            await pilot.press(key)
            await until(lambda before=before: len(app.notices) > before, what=f"a notice for {key}")
            assert "in the flights panel: Shift+Tab goes there" in app.notices[-1], app.notices[-1]
        said = len(app.notices)
        await pilot.press("shift+tab", "a")  # on the panel, `a` is the panel's
        assert isinstance(app.focused, FlightsTable)
        await until(lambda: len(app.notices) > said, what="the panel's own answer")
        assert "select a flight that needs input" in app.notices[-1]
        await pilot.press("shift+tab", "a")  # on the command line, a letter is typed
        assert app.main.query_one(CommandLine).value == "a"


async def test_help_reads_as_sentences_at_80_columns(bus: FileBus) -> None:
    """/help at 80x24: a command's text runs the width of the page, not a word a line beside
    its long usage; every command's usage is on one line of its own."""
    from rich.console import Console
    from textual.widgets import Static

    from wavewait.tui.commands import COMMANDS
    from wavewait.tui.screens.help import HelpScreen, help_text

    app = scenes.frozen_app(bus)
    async with app.run_test(size=(80, 24)) as pilot:
        await scenes.help_screen(pilot)
        assert isinstance(app.screen, HelpScreen)
        width = app.screen.query_one("#help-body").query_one(Static).content_region.width
        assert width >= 70  # the page takes the terminal's width
        console = Console(width=width, record=True, file=open("/dev/null", "w"))
        console.print(help_text())
        lines = [line.strip() for line in console.export_text().splitlines()]
        text = "\n".join(lines)
        for c in COMMANDS:
            assert c.usage in lines, c.usage  # whole, on a line of its own
        opening = next(line for line in lines if line.startswith("wait for the next message"))
        assert len(opening.split()) >= 8, text  # a sentence, not a word a line
        short_lines = [line for line in lines if line and len(line.split()) == 1 and not line.startswith("/")]
        assert len(short_lines) <= 3, short_lines
