"""What both buses' facades forward to their rooms alike, written once.

`FileBus` and `PostgresBus` are facades over rooms of one concern each (bus/file.py,
bus/postgres.py). Where a room of each bus has the same async shape (the inbox's claims,
the recovery sweep), its verbs are forwarded here, one line each, so the two facades keep
only what differs: the directory bus's rooms for records are synchronous, and each bus
registers, takes, subscribes and closes its own way.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Generic, Protocol, TypeVar

from ..model import Item, ItemRef


class InboxRoom(Protocol):
    """The inbox's verbs both buses' inbox rooms (bus/file_inbox.py, bus/pg_inbox.py) have."""

    async def pending(self, inbox: str, senders: Collection[str] | None = None) -> list[ItemRef]: ...
    async def peek(self, inbox: str, after: int = 0) -> list[Item]: ...
    async def claim(self, inbox: str, ref: ItemRef, wait_id: str) -> Item | None: ...
    async def claim_many(self, inbox: str, refs: Sequence[ItemRef], wait_id: str) -> list[Item]: ...
    async def claim_each(
        self, inbox: str, wait_id: str, senders: Collection[str], types: Sequence[str], *, relist: bool = False
    ) -> list[Item]: ...
    async def claim_next(
        self, inbox: str, wait_id: str, types: Sequence[str] | None = None, limit: int = 1
    ) -> list[Item]: ...
    async def holds(self, inbox: str, wait_id: str) -> int | None: ...
    async def release(self, inbox: str, wait_id: str) -> int: ...
    async def unclaim(self, inbox: str, ref: ItemRef, wait_id: str) -> bool: ...


class UpkeepRoom(Protocol):
    async def recover(self, inbox: str | None = None) -> int: ...


Inbox = TypeVar("Inbox", bound=InboxRoom)
Upkeep = TypeVar("Upkeep", bound=UpkeepRoom)


class Facade(Generic[Inbox, Upkeep]):
    """The Bus protocol's verbs that go straight to a room of the same shape on both buses;
    a bus names its rooms' own classes (`Facade[FileInbox, FileUpkeep]`), so what else it
    asks of them is typed too."""

    inbox: Inbox
    upkeep: Upkeep

    # ------------------------------------------------------------------ items
    async def pending(self, inbox: str, senders: Collection[str] | None = None) -> list[ItemRef]:
        return await self.inbox.pending(inbox, senders)

    async def peek(self, inbox: str, after: int = 0) -> list[Item]:
        return await self.inbox.peek(inbox, after)

    async def claim(self, inbox: str, ref: ItemRef, wait_id: str) -> Item | None:
        return await self.inbox.claim(inbox, ref, wait_id)

    async def claim_many(self, inbox: str, refs: Sequence[ItemRef], wait_id: str) -> list[Item]:
        return await self.inbox.claim_many(inbox, refs, wait_id)

    async def claim_each(
        self, inbox: str, wait_id: str, senders: Collection[str], types: Sequence[str], *, relist: bool = False
    ) -> list[Item]:
        return await self.inbox.claim_each(inbox, wait_id, senders, types, relist=relist)

    async def claim_next(
        self, inbox: str, wait_id: str, types: Sequence[str] | None = None, limit: int = 1
    ) -> list[Item]:
        return await self.inbox.claim_next(inbox, wait_id, types, limit)

    async def holds(self, inbox: str, wait_id: str) -> int | None:
        return await self.inbox.holds(inbox, wait_id)

    async def release(self, inbox: str, wait_id: str) -> int:
        return await self.inbox.release(inbox, wait_id)

    async def unclaim(self, inbox: str, ref: ItemRef, wait_id: str) -> bool:
        return await self.inbox.unclaim(inbox, ref, wait_id)

    # ------------------------------------------------------------------ upkeep
    async def recover(self, inbox: str | None = None) -> int:
        return await self.upkeep.recover(inbox)
