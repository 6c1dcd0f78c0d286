"""A conversation's supervisor side (core/turns.py) with an agent whose turns are short: the
stand-in that speaks Claude Code's stream-json (tests/talkagent.py) answers at once, so a turn
may start and end before the supervisor looks. Each tell is still answered with its turn, and
the transcript keeps each told message before what the agent answered to it."""

from __future__ import annotations

import pytest

from wavewait.core import admission, conversation, transcript

from conftest import until
from talktools import start_talker

pytestmark = pytest.mark.anyio


async def test_tells_to_an_agent_that_answers_at_once_are_answered_in_order_with_their_turns(bus, tmp_path):
    a = await start_talker(bus, tmp_path, "talky", "hello there")
    try:
        await until(lambda: _status(bus, a.id, "idle"), 30, "the prompt's turn to end")
        said = await conversation.tell(bus, a.id, "second", by="orchestrator")
        assert (said["told"], said["turn"]) == ("next_turn", 2)
        said = await conversation.tell(bus, a.id, "third", by="orchestrator")
        assert (said["told"], said["turn"]) == ("next_turn", 3)
        await until(lambda: _status(bus, a.id, "idle", turn=3), 30, "the third turn to end")
        lines = [transcript.line(transcript.entry_view(i)) for i in await transcript.read(bus, a.id)]
        for n, text in (
            (1, "prompt: hello there"),
            (2, "told by orchestrator: second"),
            (3, "told by orchestrator: third"),
        ):
            told = lines.index(f"[{n}] {text}")
            answer = lines.index(f"[{n}] agent: You said: {text.split(': ', 1)[1]}")
            assert told < lines.index(f"[{n}] · turn {n} started") < answer, lines
    finally:
        await admission.kill(bus, await bus.get_agent(a.id), by="orchestrator")


async def test_an_interrupt_ends_a_long_turn_and_the_next_tell_starts_the_next(bus, tmp_path):
    a = await start_talker(bus, tmp_path, "slow", "work SLOW on this")
    try:
        await until(lambda: _status(bus, a.id, "running", turn=1), 30, "the long turn to run")
        said = await conversation.interrupt_turn(bus, a.id, by="orchestrator")
        assert (said["interrupted"], said["turn"]) == (True, 1)
        assert (await bus.get_agent(a.id)).status == "idle"
        said = await conversation.tell(bus, a.id, "now quickly", by="orchestrator")
        assert (said["told"], said["turn"]) == ("next_turn", 2)
        kinds = [(v["kind"], v["text"]) for v in map(transcript.entry_view, await transcript.read(bus, a.id))]
        assert ("turn", "turn 1 interrupted") in kinds and ("note", "interrupted by orchestrator") in kinds
    finally:
        await admission.kill(bus, await bus.get_agent(a.id), by="orchestrator")


async def _status(bus, agent_id: str, status: str, turn: int | None = None) -> bool:
    a = await bus.get_agent(agent_id)
    return a.status == status and (turn is None or a.turn == turn)


async def test_a_tell_from_another_host_reaches_the_flights_supervisor_over_postgresql(tmp_path, monkeypatch):
    """Two hosts on one PostgreSQL bus: the flight runs on host-a (its supervisor there), the
    tell is given on host-b. It travels on the bus; host-a's supervisor takes it; the answer and
    the conversation come back over the bus."""
    from pg.pgtools import pg_bus

    async with pg_bus() as bus:
        monkeypatch.setenv("WAVEWAIT_HOST", "host-a")  # the spawn and its supervisor
        a = await start_talker(bus, tmp_path, "far", "hello")
        try:
            await until(lambda: _status(bus, a.id, "idle"), 30, "the prompt's turn to end")
            monkeypatch.setenv("WAVEWAIT_HOST", "host-b")  # the teller, elsewhere
            said = await conversation.tell(bus, a.id, "from afar", by="orchestrator")
            assert (said["told"], said["turn"]) == ("next_turn", 2)
            await until(lambda: _status(bus, a.id, "idle", turn=2), 30, "the told turn to end")
            lines = [transcript.line(transcript.entry_view(i)) for i in await transcript.read(bus, a.id)]
            assert "[2] agent: You said: from afar" in lines, lines
        finally:
            monkeypatch.setenv("WAVEWAIT_HOST", "host-a")
            await admission.kill(bus, await bus.get_agent(a.id), by="orchestrator")
