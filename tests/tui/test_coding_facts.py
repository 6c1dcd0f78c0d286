"""A coding flight's changes and cost in the flights panel: first in its detail column."""

from __future__ import annotations

import pytest

from wavewait.core.agents import register
from wavewait.core.model import ChangeSummary, Usage

from conftest import until
from tuitools import IDS, put_flight, running, screen_text

pytestmark = pytest.mark.anyio


async def test_a_coding_flights_changes_and_cost_show_in_the_panel_and_follow_its_record(file_bus):
    await register(file_bus, "orchestrator")
    await put_flight(file_bus, "doc-writer", 1)
    async with running(file_bus) as (app, _pilot):
        await until(lambda: "doc-writer" in screen_text(app), what="the flight's row")
        assert " tok" not in screen_text(app)  # a plain flight shows no coding facts
        await file_bus.update_agent(
            IDS["doc-writer"],
            changes=ChangeSummary(files=2, added=12, deleted=3),
            usage=Usage(input_tokens=1000, output_tokens=234, cost_usd=0.0123),
        )
        await until(lambda: "+12 −3 in 2 files · 1.2k tok" in screen_text(app), what="the facts")
        assert "0/1 reported · 1 running · 1.2k tok · $0.0123" in screen_text(app)  # the wave's totals
        await file_bus.update_agent(IDS["doc-writer"], usage=Usage(input_tokens=20, output_tokens=10))
        await until(lambda: "+12 −3 in 2 files · 30 tok" in screen_text(app), what="the new count")
        assert "1 running · 30 tok  " in screen_text(app)  # no money reported: none shown


def test_the_facts_read_as_people_count() -> None:
    from wavewait.core.model import Agent
    from wavewait.tui.state import coding_facts, flight_detail

    a = Agent(id="a1", name="n", changes=ChangeSummary(files=1, added=1), usage=Usage(input_tokens=1_500_000))
    assert coding_facts(a) == "+1 −0 in 1 file · 1.5M tok"
    a.usage = Usage(input_tokens=20, output_tokens=10, cost_usd=0.00028)
    a.status, a.reason = "dead", "killed by orchestrator; last: tool Write"
    assert flight_detail(a, False) == "+1 −0 in 1 file · 30 tok · $0.0003 · killed by orchestrator; last: tool Write"
    assert flight_detail(Agent(id="b1", name="m", last_message="hi"), False) == "hi"


async def test_spawn_with_a_preset_starts_a_coding_flight_in_its_own_worktree(file_bus, tmp_path, monkeypatch):
    """/spawn NAME --preset P PROMPT: the agent (here replaying Claude Code's events) runs in
    a worktree of the repository the TUI was started in, reports, and the panel shows it."""
    import json
    import sys
    from pathlib import Path

    from wavewait.tui.widgets.command import CommandLine

    from gittools import make_repo, status
    from tuitools import scrollback

    repo = make_repo(tmp_path / "project", monkeypatch)
    replay = Path(__file__).parents[1] / "core" / "replay_agent.py"
    presets = tmp_path / "presets.toml"
    presets.write_text(
        f'[presets.replay]\nprogram = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(replay))}, "{{prompt}}"]\n'
        'events = "claude"\n'
    )
    monkeypatch.setenv("WAVEWAIT_PRESETS", str(presets))
    monkeypatch.chdir(repo)
    plan = json.dumps({"events": "claude-success.jsonl", "write": {"t.txt": "t\n"}})
    await register(file_bus, "orchestrator")
    async with running(file_bus) as (app, pilot):
        app.main.query_one(CommandLine).value = f"/spawn coder --wave w --preset replay 'plan: {plan}'"
        await pilot.press("enter")
        await until(lambda: "branch wavewait/w/coder" in scrollback(app), what="the spawn said")
        await until(lambda: "+1 −0 in 1 file · 30 tok" in screen_text(app), 30, what="its changes and tokens")
    assert status(repo) == ""


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("/spawn x --preset", "give a value after --preset"),
        ("/spawn x --preset claude", "give the prompt"),
        ("/spawn --preset claude hi", "give one NAME"),
    ],
)
def test_a_preset_spawn_that_is_not_whole_says_what_is_missing(line: str, why: str) -> None:
    from wavewait.tui.commands import Usage as UsageError
    from wavewait.tui.commands import parse

    with pytest.raises(UsageError, match=why):
        parse(line)
    got = parse("/spawn coder --preset codex --wave w fix the bug")
    assert (got.args, got.preset, got.wave, got.rest) == (["coder"], "codex", "w", ["fix", "the", "bug"])
    got = parse("/spawn coder --preset claude --model opus --no-worktree -- fix it")
    assert got.options == {"model": "opus", "worktree": False} and got.rest == ["fix", "it"]
    got = parse("/spawn job --worktree --base v1 -- make test")
    assert (got.preset, got.options, got.rest) == (None, {"worktree": True, "base": "v1"}, ["make", "test"])


