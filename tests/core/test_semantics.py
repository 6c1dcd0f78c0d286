"""The semantics every wait shares (core/wait/engine.py's rules): one test (or more) per rule, on a real bus."""

from __future__ import annotations

import math
import signal as signals
import time
from datetime import UTC

import anyio
import pytest

from wavewait.core import messages, wait
from wavewait.core.admission import close
from wavewait.core.agents import mark_dead
from wavewait.core.errors import BadInput, BusError
from wavewait.core.proc import hostname

from conftest import Background, env_for, has_progress, has_waits, push_timers_out, until, wavewait_cmd
from coretools import crew, run_actor, waits_of

pytestmark = pytest.mark.anyio


# 1 ----------------------------------------------------------------- subscribe before reading
async def test_a_change_between_subscribe_and_the_first_read_is_not_missed(bus, monkeypatch):
    await crew(bus)
    push_timers_out(monkeypatch)
    real_register = bus.register_wait
    reads = 0

    async def first_read_then_a_message_lands(record, **kwargs):
        nonlocal reads
        reads += 1
        got = await real_register(record, **kwargs)  # a next-message wait's first read: its claim
        assert kwargs.get("claim_from") == "orchestrator" and got == []
        await messages.send(bus, "file-reader", "orchestrator", "landed in the gap")
        return got

    monkeypatch.setattr(bus, "register_wait", first_read_then_a_message_lands)
    with anyio.fail_after(20):
        r = await wait.wait_next(bus, "orchestrator", 3600)
    assert (r.status, r.message) == ("received", "landed in the gap")
    assert reads == 1


# 2 ----------------------------------------------------------------- event-driven, not polled
async def test_a_wait_wakes_on_a_message_from_another_process_with_every_timer_an_hour_away(bus, monkeypatch):
    await crew(bus)
    push_timers_out(monkeypatch)
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("next", wait.wait_next, bus, "orchestrator", 3600)
        await until(lambda: waits_of(bus, "next"), what="the wait to register")
        await run_actor(bus, "send", "orchestrator", "test-runner", "1")
        r = await bg.result("next", 20)
    assert (r.status, r.sender, r.message) == ("received", "test-runner", "test-runner-0")


async def test_a_fan_in_wakes_on_an_agent_change_with_every_timer_an_hour_away(bus, monkeypatch):
    await crew(bus)
    push_timers_out(monkeypatch)
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 3600, ["file-reader", "linter"])
        await until(lambda: waits_of(bus, "fan_in"), what="the wait to register")
        await close(bus, await bus.get_agent("linter"))
        await mark_dead(bus, "file-reader", "crashed")
        r = await bg.result("fan", 20)
    assert r.status == "complete"
    assert [(t.agent_id, t.status) for t in r.results] == [("file-reader", "dead"), ("linter", "closed")]


# 3 ----------------------------------------------------------------- early termination
async def test_fan_in_returns_early_when_every_target_received_idled_or_died(bus):
    await crew(bus)
    await messages.send(bus, "file-reader", "orchestrator", "found 3 issues")
    await messages.notify_completion(bus, "test-runner", status="success", message="green")
    taken = await wait.wait_event(bus, "orchestrator", 0, ["worker_complete"])
    assert taken.type == "worker_complete"  # the completion is taken elsewhere; the runner is idle
    await mark_dead(bus, "linter", "segfault")
    with anyio.fail_after(10):
        r = await wait.wait_fan_in(bus, "orchestrator", 60, ["file-reader", "test-runner", "linter"])
    assert r.status == "complete"
    assert [(t.status, t.message) for t in r.results] == [
        ("received", "found 3 issues"),
        ("idle", None),
        ("dead", None),
    ]
    assert r.results[2].reason == "segfault"


# 4 ----------------------------------------------------------------- timeout is a normal result
async def test_a_timeout_returns_every_target_with_its_status_and_what_was_received(bus):
    await crew(bus)
    await messages.send(bus, "file-reader", "orchestrator", "half done")
    r = await wait.wait_fan_in(bus, "orchestrator", 0.3, ["file-reader", "test-runner"])
    assert r.status == "timeout" and r.outcome() == "timeout"
    assert [(t.agent_id, t.status, t.message) for t in r.results] == [
        ("file-reader", "received", "half done"),
        ("test-runner", "running", None),
    ]
    assert r.elapsed_sec >= 0.3


