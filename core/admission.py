"""Admission: a wave's limit of running flights, and the queue of the flights past it.

A wave may have a limit (`max_parallel` in its settings, core/waves.py): a number, or `auto`
(what the machine can take now: its cores, its free memory, its load). A spawn into a wave
at its limit is queued, not refused: the flight's record exists at once, `queued`, holding
what it needs to start (command, folder, environment), so any process can start it exactly
as its spawner would have. Nothing depends on the spawner staying alive: whoever sees a
flight of the wave end runs an admission `step` (the flight's supervisor at its end, a kill
or close, any spawn into the wave, a liveness sweep that marks one dead), and while queued flights wait
for memory or load, a small watcher process (`python -m wavewait.core.admission WAVE`)
runs one every RECHECK seconds until they start.

One step, under the lock of the wave's `admission` document (bus/wave_docs.py):
1. the slots: the flights admitted (`slots`) and the wave's other running or idle flights;
   a dead or closed flight frees its slot (terminal states: a list of the wave's flights
   read before the lock is safe for this);
2. the queued flights take the free slots in the order they were queued (with `auto`,
   only as many as the machine can take now);
3. after the lock each admitted flight moves `queued` → `running` (once, however many
   race; one killed or closed meanwhile never starts) and its supervisor is started.
A flight whose start failed is dead (its slot frees); one whose starter died before it ran
is started by the next step, or marked dead if the starter got halfway.

docs/admission.md says it for people, with the thresholds of `auto`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import subprocess
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from . import agents, budgets, waves
from .bus import Bus, open_bus
from .errors import BadInput, BudgetSpent
from .exits import Exit
from .ids import check_wave, is_id
from .launch_plan import LaunchPlan
from .model import Agent, now
from .proc import alive, command_process, hostname, python_module
from .waves import WaveSettings

log = logging.getLogger("wavewait.admission")

ADMISSION = "admission"  # the kind of the wave document (bus/wave_docs.py)
MAX_QUEUED = 5000  # queued flights one wave may hold (its document stays well under 1 MiB)
#: seconds a flight may stay admitted and unstarted by a starter on another host (whose pid
#: cannot be seen) before the next step takes it over: far longer than a start takes
START_GRACE = 60.0
GIB = 1 << 30
MIB = 1 << 20


def _size(text: str) -> int:
    """`512M`, `2G`, `1.5G` or a number of bytes."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": MIB, "G": GIB, "T": 1 << 40}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def _env(name: str, default: str, parse: Any = float) -> Any:
    """A threshold from the environment of the process running the step (for tests and for
    machines unlike the defaults); a value that cannot be read is said and not used."""
    raw = os.environ.get(name)
    if raw:
        try:
            return parse(raw)
        except ValueError:
            log.warning("%s=%r is not readable; using %s", name, raw, default)
    return parse(default)


@dataclass(frozen=True)
class Thresholds:
    """What `auto` keeps to (docs/admission.md), read from the environment at each step."""

    reserve: int  # bytes of memory left free whatever starts
    flight_mem: int  # bytes a flight is taken to need at least (before any of the wave is measured)
    per_core: float  # running flights per core at most
    load_per_core: float  # no new flight while the 1-minute load average passes cores × this
    recheck: float  # seconds between two checks while flights wait for the machine

    @classmethod
    def from_env(cls) -> Thresholds:
        return cls(
            reserve=_env("WAVEWAIT_ADMIT_RESERVE", "1G", _size),
            flight_mem=_env("WAVEWAIT_ADMIT_FLIGHT_MEM", "512M", _size),
            per_core=_env("WAVEWAIT_ADMIT_PER_CORE", "2"),
            load_per_core=_env("WAVEWAIT_ADMIT_LOAD_PER_CORE", "2"),
            recheck=_env("WAVEWAIT_ADMIT_RECHECK", "2"),
        )


# --------------------------------------------------------------------------- the machine
def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if abs(n) >= GIB else f"{n / MIB:.0f} MiB"


