"""The liveness sweep of the waits of one process: one timer for all of them.

A wait on flights must see a flight whose process vanished as dead (docs/words.md) within
`SWEEP_INTERVAL`, though nothing on the bus changes when a process is KILLed. Each wait
sweeping its own targets woke every held wait twice a second: 200 fan-ins held by one MCP
server made 400 wakes a second with nothing to read. Here one task per bus and event loop
sweeps the targets of every wait registered with it, each flight once; a death it records is
a change on the bus, which wakes the waits on that flight as any change does.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from ..admission import sweep
from ..bus import Bus
from ..model import Agent


@dataclass
class _Registered:
    targets: Callable[[], list[Agent]]  # the wait's targets whose liveness still matters, as it knows them
    every: float  # its sweep interval (WaitSettings.sweep_every)
    failed: Callable[[Exception], None]  # a sweep that raised: the wait raises it from its next step


class Sweeper:
    """The sweeps of the waits on one bus in one event loop: a task that runs while any is registered."""

    def __init__(self, bus: Bus, loop: asyncio.AbstractEventLoop) -> None:
        self.bus, self.loop = bus, loop
        self.waits: dict[str, _Registered] = {}
        self.task: asyncio.Task[None] | None = None
        self.sleeping = False  # the task is between sweeps (a cancel then cuts no sweep short)

    def add(
        self, wait_id: str, targets: Callable[[], list[Agent]], every: float, failed: Callable[[Exception], None]
    ) -> None:
        sooner = bool(self.waits) and every < min(r.every for r in self.waits.values())
        self.waits[wait_id] = _Registered(targets, every, failed)
        if sooner and self.task is not None and self.sleeping:  # its sleep is longer than this wait's interval
            self.task.cancel()
            self.task = None
        if self.task is None or self.task.done():
            self.task = self.loop.create_task(self._run(), name="wavewait-liveness-sweep")

    def remove(self, wait_id: str) -> None:
        self.waits.pop(wait_id, None)
        if self.waits:
            return
        if self.task is not None:
            self.task.cancel()  # no wait is left to sweep for
            self.task = None
        if _sweepers.get(self.bus) is self:  # it holds its bus: kept only while a wait uses it
            del _sweepers[self.bus]

    async def _run(self) -> None:
        while self.waits:
            self.sleeping = True
            try:
                await asyncio.sleep(min(r.every for r in self.waits.values()))
            finally:
                self.sleeping = False
            waits = list(self.waits.values())
            try:
                await sweep(self.bus, _freshest(waits))
            except Exception as e:  # each wait raises it as if its own sweep had
                for r in waits:
                    r.failed(e)

    def __repr__(self) -> str:
        return f"Sweeper({len(self.waits)} waits)"


def _freshest(waits: list[_Registered]) -> list[Agent]:
    """Each flight once, by the newest record a wait holds of it (a wait that has not stepped
    since it changed holds an older one). One wait, the common case, as it is: a join over
    10,000 flights would otherwise pay a dict of them twice a second."""
    if len(waits) == 1:
        return waits[0].targets()
    out: dict[str, Agent] = {}
    for r in waits:
        for a in r.targets():
            if (seen := out.setdefault(a.id, a)) is not a and a.updated_at > seen.updated_at:
                out[a.id] = a
    return list(out.values())


_sweepers: weakref.WeakKeyDictionary[Bus, Sweeper] = weakref.WeakKeyDictionary()


def sweeper(bus: Bus) -> Sweeper:
    """The sweeper of `bus` in the running event loop (a process runs one loop at a time: one of
    a loop that ended is replaced)."""
    loop = asyncio.get_running_loop()
    current = _sweepers.get(bus)
    if current is None or current.loop is not loop:
        current = _sweepers[bus] = Sweeper(bus, loop)
    return current
