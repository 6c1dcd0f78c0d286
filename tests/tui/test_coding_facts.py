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
        await file_bus.update_agent(IDS["doc-writer"], usage=Usage(input_tokens=20, output_tokens=10))
        await until(lambda: "+12 −3 in 2 files · 30 tok" in screen_text(app), what="the new count")


def test_the_facts_read_as_people_count() -> None:
    from wavewait.core.model import Agent
    from wavewait.tui.state import coding_facts, flight_detail

    a = Agent(id="a1", name="n", changes=ChangeSummary(files=1, added=1), usage=Usage(input_tokens=1_500_000))
    assert coding_facts(a) == "+1 −0 in 1 file · 1.5M tok"
    a.usage = Usage(input_tokens=20, output_tokens=10, cost_usd=0.00028)
    a.status, a.reason = "dead", "killed by orchestrator; last: tool Write"
    assert flight_detail(a, False) == "+1 −0 in 1 file · 30 tok · $0.0003 · killed by orchestrator; last: tool Write"
    assert flight_detail(Agent(id="b1", name="m", last_message="hi"), False) == "hi"
