"""A join's own wakes (docs/architecture.md, "Keys"): a check that ends and a folder that
changes wake the wait with a key of their own, so its step reads the verdicts or scans the
files alone, not every target it still waits on and the whole inbox. (They woke it as
"anything may have changed": a join over 10,000 flights with a check re-read every waiting
flight's record per verdict.)"""

from __future__ import annotations

import anyio
import pytest

from wavewait.core import messages, wait
from wavewait.core.bus.keys import CHECKS_KEY, FILES_KEY, arrival_key, inbox_key
from wavewait.core.watch import Fanout, Keyed

from conftest import has_progress, has_waits, push_timers_out, register_crew, until

pytestmark = pytest.mark.anyio

CREW = tuple(f"f{i:02d}" for i in range(20))


async def test_a_keyed_poke_is_noted_as_its_key_and_keeps_the_senders_known():
    fanout = Fanout()
    box = inbox_key("orch")
    sub = fanout.add(Keyed(fanout, [box], routes={arrival_key("orch", "a"): box}))
    fanout.dispatch([arrival_key("orch", "a")])
    sub.poke(CHECKS_KEY)
    sub.poke(FILES_KEY)
    await until(lambda: sub._event.is_set(), what="the wake")
    for _ in range(5):
        await anyio.sleep(0)  # the pokes are queued on the loop: let them land
    assert sub.changed() == {box, CHECKS_KEY, FILES_KEY} and sub.arrivals() == {"a"}
    sub.poke()  # without a key: anything may have changed
    for _ in range(5):
        await anyio.sleep(0)
    assert sub.changed() is None


async def test_a_check_verdict_does_not_reread_the_targets_still_waited_on(bus, tmp_path, monkeypatch):
    push_timers_out(monkeypatch)  # only the bus and the join's own pokes wake it
    await register_crew(bus, *CREW)
    for name in CREW:
        agent = await bus.get_agent(name)
        await bus.put_agent(agent.model_copy(update={"cwd": str(tmp_path)}))
    read: list[list[str]] = []
    real = bus.get_agents

    async def counted(ids, *args, **kwargs):
        read.append(list(ids))
        return await real(ids, *args, **kwargs)

    monkeypatch.setattr(bus, "get_agents", counted)
    join = wait.Join(check="true", files=[wait.FilesTarget(glob=str(tmp_path / "*.whl"))])
    got: dict[str, object] = {}

    async def waiting() -> None:
        got["r"] = await wait.wait_fan_in(bus, "orchestrator", 30, list(CREW), join=join)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiting)
        await until(lambda: has_waits(bus, 1), what="the join on the bus")
        await until(lambda: has_progress(bus, "met 0 / need 21"), what="the first step")
        read.clear()
        await messages.send(bus, "f00", "orchestrator", "report of f00")
        await until(lambda: has_progress(bus, "met 1 / need 21"), what="f00's check passed")
        (tmp_path / "pkg.whl").touch()
        await until(lambda: has_progress(bus, "met 2 / need 21"), what="the file target met")
        # the 19 flights that did not report were never read again: only a sender's record is
        assert all(len(ids) <= 1 for ids in read), read
        for name in CREW[1:]:
            await messages.send(bus, name, "orchestrator", f"report of {name}")
    assert got["r"].status == "complete" and got["r"].met == 21, got["r"]


async def test_a_verdict_that_decides_the_join_wakes_it_at_once_and_the_others_are_gathered(bus, tmp_path, monkeypatch):
    """Verdicts that do not decide the join wait for the next step (a report's), so a burst of
    reports steps once each, not twice; one that decides it (here the second pass of `need
    2`) wakes the wait at once. With the gathering wake an hour away, the join still returns."""
    push_timers_out(monkeypatch)
    monkeypatch.setattr(wait.join_checks, "GATHER", 3600.0)
    crew = CREW[:3]
    await register_crew(bus, *crew)
    for name in crew:
        agent = await bus.get_agent(name)
        await bus.put_agent(agent.model_copy(update={"cwd": str(tmp_path)}))
    got: dict[str, object] = {}

    async def waiting() -> None:
        got["r"] = await wait.wait_fan_in(bus, "orchestrator", 60, list(crew), join=wait.Join(check="true", need=2))

    with anyio.fail_after(50):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiting)
            await until(lambda: has_progress(bus, "met 0 / need 2"), what="the first step")
            await messages.send(bus, "f00", "orchestrator", "report of f00")
            # its verdict does not decide the join: read by the next step (a due record write may bring it)
            await until(lambda: reported_taken(bus, "1/3 received"), what="f00's report taken")
            await messages.send(bus, "f01", "orchestrator", "report of f01")
    assert got["r"].status == "complete" and got["r"].met == 2, got["r"]


async def reported_taken(bus, words: str) -> bool:
    return any(words in w.progress for w in await bus.list_waits())
