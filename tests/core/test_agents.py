"""Fan-out and liveness: supervised spawn, deaths, leases, kill, close, wait_agent."""

from __future__ import annotations

import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from wavewait.core import admission, agents, messages, wait
from wavewait.core.errors import BadInput, DeadRecipient
from wavewait.core.proc import alive, pid_start

from conftest import PYTHON, Background, push_timers_out, until
from coretools import crew, waits_of

pytestmark = pytest.mark.anyio


async def status_of(bus, agent_id: str) -> str:
    return (await bus.get_agent(agent_id)).status


def is_dead(bus, agent_id: str):
    async def check() -> bool:
        return await status_of(bus, agent_id) == "dead"

    return check


async def test_spawn_records_pid_start_time_exit_code_and_log_and_sets_the_child_env(bus):
    await crew(bus)
    a = await admission.spawn(
        bus,
        "reporter",
        ["sh", "-c", 'echo "bus=$WAVEWAIT_BUS id=$WAVEWAIT_AGENT_ID parent=$WAVEWAIT_PARENT_ID"; exit 3'],
        parent_id="orchestrator",
        wave="wave-7",
    )
    assert a.pid and a.pid_start and a.supervisor_pid and a.wave == "wave-7"
    assert a.parent_id == "orchestrator" and len(a.id) == 32
    await until(is_dead(bus, a.id), what="the flight to be recorded dead")
    done = await bus.get_agent(a.id)
    said = f"bus={bus.url} id={a.id} parent=orchestrator"
    # the reason gives the exit code and the last lines the flight wrote
    assert done.exit_code == 3 and done.reason == f"exited with code 3; last output:\n{said}" and done.ended_at
    with open(done.log_path) as f:
        assert f.read().strip() == said
    event = await wait.wait_event(bus, "orchestrator", 10, ["agent_dead"])  # sent just after the status
    assert (event.type, event.model_extra["from"]) == ("agent_dead", a.id)


async def test_a_flight_that_reports_and_exits_cleanly_is_closed_not_dead(bus):
    await crew(bus)
    a = await admission.spawn(
        bus, "tidy", [PYTHON, "-m", "wavewait", "notify", "--message", "all done"], parent_id="orchestrator"
    )
    with anyio.fail_after(30):
        r = await wait.wait_agent(
            bus, "orchestrator", id="tidy-closed", agent_id=a.id, kind="agent-closed", description="tidy finishes"
        )
    assert r.resolution.status == "agent_closed"
    assert (await bus.get_agent(a.id)).exit_code == 0
    assert (await wait.wait_next(bus, "orchestrator", 0)).message == "all done"


async def test_a_flight_that_exits_cleanly_without_reporting_is_closed_not_dead(bus):
    """Dead means it died: a clean exit is closed, whatever it sent."""
    await crew(bus)
    a = await admission.spawn(bus, "quitter", ["true"], parent_id="orchestrator")
    with anyio.fail_after(15):
        r = await wait.wait_fan_in(bus, "orchestrator", 60, [a.id])
    assert [(t.status, t.reason) for t in r.results] == [("closed", "exited with code 0")]


async def test_a_spawned_flight_reaches_the_wavewait_that_spawned_it(bus):
    """Its directory first on PATH and WAVEWAIT_BIN set, whatever PATH the spawner had."""
    await crew(bus)
    env = {k: v for k, v in os.environ.items() if k != "PATH"} | {"PATH": "/usr/bin:/bin"}
    a = await admission.spawn(
        bus, "finder", ["sh", "-c", 'command -v wavewait; echo "$WAVEWAIT_BIN"'], parent_id="orchestrator", env=env
    )
    await until(lambda: closed(bus, a.id), what="the flight to end")
    program = os.path.join(os.path.dirname(sys.executable), "wavewait")
    assert await agents.read_output(bus, await bus.get_agent(a.id), 2) == [program, program]


async def closed(bus, agent_id: str) -> bool:
    a = await bus.get_agent(agent_id)
    return a is not None and a.status == "closed"


async def test_kill_on_a_flight_that_already_ended_keeps_its_word(bus):
    await crew(bus)
    a = await admission.spawn(bus, "quick", ["true"], parent_id="orchestrator")
    await until(lambda: closed(bus, a.id), what="the flight to end")
    after = await admission.kill(bus, a, by="orchestrator")
    assert after.status == "closed" and after.reason == "exited with code 0"
    assert "already ended" in (agents.kill_said(a, after) or "")


