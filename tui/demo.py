"""`wavewait demo`: a simulated wave of real processes, so a newcomer sees everything at once.

Six flights start as real child processes (`python -m wavewait.tui.demo_flight`), each
supervised like any spawned agent, in a wave that runs at most five at once: the sixth is
queued until the first one ends. Three report back at different times (two through the
core and stay idle a while, one through the `wavewait notify` CLI, as a shell-only agent
would), one dies with an error, one stays slow: it makes a wait of its own, which the mirror
panel shows and a person can interrupt or answer (`/send`). The TUI then runs a fan-in wait
on the whole wave that nothing ends for its first ASK_AFTER seconds (the slow flight and the
one that will ask still run): the time to press Escape. Then one flight asks a question and
needs input until the person answers it (`/reply`). `--seed` fixes the timings; the story
the person is told, step by step, is `demo_story.py`'s.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core import admission, spawning
from ..core.bus import Bus, open_bus
from ..core.ids import short
from ..core.model import Agent
from ..core.proc import alive, end_processes, python_module
from ..core.spawning import SpawnRequest

WAVE = "wave-1"
STOP_PASSES = 3  # the demo's exit lists its flights again while one is left running (admitted meanwhile)
SUPERVISORS_GRACE = 5.0  # at most, seconds for the supervisors to record how their flights ended
QUEUE_WAVE = "queue-demo"  # the agents of `wavewait demo --queue` (the runner's wave for queue `demo`)


@dataclass(frozen=True)
class DemoFlight:
    name: str
    role: str  # report | report-cli | ask | die | slow
    delay: float  # seconds of "work" before it reports, dies or starts waiting
    message: str
    linger: float = 0.0  # a reporter: seconds it stays idle after its report, before it exits


MAX_PARALLEL = 5  # the demo's wave runs at most this many at once: its sixth flight starts queued
ASK_AFTER = 22.0  # the least seconds before the question: the demo's wait runs that long at least


@dataclass(frozen=True)
class DemoPlan:
    seed: int | None
    flights: tuple[DemoFlight, ...] = field(default_factory=tuple)
    timeout: float = 60.0  # the demo's fan-in wait (the question, Escape or this ends it)
    max_parallel: int | None = MAX_PARALLEL


def plan(seed: int | None = None) -> DemoPlan:
    """The demo wave; the same seed gives the same timings and findings.

    In spawn order: the sixth (test-runner) is queued until linter dies and frees a slot;
    file-reader and schema-check report and stay idle a while; doc-writer asks only after
    ASK_AFTER seconds, so the demo's wait still runs when the person is told to press Escape.
    """
    rng = random.Random(seed)
    issues = rng.randint(2, 7)
    fks = rng.randint(8, 20)
    tests = rng.randint(120, 400)
    flights = (
        DemoFlight(
            "file-reader",
            "report",
            round(rng.uniform(6.0, 9.0), 1),
            f"read 42 files; found {issues} issues in src/provider/",
            linger=20.0,
        ),
        DemoFlight(
            "schema-check",
            "report",
            round(rng.uniform(10.0, 14.0), 1),
            f"{fks} foreign keys, 3 without an index",
            linger=4.0,
        ),
        DemoFlight(
            "doc-writer",
            "ask",
            round(rng.uniform(ASK_AFTER, ASK_AFTER + 4), 1),
            "put the guide in docs/ or in the wiki?",
        ),
        DemoFlight("linter", "die", round(rng.uniform(4.0, 6.0), 1), "ruff crashed: config error"),
        DemoFlight("migrator", "slow", round(rng.uniform(1.0, 2.0), 1), "waiting for a go-ahead"),
        DemoFlight("test-runner", "report-cli", round(rng.uniform(5.0, 8.0), 1), f"{tests} tests pass, 0 fail"),
    )
    return DemoPlan(seed=seed, flights=flights)


def command(f: DemoFlight) -> list[str]:
    return [*python_module("wavewait.tui.demo_flight"), f.role, str(f.delay), f.message, str(f.linger)]


async def launch(bus: Bus, me: str, demo: DemoPlan, say: Callable[[str], None]) -> list[Agent]:
    """Spawn the wave as real supervised processes; return their records. What to do is
    not said here (the scrollback moves on): the demo's guide line says it (`demo_story.py`)."""
    if not demo.flights:  # a plan without flights: the demo's screen over records put there (scenes.py)
        return []
    limit = f", at most {demo.max_parallel} at once" if demo.max_parallel else ""
    seed = f" (--seed {demo.seed})" if demo.seed is not None else ""
    say(f"demo: spawning {len(demo.flights)} flights in {WAVE}{limit}{seed}")
    out = []
    for f in demo.flights:
        request = SpawnRequest(name=f.name, parent=me, command=command(f), wave=WAVE, max_parallel=demo.max_parallel)
        agent = await spawning.spawn(bus, request)
        how = f"pid {agent.pid}" if agent.pid else f"{agent.status}: {agent.reason or 'waits for a slot'}"
        say(f"  spawned {agent.name} ({short(agent.id)}), {how}")
        out.append(agent)
    return out


