"""The next message: the oldest item of the caller's inbox (and up to `max_messages - 1` more)."""

from __future__ import annotations

from ..agents import ensure_registered, name_of
from ..bus import Bus
from ..errors import BadInput
from ..model import Item, ItemRef
from ..results import (
    ENTRY_CHARS,
    FIELD_CHARS,
    NextMessage,
    QueuedMessage,
    iso,
)
from .engine import (
    AGENT_TYPES,
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

#: the most messages one next-message wait returns (`max_messages`)
MAX_MESSAGES = 100


class NextCondition(Condition[NextMessage]):
    """The oldest message (or completion, or question) in the caller's inbox, and up to
    `limit - 1` more already queued behind it, as long as their text fits `budget`."""

    kind = "next"
    tool = "wait"
    uses_inbox = True
    claims_oldest = True
    claim_types = AGENT_TYPES

    def __init__(self, limit: int = 1, budget: int | None = None) -> None:
        super().__init__("next message" if limit == 1 else f"next messages (up to {limit})")
        self.claim_limit, self.budget = limit, budget
        self.got: list[Item] = []

    async def step(self, w: Waiting) -> NextMessage | None:
        items = await claim_oldest(w, self.claim_types, self.claim_limit)
        if not items:
            return None
        self.got = await self._within_budget(w, items)
        first, *more = [await _message(w, item) for item in self.got]
        return NextMessage(
            status="received",
            sender=first.sender,
            name=first.name,
            message=first.message,
            message_id=first.message_id,
            sent_at=first.sent_at,
            type=first.type,
            more=more or None,
            elapsed_sec=w.elapsed,
        )

    async def _within_budget(self, w: Waiting, items: list[Item]) -> list[Item]:
        """The first item always; the next ones while their entries fit the budget. The rest go
        back to the inbox at their place, for the next call."""
        if self.budget is None:
            return items
        used, kept = _chars(items[0]), items[:1]
        for i, item in enumerate(items[1:], 1):
            used += _chars(item)
            if used > self.budget:
                for left in items[i:]:
                    await w.bus.unclaim(w.caller, ItemRef(left.seq, left.type, left.sender, left.id), w.id)
                break
            kept.append(item)
        return kept

    def progress(self) -> str:
        if not self.got:
            return "no message yet"
        return "received a message" if len(self.got) == 1 else f"received {len(self.got)} messages"

    def claimed(self) -> int:
        return len(self.got)

    def ended(self, why: Ending, w: Waiting) -> NextMessage:
        return NextMessage(status=why, elapsed_sec=w.elapsed)


async def _message(w: Waiting, item: Item) -> QueuedMessage:
    return QueuedMessage(
        sender=item.sender,
        name=await name_of(w.bus, item.sender),
        message=item.body,
        message_id=item.id,
        sent_at=iso(item.sent_at),
        type=item.type,
    )


async def wait_next(
    bus: Bus,
    caller: str,
    timeout: float,
    *,
    max_messages: int = 1,
    budget: int | None = None,
    on_progress: ProgressFn | None = None,
    control: Control | None = None,
    settings: WaitSettings | None = None,
) -> NextMessage:
    """The oldest message (or completion, or question) in the caller's inbox, FIFO; with
    `max_messages` > 1, also the ones queued behind it (in `more`), up to that many in all
    and, after the first, within `budget` characters of text."""
    timeout = check_timeout(timeout)
    if isinstance(max_messages, bool) or not isinstance(max_messages, int) or not 1 <= max_messages <= MAX_MESSAGES:
        raise BadInput(f"max_messages: must be a whole number from 1 to {MAX_MESSAGES}, got {max_messages!r}")
    await ensure_registered(bus, caller)
    return await run(
        bus,
        caller,
        NextCondition(max_messages, budget),
        timeout=timeout,
        on_progress=on_progress,
        control=control,
        settings=settings,
    )


def _chars(item: Item) -> int:
    """About the characters of `item`'s entry in `more` (its name is as long as its id at most)."""
    return ENTRY_CHARS + 4 * FIELD_CHARS + len(item.body) + 2 * len(item.sender) + len(item.id) + len(item.type) + 25


# --------------------------------------------------------------------------- fan-in