async def test_a_coding_flights_screen_shows_its_diff(file_bus, tmp_path, monkeypatch):
    from wavewait.core import flights
    from wavewait.tui.screens.flight import FlightScreen
    from wavewait.tui.widgets.flights import FlightsTable

    from gittools import make_repo

    repo = make_repo(tmp_path / "project", monkeypatch)
    await register(file_bus, "orchestrator")
    a = await flights.start(
        file_bus,
        "writer",
        parent_id="orchestrator",
        command=["sh", "-c", "echo hello from the flight > h.txt"],
        worktree=True,
        wave="w",
        cwd=str(repo),
    )

    async def counted() -> bool:
        got = await file_bus.get_agent(a.id)
        return got.changes is not None and got.changes.final

    await until(counted, 30, "the flight's final changes")
    async with running(file_bus) as (app, pilot):
        table = app.main.query_one(FlightsTable)
        await until(lambda: table.row_count == 1, what="the row")
        table.focus()
        await pilot.press("enter")
        await until(lambda: isinstance(app.screen, FlightScreen), what="the flight screen")
        await until(lambda: "+hello from the flight" in screen_text(app), what="the diff")
        assert "Changes on wavewait/w/writer: +1 −0 in 1 file" in screen_text(app)


async def test_a_and_d_allow_or_deny_the_selected_flights_permission_request(file_bus):
    from wavewait.core import messages
    from wavewait.tui.widgets.command import CommandLine
    from wavewait.tui.widgets.flights import FlightsTable

    from tuitools import scrollback

    await register(file_bus, "orchestrator")
    await put_flight(file_bus, "doc-writer", 1)
    async with running(file_bus) as (app, pilot):
        table = app.main.query_one(FlightsTable)
        await until(lambda: table.row_count == 1, what="the row")
        table.focus()
        await pilot.press("a")
        await until(lambda: "select a flight that needs input" in " ".join(app.notices), what="the refusal")
        await messages.ask(file_bus, IDS["doc-writer"], 'permission: Bash {"command": "make"}. Answer allow, or deny.')
        await until(lambda: "? needs input" in screen_text(app), what="the question")
        table.focus()
        await pilot.press("a")
        await until(lambda: "answered doc-writer" in scrollback(app), what="the answer sent")
        answers = [i.body for i in await file_bus.peek(IDS["doc-writer"]) if i.type == messages.ANSWER]
        assert answers == ["allow"]
        await until(lambda: "? needs input" not in screen_text(app), what="the state cleared")
        await messages.ask(file_bus, IDS["doc-writer"], "permission: Bash {}")
        await until(lambda: "? needs input" in screen_text(app), what="the second question")
        table.focus()
        await pilot.press("d")
        cmd = app.main.query_one(CommandLine)
        await until(lambda: cmd.value == "/reply f1e2d3c4 deny ", what="the deny offered")


async def test_spawn_a_command_in_its_own_worktree_from_the_tui(file_bus, tmp_path, monkeypatch):
    from gittools import git, make_repo, status
    from tuitools import scrollback, type_command

    repo = make_repo(tmp_path / "project", monkeypatch)
    monkeypatch.chdir(repo)
    await register(file_bus, "orchestrator")
    async with running(file_bus) as (app, pilot):
        await type_command(pilot, "/spawn job --worktree -- sh -c 'echo made > made.txt'")
        await until(lambda: "branch wavewait/no-wave/job" in scrollback(app), what="the spawn said")
        await until(lambda: "+1 −0 in 1 file" in screen_text(app), 30, what="its changes")
    assert status(repo) == "" and git(repo, "show", "wavewait/no-wave/job:made.txt") == "made\n"
