"""A flight that asks a question needs input until it is answered; the answer reaches it."""

from __future__ import annotations

import anyio
import pytest

from wavewait.core import agents, messages, wait
from wavewait.core.errors import BadInput

from conftest import until
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