async def test_read_output_is_a_bounded_tail(bus):
    await crew(bus)
    a = await admission.spawn(bus, "talker", ["sh", "-c", "seq 1 3000"], parent_id="orchestrator")
    await until(lambda: closed(bus, a.id), what="the flight to end")
    a = await bus.get_agent(a.id)
    assert await agents.read_output(bus, a, 3) == ["2998", "2999", "3000"]
    assert len(await agents.read_output(bus, a, 1000)) == 1000
    for bad in (0, 1001, True, "5"):
        with pytest.raises(BadInput, match="lines"):
            await agents.read_output(bus, a, bad)


async def test_a_sigkilled_flight_makes_a_60s_fan_in_return_at_once_with_it_dead(bus, monkeypatch):
    await crew(bus)
    push_timers_out(monkeypatch)  # only the supervisor's record can wake the wait
    sleeper = await admission.spawn(bus, "sleeper", ["sleep", "60"], parent_id="orchestrator")
    await messages.send(bus, "file-reader", "orchestrator", "done early")
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 60, ["file-reader", sleeper.id])
        await until(lambda: waits_of(bus, "fan_in"), what="the fan-in to register")
        os.kill(sleeper.pid, signal.SIGKILL)
        r = await bg.result("fan", 15)
    assert r.status == "complete"
    assert [(t.status, t.reason) for t in r.results] == [("received", None), ("dead", "killed by SIGKILL")]


async def test_a_killed_process_group_is_found_dead_by_the_liveness_sweep(bus):
    await crew(bus)
    sleeper = await admission.spawn(bus, "sleeper", ["sleep", "60"], parent_id="orchestrator")
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 60, [sleeper.id])
        await until(lambda: waits_of(bus, "fan_in"), what="the fan-in to register")
        os.killpg(sleeper.supervisor_pid, signal.SIGKILL)  # the supervisor dies with it
        r = await bg.result("fan", 15)
    assert r.status == "complete"
    assert [(t.status, t.reason) for t in r.results] == [("dead", "process vanished")]
    assert agents.SWEEP_INTERVAL <= 1.0


async def test_a_flight_whose_supervisor_pid_was_taken_by_another_process_is_dead(bus):
    """Pids wrap within minutes on a busy machine: a supervisor that died with its flight, its
    pid now another process's (this one), is known by its start time, not taken for alive."""
    gone = await anyio.run_process(["sh", "-c", "echo $$"])
    pid = int(gone.stdout)  # a process that ended and was reaped
    me = os.getpid()
    await agents.register(bus, "reused", parent_id="orchestrator")
    await bus.update_agent("reused", pid=pid, pid_start="1", supervisor_pid=me, supervisor_start="1")
    assert alive(me) and not alive(me, "1")
    (dead,) = await admission.sweep(bus, [await bus.get_agent("reused")])
    assert (dead.status, dead.reason) == ("dead", "process vanished")
    live = await agents.register(bus, "recording", parent_id="orchestrator")  # its supervisor is still at it
    await bus.update_agent(live.id, pid=pid, pid_start="1", supervisor_pid=me, supervisor_start=pid_start(me))
    assert await admission.sweep(bus, [await bus.get_agent(live.id)]) == []


async def test_a_flight_started_by_a_process_that_ignores_term_and_int_gets_the_defaults(bus):
    """A queued flight is started by whoever runs the admission step: often another flight's
    supervisor, which ignores TERM and INT. Its command must not inherit that (an ignored
    signal stays ignored across exec), or a kill's TERM would do nothing."""
    await crew(bus)
    script = (
        "import asyncio, signal\n"
        "from wavewait.core import admission, agents\n"
        "from wavewait.core.bus import open_bus\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "async def main():\n"
        "    bus = await open_bus()\n"
        "    a = await admission.spawn(bus, 'sleeper', ['sleep', '60'], parent_id='orchestrator')\n"
        "    print(a.id)\n"
        "    await bus.close()\n"
        "asyncio.run(main())\n"
    )
    p = await anyio.run_process([PYTHON, "-c", script], env={**os.environ, "WAVEWAIT_BUS": bus.url})
    flight = await bus.get_agent(p.stdout.decode().strip())
    try:
        with open(f"/proc/{flight.pid}/status") as f:
            ignored = int(next(line for line in f if line.startswith("SigIgn:")).split()[1], 16)
        assert not ignored & (1 << (signal.SIGTERM - 1)) and not ignored & (1 << (signal.SIGINT - 1))
    finally:
        await admission.kill(bus, flight)
    await until(lambda: not alive(flight.pid, flight.pid_start), 10, "the flight's command to end")
    # its supervisor records the end on the bus: gone before the bus is (on PostgreSQL it
    # opened the bus again after the schema was dropped, and left the schema behind)
    ended = await bus.get_agent(flight.id)
    assert ended.supervisor_pid is not None
    await until(lambda: not alive(ended.supervisor_pid, ended.supervisor_start), 30, "the supervisor to end")