async def test_every_kind_of_wait_times_out_normally(bus, tmp_path):
    await crew(bus)
    (tmp_path / "a.done").touch()
    assert (await wait.wait_next(bus, "orchestrator", 0.1)).status == "timeout"
    assert (await wait.wait_event(bus, "orchestrator", 0.1)).type == "timeout"
    s = await wait.wait_signal(bus, "orchestrator", str(tmp_path / "*.done"), timeout=0.1, min_count=2)
    assert s.timed_out and s.partial_matches == [str(tmp_path / "a.done")] and s.matched is None
    a = await wait.wait_agent(
        bus,
        "orchestrator",
        id="w1",
        agent_id="file-reader",
        kind="agent-idle",
        description="reader done",
        timeout_at=_iso_in(0.1),
    )
    assert a.resolution.status == "timed_out" and a.resolution.pending == ["file-reader"]
    assert await bus.list_waits() == []


def _iso_in(seconds: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(time.time() + seconds, UTC).isoformat()


# 5 ----------------------------------------------------------------- interrupt
async def test_an_interrupt_from_another_process_returns_at_once_with_the_partial_state(bus):
    await crew(bus)
    await messages.send(bus, "file-reader", "orchestrator", "part one")
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 3600, ["file-reader", "test-runner"])

        await until(lambda: has_progress(bus, "1/2"), what="the wait to take the first message")
        (record,) = await waits_of(bus, "fan_in")
        await run_actor(bus, "interrupt", record.id)
        r = await bg.result("fan")
    assert r.status == "interrupted" and r.outcome() == "interrupted"
    assert [(t.status, t.message) for t in r.results] == [("received", "part one"), ("running", None)]
    assert await bus.pending("orchestrator") == []  # what it returned with is taken, not re-queued
    assert await bus.list_waits() == []


async def test_control_interrupt_in_process_returns_the_partial_state(bus, tmp_path):
    await crew(bus)
    (tmp_path / "one.done").touch()
    control = wait.Control()
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start(
            "sig",
            wait.wait_signal,
            bus,
            "orchestrator",
            str(tmp_path / "*.done"),
            timeout=3600,
            min_count=3,
            control=control,
        )
        await until(lambda: waits_of(bus, "signal"), what="the wait to register")
        control.interrupt()
        r = await bg.result("sig")
    assert r.interrupted and r.partial_matches == [str(tmp_path / "one.done")]
    assert r.outcome() == "interrupted"


async def test_an_interrupt_flag_set_before_the_wait_reads_still_interrupts_it(bus):
    await crew(bus)
    control = wait.Control()
    control.interrupt()
    with anyio.fail_after(10):
        r = await wait.wait_next(bus, "orchestrator", 3600, control=control)
    assert r.status == "interrupted"


# 6 ----------------------------------------------------------------- exactly-once
async def test_two_racing_waiters_each_get_one_message_and_the_loser_keeps_waiting(bus):
    await crew(bus)
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("a", wait.wait_next, bus, "orchestrator", 3600)
        bg.start("b", wait.wait_next, bus, "orchestrator", 3600)
        await until(lambda: has_waits(bus, 2, "next"), what="both waits to register")
        await messages.send(bus, "file-reader", "orchestrator", "first")
        await until(lambda: len(bg.results) == 1, what="one waiter to win")
        await until(lambda: has_waits(bus, 1, "next"), what="the loser to still be waiting")
        await messages.send(bus, "file-reader", "orchestrator", "second")
        await until(lambda: len(bg.results) == 2, what="the loser to get the next one")
    assert sorted(r.message for r in bg.results.values()) == ["first", "second"]
    assert await bus.pending("orchestrator") == []


async def test_a_cancelled_wait_gives_its_claims_back_in_their_original_order(bus):
    await crew(bus)
    await messages.send(bus, "file-reader", "orchestrator", "m1 from reader")
    await messages.send(bus, "linter", "orchestrator", "m2 from linter")
    await messages.send(bus, "test-runner", "orchestrator", "m3 from runner")
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 3600, ["file-reader", "test-runner", "orchestrator"])

        await until(lambda: has_progress(bus, "2/3"), what="the wait to claim two messages")
        assert [r.sender for r in await bus.pending("orchestrator")] == ["linter"]
        tg.cancel_scope.cancel()
    assert "fan" not in bg.results
    assert [r.sender for r in await bus.pending("orchestrator")] == ["file-reader", "linter", "test-runner"]
    assert await bus.list_waits() == []
    got = [(await wait.wait_next(bus, "orchestrator", 0)).message for _ in range(3)]
    assert got == ["m1 from reader", "m2 from linter", "m3 from runner"]


