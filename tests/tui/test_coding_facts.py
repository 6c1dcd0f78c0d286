"""A coding flight's changes and cost in the flights panel: columns of their own, and each wave's totals in its header."""

from __future__ import annotations

import re
import subprocess

import pytest

from wavewait.core.agents import register
from wavewait.core.model import ChangeSummary, Usage

from conftest import until
from tuitools import IDS, put_flight, running, screen_text

pytestmark = pytest.mark.anyio


async def test_a_coding_flights_changes_and_cost_show_in_the_panel_and_follow_its_record(file_bus):
    await register(file_bus, "orchestrator")
    await put_flight(file_bus, "doc-writer", 1)
    async with running(file_bus) as (app, pilot):
        await until(lambda: "doc-writer" in screen_text(app), what="the flight's row")
        assert "changes" not in screen_text(app)  # a plain wave has no coding columns
        assert " tok" not in screen_text(app)
        await file_bus.update_agent(
            IDS["doc-writer"],
            changes=ChangeSummary(files=2, added=12, deleted=3),
            usage=Usage(input_tokens=1000, output_tokens=234, cost_usd=0.0123),
        )
        await until(lambda: "+12 −3 2f   1.2k $0.0123" in screen_text(app), what="the columns")
        assert "changes" in screen_text(app) and "cost" in screen_text(app)
        assert "0/1 reported · 1 running  ·  wave-1 1.2k tok $0.0123" in screen_text(app)  # the wave's totals
        await file_bus.update_agent(IDS["doc-writer"], usage=Usage(input_tokens=20, output_tokens=10))
        await until(lambda: re.search(r"\+12 −3 2f +30  ", screen_text(app)) is not None, what="the new count")
        assert "wave-1 30 tok  " in screen_text(app)  # no money reported: none shown
        await pilot.resize_terminal(80, 24)  # a newcomer's terminal: the facts stay, brief
        await until(
            lambda: re.search(r"doc-writer .* \+12 −3 +30 *$", screen_text(app), re.M) is not None, what="brief"
        )
        assert "changes" in screen_text(app) and "2f" not in screen_text(app)
        assert "wave-1 30 tok" in screen_text(app)
        await file_bus.update_agent(IDS["doc-writer"], usage=Usage(input_tokens=20, output_tokens=10, cost_usd=0.25))
        await until(lambda: re.search(r"\+12 −3 +\$0\.25 *$", screen_text(app), re.M) is not None, what="money, brief")
        await pilot.resize_terminal(60, 24)  # narrower than any layout with them: they lead the detail (not shown)
        await until(lambda: "changes" not in screen_text(app), what="the columns left out")
        await pilot.resize_terminal(200, 30)
        await until(lambda: re.search(r"\+12 −3 2f +30 \$0\.2500", screen_text(app)) is not None, what="whole again")


async def test_the_header_totals_each_wave_apart(file_bus):
    """Two waves of coding flights: each wave's tokens and money, never one sum of both."""
    from wavewait.core.model import Agent

    await register(file_bus, "orchestrator")
    for i, (name, wave, usd) in enumerate(
        (("parser", "refactor", 0.25), ("lexer", "refactor", 0.5), ("cli", "lint", None))
    ):
        await file_bus.put_agent(
            Agent(
                id=IDS[name],
                name=name,
                wave=wave,
                parent_id="orchestrator",
                created_at=1000.0 + i,
                usage=Usage(input_tokens=1000 * (i + 1), output_tokens=100, cost_usd=usd),
            )
        )
    await file_bus.put_agent(Agent(id=IDS["api"], name="api", parent_id="orchestrator", usage=Usage(input_tokens=7)))
    async with running(file_bus, size=(200, 30)) as (app, _pilot):
        want = "lint 3.1k tok · refactor 3.2k tok $0.7500 · no wave 7 tok"
        await until(lambda: want in screen_text(app), what="the totals per wave")
        await file_bus.update_agent(IDS["cli"], usage=Usage(input_tokens=9000, output_tokens=1000, cost_usd=0.1))
        await until(
            lambda: "lint 10.0k tok $0.1000 · refactor 3.2k tok $0.7500" in screen_text(app), what="lint's new totals"
        )


