"""`wavewait demo` at 80x24 as a first-time user follows it: the guide in a fixed place, every
state on the panel, Escape on a running wait, a result no notice covers, a question, /reply,
the next wait (docs/tui.md, "The demo")."""

from __future__ import annotations

import pytest

from wavewait.core.model import Agent, ChangeSummary, Usage
from wavewait.core.results import EventEntry, FanIn, FileEntry, TargetResult
from wavewait.tui import scenes
from wavewait.tui.demo import ASK_AFTER, MAX_PARALLEL, DemoFlight, DemoPlan, plan
from wavewait.tui.demo_story import LINE, DemoStory
from wavewait.tui.result_view import render_result
from wavewait.tui.state import role_styles
from wavewait.tui.widgets.command import CommandLine
from wavewait.tui.widgets.flights import FlightsTable
from wavewait.tui.widgets.followlog import FollowLog
from wavewait.tui.widgets.guide import DemoGuide

from conftest import until
from tuitools import deterministic_textual, running, scrollback, type_command  # noqa: F401

STATES = {"queued", "running", "idle", "needs_input", "closed", "dead"}

#: the demo's story, fast: the sixth flight queued until linter dies, two reporters idle a
#: while, doc-writer asking only once the person had the time to press Escape
FAST = DemoPlan(
    seed=1,
    timeout=60,
    flights=(
        DemoFlight("file-reader", "report", 0.3, "read 42 files", linger=4.0),
        DemoFlight("schema-check", "report", 0.6, "14 foreign keys", linger=1.0),
        DemoFlight("doc-writer", "ask", 4.0, "put the guide in docs/ or in the wiki?"),
        DemoFlight("linter", "die", 1.0, "ruff crashed"),
        DemoFlight("migrator", "slow", 0.2, "waiting for a go-ahead"),
        DemoFlight("test-runner", "report-cli", 0.5, "120 tests pass"),
    ),
)


def _agent(name: str, **fields: object) -> Agent:
    return Agent(id=scenes.IDS[name], name=name, wave="wave-1", parent_id="orchestrator", **fields)  # type: ignore[arg-type]


def test_every_step_of_the_demo_guide_fits_two_lines_at_80_columns():
    story = DemoStory()
    running_wave = [_agent(n) for n in ("file-reader", "doc-writer", "migrator")]
    asking = [_agent("doc-writer", question="docs/ or wiki?", question_id="q"), _agent("migrator")]
    steps = [
        story.step([], False, None),
        story.step(running_wave, True, None),
    ]
    story.wait_ended()
    steps += [
        story.step(running_wave, False, None),
        story.step(asking, False, None),
        story.step(running_wave, False, None),
        story.step(running_wave, True, None),
        story.step([_agent("migrator", status="closed")], False, FanIn(status="complete", results=[], elapsed_sec=1)),
    ]
    assert [s[0] for s in steps[1:]] == ["①", "②", "③", "④", "T", "⑤"], steps
    assert "Escape" in steps[1] and f"/reply {scenes.IDS['doc-writer'][:8]}" in steps[3]
    for text in steps:
        lines = text.split("\n")
        assert len(lines) <= 2 and all(len(line) <= LINE for line in lines), text


def test_the_demo_plan_shows_every_state_and_asks_after_the_escape_moment():
    demo = plan(3)
    assert demo.max_parallel == MAX_PARALLEL < len(demo.flights)  # the sixth starts queued
    assert any(f.role == "report" and f.linger for f in demo.flights)  # idle a while
    ask = next(f for f in demo.flights if f.role == "ask")
    assert ask.delay >= ASK_AFTER >= 15  # the demo's wait still runs when the guide says Escape
    assert demo.timeout > ask.delay


def _join_result() -> FanIn:
    return FanIn(
        status="complete",
        elapsed_sec=3.0,
        need=2,
        met=2,
        results=[
            TargetResult(agent_id=scenes.IDS["file-reader"], name="file-reader", status="received", message="done"),
            TargetResult(
                agent_id=scenes.IDS["linter"],
                name="linter",
                status="check_failed",
                message="fixed it",
                output="collected 3 items\nFAILED test_x.py::test_a - assert 1 == 2\n1 failed",
            ),
            TargetResult(
                agent_id=scenes.IDS["migrator"],
                name="migrator",
                status="dead",
                reason="stopped: the join's need was met",
                changes=ChangeSummary(files=1, added=2, deleted=0),
                usage=Usage(input_tokens=1, output_tokens=1),
            ),
        ],
        files=[FileEntry(glob="dist/*.whl", min_count=1, status="met", matched=1, files=["/r/dist/a-1.whl"])],
        events=[
            EventEntry(type="deploy", status="met", event={"type": "deploy", "body": "prod is up"}),
            EventEntry(type="review", status="pending"),
        ],
        stopped=[scenes.IDS["migrator"]],
    )


