"""Snapshots of the states a person sees (pytest-textual-snapshot).

Deterministic: a frozen clock, records with fixed ids and times (`wavewait.tui.scenes`, the
same scenes `screenshots.py` renders), no animations, no cursor blink, a fixed size and
theme. Regenerate with `--snapshot-update` only after looking at the report.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from wavewait.core.bus.file import FileBus
from wavewait.tui import scenes
from wavewait.tui.widgets.command import CommandLine
from wavewait.tui.widgets.flights import FlightsTable
from wavewait.tui.widgets.status import WaitStatus

from tuitools import SIZE, deterministic_textual  # noqa: F401

pytestmark = pytest.mark.usefixtures("deterministic_textual")


@pytest.fixture
def snap_bus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FileBus:
    monkeypatch.delenv("WAVEWAIT_AGENT_ID", raising=False)
    return FileBus(tmp_path / "bus")


def snap(snap_compare, bus: FileBus, scene: str) -> bool:
    setup, run_before = scenes.SCENES[scene]
    if setup is not None:
        asyncio.run(setup(bus))
    app = scenes.frozen_app(bus, **scenes.OPTIONS.get(scene, {}))
    return snap_compare(app, run_before=run_before, terminal_size=scenes.SIZES.get(scene, SIZE))


def test_empty_bus(snap_compare, snap_bus):
    assert snap(snap_compare, snap_bus, "empty-bus")


def test_running_wave(snap_compare, snap_bus):
    assert snap(snap_compare, snap_bus, "running-wave")


def test_waiting_status_layer(snap_compare, snap_bus):
    assert snap(snap_compare, snap_bus, "waiting")


def test_after_escape(snap_compare, snap_bus):
    assert snap(snap_compare, snap_bus, "after-escape")


def test_dead_flight(snap_compare, snap_bus):
    assert snap(snap_compare, snap_bus, "dead-flight")


def test_mirror_panel(snap_compare, snap_bus):
    assert snap(snap_compare, snap_bus, "mirror")


def test_help(snap_compare, snap_bus):
    assert snap(snap_compare, snap_bus, "help")


def test_help_at_80x24(snap_compare, snap_bus):
    """At 80 columns each command's usage is on a line of its own and its text runs the width below."""
    assert snap(snap_compare, snap_bus, "help-80")


def test_flight_detail(snap_compare, snap_bus):
    assert snap(snap_compare, snap_bus, "flight-detail")


def test_coding_wave(snap_compare, snap_bus):
    """Coding flights: changes and cost in columns of their own, each wave's totals in the header."""
    assert snap(snap_compare, snap_bus, "coding-wave")


def test_coding_wave_at_80x24(snap_compare, snap_bus):
    """At 80x24 the columns that do not fit are left out; the header keeps the waves' totals."""
    assert snap(snap_compare, snap_bus, "coding-wave-80")


def test_a_flights_conversation_at_80x24(snap_compare, snap_bus):
    """A Claude Code flight's screen: its conversation (the prompt, a tell and who told it, tool
    calls on a line, results cut short, a turn's end with the usage so far), the line that tells
    it at the foot and its keys; its messages and raw log a tab away."""
    assert snap(snap_compare, snap_bus, "talk-80")


def test_needs_input(snap_compare, snap_bus):
    assert snap(snap_compare, snap_bus, "needs-input")


def test_small_terminal_keeps_the_command_line(snap_compare, snap_bus):
    """80x24, a wait running with the mirror shown: the typed line is still on screen."""
    assert snap(snap_compare, snap_bus, "small-terminal")


def test_notices_during_a_wait_at_80x24(snap_compare, snap_bus):
    """A death and a question while a wait runs, at 80x24: five flights stay in view, the
    toasts stand over the scrollback and the status (which gives way first), off the panel."""
    assert snap(snap_compare, snap_bus, "notices-during-a-wait")


def test_the_demo_during_a_wait_at_80x24(snap_compare, snap_bus):
    """The demo's moment with the mirror: five flights, the mirror, a summarised status, the toasts between."""
    assert snap(snap_compare, snap_bus, "demo-at-80x24")


@pytest.mark.anyio
@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=["80x24", "200x50"])
async def test_notices_never_cover_the_panel_or_the_command_line(snap_bus, size):
    """Nor the wait's status where the scrollback has room for them (200x50); at 80x24 the
    status is what gives way (the panel above keeps every target's state in view)."""
    setup, steps = scenes.SCENES["notices-during-a-wait"]
    assert setup is not None
    await setup(snap_bus)
    app = scenes.frozen_app(snap_bus)
    async with app.run_test(size=size, notifications=True) as pilot:
        await steps(pilot)
        kept = [app.main.query_one(FlightsTable), app.main.query_one(CommandLine)]
        if size == (200, 50):
            kept.append(app.main.query_one(WaitStatus))
        assert all(w.region.height for w in [*kept, app.main.query_one(WaitStatus)]), "all are shown"
        toasts = scenes.toasts(app)
        assert len(toasts) == 2, app.notices
        for toast in toasts:
            for widget in kept:
                assert not toast.region.overlaps(widget.region), (toast.region, widget.id, widget.region)
