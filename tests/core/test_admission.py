"""Admission: a wave's limit of running flights (docs/admission.md), with real processes.

Every flight here waits on a gate the test controls (a file), then reports and exits; the
test opens gates only once it has seen on the bus what it asserts, so nothing here is
synchronised by sleeping.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import anyio
import pytest

from wavewait.core import admission, agents, flights, wait, waves
from wavewait.core.agents import register
from wavewait.core.model import now
from wavewait.core.proc import alive, hostname

from conftest import PYTHON, Background, env_for, until, wavewait_cmd
from gittools import branches, make_repo, status

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]

#: a flight: wait for its gate (a file), then report to its parent and exit cleanly
GATED = 'while [ ! -e "$1" ]; do sleep 0.02; done; exec "$2" -m wavewait notify --message "$3 done"'


def gated(gates: Path, name: str) -> list[str]:
    return ["sh", "-c", GATED, "flight", str(gates / name), PYTHON, name]


async def of_wave(bus, wave: str) -> list:
    return [a for a in await bus.list_agents() if a.wave == wave]


async def running_now(bus, wave: str) -> list:
    return [a for a in await of_wave(bus, wave) if a.status == "running"]


def max_overlap(flights) -> int:
    """The most flights whose runs (started_at → ended_at) overlapped at any instant."""
    edges = sorted(
        [(a.started_at, 1) for a in flights] + [(a.ended_at, -1) for a in flights], key=lambda e: (e[0], e[1])
    )
    most = now = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    return most


@pytest.mark.long
@pytest.mark.both_buses
async def test_ten_spawns_with_max_parallel_2_run_two_at_a_time_and_all_ten_report(bus, tmp_path):
    """Ten real `wavewait spawn` processes at once into a wave capped at 2: eight are queued at
    once (their records exist, a fan-in waits on them), never more than two run, and the
    fan-in gets all ten reports."""
    await register(bus, "orchestrator")
    gates = tmp_path / "gates"
    gates.mkdir()
    env = env_for(bus, PYTHONSAFEPATH="1")
    ids: dict[str, str] = {}

    async def spawn(i: int) -> None:
        argv = wavewait_cmd("spawn", f"f{i}", "--wave", "w", "--max-parallel", "2", "--", *gated(gates, f"f{i}"))
        done = await anyio.run_process(argv, env=env, check=False)
        assert done.returncode == 0, done.stderr.decode()
        said = json.loads(done.stdout)
        assert said["status"] in ("running", "queued")
        ids[f"f{i}"] = said["agent_id"]

    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(spawn, i)
    assert (await waves.get_settings(bus, "w")).max_parallel == 2
    flights = await of_wave(bus, "w")
    assert len(flights) == 10
    assert sum(a.status == "queued" for a in flights) >= 8  # the queued ones exist at once
    queued = next(a for a in flights if a.status == "queued")
    assert queued.pid is None and queued.reason == "waiting for a slot: its wave runs 2 at most"
    listed = await anyio.run_process(wavewait_cmd("agents", "--wave", "w"), env=env)
    shown = {a["id"]: a for a in json.loads(listed.stdout)["agents"]}
    assert (shown[queued.id]["state"], shown[queued.id]["reason"]) == ("queued", queued.reason)

    most = 0
    async with anyio.create_task_group() as tg:
        fan = Background(tg)
        fan.start("fan", wait.wait_fan_in, bus, "orchestrator", 120, list(ids.values()))
        released: set[str] = set()
        while len(released) < 10:
            now_running = await running_now(bus, "w")
            most = max(most, len(now_running))
            for a in now_running:
                if a.name not in released and a.pid:
                    (gates / a.name).touch()
                    released.add(a.name)
            with anyio.move_on_after(0.01):  # the observer's beat, not a synchronisation
                await anyio.Event().wait()
        result = await fan.result("fan", timeout=60)
    assert result.status == "complete"
    assert sorted(r.message for r in result.results) == sorted(f"{n} done" for n in ids)
    assert {r.status for r in result.results} == {"received"}
    assert most <= 2
    done = await of_wave(bus, "w")
    await until(lambda: _all_closed(bus, "w"), 20, "every flight to be recorded closed")
    done = await of_wave(bus, "w")
    assert len(done) == 10 and all(a.started_at and a.ended_at for a in done)
    assert max_overlap(done) <= 2  # from the records: no three runs ever overlapped


SPAWNER = """
import asyncio, sys
from wavewait.core import admission, waves
from wavewait.core.bus import open_bus