async def test_a_supervisor_that_fails_says_why_in_the_flights_log(file_bus, bus_dir):
    """Its stderr goes nowhere: a supervisor that cannot record the end (here its bus lost
    its locks folder, as when the bus is removed under a running flight) says so in the
    flight's log, where a person reading a 'process vanished' looks."""
    await crew(file_bus)
    flight = await admission.spawn(file_bus, "orphan", ["sleep", "60"], parent_id="orchestrator")

    async def supervising() -> bool:  # its own first write, after it opened the bus: the spawner's was the last before
        return (await file_bus.get_agent(flight.id)).updated_at > flight.updated_at

    await until(supervising, 30, "the supervisor to record the flight's pid")
    for lock in (bus_dir / "locks").iterdir():
        lock.unlink()
    (bus_dir / "locks").rmdir()
    os.kill(flight.pid, signal.SIGKILL)
    log = Path(flight.log_path)
    await until(
        lambda: "wavewait supervise: failed, its end is not recorded" in log.read_text(), 30, "the failure said"
    )
    await until(lambda: not alive(flight.supervisor_pid, flight.supervisor_start), 30, "the supervisor to end")


@pytest.mark.parametrize("wait_starts", ["before the death", "after the death"])
async def test_a_message_sent_before_death_stays_received(bus, wait_starts):
    await crew(bus)
    script = f'{PYTHON} -m wavewait send orchestrator "last words" && kill -9 $$'
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        if wait_starts == "before the death":
            flight = await admission.spawn(
                bus, "doomed", ["sh", "-c", f"read _ < /dev/null; {script}"], parent_id="orchestrator"
            )
            bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 60, [flight.id])
        else:
            flight = await admission.spawn(bus, "doomed", ["sh", "-c", script], parent_id="orchestrator")
            await until(is_dead(bus, flight.id), 30, "the flight to die")
            bg.start("fan", wait.wait_fan_in, bus, "orchestrator", 60, [flight.id])
        r = await bg.result("fan", 30)
    assert [(t.status, t.message) for t in r.results] == [("received", "last words")]
    await until(is_dead(bus, flight.id), 30, "the flight to be dead")


async def test_an_agent_whose_lease_runs_out_without_a_heartbeat_is_dead(bus):
    await crew(bus)
    await agents.register(bus, "remote", lease=0.3, parent_id="orchestrator")
    with anyio.fail_after(15):
        r = await wait.wait_agent(
            bus, "orchestrator", id="lease-1", agent_id="remote", kind="agent-idle", description="remote finishes"
        )
    assert r.resolution.status == "agent_dead" and r.resolution.dead == ["remote"]
    assert (await bus.get_agent("remote")).reason == "lease ran out (no heartbeat)"


async def test_a_heartbeat_extends_the_lease(bus):
    await agents.register(bus, "remote", lease=5)
    before = (await bus.get_agent("remote")).lease_expires_at
    after = (await agents.heartbeat(bus, "remote", 60)).lease_expires_at
    assert after > before + 50
    assert await admission.sweep(bus, [await bus.get_agent("remote")]) == []


async def test_kill_ends_the_process_group_marks_dead_and_tells_the_parent(bus):
    await crew(bus)
    flight = await admission.spawn(bus, "stubborn", ["sh", "-c", "sleep 60 & wait"], parent_id="orchestrator")
    child_start = pid_start(flight.pid)
    killed = await admission.kill(bus, flight, by="orchestrator")
    assert killed.status == "dead" and killed.reason == "killed by orchestrator"
    assert not alive(flight.pid, child_start)
    await until(lambda: not alive(flight.supervisor_pid), what="the supervisor to end")
    event = await wait.wait_event(bus, "orchestrator", 0, ["agent_dead"])
    assert event.type == "agent_dead" and event.model_extra["agent_id"] == flight.id
    with pytest.raises(DeadRecipient, match="dead"):
        await messages.send(bus, "orchestrator", flight.id, "are you there?")