async def test_a_sigkilled_waiter_gives_its_claims_back_in_their_original_order(bus):
    await crew(bus)
    await messages.send(bus, "file-reader", "orchestrator", "m1 from reader")
    await messages.send(bus, "linter", "orchestrator", "m2 from linter")
    await messages.send(bus, "test-runner", "orchestrator", "m3 from runner")
    proc = await anyio.open_process(
        wavewait_cmd("wait", "3600", "file-reader", "test-runner", "orchestrator"), env=env_for(bus)
    )
    try:
        await until(lambda: has_progress(bus, "2/3"), 20, what="the waiter process to claim two messages")
        assert [r.sender for r in await bus.pending("orchestrator")] == ["linter"]
        proc.send_signal(signals.SIGKILL)
        with anyio.fail_after(10):
            assert await proc.wait() == -signals.SIGKILL
    finally:
        await proc.aclose()
    got = [(await wait.wait_next(bus, "orchestrator", 0)).message for _ in range(3)]
    assert got == ["m1 from reader", "m2 from linter", "m3 from runner"]
    assert (await wait.wait_next(bus, "orchestrator", 0)).status == "timeout"


# 7 ----------------------------------------------------------------- timeout 0, validation
async def test_timeout_zero_is_one_full_sweep_without_blocking(bus):
    await crew(bus)
    ended = await anyio.open_process(["true"])
    assert await ended.wait() == 0  # reaped: its pid names no process now
    await bus.update_agent("linter", pid=ended.pid, host=hostname())
    await messages.send(bus, "file-reader", "orchestrator", "ready")
    with anyio.fail_after(10):
        r = await wait.wait_fan_in(bus, "orchestrator", 0, ["file-reader", "test-runner", "linter"])
        n = await wait.wait_next(bus, "orchestrator", 0)
    assert r.status == "timeout"
    # the instant check ran the liveness sweep too: the vanished pid is dead now
    assert [t.status for t in r.results] == ["received", "running", "dead"]
    assert n.status == "timeout"


BAD_TIMEOUTS = [-1, -0.001, math.nan, math.inf, "abc", "nan", None, True, [], "-3"]


@pytest.mark.one_bus  # argument checks: before the bus
@pytest.mark.parametrize("bad", BAD_TIMEOUTS, ids=repr)
async def test_a_bad_timeout_is_a_validation_error_that_changes_nothing(bus, tmp_path, bad):
    await crew(bus)
    calls = [
        lambda: wait.wait_next(bus, "orchestrator", bad),
        lambda: wait.wait_fan_in(bus, "orchestrator", bad, ["file-reader"]),
        lambda: wait.wait_event(bus, "orchestrator", bad),
        lambda: wait.wait_signal(bus, "orchestrator", str(tmp_path / "*.x"), timeout=bad),
    ]
    for call in calls:
        with pytest.raises(BadInput, match="timeout"):
            await call()
    assert await bus.list_waits() == []


def test_check_timeout_accepts_numbers_and_numeric_strings():
    assert wait.check_timeout(0) == 0.0
    assert wait.check_timeout("2.5") == 2.5
    assert wait.check_timeout(7) == 7.0


# 8 ----------------------------------------------------------------- registered while running
async def test_every_kind_of_wait_is_registered_while_it_runs_and_gone_after(bus, tmp_path):
    await crew(bus)
    pattern = str(tmp_path / "*.done")
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("next", wait.wait_next, bus, "orchestrator", 3600)
        bg.start("fan_in", wait.wait_fan_in, bus, "orchestrator", 3600, ["file-reader", "linter"])
        bg.start("event", wait.wait_event, bus, "orchestrator", 3600, ["question"])
        bg.start("signal", wait.wait_signal, bus, "orchestrator", pattern, timeout=3600)
        bg.start(
            "agent",
            wait.wait_agent,
            bus,
            "orchestrator",
            id="w-reg",
            agent_id="test-runner",
            kind="agent-closed",
            description="runner closes",
        )

        await until(lambda: has_waits(bus, 5), what="five waits on the bus")
        records = {w.kind: w for w in await bus.list_waits()}
        assert set(records) == {"next", "fan_in", "event", "signal", "agent"}
        assert records["fan_in"].targets == ["file-reader", "linter"]
        assert records["fan_in"].waiter == "orchestrator"
        assert records["fan_in"].deadline is not None and records["fan_in"].deadline > time.time()
        assert records["fan_in"].progress.startswith("0/2 received")
        assert records["signal"].targets == [pattern]
        assert records["agent"].targets == ["test-runner"] and records["agent"].deadline is None
        assert records["agent"].description == "runner closes"
        for record in records.values():
            assert await bus.interrupt(record.id)
        for key in records:
            await bg.result(key)
    assert await bus.list_waits() == []
    assert {k: r.outcome() for k, r in bg.results.items()} == dict.fromkeys(records, "interrupted")


