"""A queued flight in the panel: `◷ queued` with why it waits, then running once a slot frees."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from wavewait.core import admission, waves
from wavewait.core.agents import register

from conftest import PYTHON, until
from tuitools import make_app, screen_text, scrollback, started, type_command

pytestmark = pytest.mark.anyio

GATED = 'while [ ! -e "$1" ]; do sleep 0.02; done; exec "$2" -m wavewait notify --message done'


def gated(gate: Path) -> list[str]:
    return ["sh", "-c", GATED, "flight", str(gate), PYTHON]


async def test_the_panel_shows_a_queued_flight_and_why_then_runs_it(file_bus, tmp_path):
    await register(file_bus, "orchestrator")
    await waves.set_settings(file_bus, "capped", max_parallel=1)
    first = await admission.spawn(file_bus, "first", gated(tmp_path / "first"), wave="capped", parent_id="orchestrator")
    later = await admission.spawn(file_bus, "later", gated(tmp_path / "later"), wave="capped", parent_id="orchestrator")
    assert (first.status, later.status) == ("running", "queued")
    app = make_app(file_bus)
    async with app.run_test(size=(120, 30)):
        await started(app)
        await until(lambda: "◷ queued" in screen_text(app), what="the queued flight's word")
        text = screen_text(app)
        assert "1 running · 1 queued" in text
        assert "waiting for a slot: its wave runs 1 at most" in text
        (tmp_path / "later").touch()
        (tmp_path / "first").touch()  # first ends; its supervisor starts the queued one
        await until(lambda: "◷ queued" not in screen_text(app), 30, what="the queued flight to start")
        await until(lambda: "2 closed" in screen_text(app), 30, what="both to run and end")


async def test_slash_spawn_keeps_to_the_waves_limit_and_says_queued(file_bus, tmp_path):
    """A person's /spawn into a capped wave is queued like any other spawn, and says so."""
    await register(file_bus, "orchestrator")
    await waves.set_settings(file_bus, "capped", max_parallel=1)
    await admission.spawn(file_bus, "first", gated(tmp_path / "first"), wave="capped", parent_id="orchestrator")
    app = make_app(file_bus)
    async with app.run_test(size=(120, 30)) as pilot:
        await started(app)
        await type_command(pilot, f"/spawn second --wave capped -- {shlex.join(gated(tmp_path / 'second'))}")
        await until(lambda: "spawned second" in scrollback(app), what="the spawn")
        assert "queued (waiting for a slot: its wave runs 1 at most)" in scrollback(app)
        second = next(a for a in await file_bus.list_agents() if a.name == "second")
        assert second.status == "queued" and second.pid is None
        (tmp_path / "second").touch()
        (tmp_path / "first").touch()
        await until(lambda: "2 closed" in screen_text(app), 30, what="both to run and end")
