"""`wavewait demo`: a simulated wave of real processes, so a newcomer sees everything at once.

Six flights start as real child processes (`python -m wavewait.tui.demo_flight`), each
supervised like any spawned agent. Three report back at different times (two through the
core, one through the `wavewait notify` CLI, as a shell-only agent would), one asks a
question and needs input until the person answers it (`/reply`), one dies with an error,
and one stays slow: it makes a wait of its own, which the mirror panel shows and a person
can interrupt. The TUI then runs a fan-in wait on the whole wave. `--seed` fixes the timings.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core import admission, spawning
from ..core.bus import Bus, open_bus
from ..core.ids import short
from ..core.model import Agent
from ..core.proc import alive, end_processes
from ..core.spawning import SpawnRequest

WAVE = "wave-1"
SUPERVISORS_GRACE = 2.0  # seconds for the supervisors to record how their flights ended
QUEUE_WAVE = "queue-demo"  # the agents of `wavewait demo --queue` (the runner's wave for queue `demo`)


@dataclass(frozen=True)
class DemoFlight:
    name: str
    role: str  # report | report-cli | ask | die | slow
    delay: float  # seconds of "work" before it reports, dies or starts waiting
    message: str


@dataclass(frozen=True)
class DemoPlan:
    seed: int | None
    flights: tuple[DemoFlight, ...] = field(default_factory=tuple)
    timeout: float = 20.0  # the fan-in wait; the slow flight makes it end by timeout


def plan(seed: int | None = None) -> DemoPlan:
    """The demo wave; the same seed gives the same timings and findings."""
    rng = random.Random(seed)
    issues = rng.randint(2, 7)
    fks = rng.randint(8, 20)
    tests = rng.randint(120, 400)
    delays = sorted(round(rng.uniform(2.0, 9.0), 1) for _ in range(4))
    rng.shuffle(delays)
    flights = (
        DemoFlight("file-reader", "report", delays[0], f"read 42 files; found {issues} issues in src/provider/"),
        DemoFlight("schema-check", "report", delays[1], f"{fks} foreign keys, 3 without an index"),
        DemoFlight("test-runner", "report-cli", delays[2], f"{tests} tests pass, 0 fail"),
        DemoFlight("doc-writer", "ask", delays[3], "put the guide in docs/ or in the wiki?"),
        DemoFlight("linter", "die", round(rng.uniform(3.0, 6.0), 1), "ruff crashed: config error"),
        DemoFlight("migrator", "slow", round(rng.uniform(1.0, 3.0), 1), "waiting for a go-ahead"),
    )
    return DemoPlan(seed=seed, flights=flights)


def command(f: DemoFlight) -> list[str]:
    return [sys.executable, "-m", "wavewait.tui.demo_flight", f.role, str(f.delay), f.message]


async def launch(bus: Bus, me: str, demo: DemoPlan, say: Callable[[str], None]) -> list[Agent]:
    """Spawn the wave as real supervised processes; return their records."""
    say(
        f"demo: spawning {len(demo.flights)} flights in {WAVE}{f' (--seed {demo.seed})' if demo.seed is not None else ''}"
    )
    out = []
    for f in demo.flights:
        agent = await spawning.spawn(bus, SpawnRequest(name=f.name, parent=me, command=command(f), wave=WAVE))
        say(f"  spawned {agent.name} ({short(agent.id)}), pid {agent.pid}")
        out.append(agent)
    say("demo: a fan-in wait on the whole wave follows; Escape interrupts it.")
    say(
        "demo: Shift+Tab reaches the flights, Enter opens one; doc-writer will ask a question: Enter on it, or /reply ID ANSWER, answers it."
    )
    say("demo: migrator runs a wait of its own, shown below as another process's wait; /interrupt ID ends it.")
    return out


async def stop(bus: Bus, me: str) -> list[Agent]:
    """End demo flights that still run (the slow one), so the demo leaves nothing behind;
    return every flight of the demo."""
    flights = []
    for a in await bus.list_agents():
        if a.wave in (WAVE, QUEUE_WAVE) and a.parent_id == me:
            flights.append(await admission.kill(bus, a, by="the demo's exit") if not a.finished else a)
    return flights


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