async def test_a_row_scrolled_into_view_after_a_layout_change_shows_it_at_once(file_bus):
    """A layout change repaints the cells that follow it (here changes and cost going brief)
    on the rows on screen only; a coding flight scrolled into view afterwards must show them
    as the new layout says at once: no read, hence no repaint, follows a scroll here."""
    from wavewait.core.model import Agent
    from wavewait.tui.widgets.flights import CHANGES_BRIEF, FlightsTable

    await register(file_bus, "orchestrator")
    facts = ChangeSummary(files=2, added=12, deleted=3)
    for i in range(40):
        await file_bus.put_agent(
            Agent(
                id=f"{i:08x}" + "0" * 24, name=f"plain-{i:02d}", wave="w", parent_id="orchestrator", created_at=1000 + i
            )
        )
    for i, name in enumerate(("coder-top", "coder-end")):  # one on screen, one far below it
        at = 999 if i == 0 else 2000
        await file_bus.put_agent(
            Agent(
                id=f"c{i:07x}" + "0" * 24, name=name, wave="w", parent_id="orchestrator", created_at=at, changes=facts
            )
        )
    async with running(file_bus, size=(200, 24)) as (app, pilot):
        table = app.main.query_one(FlightsTable)
        await until(lambda: table.row_count == 42, what="the rows")
        await until(lambda: "+12 −3 2f" in screen_text(app), what="the facts whole")
        await pilot.resize_terminal(80, 24)
        await until(lambda: table.columns["changes"].width == CHANGES_BRIEF, what="the brief layout")  # type: ignore[call-overload]
        await until(lambda: re.search(r"coder-top .* \+12 −3 ", screen_text(app)) is not None, what="brief on screen")
        assert "coder-end" not in screen_text(app)
        table.action_scroll_bottom()
        await until(lambda: "coder-end" in screen_text(app), what="the last row in view")
        line = next(line for line in screen_text(app).splitlines() if "coder-end" in line)
        assert re.search(r"coder-end .* \+12 −3 ", line) and "2f" not in line, line


def test_a_growing_wave_adds_views_without_making_the_others_anew() -> None:
    """A new flight after those shown adds its view; one before them asks for a rebuild."""
    from wavewait.core.model import Agent
    from wavewait.tui.state import Panel

    agents = {
        a.id: a
        for a in (
            Agent(id=f"{i:08x}" + "0" * 24, name=f"f{i}", wave="w", parent_id="me", created_at=1000 + i)
            for i in range(3)
        )
    }
    panel = Panel("me")
    panel.rebuild(agents.values(), set())
    before = list(panel.views)
    late = Agent(id="0a" + "0" * 30, name="late", wave="longer-wave", parent_id="me", created_at=2000)
    agents[late.id] = late
    added = panel.update(agents, [late.id], set())
    assert added is not None and [v.name for v in added] == ["late"]
    assert panel.views[:3] == before and all(a is b for a, b in zip(panel.views, before, strict=False))
    assert [v.name for v in panel.views] == ["f0", "f1", "f2", "late"]
    assert panel.waves == {"w": 3, "longer-wave": 1} and panel.summary().startswith("0/4 reported")
    early = Agent(id="0b" + "0" * 30, name="early", wave="w", parent_id="me", created_at=10)
    agents[early.id] = early
    assert panel.update(agents, [early.id], set()) is None  # it goes first: the panel is rebuilt


def test_the_cells_read_as_people_count() -> None:
    from wavewait.core.model import Agent
    from wavewait.tui.state import changed_cell, flight_detail, spent_cell

    a = Agent(id="a1", name="n", changes=ChangeSummary(files=1, added=1), usage=Usage(input_tokens=1_500_000))
    assert (changed_cell(a), spent_cell(a)) == ("+1 −0 1f", "1.5M")
    a.usage = Usage(input_tokens=20, output_tokens=10, cost_usd=12.5)
    assert spent_cell(a) == "30 $12.50"
    a.status, a.reason = "dead", "killed by orchestrator; last: tool Write"
    assert flight_detail(a, False) == "killed by orchestrator; last: tool Write"  # the facts have their columns
    assert flight_detail(Agent(id="b1", name="m", last_message="hi"), False) == "hi"
    assert (changed_cell(Agent(id="c1", name="p")), spent_cell(Agent(id="c1", name="p"))) == ("", "")