async def main():
    bus = await open_bus()
    await waves.set_settings(bus, "w", max_parallel=1)
    for i in range(5):
        sh = ["sh", "-c", sys.argv[1], "flight", sys.argv[2] + f"/g{i}", sys.executable, f"g{i}"]
        await admission.spawn(bus, f"g{i}", sh, wave="w", parent_id="orchestrator")
    print("queued", flush=True)
    await asyncio.Event().wait()  # stays until killed

asyncio.run(main())
"""


async def test_queued_flights_start_after_the_process_that_queued_them_is_killed(bus, tmp_path):
    await register(bus, "orchestrator")
    gates = tmp_path / "gates"
    gates.mkdir()
    spawner = subprocess.Popen(
        [PYTHON, "-c", SPAWNER, GATED, str(gates)],
        env=env_for(bus, PYTHONSAFEPATH="1"),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert spawner.stdout is not None
        assert (await anyio.to_thread.run_sync(spawner.stdout.readline)).strip() == "queued"
        flights = await of_wave(bus, "w")
        assert sorted(a.status for a in flights) == ["queued"] * 4 + ["running"]
    finally:
        spawner.send_signal(signal.SIGKILL)
        spawner.wait()
    order = []
    for _ in range(5):  # open each running flight's gate; the next starts without its spawner
        await until(lambda: running_now(bus, "w"), 20, "a running flight")
        (one,) = await running_now(bus, "w")
        order.append(one.name)
        (gates / one.name).touch()
        await until(lambda one=one: _status(bus, one.id, "closed"), 20, f"{one.name} to end")
    assert order == [f"g{i}" for i in range(5)]  # in the order they were queued
    assert all(a.status == "closed" for a in await of_wave(bus, "w"))


async def _all_closed(bus, wave: str) -> bool:
    return all(a.status == "closed" for a in await of_wave(bus, wave))


async def _status(bus, agent_id: str, status: str) -> bool:
    return (await bus.get_agent(agent_id)).status == status


async def test_a_queued_flight_killed_or_closed_never_starts_and_a_wait_on_it_ends(bus, tmp_path):
    await register(bus, "orchestrator")
    gates = tmp_path / "gates"
    gates.mkdir()
    await waves.set_settings(bus, "w", max_parallel=1)
    first = await admission.spawn(bus, "first", gated(gates, "first"), wave="w", parent_id="orchestrator")
    killed = await admission.spawn(bus, "killed", gated(gates, "killed"), wave="w", parent_id="orchestrator")
    closed = await admission.spawn(bus, "closed", gated(gates, "closed"), wave="w", parent_id="orchestrator")
    assert (first.status, killed.status, closed.status) == ("running", "queued", "queued")
    async with anyio.create_task_group() as tg:
        fan = Background(tg)
        fan.start("fan", wait.wait_fan_in, bus, "orchestrator", 60, [first.id, killed.id, closed.id])
        await until(lambda: _has_waits(bus), what="the fan-in to be waiting")
        gone = await agents.kill_without_admission(bus, killed, by="orchestrator")
        assert (gone.status, gone.reason) == ("dead", "killed by orchestrator before it started")
        shut = await agents.close_without_admission(bus, closed)
        assert shut.status == "closed"
        (gates / "killed").touch()
        (gates / "closed").touch()
        (gates / "first").touch()
        result = await fan.result("fan", 30)
    assert [(r.name, r.status) for r in result.results] == [
        ("first", "received"),
        ("killed", "dead"),
        ("closed", "closed"),
    ]
    later = await admission.spawn(bus, "later", gated(gates, "later"), wave="w", parent_id="orchestrator")
    (gates / "later").touch()
    await until(lambda: _status(bus, later.id, "closed"), 20, "the next flight to run and end")
    for a in (killed, closed):  # never started: no supervisor, no process, no start
        after = await bus.get_agent(a.id)
        assert after.pid is None and after.supervisor_pid is None and after.started_at is None
        assert after.launch_env is None
    told = await wait.wait_event(bus, "orchestrator", 5, ["agent_dead"])  # its parent heard of it
    assert told.model_extra["from"] == killed.id


async def _has_waits(bus) -> bool:
    return len(await bus.list_waits()) == 1


HOG = 1536 << 20  # what the memory hog holds: the margin either way is half of it

HOG_CODE = """
import sys
b = bytearray(int(sys.argv[1]))
for i in range(0, len(b), 4096):
    b[i] = 1  # resident, not just reserved
