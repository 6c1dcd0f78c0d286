"""Sending into inboxes: plain messages and completion reports.

Both are inbox items of the recipient; `wait` and `wait_for_event` take from the same
inbox, so whichever tool takes an item, it is delivered once.
"""

from __future__ import annotations

import os
from typing import Any

from .agents import ensure_agent, resolve_agent
from .bus import Bus
from .errors import BadInput, DeadRecipient
from .ids import check_id, check_type, new_id
from .limits import check_data, check_list, check_path, check_text
from .model import Item

PREVIEW = 200


async def _deliver(bus: Bus, item: Item) -> Item:
    item = await bus.deliver(item)
    preview = item.body if len(item.body) <= PREVIEW else item.body[: PREVIEW - 1] + "…"
    await bus.note_preview(item.sender, last_message=preview, last_message_at=item.sent_at)
    return item


async def send(
    bus: Bus, sender: str, to: str, message: str, type: str = "message", data: dict[str, Any] | None = None
) -> Item:
    """Deliver a message to `to` (id or prefix). A dead or closed recipient is an error."""
    check_text(message, "message")  # bounds: limits.py
    check_type(type)
    data = check_data(data)
    recipient = await resolve_agent(bus, to, "to")
    if recipient.finished:
        raise DeadRecipient(
            f"to: {recipient.name} ({recipient.id[:8]}) is {recipient.status}"
            f"{' (' + recipient.reason + ')' if recipient.reason else ''}; it cannot receive messages"
        )
    await ensure_agent(bus, sender)
    item = await _deliver(
        bus, Item(id=new_id(), type=type, to=recipient.id, sender=sender, body=message, data=data or {})
    )
    await bus.transition(recipient.id, "running", ("idle",))  # new input: back to work
    return item


async def notify_completion(
    bus: Bus,
    caller: str,
    *,
    status: str,
    message: str = "",
    changes: list[str] | None = None,
    worker_id: str | None = None,
    session_id: str | None = None,
) -> Item:
    """Report that a worker finished its job: a `worker_complete` item to its session; idle."""
    if status not in ("success", "error"):
        raise BadInput(f"status: must be 'success' or 'error', got {status!r}")
    check_text(message, "message", allow_empty=True)
    changes = check_list(changes or [], "changes", check_path)
    worker = await ensure_agent(bus, check_id(worker_id or caller, "worker_id"))
    session = session_id or worker.parent_id or os.environ.get("WAVEWAIT_PARENT_ID")
    if not session:
        raise BadInput("session_id: the worker has no parent to report to; pass session_id (or set WAVEWAIT_PARENT_ID)")
    session_agent = await ensure_agent(bus, check_id(session, "session_id"))
    item = await _deliver(
        bus,
        Item(
            id=new_id(),
            type="worker_complete",
            to=session_agent.id,
            sender=worker.id,
            body=message or f"finished: {status}",
            data={"status": status, "changes": changes},
        ),
    )
    await bus.transition(worker.id, "idle", ("running",))
    return item
