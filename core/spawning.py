"""Spawn: the one verb that starts a flight, whichever face asked.

Each face turns its own words into one `SpawnRequest` (the CLI's and the TUI's flags through
wavewait/spawn_flags.py, `spawn_agent`'s arguments, a task of the queue, a merge's conflict)
and calls `spawn`, so a flight starts the same way from all of them. The trip reads top to
bottom, each layer taking the plan whole:

1. `flights.plan` resolves the request once into a `LaunchPlan` (core/launch_plan.py): every
   check, the preset, the worktree chosen, the wave's budget and limit kept, the wave's
   settings read, a spent budget refused;
2. the spawner gets a record (`agents.ensure_agent`);
3. `flights.launch` makes its worktree, if it gets one;
4. `admission.launch` lets it in by its wave's limit, or queues it past it;
5. `agents.spawn_without_admission` keeps its record and starts its supervisor.
"""

from __future__ import annotations

from . import agents, flights
from .bus import Bus
from .launch_plan import SpawnRequest
from .model import Agent

__all__ = ["SpawnRequest", "spawn"]


async def spawn(bus: Bus, request: SpawnRequest, *, on_record: agents.OnRecord | None = None) -> Agent:
    """Start the flight `request` asks for; its record: running, or queued past its wave's limit.

    `on_record` is a step of the spawner, not an option of the flight (the queue runner names
    the flight in its task once its record is kept, `agents.recorded`), so it is no field."""
    plan = await flights.plan(bus, request)
    await agents.ensure_agent(bus, request.parent)
    return await flights.launch(bus, plan, on_record=on_record)