print("holding", flush=True)
sys.stdin.read()
"""


@pytest.mark.long
async def test_auto_starts_no_flight_while_memory_is_short_and_starts_it_once_it_frees(bus, tmp_path, monkeypatch):
    """A real memory hog makes free memory short of what `auto` keeps free plus a flight:
    the flights stay queued, saying why, while the watcher checks again and again; once
    the hog ends they start and report."""
    await register(bus, "orchestrator")
    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / "m0").touch()
    (gates / "m1").touch()
    hog = subprocess.Popen([PYTHON, "-c", HOG_CODE, str(HOG)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout is not None
        assert (await anyio.to_thread.run_sync(hog.stdout.readline)).strip() == "holding"
        cost = 64 << 20
        # with the hog, free is half a hog short of reserve + a flight; without it, half a hog over
        reserve = admission.mem_available() + HOG // 2 - cost
        monkeypatch.setenv("WAVEWAIT_ADMIT_RESERVE", str(reserve))
        monkeypatch.setenv("WAVEWAIT_ADMIT_FLIGHT_MEM", str(cost))
        monkeypatch.setenv("WAVEWAIT_ADMIT_LOAD_PER_CORE", "1000")  # this test is about memory
        monkeypatch.setenv("WAVEWAIT_ADMIT_RECHECK", "0.2")
        await waves.set_settings(bus, "m", max_parallel="auto")
        spawned = [
            await admission.spawn(bus, n, gated(gates, n), wave="m", parent_id="orchestrator") for n in ("m0", "m1")
        ]
        assert [a.status for a in spawned] == ["queued", "queued"]
        assert spawned[1].reason.startswith("waiting for memory: ") and "needs" in spawned[1].reason
        first_check = (await bus.get_wave_doc("m", admission.ADMISSION))["checked_at"]

        async def checked_again_and_again() -> bool:
            doc = await bus.get_wave_doc("m", admission.ADMISSION)
            return doc["checked_at"] > first_check + 1.0 and bool(doc.get("watcher"))

        await until(checked_again_and_again, 20, "the watcher to check the machine again for a second")
        flights = await of_wave(bus, "m")
        assert [a.status for a in flights] == ["queued", "queued"]  # still short: nothing started
        assert all(a.pid is None and a.reason.startswith("waiting for memory") for a in flights)
    finally:
        hog.kill()
        hog.wait()
    for a in spawned:  # memory freed: the watcher starts them, they report and end
        await until(lambda a=a: _status(bus, a.id, "closed"), 30, f"{a.name} to start and end")
    got = await wait.wait_fan_in(bus, "orchestrator", 10, [a.id for a in spawned])
    assert [r.status for r in got.results] == ["received", "received"]

    async def watcher_gone() -> bool:
        return not (await bus.get_wave_doc("m", admission.ADMISSION)).get("watcher")

    await until(watcher_gone, 10, "the watcher to end once nothing waits for memory")


TREE_CODE = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdin=subprocess.PIPE)
print(child.pid, flush=True)
child.wait()
"""
CHILD_CODE = """
import sys
b = bytearray(64 << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
print("holding", flush=True)
sys.stdin.read()
"""


