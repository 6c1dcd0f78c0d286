"""A flight that asks a question needs input until it is answered; the answer reaches it."""

from __future__ import annotations

import anyio
import pytest

from wavewait.core import agents, messages, wait
from wavewait.core.errors import BadInput

from conftest import Background, has_progress, has_waits, push_timers_out, until
from coretools import crew

pytestmark = pytest.mark.anyio


async def test_asking_makes_the_flight_need_input_and_answering_clears_it(bus):
    await crew(bus)
    await bus.update_agent("file-reader", parent_id="orchestrator")
    q = await messages.ask(bus, "file-reader", "which database?")
    asker = await bus.get_agent("file-reader")
    assert asker.state == "needs_input" and asker.status == "running" and asker.question == "which database?"
    assert agents.agent_view(asker)["state"] == "needs_input"
    event = await wait.wait_event(bus, "orchestrator", 0, ["question"])
    assert event.model_extra["question_id"] == q.id and event.model_extra["body"] == "which database?"
    await messages.answer(bus, "orchestrator", "file-reader", "postgres", question_id=q.id)
    assert (await bus.get_agent("file-reader")).state == "running"
    got = await wait.wait_event(bus, "file-reader", 0, [messages.ANSWER])
    assert got.model_extra["body"] == "postgres" and got.model_extra["question_id"] == q.id


async def test_an_answer_is_taken_by_the_asker_waiting_for_it(bus):
    await crew(bus)
    await bus.update_agent("test-runner", parent_id="orchestrator")
    async with anyio.create_task_group() as tg:
        got = []

        async def asker() -> None:
            await messages.ask(bus, "test-runner", "go on?")
            got.append(await wait.wait_event(bus, "test-runner", 30, [messages.ANSWER]))

        tg.start_soon(asker)

        async def needs_input() -> bool:
            return (await bus.get_agent("test-runner")).state == "needs_input"

        await until(needs_input, what="the question")
        await messages.answer(bus, "orchestrator", "test-r", "yes")
    assert got[0].model_extra["body"] == "yes"


async def test_a_fan_in_gives_a_question_as_needs_input(bus):
    await crew(bus)
    await bus.update_agent("linter", parent_id="orchestrator")
    await messages.ask(bus, "linter", "skip the slow rules?")
    r = await wait.wait_fan_in(bus, "orchestrator", 5, ["linter"])
    assert [(t.status, t.message) for t in r.results] == [("needs_input", "skip the slow rules?")]


async def test_answers_that_do_not_fit_are_refused(bus):
    await crew(bus)
    with pytest.raises(BadInput, match="no open question"):
        await messages.answer(bus, "orchestrator", "file-reader", "hello")
    await bus.update_agent("file-reader", parent_id="orchestrator")
    await messages.ask(bus, "file-reader", "first?")
    with pytest.raises(BadInput, match="question_id"):
        await messages.answer(bus, "orchestrator", "file-reader", "yes", question_id="0" * 32)
    await agents.register(bus, "loner")  # no parent
    with pytest.raises(BadInput, match="no parent"):
        await messages.ask(bus, "loner", "anyone?")


async def test_a_join_that_returns_on_a_question_shows_a_death_its_wakes_have_not_brought_yet(bus, monkeypatch):
    """The join returns on the question it woke for; a flight's death recorded an instant
    before, whose change has not reached the wait (here: never will), is in the result as the
    record says, not as the wait last read it (the panel said dead beside a result's running)."""
    push_timers_out(monkeypatch)  # no rescan, no sweep: only the question's change wakes the join
    await crew(bus)
    for name in ("linter", "file-reader"):
        await bus.update_agent(name, parent_id="orchestrator")
    if hasattr(bus, "listener"):
        keep = bus.listener._dispatch
        monkeypatch.setattr(
            bus.listener, "_dispatch", lambda p: keep(" ".join(k for k in p.split() if "linter" not in k))
        )
    else:
        keep = bus._changed_paths
        monkeypatch.setattr(bus, "_changed_paths", lambda paths: keep({p for p in paths if "linter" not in p}))
    async with anyio.create_task_group() as tg:
        got: dict[str, wait.FanIn] = {}

        async def join() -> None:
            got["r"] = await wait.wait_fan_in(bus, "orchestrator", 30, ["linter", "file-reader"])

        tg.start_soon(join)
        await until(lambda: has_progress(bus, "0/2 received"), what="the join's first step")
        await bus.update_agent("linter", status="dead", reason="exited with code 1")
        await messages.ask(bus, "file-reader", "docs/ or the wiki?")
    r = got["r"]
    assert r.status == "needs_input"
    assert [(t.name, t.status, t.reason) for t in r.results] == [
        ("linter", "dead", "exited with code 1"),
        ("file-reader", "needs_input", None),
    ]


async def test_a_question_on_its_record_before_it_is_in_the_inbox_is_waited_for_and_taken_whole(bus, monkeypatch):
    """An asker marks its record, then delivers the question. A join that sees the record
    first waits for the question (a second at most), and returns it whole and taken, not
    the record's 200-character line with the question left in the inbox."""
    await crew(bus)
    question = "may I push to main? " * 20  # longer than the record's line
    gate = anyio.Event()
    deliver = messages._deliver

    async def held(bus, item, me):
        await gate.wait()
        return await deliver(bus, item, me)

    monkeypatch.setattr(messages, "_deliver", held)

    async def waiting_for_it() -> bool:
        return any("linter asked (the question on its way)" in w.progress for w in await bus.list_waits())

    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 30, ["linter", "test-runner"])
        await until(lambda: has_waits(bus, 1), 15, "the join to be held")
        tg.start_soon(messages.ask, bus, "linter", question, "orchestrator")
        await until(waiting_for_it, 15, "the join to see the question on the linter's record, and wait for it")
        gate.set()
        r = await bg.result("fan")
    assert r.status == "needs_input"
    assert [(e.agent_id, e.status, e.message) for e in r.results] == [
        ("linter", "needs_input", question),
        ("test-runner", "running", None),
    ]
    assert [i.body for i in await bus.peek("orchestrator")] == []  # taken with the answer
