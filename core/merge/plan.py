"""Planning a merge: the wave's flights with branches, in merge order (dependencies first,
then report time), those that cannot merge marked skipped, and the files two flights touched."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import admission, worktrees
from ..bus import Bus
from ..errors import BadInput
from ..ids import check_name
from ..model import Agent, Task
from ..proc import alive, hostname
from .outcome import FlightMerge, FlightStatus, Overlap

OVERLAP_KEPT = 500  # overlapping files listed
#: seconds a merge waits for flights that reported and are still ending: what a flight left
#: in its worktree is committed on its branch as its process ends (core/flights.py, wrap_up)
SETTLE = 10.0
SETTLE_STEP = 0.05


@dataclass
class Flight:
    agent: Agent
    task: Task | None = None
    reported: float | None = None
    depends: list[str] = field(default_factory=list)  # agent ids of the flights it depends on
    out: FlightMerge | None = None

    @property
    def branch(self) -> str | None:
        return self.agent.worktree.branch if self.agent.worktree else None

    def result(self, status: FlightStatus, **fields: Any) -> FlightMerge:
        self.out = FlightMerge(
            agent_id=self.agent.id, name=self.agent.name, branch=self.branch, status=status, **fields
        )
        return self.out


async def pick_wave(bus: Bus, wave: str | None) -> str:
    if wave is not None:
        return check_name(wave, "wave")
    waves = sorted({a.wave for a in await bus.list_agents() if a.wave and a.worktree is not None})
    if len(waves) == 1:
        return waves[0]
    if not waves:
        raise BadInput("wave: no wave has flights with branches to merge; spawn flights with --worktree first")
    raise BadInput(f"wave: name the wave to merge (one of: {', '.join(waves)})")


async def _tasks_of(bus: Bus, wave: str) -> dict[str, Task]:
    """The queue tasks of a queue's wave (`queue-NAME`, core/runner.py), by their agent's id."""
    if not wave.startswith("queue-"):
        return {}
    try:
        store = bus.tasks(wave.removeprefix("queue-"))
    except BadInput:
        return {}
    return {t.agent_id: t for t in await store.tasks() if t.agent_id}


def _order(flights: list[Flight]) -> list[Flight]:
    """Dependencies first (a task's flight after those it depends on), then report time."""
    by_id = {f.agent.id: f for f in flights}
    key = {f.agent.id: (f.task.seq if f.task else 0, f.reported or 0.0, f.agent.created_at) for f in flights}
    done: list[Flight] = []
    seen: set[str] = set()
    ready = sorted(flights, key=lambda f: key[f.agent.id])

    def visit(f: Flight, path: tuple[str, ...] = ()) -> None:
        if f.agent.id in seen or f.agent.id in path:
            return
        for dep in sorted((by_id[d] for d in f.depends if d in by_id), key=lambda g: key[g.agent.id]):
            visit(dep, (*path, f.agent.id))
        seen.add(f.agent.id)
        done.append(f)

    for f in ready:
        visit(f)
    return done


async def plan(bus: Bus, wave: str) -> list[Flight]:
    """The wave's flights with branches, in merge order; those that cannot merge marked skipped.

    A flight's branch is its own by its id (core/worktrees.py): one whose branch was deleted
    and made again for a later flight of the same name is skipped, never merged as that one."""
    flights: list[Flight] = []
    tasks = await _tasks_of(bus, wave)
    task_agent = {t.id: aid for aid, t in tasks.items()}
    listed = await admission.list_swept(bus, wave)
    if not listed:
        raise BadInput(
            f"wave: there is no wave {wave!r}: no flight was ever spawned in it; "
            "`wavewait agents` lists the flights and their waves (spawn into one with --wave NAME --worktree)"
        )
    for a in listed:
        if a.worktree is None:
            continue
        task = tasks.get(a.id)
        # reported: a queue task once done, any other flight once it sent a report (`model.is_report`)
        reported = (task.updated_at if task.status == "done" else None) if task is not None else a.reported_at
        depends = [task_agent[d] for d in task.depends_on if d in task_agent] if task else []
        flights.append(Flight(agent=a, task=task, reported=reported, depends=depends))
    flights = _order(flights)
    await _settle(bus, [f for f in flights if f.reported is not None])
    taken = await asyncio.to_thread(worktrees.taken_branches, listed)
    names = {a.id: a.name for a in listed}
    for f in flights:
        if f.agent.status == "dead":
            f.result("skipped", why=f"dead: {f.agent.reason or 'its process ended without reporting'}")
        elif f.reported is None:
            f.result("skipped", why="it did not report (still running, or ended without a report)")
        elif f.agent.state == "needs_input" and f.agent.asked_by is None:
            f.result(
                "skipped", why="it asked a question nobody answered yet: answer it (wavewait reply), then merge again"
            )
        elif _ending(f.agent):
            f.result(
                "skipped",
                why=f"it reported, but its process still runs after {SETTLE:g} s: its branch gets what it "
                "left when it ends; merge again once it has (or stop it: wavewait kill)",
            )
        elif (holder := taken.get(f.agent.id)) is not None:
            whose = f"{names[holder]} ({holder[:8]})" if holder in names else holder[:8]
            f.result("skipped", why=f"its branch {f.branch} is gone: that name is now the branch of {whose}")
    return flights


def _ending(a: Agent) -> bool:
    """Whether its branch may still lack its work: it has not ended, and its process or its
    supervisor (which commits what it left, then records the end) runs on this host. Not a
    flight waiting for an answer (the merge says so), nor an idle conversation (a turn's
    work is committed as the turn ends)."""
    if a.worktree is None or a.finished or a.state == "needs_input":
        return False
    if a.conversation is not None and a.status == "idle":
        return False
    return a.host in (None, hostname()) and (alive(a.pid, a.pid_start) or alive(a.supervisor_pid, a.supervisor_start))


async def _settle(bus: Bus, reported: list[Flight]) -> None:
    """Wait up to `SETTLE` seconds for the reported flights still ending (`_ending`), each
    flight's record read again: a report comes just before its process ends, and a merge
    run right after the wait that took it would find the branch without the work."""
    deadline = asyncio.get_running_loop().time() + SETTLE
    ending = [f for f in reported if _ending(f.agent)]
    while ending and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(SETTLE_STEP)
        for f in ending:
            f.agent = await bus.get_agent(f.agent.id) or f.agent
        ending = [f for f in ending if _ending(f.agent)]


def overlap(touched: dict[str, list[str]], order: Sequence[Flight]) -> list[Overlap]:
    """The files two flights or more touched, with those flights' names in merge order."""
    who: dict[str, list[str]] = {}
    for f in order:
        for path in touched.get(f.agent.id, []):
            who.setdefault(path, []).append(f.agent.name)
    return [Overlap(path=p, flights=names) for p, names in sorted(who.items()) if len(names) > 1][:OVERLAP_KEPT]
