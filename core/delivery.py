"""Acknowledged delivery: what a wait took leaves its inbox only once the reply reached the caller.

A wait run with `Control(hold=True)` returns with its claims still held (claim → reply →
acknowledge). The face then checks the claims still hold (`confirm`: fencing against a
waiter that was paused past its lease while another took over), writes its reply, and
calls `ack` once the reply is out (claims → history) or `release` if it never got there
(claims back to the head of the inbox, in their order). Until then the wait's record stays
on the bus, so recovery knows the claims are not orphaned; if the process dies first,
recovery returns them and the next wait delivers them again, with the same message ids.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio

from .bus import Bus
from .errors import WavewaitError
from .model import Item

log = logging.getLogger(__name__)


class ClaimLost(WavewaitError):
    """The wait's claims were returned while it was not looking (paused past its lease)."""

    def __init__(self, wait_id: str, expected: int, held: int | None) -> None:
        self.wait_id, self.expected, self.held = wait_id, expected, held
        super().__init__(
            f"this wait ({wait_id}) was paused past its lease and its {expected} message(s) went back "
            "to the inbox, where another wait may have taken them: nothing was lost and nothing is "
            "delivered twice; call the wait again"
        )


async def take_and_end(bus: Bus, inbox: str, wait_id: str) -> list[Item]:
    """Take the wait's claims and end its record: one statement on PostgreSQL. If that
    fails, the record is still ended (its claims then go back through recovery)."""
    try:
        return await bus.take(inbox, wait_id, inbox, end=True)
    except BaseException:
        await bus.end_wait(wait_id)
        raise


@dataclass
class Delivery:
    """The claims of one finished wait, until the face acknowledges or releases them."""

    bus: Bus
    inbox: str
    wait_id: str
    expected: int  # how many items the wait's result carries
    settled: bool = field(default=False, init=False)

    async def confirm(self) -> None:
        """Raise `ClaimLost` unless the wait still holds every claim its result carries;
        renews its lease on a bus that has leases, so the reply goes out well inside it."""
        if self.expected == 0:
            return
        held = await self.bus.holds(self.inbox, self.wait_id)
        if held != self.expected:
            await self.release()  # whatever is left is not this wait's to deliver
            raise ClaimLost(self.wait_id, self.expected, held)

    async def ack(self) -> list[Item]:
        """The reply reached the caller: the items leave the inbox for its history."""
        if self.settled:
            return []
        self.settled = True
        taken: list[Item] = []
        with anyio.CancelScope(shield=True):
            taken = await take_and_end(self.bus, self.inbox, self.wait_id)
        return taken

    async def release(self) -> int:
        """The reply did not reach the caller: the items go back to the head of the inbox."""
        if self.settled:
            return 0
        self.settled = True
        with anyio.CancelScope(shield=True):
            try:
                n = await self.bus.release(self.inbox, self.wait_id) if self.expected else 0
            finally:
                await self.bus.end_wait(self.wait_id)
        if n:
            log.info(
                "wavewait: wait %s returned %d item(s) to %s: no reply reached the caller", self.wait_id, n, self.inbox
            )
        return n


@asynccontextmanager
async def delivering(delivery: Delivery | None) -> AsyncIterator[None]:
    """Deliver a wait's items with the reply written inside: acknowledged on a clean exit,
    released on an error or a cancel (claim → reply → acknowledge, docs/reliability.md). The
    CLI and the MCP face settle what a wait took this way; `None` (the wait took nothing)
    settles nothing. The TUI holds nothing (its waits run without `hold`): its reply is its
    own screen, in the same process, so the wait takes what it claimed as it returns."""
    try:
        yield
    except BaseException:
        if delivery is not None:
            await delivery.release()
        raise
    if delivery is not None:
        await delivery.ack()


@asynccontextmanager
async def holding(delivery: Callable[[], Delivery | None]) -> AsyncIterator[None]:
    """Around running a wait whose claims a face holds (`Control(hold=True)`) until it has
    written the reply: any error or cancel before the face takes them over gives them back.
    `delivery` reads the wait's delivery once it exists (it is made as the wait returns)."""
    try:
        yield
    except BaseException:
        if (held := delivery()) is not None:
            await held.release()
        raise