async def test_interrupting_an_unknown_wait_says_so(bus):
    assert await bus.interrupt("0123456789abcdef") is False


# 9 ----------------------------------------------------------------- progress
async def test_the_progress_callback_reports_each_change_with_increasing_elapsed_time(bus):
    """Each change until the result is decided; the result itself says the rest (a report sent
    just before it could reach a host's handler after it)."""
    await crew(bus)
    seen = []

    async def on_progress(p: wait.Progress) -> None:
        seen.append(p)

    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start(
            "fan", wait.wait_fan_in, bus, "orchestrator", 600, ["file-reader", "test-runner"], on_progress=on_progress
        )
        await until(lambda: len(seen) == 1, what="the first progress report")
        await messages.send(bus, "file-reader", "orchestrator", "found 3 issues")
        await until(lambda: len(seen) == 2, what="a report after the first message")
        await messages.send(bus, "test-runner", "orchestrator", "green")
        r = await bg.result("fan")
    assert r.status == "complete"
    assert [p.message for p in seen] == [
        "0/2 received · waiting on file-reader, test-runner",
        "1/2 received: file-reader · waiting on test-runner",
    ]
    assert all(p.total == 600 for p in seen)
    assert [p.elapsed for p in seen] == sorted(p.elapsed for p in seen)
    assert (await waits_of(bus)) == []


async def test_a_slow_write_of_the_progress_line_does_not_hold_the_wait(bus, monkeypatch):
    """The line goes to the wait's record beside the steps (on PostgreSQL the record of a wait
    on 100,000 flights is rewritten whole, 150 ms): a write that never ends does not keep the
    result from coming, and it is given up with the wait."""
    await crew(bus)
    push_timers_out(monkeypatch)
    writing, stop = anyio.Event(), anyio.Event()
    written: list[str] = []

    async def stuck(wait_id: str, progress: str) -> None:
        writing.set()
        try:
            await stop.wait()
        finally:
            written.append(progress)

    monkeypatch.setattr(bus, "update_wait", stuck)
    flights = ["file-reader", "test-runner"]
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 600, flights)
        await until(lambda: has_waits(bus, 1, "fan_in"), what="the fan-in to register")
        await messages.send(bus, "file-reader", "orchestrator", "found 3 issues")  # a new line to write
        with anyio.fail_after(10):
            await writing.wait()
        await messages.send(bus, "test-runner", "orchestrator", "green")
        r = await bg.result("fan", 10)
    assert r.status == "complete" and [t.message for t in r.results] == ["found 3 issues", "green"]
    await until(lambda: written == ["1/2 received: file-reader · waiting on test-runner"], what="the write given up")
    assert not stop.is_set()


async def test_a_failed_write_of_the_progress_line_ends_the_wait_with_its_error(bus, monkeypatch):
    await crew(bus)
    push_timers_out(monkeypatch)

    async def failing(wait_id: str, progress: str) -> None:
        raise BusError("the bus is gone")

    monkeypatch.setattr(bus, "update_wait", failing)
    await messages.send(bus, "file-reader", "orchestrator", "found 3 issues")  # a new line to write
    with anyio.fail_after(10), pytest.raises(BusError, match="the bus is gone"):
        await wait.wait_fan_in(bus, "orchestrator", 600, ["file-reader", "test-runner"])
    assert await bus.pending("orchestrator") != []  # the report went back to the inbox


async def test_a_plain_function_works_as_progress_callback(bus):
    await crew(bus)
    seen: list[str] = []
    await wait.wait_next(bus, "orchestrator", 0, on_progress=lambda p: seen.append(p.message))
    assert seen == ["no message yet"]
