"""Typed events taken by filter, system events kept bounded, and file signals by glob."""

from __future__ import annotations

import anyio
import pytest

from wavewait.core import messages, wait
from wavewait.core.errors import BadInput
from wavewait.core.ids import new_id
from wavewait.core.model import SYSTEM_EVENTS_KEPT, Item

from conftest import Background, until
from coretools import crew, waits_of

pytestmark = pytest.mark.anyio


async def test_a_type_filter_takes_only_that_type_and_leaves_the_others_queued_in_order(bus):
    await crew(bus)
    await messages.send(bus, "file-reader", "orchestrator", "hello")
    await messages.notify_completion(bus, "test-runner", status="error", message="2 failed", changes=["src/a.py"])
    await messages.send(bus, "linter", "orchestrator", "question?", type="question", data={"question_id": "q1"})
    done = await wait.wait_event(bus, "orchestrator", 0, ["worker_complete"])
    assert done.to_json() | {"event_id": None} == {
        "event_id": None,
        "type": "worker_complete",
        "worker_id": "test-runner",
        "status": "error",
        "changes": ["src/a.py"],
        "message": "2 failed",
    }
    q = await wait.wait_event(bus, "orchestrator", 0, ["question"])
    assert (q.model_extra["question_id"], q.model_extra["body"]) == ("q1", "question?")
    assert (await wait.wait_event(bus, "orchestrator", 0, ["question"])).type == "timeout"
    rest = await wait.wait_event(bus, "orchestrator", 0)
    assert (rest.type, rest.model_extra["body"]) == ("message", "hello")


async def test_a_typed_wait_wakes_for_its_type_and_ignores_others(bus):
    await crew(bus)
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("ev", wait.wait_event, bus, "orchestrator", 60, ["worker_complete"])
        await until(lambda: waits_of(bus, "event"), what="the wait to register")
        await messages.send(bus, "linter", "orchestrator", "not for this wait")
        await messages.notify_completion(bus, "linter", status="success", message="clean")
        r = await bg.result("ev")
    assert r.type == "worker_complete" and r.model_extra["message"] == "clean"
    assert [i.body for i in await bus.peek("orchestrator")] == ["not for this wait"]


async def test_system_events_are_kept_up_to_1000_oldest_dropped_and_wait_never_takes_them(bus):
    await crew(bus)
    await messages.send(bus, "linter", "orchestrator", "a message among the events")
    for i in range(SYSTEM_EVENTS_KEPT + 5):
        await bus.deliver(Item(id=new_id(), type="agent_dead", to="orchestrator", sender="linter", body=f"death {i}"))
    items = await bus.peek("orchestrator")
    system = [i.body for i in items if i.type == "agent_dead"]
    assert system == [f"death {i}" for i in range(5, SYSTEM_EVENTS_KEPT + 5)]
    assert [i.body for i in items if i.type == "message"] == ["a message among the events"]
    nxt = await wait.wait_next(bus, "orchestrator", 0)
    assert nxt.message == "a message among the events"
    assert (await wait.wait_next(bus, "orchestrator", 0)).status == "timeout"
    first = await wait.wait_event(bus, "orchestrator", 0, ["agent_dead"])
    assert first.model_extra["body"] == "death 5"


@pytest.mark.parametrize("types", [[], "message", ["Bad Type"], ["../x"]], ids=repr)
async def test_bad_event_types_are_validation_errors(bus, types):
    await crew(bus)
    with pytest.raises(BadInput, match="types"):
        await wait.wait_event(bus, "orchestrator", 0, types)


# ----------------------------------------------------------------------------- signals
async def test_a_signal_already_present_matches_immediately_sorted_and_absolute(bus, tmp_path):
    flights = tmp_path / "wave-7" / "flights"
    flights.mkdir(parents=True)
    for n in ("b", "a", "c"):
        (flights / f"{n}.done").touch()
    (flights / "a.log").touch()
    r = await wait.wait_signal(bus, "orchestrator", str(flights / "*.done"), timeout=60, min_count=2)
    assert r.matched == [str(flights / f"{n}.done") for n in "abc"]
    assert r.outcome() == "satisfied" and not r.timed_out


async def test_a_signal_that_appears_mid_wait_wakes_it_even_in_a_folder_made_later(bus, tmp_path):
    flights = tmp_path / "wave-8" / "flights"
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("sig", wait.wait_signal, bus, "orchestrator", str(flights / "*.done"), timeout=3600, min_count=2)
        await until(lambda: waits_of(bus, "signal"), what="the wait to register")
        flights.mkdir(parents=True)  # the folder did not exist when the wait began
        done = await anyio.run_process(
            ["sh", "-c", f"cd {flights} && echo x > one.done && echo y > notes.txt && echo z > two.done"]
        )
        assert done.returncode == 0
        r = await bg.result("sig", 20)
    assert r.matched == [str(flights / "one.done"), str(flights / "two.done")]


async def test_a_signal_timeout_returns_the_partial_matches(bus, tmp_path):
    (tmp_path / "x.done").touch()
    r = await wait.wait_signal(bus, "orchestrator", str(tmp_path / "*.done"), timeout=0.2, min_count=3)
    assert r.timed_out and r.partial_matches == [str(tmp_path / "x.done")]
    assert r.to_json()["timed_out"] is True and "matched" not in r.to_json()


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"min_count": 0}, "min_count"),
        ({"min_count": True}, "min_count"),
        ({"min_count": 1.5}, "min_count"),
        ({"pattern": "relative/*.done"}, "absolute"),
    ],
)
async def test_bad_signal_arguments_are_validation_errors(bus, tmp_path, kwargs, match):
    kwargs = dict(kwargs)  # the parameters are shared by every backend's run: never mutate them
    pattern = kwargs.pop("pattern", str(tmp_path / "*.done"))
    with pytest.raises(BadInput, match=match):
        await wait.wait_signal(bus, "orchestrator", pattern, timeout=1, **kwargs)
