"""The merge view: `/merge WAVE --check CMD` runs the merge queue on five real flights and
shows each flight's status as it changes, the overlap, and a stopped flight's files or
check output; a snapshot of the view at the end of the five-branch merge."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from textual.widgets import DataTable

from wavewait.core.bus.file import FileBus
from wavewait.tui import scenes
from wavewait.tui.commands import Usage, parse
from wavewait.tui.screens.merge import MergeScreen

from conftest import env_for, until, wavewait_cmd
from gittools import git, make_repo
from mergetools import CHECK, WAVE, five_flights, preset_file
from tuitools import SIZE, deterministic_textual, make_app, screen_text, scrollback, type_command  # noqa: F401

pytestmark = [pytest.mark.usefixtures("deterministic_textual"), pytest.mark.one_bus]
COMMAND = f"/merge {WAVE} --check 'sh check.sh'"


def wave_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The repository, with the check as a script in it (so the command line stays short)."""
    repo = make_repo(tmp_path / "project", monkeypatch)
    (repo / ".git" / "info" / "exclude").write_text(".wavebus/\n")
    # with MERGE_GATE set, omega's check waits for that file: the test sees the merge mid-way
    gate = 'if [ -n "$MERGE_GATE" ] && [ -e omega.txt ]; then while [ ! -e "$MERGE_GATE" ]; do sleep 0.05; done; fi'
    (repo / "check.sh").write_text(f"{CHECK}\n{gate}\n")
    git(repo, "add", "check.sh")
    git(repo, "commit", "--quiet", "-m", "the check")
    return repo


def rows(view: MergeScreen) -> list[tuple[str, str]]:
    table = view.query_one("#merge-flights", DataTable)
    return [(str(table.get_row_at(i)[1]), str(table.get_row_at(i)[3])) for i in range(table.row_count)]


async def merged_view(pilot) -> None:
    await until(lambda: pilot.app.main.read_count > 0, what="the first read")
    await type_command(pilot, COMMAND)
    await until(lambda: isinstance(pilot.app.screen, MergeScreen) and pilot.app.screen.done, 120, what="the merge")
    await pilot.pause()
    pilot.app.clear_notifications()  # the toasts of the two flights that need input name their random ids
    await pilot.pause()


def test_the_merge_command_parses_its_options() -> None:
    p = parse("/merge w5 --into integration --check 'pytest -q' --dry-run --resolve-with codex")
    assert p.args == ["w5"]
    assert p.options == {"into": "integration", "check": "pytest -q", "dry_run": True, "resolve_with": "codex"}
    assert parse("/merge").args == []
    with pytest.raises(Usage, match="give a value after --check"):
        parse("/merge w5 --check")
    with pytest.raises(Usage, match="unexpected 'w6'"):
        parse("/merge w5 w6")


@pytest.mark.anyio
async def test_merge_shows_each_flights_status_as_it_changes(bus, tmp_path, monkeypatch) -> None:
    repo = wave_repo(tmp_path, monkeypatch)
    await five_flights(bus, repo, preset_file(tmp_path))
    gate = tmp_path / "gate"
    monkeypatch.setenv("MERGE_GATE", str(gate))
    app = make_app(bus)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.read_count > 0, what="the first read")
        await type_command(pilot, COMMAND)
        await until(lambda: isinstance(app.screen, MergeScreen), what="the merge view")
        view = app.screen
        # live: omega's check is running; the flights before it are shown as they ended
        before = [
            ("alpha", "✔ merged"),
            ("pair-one", "✔ merged"),
            ("broken", "✖ check failed"),
            ("pair-two", "✖ conflict"),
            ("omega", "· pending"),
        ]
        checking = lambda: view.result is not None and view.result.flights[4].why == "its check is running"  # noqa: E731
        await until(lambda: checking() and rows(view) == before, 60, what="omega's check, the four before it shown")
        await pilot.pause()
        assert "its check is running" in screen_text(app) and "merging…" in screen_text(app)
        gate.write_text("")
        await until(lambda: view.done, 120, what="the merge to end")
        await pilot.pause()
        assert rows(view) == [
            ("alpha", "✔ merged"),
            ("pair-one", "✔ merged"),
            ("broken", "✖ check failed"),
            ("pair-two", "✖ conflict"),
            ("omega", "✔ merged"),
        ]
        text = screen_text(app)
        assert "Merge w5 into main" in text and "stopped: flights need input" in text
        assert "overlap: src/app.py (pair-one, pair-two)" in text
        assert "broken.flag: the build is broken" in text  # the first stopped flight's check output
        await pilot.press("down")  # the detail follows the cursor once it moved
        await pilot.pause()
        assert "pair-one: merged" in screen_text(app)
        await pilot.press("escape")
        await until(lambda: "merge w5 into main: needs input · 3 merged" in scrollback(app), what="the summary")