async def stop(bus: Bus, me: str) -> list[Agent]:
    """End demo flights that still run (the slow one, the idle ones), so the demo leaves
    nothing behind; return every flight of the demo.

    The queued first, each from its record as it is now: a running flight's end admits the
    next queued one (its supervisor starts it), which a kill from its old queued record would
    mark dead and leave running. Then the rest at once, as a quit must be quick.
    """
    ended: dict[str, Agent] = {}
    for _ in range(STOP_PASSES):  # again if one was admitted meanwhile (a supervisor was starting it)
        mine = [a for a in await bus.list_agents() if a.wave in (WAVE, QUEUE_WAVE) and a.parent_id == me]
        ended.update((a.id, a) for a in mine if a.finished and a.id not in ended)
        left = [a for a in mine if not a.finished]
        if not left:
            break
        queued = [a for a in left if a.status == "queued"]
        for a in [
            *[await _stop_one(bus, a) for a in queued],
            *await asyncio.gather(*(_stop_one(bus, a) for a in left if a not in queued)),
        ]:
            ended[a.id] = a
    return list(ended.values())


async def _stop_one(bus: Bus, old: Agent) -> Agent:
    """Kill `old` from its record as it is now."""
    a = await bus.get_agent(old.id) or old
    return a if a.finished else await admission.kill(bus, a, by="the demo's exit")


async def supervisors_gone(flights: list[Agent], grace: float = SUPERVISORS_GRACE) -> list[Agent]:
    """Wait (bounded) until the flights' supervisors have exited; return those still running.

    A supervisor records its flight's end on the bus after the flight is gone: a bus removed
    before that would be written again.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while left := [a for a in flights if a.supervisor_pid and alive(a.supervisor_pid)]:
        if loop.time() >= deadline:
            return left
        await asyncio.sleep(0.02)
    return []


class Teardown:
    """What a demo run leaves behind, ended once: its flights that still run and its
    temporary bus (`temp_dir`, removed after the flights ended).

    Called after the app returned, or, when its shutdown hangs after a signal, from the
    app's forced-exit timer; whichever comes first does the work, a second call waits for
    it. It runs its own event loop: the app's may be the part that is stuck.
    """

    def __init__(self, url: str, me: str, temp_dir: str | None = None) -> None:
        self.url = url
        self.me = me
        self.temp_dir = temp_dir
        self._lock = threading.Lock()
        self._done = False

    def __call__(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            if threading.current_thread() is threading.main_thread():
                # a second hangup (or a TERM after it) must not cut the teardown short
                for sig in (signal.SIGHUP, signal.SIGTERM):
                    signal.signal(sig, signal.SIG_IGN)
            try:
                asyncio.run(self._stop())
            finally:
                if self.temp_dir:
                    shutil.rmtree(self.temp_dir, ignore_errors=True)

    async def _stop(self) -> None:
        bus = await open_bus(self.url)
        try:
            flights = await stop(bus, self.me)
        finally:
            await bus.close()
        if self.temp_dir:  # removed next: the supervisors finish writing to it, or are ended
            owned = [(a.supervisor_pid, a.supervisor_start) for a in flights if a.supervisor_pid]
            owned += [(a.pid, a.pid_start) for a in flights if a.pid]
            await asyncio.to_thread(end_processes, owned, SUPERVISORS_GRACE)
