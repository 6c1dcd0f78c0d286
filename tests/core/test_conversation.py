"""`tell` refuses what it cannot do, saying why, and leaves nothing behind (docs/conversations.md).
Records only, on a real bus (both): each case is a flight's record as the bus would hold it."""

from __future__ import annotations

import pytest

from wavewait.core import conversation, transcript, waves
from wavewait.core.errors import BadInput, WavewaitError
from wavewait.core.model import Agent, FlightBudget, Usage, WorktreeInfo, now

pytestmark = pytest.mark.anyio


def flight(name: str, **fields: object) -> Agent:
    base: dict[str, object] = {
        "id": f"{name}0000000000000000000000000000"[:32],
        "name": name,
        "status": "idle",
        "conversation": "claude",
        "session_id": "0b0b0b0b-0000-0000-0000-000000000000",
        "turn": 1,
        "host": "this-host-is-not-here",
    }
    return Agent.model_validate(base | fields)


CASES = [
    (flight("plain", conversation=None, host=None), BadInput, "`send` puts a message in its inbox instead"),
    (flight("sealed", status="closed", closed_for_good=True), BadInput, "closed with `close`"),
    (flight("waiting", status="queued", host=None), BadInput, "is queued: it has not started"),
    (flight("nosession", status="dead", session_id=None, host=None), BadInput, "never started a session"),
    (flight("elsewhere", status="closed"), BadInput, "tell it from that host"),
    (
        flight("lapsed", lease_expires_at=now() - 60, supervisor_pid=1),
        WavewaitError,
        "no supervisor runs lapsed on host this-host-is-not-here (its lease ran out)",
    ),
    (
        flight("spent", host=None, budget=FlightBudget(tokens=100), usage=Usage(input_tokens=90, output_tokens=20)),
        BadInput,
        "takes no more turns: budget: its own cap of 100 tokens is spent",
    ),
]


@pytest.mark.parametrize(("record", "error", "said"), CASES, ids=[c[0].name for c in CASES])
async def test_a_tell_that_cannot_be_given_is_refused_and_nothing_is_left_for_a_supervisor(bus, record, error, said):
    if record.host is None:
        from wavewait.core.proc import hostname

        record = record.model_copy(update={"host": hostname()})
    await bus.put_agent(record)
    with pytest.raises(error) as e:
        await conversation.tell(bus, record.id, "hello", by="orchestrator")
    assert said in str(e.value)
    assert await bus.pending(transcript.tells_inbox(record.id)) == []
    after = await bus.get_agent(record.id)
    assert after is not None and (after.status, after.turn) == (record.status, record.turn)


async def test_a_pruned_worktree_cannot_be_resumed_in_and_its_branch_is_named(bus, tmp_path):
    from wavewait.core.proc import hostname

    gone = WorktreeInfo(path=str(tmp_path / "gone"), branch="wavewait/w/x", base="0" * 40, repo=str(tmp_path))
    record = flight("pruned", status="closed", host=hostname(), worktree=gone)
    await bus.put_agent(record)
    with pytest.raises(BadInput, match=r"is gone .*its branch wavewait/w/x keeps its work"):
        await conversation.tell(bus, record.id, "hello", by="orchestrator")
    assert (await bus.get_agent(record.id)).status == "closed"


async def test_a_wave_past_its_budget_takes_no_more_turns(bus):
    from wavewait.core.proc import hostname

    await waves.set_settings(bus, "w1", budget_tokens=50)
    record = flight("wavey", wave="w1", host=hostname(), usage=Usage(input_tokens=40, output_tokens=20))
    await bus.put_agent(record)
    with pytest.raises(BadInput, match="wave 'w1' has spent its budget of 50 tokens"):
        await conversation.tell(bus, record.id, "hello", by="orchestrator")


async def test_a_transcript_keeps_its_last_entries_and_pages_back_by_seq(bus):
    from wavewait.core.talk import Entry

    a = "talk0000000000000000000000000000"
    await transcript.append(bus, a, [Entry("agent", f"line {i}", 1) for i in range(30)])
    assert await transcript.trim(bus, a, keep=10) == 20
    kept = await transcript.read(bus, a, tail=100)
    assert [i.body for i in kept] == [f"line {i}" for i in range(20, 30)]
    page = await transcript.read(bus, a, tail=4, before=kept[5].seq)
    assert [i.body for i in page] == ["line 21", "line 22", "line 23", "line 24"]
    # a follower reads only what is past its last seq (the bus's peek after a seq)
    assert [i.body for i in await bus.peek(transcript.talk_inbox(a), kept[-2].seq)] == ["line 29"]
    assert await transcript.trim(bus, a, keep=10) == 0  # nothing more to drop
    assert [w for w in await bus.list_waits() if w.tool == "transcript_trim"] == []  # its short wait ended