def test_the_brief_cells_fit_a_narrow_column_and_unknown_is_not_zero() -> None:
    from wavewait.core.model import Agent
    from wavewait.tui.state import changed_brief, spent_brief, spent_cell
    from wavewait.tui.widgets.flights import CHANGES_BRIEF, COST_BRIEF

    a = Agent(id="a1", name="n", changes=ChangeSummary(files=3, added=120, deleted=45), usage=Usage(input_tokens=9))
    assert (changed_brief(a), spent_brief(a)) == ("+120 −45", "9")
    a.changes = ChangeSummary(files=40, added=123_456, deleted=9_999)
    a.usage = Usage(input_tokens=38_200, output_tokens=4_100, cost_usd=0.2114)
    assert (changed_brief(a), spent_brief(a)) == ("+123k −9.9k", "$0.21")
    for usd, shown in ((0.005, "$0.0050"), (12.5, "$12.50"), (1234.0, "$1234")):
        a.usage = Usage(cost_usd=usd)
        assert spent_brief(a) == shown
    for cell in ("+999 −999", "+99k −9.9k", "$0.0050", "999.9k", "$12.50"):
        assert len(cell) <= (CHANGES_BRIEF if cell.startswith("+") else COST_BRIEF), cell
    # a coding flight that ended without any usage known (a Codex flight killed in its first turn)
    gone = Agent(id="b1", name="m", events="codex", status="dead", ended_at=1.0)
    assert (spent_cell(gone), spent_brief(gone)) == ("?", "?")
    assert spent_cell(Agent(id="c1", name="p", events="codex")) == ""  # running: nothing yet


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
        await until(lambda: "+1 −0 1f" in screen_text(app), 30, what="its changes")
        await until(lambda: "w 30 tok" in screen_text(app), what="its tokens in the wave's totals")
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
        await until(lambda: "+1 −0 1f" in screen_text(app), 30, what="its changes")

    def committed() -> bool:
        # the panel shows the worktree's changes as they are made; the flight's commit on its
        # branch comes once it ended (a CI run read the branch in between)
        shown = subprocess.run(["git", "-C", str(repo), "show", "wavewait/no-wave/job:made.txt"], capture_output=True)
        return shown.returncode == 0

    await until(committed, 30, what="the flight's commit on its branch")
    assert status(repo) == "" and git(repo, "show", "wavewait/no-wave/job:made.txt") == "made\n"


async def test_the_header_shows_each_waves_spend_against_its_budget(file_bus):
    """A wave's budget, kept on the bus, shows as spent / budget after the wave's name, and
    follows the settings when they change; a wave without one keeps its plain totals."""
    from textual.widgets import Static

    from wavewait.core import waves
    from wavewait.core.model import Agent

    await register(file_bus, "orchestrator")
    for i, (name, wave, usd) in enumerate((("parser", "refactor", 0.25), ("cli", "lint", None))):
        await file_bus.put_agent(
            Agent(
                id=IDS[name],
                name=name,
                wave=wave,
                parent_id="orchestrator",
                created_at=1000.0 + i,
                usage=Usage(input_tokens=1000 * (i + 1), output_tokens=100, cost_usd=usd),
            )
        )
    await waves.set_settings(file_bus, "refactor", budget_tokens=200_000, budget_usd=5)
    async with running(file_bus, size=(200, 30)) as (app, _pilot):
        want = "lint 2.1k tok · refactor 1.1k/200.0k tok $0.2500/$5.00"
        await until(lambda: want in screen_text(app), what="the budget beside the wave's spend")
        await waves.set_settings(file_bus, "lint", budget_tokens=2000)  # a budget set while it shows
        await until(lambda: "lint 2.1k/2.0k tok · refactor" in screen_text(app), what="lint's new budget")
        head = app.main.query_one("#summary", Static).content
        styled = {head.plain[s.start : s.end]: str(s.style) for s in head.spans}
        assert styled["lint 2.1k/2.0k tok"] == app.roles["bad"]  # a spent budget stands out
        assert styled[" · refactor 1.1k/200.0k tok $0.2500/$5.00"] == "dim"
        await file_bus.put_agent(
            Agent(id=IDS["api"], name="api", wave="docs", parent_id="orchestrator", created_at=1002.0)
        )
        await waves.set_settings(file_bus, "docs", budget_usd=1)
        await until(lambda: "docs $0.0000/$1.00 · lint" in screen_text(app), what="a new wave's budget")


def test_spend_against_a_budget_reads_as_spent_over_budget() -> None:
    from wavewait.tui.state import spent

    assert spent(48_100, 0.42, (200_000, 5.0)) == " 48.1k/200.0k tok $0.4200/$5.00"
    assert spent(0, 0.0, (200_000, None)) == " 0/200.0k tok"
    assert spent(1200, 0.0, (None, 2.0)) == " 1.2k tok $0.0000/$2.00"
    assert spent(1200, 0.01, None) == " 1.2k tok $0.0100"