def mem_available() -> int:
    """MemAvailable from /proc/meminfo: what can be had without swapping (bytes)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise OSError("/proc/meminfo has no MemAvailable (a kernel older than 3.14)")


def load1() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def processes() -> dict[int, tuple[int, int]]:
    """Every process on this host: pid → (parent pid, resident memory in bytes)."""
    page = os.sysconf("SC_PAGE_SIZE")
    out: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
            rest = stat[stat.rfind(")") + 2 :].split()
            # field 24 of stat (rss, in pages); a zombie has none
            out[int(entry.name)] = (int(rest[1]), int(rest[21]) * page)
        except (OSError, ValueError, IndexError):
            continue  # it ended while we looked
    return out


def tree_memory(table: dict[int, tuple[int, int]], roots: dict[str, int]) -> dict[str, int]:
    """Resident memory of each flight's whole process tree (its supervisor and everything
    below it), by flight id. A process below another flight's supervisor is that flight's
    (a supervisor started by another one's step is its child until that one exits)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    tops = set(roots.values())
    out = {}
    for flight_id, root in roots.items():
        total, todo = 0, [root]
        while todo:
            pid = todo.pop()
            if pid not in table:
                continue
            total += table[pid][1]
            todo += [c for c in children.get(pid, ()) if c not in tops]
        out[flight_id] = total
    return out


@dataclass(frozen=True)
class Machine:
    """What `auto` looks at, read once per step (before the lock: /proc reads)."""

    cores: int
    available: int  # MemAvailable, bytes
    load: float  # 1-minute load average
    trees: dict[str, int]  # the wave's running flights on this host: memory of each one's tree

    @classmethod
    def read(cls, flights: Iterable[Agent]) -> Machine:
        roots = {
            a.id: a.supervisor_pid
            for a in flights
            if a.supervisor_pid
            and not a.finished
            and a.host == hostname()
            and alive(a.supervisor_pid, a.supervisor_start)
        }
        trees = tree_memory(processes(), roots) if roots else {}
        return cls(cores=cores(), available=mem_available(), load=load1(), trees=trees)


Why = Literal["", "slots", "memory", "load"]


def room_auto(m: Machine, t: Thresholds, holders: Sequence[str]) -> tuple[int, Why, str]:
    """How many more flights the machine takes now, what holds the rest back and why (for people).

    A flight costs as much as the largest running one of its wave measures (its whole
    process tree), and at least `flight_mem`; a flight admitted but not grown to that yet is
    counted at that cost, so ten flights started at once do not all see the same free memory."""
    cap = max(1, math.floor(m.cores * t.per_core))
    cost = max([t.flight_mem, *m.trees.values()])
    coming = sum(max(0, cost - m.trees.get(h, 0)) for h in holders)  # not grown to their cost yet
    free = m.available - coming
    bounds: list[tuple[int, Why, str]] = [
        (cap - len(holders), "slots", f"waiting for a slot: {len(holders)} running, {cap} at most on {m.cores} cores"),
        (
            math.floor((free - t.reserve) / cost),
            "memory",
            f"waiting for memory: {_gib(free)} free, needs {_gib(t.reserve + cost)} "
            f"({_gib(t.reserve)} kept free + {_gib(cost)} a flight)",
        ),
    ]
    if holders and m.load > m.cores * t.load_per_core:  # the first flight is never held for load
        limit = m.cores * t.load_per_core
        bounds.append((0, "load", f"waiting for the machine's load: {m.load:.1f} on {m.cores} cores (under {limit:g})"))
    room, why, reason = min(bounds, key=lambda b: b[0])
    return max(0, room), why, reason


# --------------------------------------------------------------------------- one step
@dataclass
class Step:
    """What one step decided and did."""

    admitted: list[str] = field(default_factory=list)
    buried: list[str] = field(default_factory=list)  # admitted, starter died halfway: marked dead
    failed: dict[str, str] = field(default_factory=dict)  # admitted, could not start: why
    queued: list[str] = field(default_factory=list)  # still queued, in order
    why: Why = ""
    reason: str = ""  # why the queued ones wait, for people
    watcher_alive: bool = False


def _starter() -> dict[str, Any]:
    pid, start = command_process()
    return {"host": hostname(), "pid": pid, "start": start, "at": now()}


def _gone(who: dict[str, Any] | None) -> bool:
    """Whether the process named by `who` (a starter, a watcher) is gone."""
    if not who:
        return True
    if who.get("host") == hostname():
        return not alive(who.get("pid"), who.get("start"))
    return now() - float(who.get("at") or 0) > START_GRACE


async def step(
    bus: Bus, wave: str, *, enqueue: str | None = None, settings: WaveSettings | None = None, watcher: bool = False
) -> Step:
    """Admit what the wave's limit lets in, then start it; see the module's docstring.

    `enqueue`: a queued flight just put on the bus, added to the end of the queue first (its
    spawn read the wave's `settings` and refused a spent budget: neither is done again for
    it). Without `settings` they are read here, once for the whole step."""
    if not is_id(wave):
        return Step()  # a wave named with more than an id's characters has no settings, so no limit
    if settings is None:
        settings = await waves.get_settings(bus, wave)
    limit = settings.max_parallel
    if limit is None and enqueue is None and not (await bus.get_wave_doc(wave, ADMISSION) or {}).get("queue"):
        return Step()  # no limit and nothing queued: nothing to admit
    flights = [a for a in await bus.list_agents() if a.wave == wave]
    by_id = {a.id: a for a in flights}
    machine = await asyncio.to_thread(Machine.read, flights) if limit == "auto" else None
    thresholds = Thresholds.from_env()
    out = Step()

    def change(doc: dict[str, Any] | None) -> dict[str, Any]:
        nonlocal out
        out = Step()  # it may run twice (bus/wave_docs.py): decide afresh each time
        doc = dict(doc or {})
        queue = [i for i in doc.get("queue", []) if isinstance(i, str)]
        slots = {k: v for k, v in (doc.get("slots") or {}).items() if isinstance(v, dict)}
        if enqueue is not None and enqueue not in queue and enqueue not in slots:
            if len(queue) >= MAX_QUEUED:
                raise BadInput(f"wave: {wave} has {MAX_QUEUED} flights queued already; wait for some to start")
            queue.append(enqueue)

        def ended(i: str) -> bool:  # terminal, or gone: safe to act on a read made before the lock
            a = by_id.get(i)
            return a is not None and a.finished

        slots = {i: s for i, s in slots.items() if not ended(i)}
        queue = [i for i in queue if not ended(i) and i not in slots]
        for i, s in list(slots.items()):
            a = by_id.get(i)
            if a is None or not _gone(s):
                continue
            if a.status == "queued":  # its starter died before moving it: start it here
                slots[i] = _starter()
                out.admitted.append(i)
            elif a.status == "running" and a.supervisor_pid is None:  # died in the middle of it
                del slots[i]
                out.buried.append(i)
        holders = list(slots) + [a.id for a in flights if a.status in ("running", "idle") and a.id not in slots]
        room: int
        why: Why
        if limit is None:
            room, why, reason = len(queue), "", ""
        elif limit == "auto":
            assert machine is not None
            room, why, reason = room_auto(machine, thresholds, holders)
        else:
            room, why, reason = limit - len(holders), "slots", f"waiting for a slot: its wave runs {limit} at most"
        # a flight starts on the host it was queued on (its folder and environment are that
        # host's): a step elsewhere leaves it for the next step there
        here = [i for i in queue if (a := by_id.get(i)) is not None and a.host in (None, hostname())]
        taken = set(here[: max(0, room)])
        for i in here[: max(0, room)]:
            slots[i] = _starter()
            out.admitted.append(i)
        queue = [i for i in queue if i not in taken]
        out.queued = queue
        out.why, out.reason = (why, reason) if queue else ("", "")
        out.watcher_alive = not _gone(doc.get("watcher"))
        return {**doc, "queue": queue, "slots": slots, "reason": out.reason, "checked_at": now()}

    await bus.update_wave_doc(wave, ADMISSION, change)
    for i in out.buried:
        a = await bus.get_agent(i)
        if a is not None and a.status == "running" and a.supervisor_pid is None:
            await agents.mark_dead(bus, i, "never started: the process starting it ended first")
    for i in out.admitted:
        if (why_not := await _start(bus, i, None if i == enqueue else settings)) is not None:
            out.failed[i] = why_not
    await _say_why(bus, [by_id[i] for i in out.queued if i in by_id], out.reason)
    if out.failed:  # their slots are free again: the next in the queue may have them
        again = await step(bus, wave, watcher=watcher)
        again.failed |= out.failed
        return again
    if out.why in ("memory", "load") and not watcher and not out.watcher_alive:
        start_watcher(bus, wave)
    return out


async def _start(bus: Bus, agent_id: str, settings: WaveSettings | None) -> str | None:
    """Start an admitted flight as its spawner would have: None, or why it could not.

    With its wave's `settings`, a spent budget refuses it first (it may have been spent
    while this one waited); None: its spawn has just checked that."""
    agent = await bus.get_agent(agent_id)
    if agent is None or agent.status != "queued":
        return None  # killed, closed or started by another step meanwhile
    try:
        if settings is not None and agent.wave is not None:
            await budgets.refuse_spent(bus, agent.wave, settings)
    except BudgetSpent as e:
        await agents.stop(bus, agent, f"{budgets.REASON}: {e}")
        return str(e)
    env = agent.launch_env
    started = await bus.transition(agent_id, "running", ("queued",), started_at=now(), reason=None, launch_env=None)
    if started is None:
        return None
    if env is None:
        why = "nothing was kept to start it with (its record has no environment)"
        await agents.mark_dead(bus, agent_id, f"could not start: {why}")
        return why
    try:
        await agents.launch(bus, started, env, announce=True)
    except BadInput as e:  # it is dead, with the reason; its slot frees
        return str(e)
    return None


async def _say_why(bus: Bus, queued: list[Agent], reason: str) -> None:
    """Each queued flight's `reason`: why it waits (written only where it changed)."""
    for a in queued:
        if a.reason != reason and a.status == "queued":
            await bus.update_agent(a.id, reason=reason)


# --------------------------------------------------------------------------- the spawn that keeps to the limit
async def launch(bus: Bus, plan: LaunchPlan, *, on_record: agents.OnRecord | None = None) -> Agent:
    """`agents.spawn_without_admission`, within the wave's limit the plan read: past it, the
    flight is kept `queued` (its record returned at once) and starts when a slot frees (a
    wave that spent its budget refuses it then). `on_record` is called before it is queued
    or started (`agents.recorded`)."""
    wave = plan.record.wave
    if wave is None or plan.limit is None:
        return await agents.spawn_without_admission(bus, plan, on_record=on_record)
    agent = plan.record.model_copy(update={"status": "queued", "launch_env": plan.env})
    await bus.put_agent(agent)
    await agents.recorded(bus, agent, on_record)
    try:
        done = await step(bus, wave, enqueue=agent.id, settings=plan.settings)
    except BadInput as e:
        await bus.transition(agent.id, "dead", ("queued",), reason=f"not queued: {e}", ended_at=now(), launch_env=None)
        raise
    if agent.id in done.failed:
        raise BadInput(done.failed[agent.id])
    return await bus.get_agent(agent.id) or agent


async def spawn(
    bus: Bus,
    name: str,
    command: Sequence[str],
    *,
    wave: str | None = None,
    parent_id: str | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    agent_id: str | None = None,
    budget: budgets.BudgetArgs | None = None,
    on_record: agents.OnRecord | None = None,
    **fields: Any,
) -> Agent:
    """`launch` for a plain command, from a caller without a face's request (a test, a
    bench): its plan made here (checked, the wave's budget `budget` kept and a spent one
    refused, the wave's settings read once); `fields`, more of its record."""
    record, child_env = agents.prepare(
        bus, name, command, wave=wave, parent_id=parent_id, env=env, cwd=cwd, agent_id=agent_id
    )
    settings = await budgets.admit(bus, wave, budget.wave if budget else None)
    record = record.model_copy(update={**fields, "budget": budget.flight if budget else None})
    return await launch(bus, LaunchPlan(record, child_env, settings), on_record=on_record)


# --------------------------------------------------------------------------- who else runs steps
async def sweep(bus: Bus, flights: Iterable[Agent]) -> list[Agent]:
    """`agents.sweep_without_admission`, then a step for each wave where it found a flight dead (a slot freed)."""
    dead = await agents.sweep_without_admission(bus, flights)
    for wave in sorted({a.wave for a in dead if a.wave}):
        await step(bus, wave)
    return dead


async def list_swept(bus: Bus, wave: str | None = None) -> list[Agent]:
    """The agents (of `wave`) as `wavewait agents` and `list_agents` show them: after a
    liveness sweep (and the steps it calls for)."""
    if wave is not None:
        check_wave(wave)
    await sweep(bus, await bus.list_agents())
    return [a for a in await bus.list_agents() if wave is None or a.wave == wave]


async def list_wave(bus: Bus, wave: str | None) -> list[Agent]:
    """`list_swept`, where a person named the wave: a wave no flight is in is bad input, not
    an empty list with exit 0 (a misspelt wave would read as one whose flights all went)."""
    found = await list_swept(bus, wave)
    if wave is not None and not found:
        raise BadInput(
            f"{{wave}}: no flight is in wave {wave}; list the agents without a wave to see the waves there are",
            fields=("wave",),
        )
    return found


async def kill(bus: Bus, agent: Agent, by: str | None = None) -> Agent:
    """`agents.kill_without_admission`, then a step for its wave: its slot is free now, even when its
    supervisor did not live to run one (a flight that ignores TERM gets its group KILLed)."""
    after = await agents.kill_without_admission(bus, agent, by)
    if after.wave is not None:
        await step(bus, after.wave)
    return after


async def kill_all(bus: Bus, ids: Sequence[str], reason: str) -> dict[str, Agent | Exception]:
    """Stop the flights of `ids` that still run or wait on this host, all at once, for `reason`
    (dead, with it); then a step for each of their waves. The queued ones first, each from
    its record as it is then: a running one's end admits the next queued one of its wave,
    which would otherwise be "stopped" from its queued record (no pid) and run on, dead on
    the bus. Each flight's outcome: its record after, or the error that kept it from being
    stopped (the others are stopped all the same). Flights on another host are left to it."""
    records = await bus.get_agents(ids)
    found = [a for i in ids if (a := records.get(i)) is not None and a.pending and a.host in (None, hostname())]
    out: dict[str, Agent | Exception] = {}

    async def one(agent: Agent) -> None:
        try:
            out[agent.id] = await agents.stop(bus, agent, reason)
        except Exception as e:  # named in the caller's answer, not lost with the others' outcomes
            log.warning("could not stop %s (%s): %s", agent.name, agent.id, e)
            out[agent.id] = e

    for batch in ([a for a in found if a.status == "queued"], [a for a in found if a.status != "queued"]):
        async with anyio.create_task_group() as tg:
            for a in batch:
                tg.start_soon(one, a)
    for wave in sorted({a.wave for a in found if a.wave}):
        await step(bus, wave)
    return out


async def close(bus: Bus, agent: Agent, reason: str = "closed") -> Agent:
    """`agents.close_without_admission`, then a step for its wave: a closed flight's slot is free at once (its
    process, left to finish, is no longer counted)."""
    after = await agents.close_without_admission(bus, agent, reason)
    if after.wave is not None:
        await step(bus, after.wave)
    return after


def start_watcher(bus: Bus, wave: str) -> None:
    """A process of its own that checks the machine again every few seconds while the
    wave's queued flights wait for memory or load (it survives whoever started it)."""
    env = {**os.environ, "WAVEWAIT_BUS": bus.url}
    watcher = subprocess.Popen(
        [*python_module("wavewait.core.admission"), wave],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    # reaped when it ends, so a long-lived process that started it (a server, the TUI) keeps no zombie
    threading.Thread(target=watcher.wait, name=f"wavewait-reap {watcher.pid}", daemon=True).start()


async def watch(bus: Bus, wave: str) -> None:
    """The watcher's loop: one step every RECHECK seconds while flights wait for the machine."""
    mine = _starter()

    def claim(doc: dict[str, Any] | None) -> dict[str, Any] | None:
        doc = doc or {}
        held = doc.get("watcher")
        if not _gone(held) and held != mine:
            return None  # another watcher has it
        return {**doc, "watcher": mine}

    kept = await bus.update_wave_doc(wave, ADMISSION, claim)
    if not kept or kept.get("watcher") != mine:
        return
    try:
        while True:
            done = await step(bus, wave, watcher=True)
            if done.why not in ("memory", "load"):
                return
            await asyncio.sleep(Thresholds.from_env().recheck)  # the machine sends no event when memory frees
    finally:

        def release(doc: dict[str, Any] | None) -> dict[str, Any] | None:
            return {**doc, "watcher": None} if doc and doc.get("watcher") == mine else None

        await bus.update_wave_doc(wave, ADMISSION, release)


async def _main(wave: str) -> None:
    bus = await open_bus()
    try:
        await watch(bus, wave)
    finally:
        await bus.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m wavewait.core.admission WAVE", file=sys.stderr)
        sys.exit(Exit.BAD_INPUT)
    asyncio.run(_main(sys.argv[1]))
