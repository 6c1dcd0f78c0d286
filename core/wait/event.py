"""A typed event: one item of the given types from the caller's inbox, oldest first."""

from __future__ import annotations

from collections.abc import Sequence

from ..agents import ensure_registered
from ..bus import Bus
from ..errors import BadInput
from ..ids import check_type
from ..limits import check_list
from ..model import Item
from ..results import (
    Event,
    event_view,
)
from .engine import (
    Condition,
    Control,
    Ending,
    ProgressFn,
    Waiting,
    WaitSettings,
    check_timeout,
    claim_oldest,
    run,
)


class EventCondition(Condition[Event]):
    """One event of the given types (any type when None) from the caller's inbox, FIFO."""

    kind = "event"
    tool = "wait_for_event"
    uses_inbox = True
    claims_oldest = True

    def __init__(self, types: Sequence[str] | None) -> None:
        super().__init__(f"an event of type {', '.join(types)}" if types else "any event")
        self.wanted = set(types) if types else None
        self.claim_types = sorted(self.wanted) if self.wanted else None
        self.got: Item | None = None

    async def step(self, w: Waiting) -> Event | None:
        got = await claim_oldest(w, self.claim_types)
        self.got = got[0] if got else None
        return None if self.got is None else Event(**event_view(self.got))

    def progress(self) -> str:
        return "event received" if self.got else "no event yet"

    def claimed(self) -> int:
        return int(self.got is not None)

    def ended(self, why: Ending, w: Waiting) -> Event:
        return Event(type=why)


async def wait_event(
    bus: Bus,
    caller: str,
    timeout: float = 300,
    types: Sequence[str] | None = None,
    *,
    on_progress: ProgressFn | None = None,
    control: Control | None = None,
    settings: WaitSettings | None = None,
) -> Event:
    """One event of the given types from the caller's inbox, FIFO; others stay queued."""
    timeout = check_timeout(timeout, "timeout_secs")
    if types is not None:
        if isinstance(types, str) or not isinstance(types, Sequence) or not types:
            raise BadInput("types: give a non-empty list of event types, or omit it for all types")
        types = check_list(types, "types", check_type)
    await ensure_registered(bus, caller)
    return await run(
        bus, caller, EventCondition(types), timeout=timeout, on_progress=on_progress, control=control, settings=settings
    )