async def test_close_is_terminal_and_a_closed_agent_takes_no_messages(bus):
    await crew(bus)
    closed = await admission.close(bus, await bus.get_agent("linter"))
    assert closed.status == "closed"
    with pytest.raises(DeadRecipient, match=r"linter .*closed"):
        await messages.send(bus, "orchestrator", "linter", "more work")
    await agents.mark_dead(bus, "test-runner", "crashed")
    with pytest.raises(BadInput, match="dead, not open"):
        await admission.close(bus, await bus.get_agent("test-runner"))


async def test_new_input_makes_an_idle_agent_running_again(bus):
    await crew(bus)
    await messages.notify_completion(bus, "linter", status="success", message="clean")
    assert await status_of(bus, "linter") == "idle"
    await messages.send(bus, "orchestrator", "linter", "one more file")
    assert await status_of(bus, "linter") == "running"


# ----------------------------------------------------------------------------- wait_agent
async def test_wait_agent_any_returns_on_the_first_idle_and_all_waits_for_every_one(bus):
    await crew(bus)
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        bg.start(
            "any",
            wait.wait_agent,
            bus,
            "orchestrator",
            id="any-1",
            agent_id="file-reader",
            agent_ids=["test-runner", "file-reader"],
            kind="agent-idle",
            match="any",
            description="first one done",
        )
        bg.start(
            "all",
            wait.wait_agent,
            bus,
            "orchestrator",
            id="all-1",
            agent_id="file-reader",
            agent_ids=["test-runner"],
            kind="agent-idle",
            description="both done",
        )
        await until(lambda: len(bg.results) == 0 and waits_of(bus, "agent"), what="waits to register")
        await messages.notify_completion(bus, "test-runner", status="success")
        r_any = await bg.result("any")
        assert "all" not in bg.results
        await admission.close(bus, await bus.get_agent("file-reader"))  # closed counts as idle
        r_all = await bg.result("all")
    assert r_any.resolution.status == "agent_idle"
    assert r_any.resolution.resolved == ["test-runner"] and r_any.resolution.pending == ["file-reader"]
    assert r_any.to_json()["resolution"]["resolvedAgentIds"] == ["test-runner"]
    assert r_all.resolution.status == "agent_idle"
    assert sorted(r_all.resolution.resolved) == ["file-reader", "test-runner"]


async def test_wait_agent_with_a_repeated_id_returns_the_stored_resolution(bus):
    await crew(bus)
    await admission.close(bus, await bus.get_agent("linter"))
    first = await wait.wait_agent(
        bus, "orchestrator", id="lint-closed", agent_id="linter", kind="agent-closed", description="linter closes"
    )
    again = await wait.wait_agent(
        bus,
        "orchestrator",
        id="lint-closed",
        agent_id="file-reader",
        kind="agent-idle",
        description="something else entirely",
    )
    assert first.resolution.status == "agent_closed"
    assert again.to_json() == first.to_json()


async def test_wait_agent_with_a_timeout_in_the_past_resolves_timed_out_at_once(bus):
    await crew(bus)
    past = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    with anyio.fail_after(10):
        r = await wait.wait_agent(
            bus,
            "orchestrator",
            id="late",
            agent_id="linter",
            kind="agent-closed",
            description="too late",
            timeout_at=past,
        )
    assert r.resolution.status == "timed_out" and r.resolution.pending == ["linter"]
    assert r.resolution.timeout_at is not None


async def test_wait_agent_rejects_unknown_agents_and_bad_fields(bus):
    await crew(bus)
    ok = dict(id="w", agent_id="linter", kind="agent-idle", description="d")
    for bad, match in [
        ({"agent_id": "nobody"}, "no agent"),
        ({"kind": "agent-done"}, "kind"),
        ({"match": "most"}, "match"),
        ({"description": " "}, "description"),
        ({"id": "../x"}, "id"),
        ({"timeout_at": "tomorrow"}, "timeoutAt"),
    ]:
        with pytest.raises(BadInput, match=match):
            await wait.wait_agent(bus, "orchestrator", **(ok | bad))
    assert await bus.list_waits() == []