def test_merge_view_snapshot(snap_compare, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WAVEWAIT_AGENT_ID", raising=False)
    bus = FileBus(tmp_path / "bus")
    repo = wave_repo(tmp_path, monkeypatch)
    asyncio.run(five_flights(bus, repo, preset_file(tmp_path)))
    monkeypatch.chdir(repo)
    assert snap_compare(scenes.frozen_app(bus), run_before=merged_view, terminal_size=SIZE)


@pytest.mark.anyio
async def test_watch_follows_a_merge_run_by_the_cli_in_another_process(bus, tmp_path, monkeypatch) -> None:
    repo = wave_repo(tmp_path, monkeypatch)
    await five_flights(bus, repo, preset_file(tmp_path))
    gate = tmp_path / "gate"
    app = make_app(bus)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.read_count > 0, what="the first read")
        await type_command(pilot, f"/merge {WAVE} --watch")
        await until(lambda: isinstance(app.screen, MergeScreen), what="the merge view")
        view = app.screen
        await pilot.pause()
        assert "No merge of w5 yet" in screen_text(app)
        env = env_for(bus, WAVEWAIT_WORKTREES=os.environ["WAVEWAIT_WORKTREES"], MERGE_GATE=str(gate))
        cli = await asyncio.create_subprocess_exec(
            *wavewait_cmd("merge", WAVE, "--check", "sh check.sh"), cwd=repo, env=env, stdout=asyncio.subprocess.PIPE
        )
        try:
            # live, from the bus: omega's check runs while the four before it show how they ended
            await until(lambda: rows(view)[:1] == [("alpha", "✔ merged")] and not view.done, 60, what="alpha merged")
            await until(
                lambda: len(rows(view)) == 5 and rows(view)[3] == ("pair-two", "✖ conflict"), 60, what="pair-two"
            )
            assert not view.done and rows(view)[4] == ("omega", "· pending")
            gate.write_text("")
            await until(lambda: view.done, 60, what="the merge to end")
        finally:
            out, _ = await cli.communicate()
        assert cli.returncode == 6
        await pilot.pause()
        assert rows(view) == [
            ("alpha", "✔ merged"),
            ("pair-one", "✔ merged"),
            ("broken", "✖ check failed"),
            ("pair-two", "✖ conflict"),
            ("omega", "✔ merged"),
        ]
        assert "stopped: flights need input" in screen_text(app)


@pytest.mark.anyio
async def test_m_on_a_flight_and_enter_on_a_stopped_one_open_its_waves_merge(bus, tmp_path, monkeypatch) -> None:
    from wavewait.core import merge
    from wavewait.tui.widgets.flights import FlightsTable

    repo = wave_repo(tmp_path, monkeypatch)
    fl = await five_flights(bus, repo, preset_file(tmp_path))
    await merge.merge_wave(bus, WAVE, caller="orchestrator", check="sh check.sh")
    app = make_app(bus)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.read_count > 0, what="the first read")
        table = app.main.query_one(FlightsTable)
        await until(lambda: table.row_count == 5, what="the five flights")
        table.focus()
        await pilot.press("m")
        await until(lambda: isinstance(app.screen, MergeScreen) and app.screen.done, what="the merge view")
        assert [s for _, s in rows(app.screen)] == ["✔ merged", "✔ merged", "✖ check failed", "✖ conflict", "✔ merged"]
        await pilot.press("escape")
        await until(lambda: not isinstance(app.screen, MergeScreen), what="the view to close")
        table.move_cursor(row=table.get_row_index(fl["pair-two"].id))
        await pilot.press("enter")  # it needs input because the merge stopped on it: its merge shows
        await until(lambda: isinstance(app.screen, MergeScreen) and app.screen.done, what="the merge view again")
        assert "pair-two: merge: wavewait/w5/pair-two conflicts with main in src/app.py" in scrollback(app)
        # its notice says where to look, not to reply
        assert any(n.startswith("pair-two (") and n.endswith(f"/merge {WAVE} --watch") for n in app.notices), (
            app.notices
        )