def test_a_flights_whole_process_tree_is_counted():
    """Memory of a flight: its supervisor and every process below it, not one process, and
    not the tree of another flight's supervisor started below it."""
    parent = subprocess.Popen([PYTHON, "-c", TREE_CODE, CHILD_CODE], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert parent.stdout.readline().strip() == "holding"  # the child's, on the same pipe
        table = admission.processes()
        assert table[child][0] == parent.pid and table[child][1] > 64 << 20
        trees = admission.tree_memory(table, {"f": parent.pid})
        assert trees["f"] == table[parent.pid][1] + table[child][1]
        # a flight's supervisor below it is that flight's, not its
        apart = admission.tree_memory(table, {"f": parent.pid, "g": child})
        assert apart == {"f": table[parent.pid][1], "g": table[child][1]}
    finally:
        parent.kill()
        parent.wait()


def test_thresholds_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("WAVEWAIT_ADMIT_RESERVE", "2G")
    monkeypatch.setenv("WAVEWAIT_ADMIT_FLIGHT_MEM", "300M")
    t = admission.Thresholds.from_env()
    assert (t.reserve, t.flight_mem) == (2 << 30, 300 << 20)
    m = admission.Machine(cores=2, available=(2 << 30) + (100 << 20), load=0.0, trees={})
    room, why, reason = admission.room_auto(m, t, [])
    assert (room, why) == (0, "memory")
    assert reason == "waiting for memory: 2.1 GiB free, needs 2.3 GiB (2.0 GiB kept free + 300 MiB a flight)"
    m = admission.Machine(cores=2, available=8 << 30, load=9.0, trees={"a": 500 << 20})
    assert admission.room_auto(m, t, ["a"])[1] == "load"
    assert admission.room_auto(m, t, [])[0] == 4  # the first flight is never held for load; 2 a core


async def test_a_flight_whose_start_fails_frees_its_slot_for_the_next(bus, tmp_path):
    """The folder of a queued flight is gone when its turn comes: it is dead with the reason,
    its parent hears of it, and the next queued flight starts in its place."""
    await register(bus, "orchestrator")
    gates = tmp_path / "gates"
    gates.mkdir()
    gone = tmp_path / "gone"
    gone.mkdir()
    await waves.set_settings(bus, "w", max_parallel=1)
    first = await admission.spawn(bus, "first", gated(gates, "first"), wave="w", parent_id="orchestrator")
    broken = await admission.spawn(
        bus, "broken", gated(gates, "broken"), wave="w", parent_id="orchestrator", cwd=str(gone)
    )
    after = await admission.spawn(bus, "after", gated(gates, "after"), wave="w", parent_id="orchestrator")
    assert (first.status, broken.status, after.status) == ("running", "queued", "queued")
    gone.rmdir()
    (gates / "after").touch()
    (gates / "first").touch()
    await until(lambda: _status(bus, after.id, "closed"), 30, "the flight after the broken one to run")
    dead = await bus.get_agent(broken.id)
    assert dead.status == "dead" and "cannot start its supervisor" in dead.reason and dead.pid is None
    told = await wait.wait_event(bus, "orchestrator", 5, ["agent_dead"])
    assert told.model_extra["from"] == broken.id


async def test_a_flight_admitted_by_a_starter_that_died_is_started_by_the_next_step(bus, tmp_path):
    """A starter that died between admitting a flight (under the lock) and starting it leaves
    the flight queued in a slot: the next step sees the starter gone and starts it itself."""
    await register(bus, "orchestrator")
    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / "orphan").touch()
    await waves.set_settings(bus, "w", max_parallel=1)
    blocker = await admission.spawn(bus, "blocker", gated(gates, "blocker"), wave="w", parent_id="orchestrator")
    orphan = await admission.spawn(bus, "orphan", gated(gates, "orphan"), wave="w", parent_id="orchestrator")
    assert orphan.status == "queued"
    await agents.close_without_admission(
        bus, blocker
    )  # its slot is free; its process runs on, so no step comes from it
    ended = subprocess.Popen(["true"])
    ended.wait()  # the dead starter: its pid names no process now

    def admitted_by_the_dead(doc):  # what a starter leaves when it dies right after the lock
        return {**doc, "queue": [], "slots": {orphan.id: {"host": hostname(), "pid": ended.pid, "at": now()}}}

    await bus.update_wave_doc("w", admission.ADMISSION, admitted_by_the_dead)
    assert (await bus.get_agent(orphan.id)).status == "queued"
    done = await admission.step(bus, "w")
    assert done.admitted == [orphan.id] and not done.failed
    await until(lambda: _status(bus, orphan.id, "closed"), 30, "the orphaned flight to start and end")
    (gates / "blocker").touch()