def test_the_result_view_shows_a_joins_files_events_stopped_and_check_output():
    text = "\n".join(line.plain for line in render_result(_join_result(), role_styles({})))
    assert "FAILED test_x.py::test_a - assert 1 == 2" in text  # the failed check's output
    assert "dist/*.whl" in text and "/r/dist/a-1.whl" in text and "1/1 matched" in text
    assert "event deploy" in text and "prod is up" in text and "event review" in text
    assert "stopped (--stop-rest): migrator" in text
    assert "stopped: the join's need was met" in text


def _visible(app, widget) -> bool:
    r = widget.region
    return r.height > 0 and r.y >= 0 and r.bottom <= app.size.height


@pytest.mark.anyio
async def test_the_demos_story_at_80x24(file_bus):
    """Escape on the running wait, a result no toast covers, the question, /reply, the rest:
    the guide says each step in view, and the panel shows every state on the way."""
    seen: set[str] = set()
    async with running(file_bus, size=(80, 24), demo=FAST, sweep_every=0) as (app, pilot):
        main = app.main

        def see(cond: bool = True) -> bool:
            seen.update(v.state for v in main.flight_views())
            return cond

        guide = main.query_one(DemoGuide)
        await until(lambda: see(main.waiting), timeout=30, what="the demo's wait")
        await pilot.pause()
        assert "Press Escape now" in guide.text and _visible(app, guide)
        await pilot.press("escape")
        await until(lambda: see(not main.waiting), timeout=10, what="the interrupted result")
        assert main.last_result is not None and main.last_result.status == "interrupted"
        await pilot.pause()
        assert guide.text.startswith("②") and _visible(app, guide)
        assert scenes.toasts(app) == [], app.notices  # the result is the news: no toast over it

        await until(lambda: see(any(a.state == "needs_input" for a in main.flights())), timeout=30, what="the question")
        await until(lambda: see(guide.text.startswith("③")), what="the answer step")
        await pilot.pause()
        # the question came while the result was the newest: a line below it, not a toast over it
        assert scenes.toasts(app) == [], app.notices
        assert "needs input: put the guide in docs/" in scrollback(app)
        doc = next(a for a in main.flights() if a.name == "doc-writer")
        await type_command(pilot, f"/reply {doc.id[:8]} docs/")
        await until(lambda: see(not any(a.state == "needs_input" for a in main.flights())), what="the answer taken")
        await until(lambda: see(guide.text.startswith("④")), what="the rest step")
        slow = next(a for a in main.flights() if a.name == "migrator")
        assert f"/send {slow.id[:8]} go" in guide.text
        await type_command(pilot, f"/send {slow.id[:8]} go")
        await until(lambda: see(all(a.finished for a in main.flights())), timeout=30, what="every flight ended")
        await type_command(pilot, "/wait 30 --wave wave-1")
        await until(
            lambda: see(main.story is not None and main.story.waits_ended == 2 and not main.waiting),
            timeout=30,
            what="the last wait",
        )
        await pilot.pause()
        last = main.last_result
        assert isinstance(last, FanIn)
        records = {a.id: a.state for a in main.flights()}
        # every flight ended before this wait: the words of those it took nothing from are the
        # records' (none says running)
        plain = [e for e in last.results if e.message is None]
        assert plain and {e.name: e.status for e in plain} == {e.name: records[e.agent_id] for e in plain}
        # nothing of the frame's fixed parts is pushed out at 80x24
        assert _visible(app, main.query_one(CommandLine)) and _visible(app, main.query_one(FlightsTable))
        assert _visible(app, guide) and main.query_one("#scrollback", FollowLog).region.height >= 2
        assert seen >= STATES, seen
        # the header counts every flight whose report reached the person, as the panel's rows do
        views = main.flight_views()
        assert [v.name for v in views if not v.reported] == ["linter"], views  # it died: no report
        assert main._panel.summary().startswith("5/6 reported")
        assert last.status == "complete", last
        assert guide.text.startswith("⑤")


@pytest.mark.anyio
async def test_a_report_that_comes_before_send_returns_counts_as_the_new_rounds(file_bus, monkeypatch):
    """The flight answered a /send within milliseconds, before the TUI noted the new round:
    its report is the new round's, so the panel says it reported (the demo's migrator did this)."""
    from wavewait.core import messages
    from wavewait.tui import slash

    sent = messages.send

    async def send_and_answer(bus, sender, to, message, *args, **kwargs):
        item = await sent(bus, sender, to, message, *args, **kwargs)
        await messages.notify_completion(bus, item.to, status="success", message="go-ahead: go")
        return item

    async with running(file_bus, "migrator") as (app, pilot):
        monkeypatch.setattr(slash.messages, "send", send_and_answer)
        await type_command(pilot, f"/send {scenes.IDS['migrator'][:8]} go")
        migrator = scenes.IDS["migrator"]
        await until(lambda: "go-ahead" in (app.main.read.by_id[migrator].last_message or ""), what=scrollback(app))
        await until(lambda: app.main._panel.summary().startswith("1/1 reported"), what="the report counted")
