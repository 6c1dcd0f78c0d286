"""A join's `stop_rest`: once its need is met, the flights it did not count are stopped.

It runs after the wait, on its result: the wait's claims are settled by then, and the stops
(each up to twice a kill's grace for a flight that ignores TERM) do not hold the wait's
record. It stops through admission (`admission.kill_all`): the queued flights first, each
from its record as it is then, all at once, then a step per wave; a flight that could not
be stopped says why in its entry, and the others' outcomes are kept (docs/joins.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..admission import kill_all
from ..bus import Bus
from ..model import TargetStatus
from ..results import FanIn, TargetResult

#: a stopped flight's reason
STOPPED = "stopped: the join's need was met (stop_rest)"


async def stop_rest(
    bus: Bus,
    fan: FanIn,
    losers: Sequence[str],
    *,
    entry_of: Callable[[str], TargetResult],
    status_of: Callable[[str], TargetStatus],
    place: Mapping[str, int],
) -> FanIn:
    """Stop `losers` (in the caller's order) that still run or wait; `fan.stopped` lists those
    stopped, their entries say `dead` and why. A flight counted in `omitted` (the output
    budget) is counted as it is now; one that could not be stopped gets an entry saying why.
    `entry_of` makes a flight's entry as the wait saw it, `status_of` its word there."""
    outcome = await kill_all(bus, losers, STOPPED)
    fan.stopped = []
    entries = {e.agent_id: e for e in fan.results}
    omitted = dict(fan.omitted or {})
    for a_id in losers:
        after = outcome.get(a_id)
        if after is None:
            continue  # it had ended already, or runs on another host: left as it is
        entry = entries.get(a_id)
        if isinstance(after, Exception):
            if entry is None:  # counted, not shown: shown now, with why it still runs
                omitted[status_of(a_id)] -= 1
                entry = entries[a_id] = entry_of(a_id)
                fan.results.append(entry)
            entry.reason = f"stop_rest could not stop it ({type(after).__name__}: {after}); it may still run"
            continue
        fan.stopped.append(a_id)
        if entry is None:  # counted, not shown: counted as it is now
            omitted[status_of(a_id)] -= 1
            omitted[after.state] = omitted.get(after.state, 0) + 1
            continue
        if entry.status != "check_failed":
            entry.status = after.state
        entry.reason = after.reason
    fan.results.sort(key=lambda e: place[e.agent_id])
    fan.omitted = {k: n for k, n in omitted.items() if n} or None
    return fan