async def test_queued_coding_flights_start_in_their_worktrees_and_one_killed_leaves_none(bus, tmp_path, monkeypatch):
    """Flights in their own worktrees, queued: the worktree is made at once; the flight starts
    in it when its turn comes (from the supervisor of the one before); killed while queued,
    its worktree and its empty branch go."""
    repo = make_repo(tmp_path / "repo", monkeypatch)
    gates = tmp_path / "gates"
    gates.mkdir()
    await register(bus, "orchestrator")
    await waves.set_settings(bus, "w", max_parallel=1)
    writes = [PYTHON, "-c", "import os; open('made.txt', 'w').write(os.getcwd())"]

    async def start(name: str, command: list[str]):
        return await flights.start(
            bus, name, parent_id="orchestrator", command=command, cwd=str(repo), worktree=True, wave="w"
        )

    first = await start("first", gated(gates, "first"))
    second = await start("second", writes)
    doomed = await start("doomed", writes)
    assert (first.status, second.status, doomed.status) == ("running", "queued", "queued")
    assert Path(doomed.worktree.path).is_dir() and doomed.worktree.branch in branches(repo)
    await agents.kill_without_admission(bus, doomed, by="the test")
    assert not Path(doomed.worktree.path).exists() and doomed.worktree.branch not in branches(repo)
    (gates / "first").touch()
    await until(lambda: _status(bus, second.id, "closed"), 30, "the second flight to run in its worktree")
    done = await bus.get_agent(second.id)
    assert (Path(second.worktree.path) / "made.txt").read_text() == second.worktree.path
    assert done.changes is not None and [p.path for p in done.changes.paths] == ["made.txt"]
    assert status(repo) == ""  # the user's checkout untouched


async def test_a_flight_killed_with_its_supervisor_still_frees_its_slot(bus, tmp_path):
    """A flight that ignores TERM gets its whole group KILLed, its supervisor too, so no
    supervisor runs a step at its end: the kill itself does, and the next flight starts."""
    await register(bus, "orchestrator")
    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / "next").touch()
    await waves.set_settings(bus, "w", max_parallel=1)
    ignoring = tmp_path / "ignoring"
    stubborn = ["sh", "-c", f"trap '' TERM; touch {ignoring}; while true; do sleep 0.05; done"]
    first = await admission.spawn(bus, "stubborn", stubborn, wave="w", parent_id="orchestrator")
    after = await admission.spawn(bus, "next", gated(gates, "next"), wave="w", parent_id="orchestrator")
    assert (first.status, after.status) == ("running", "queued")
    # spawn answers once the command has started, maybe before its trap: kill it once it ignores TERM
    await until(ignoring.exists, 30, "the stubborn flight to ignore TERM")
    dead = await admission.kill(bus, first, by="the test")
    assert dead.status == "dead"
    assert not alive(first.supervisor_pid, first.supervisor_start)  # no supervisor left to run a step
    await until(lambda: _status(bus, after.id, "closed"), 30, "the next flight to start and end")
