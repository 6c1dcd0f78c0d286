"""Sending into inboxes: plain messages and completion reports.

Both are inbox items of the recipient; `wait` and `wait_for_event` take from the same
inbox, so whichever tool takes an item, it is delivered once. Every sender is first checked
to be the flight the sending process belongs to (`identity.py`), so nothing is sent under
a name the process cannot back.
"""

from __future__ import annotations

import os
from typing import Any

from .agents import ensure_agent, resolve_agent
from .bus import Bus
from .errors import BadInput, DeadRecipient
from .identity import check_sender
from .ids import check_id, check_type, new_id
from .limits import check_data, check_list, check_path, check_text
from .model import Agent, Item, is_report

PREVIEW = 200


async def as_sender(bus: Bus, sender: str, field: str = "agent") -> Agent:
    """The record of `sender` (registered if new), once `identity.check_sender` found that
    this process may send as it; `ForgedSender` (nothing sent, nothing registered) if not."""
    check_id(sender, field)
    known = await bus.get_agent(sender)
    await check_sender(bus, sender, known)
    return known if known is not None else await ensure_agent(bus, sender)


def preview(text: str) -> str:
    """A message as a flight's `last_message` shows it: at most PREVIEW characters."""
    return text if len(text) <= PREVIEW else text[: PREVIEW - 1] + "…"


async def _deliver(bus: Bus, item: Item, sender: Agent) -> Item:
    """Deliver an item `sender` sent; its first report (`is_report`) stamps its `reported_at`,
    whichever way it was sent (send, notify_completion, ask): the merge queue reads it."""
    item = await bus.deliver(item)
    await bus.note_preview(item.sender, last_message=preview(item.body), last_message_at=item.sent_at)
    if sender.reported_at is None and is_report(item.type):
        await bus.update_agent(sender.id, reported_at=item.sent_at)
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
    me = await as_sender(bus, sender)
    item = await _deliver(
        bus, Item(id=new_id(), type=type, to=recipient.id, sender=sender, body=message, data=data or {}), me
    )
    await bus.transition(recipient.id, "running", ("idle",))  # new input: back to work
    if type == "question":
        await _mark_question(bus, item)
    return item


ANSWER = "answer"  # the item type of a reply to a question; the asker waits for it


async def _mark_question(bus: Bus, item: Item) -> None:
    """The asker needs input until its question is answered (`Agent.state`)."""
    preview = item.body if len(item.body) <= PREVIEW else item.body[: PREVIEW - 1] + "…"
    await bus.update_agent(item.sender, question=preview, question_id=item.id, question_to=item.to, asked_by=None)


async def ask(bus: Bus, asker: str, question: str, to: str | None = None) -> Item:
    """Ask `to` (default: the asker's parent) a question; the asker needs input until answered.

    The question is a `question` item in the recipient's inbox (its `data.question_id` is the
    item's id); the answer comes back as an `answer` item with the same `question_id`.
    """
    check_text(question, "question")
    me = await as_sender(bus, asker)
    parent = to or me.parent_id or os.environ.get("WAVEWAIT_PARENT_ID")
    if not parent:
        raise BadInput("to: the asker has no parent to ask; pass who to ask (or set WAVEWAIT_PARENT_ID)")
    recipient = await ensure_agent(bus, check_id(parent, "to"))
    qid = new_id()
    item = Item(id=qid, type="question", to=recipient.id, sender=me.id, body=question, data={"question_id": qid})
    # marked before it is delivered: whoever takes the question can answer it at once
    await _mark_question(bus, item)
    try:
        return await _deliver(bus, item, me)
    except BaseException:
        await bus.update_agent(me.id, question=None, question_id=None)
        raise


async def ask_for(bus: Bus, flight: Agent, question: str, asked_by: str, to: str) -> Item:
    """A question asked for `flight` by wavewait itself (`asked_by`, e.g. the merge queue, which
    stopped on its branch): the flight needs input (even once ended) and `to` gets the question."""
    recipient = await ensure_agent(bus, check_id(to, "to"))
    qid = new_id()
    body = question if len(question) <= 30_000 else question[:29_999] + "…"
    item = Item(
        id=qid,
        type="question",
        to=recipient.id,
        sender=flight.id,
        body=body,
        data={"question_id": qid, "asked_by": asked_by},
    )
    preview = body if len(body) <= PREVIEW else body[: PREVIEW - 1] + "…"
    await bus.update_agent(flight.id, question=preview, question_id=qid, question_to=recipient.id, asked_by=asked_by)
    return await _deliver(bus, item, flight)


async def withdraw(bus: Bus, flight: Agent, asked_by: str) -> None:
    """Clear the question `asked_by` asked for `flight` (its branch merged, say); its own stays."""
    if flight.asked_by == asked_by and flight.question_id is not None:
        await bus.update_agent(flight.id, question=None, question_id=None, asked_by=None)


async def answer(bus: Bus, sender: str, asker: str, text: str, question_id: str | None = None) -> Item:
    """Answer the open question of `asker` (id or prefix): an `answer` item to its inbox.

    With `question_id`, only that question is answered (a stale id is an error, so an answer
    never lands on a newer question it was not meant for). Answering clears `needs_input`.
    """
    check_text(text, "answer")
    agent = await resolve_agent(bus, asker, "agent")
    if agent.asked_by == "merge" and agent.question_id is not None:
        raise BadInput(
            f"agent: {agent.name} ({agent.id[:8]}) was stopped by the merge queue ({agent.question}); "
            "fix its branch (commit on it) and run `wavewait merge` again"
        )
    if agent.question_id is None or agent.finished:
        raise BadInput(f"agent: {agent.name} ({agent.id[:8]}) has no open question; send it a message instead")
    if question_id is not None and question_id != agent.question_id:
        raise BadInput(
            f"question_id: {question_id!r} is not {agent.name}'s open question ({agent.question_id}); it was "
            "answered already or replaced"
        )
    me = await as_sender(bus, sender)
    item = await _deliver(
        bus,
        Item(
            id=new_id(),
            type=ANSWER,
            to=agent.id,
            sender=sender,
            body=text,
            data={"question_id": agent.question_id, "question": agent.question or ""},
        ),
        me,
    )
    await bus.update_agent(agent.id, question=None, question_id=None)
    return item


async def find_question_asker(bus: Bus, question_id: str) -> str:
    """The agent whose open question has this id (for a reply given by question id only)."""
    check_id(question_id, "question_id")
    for a in await bus.list_agents():
        if a.question_id == question_id and not a.finished:
            return a.id
    raise BadInput(f"question_id: no open question {question_id!r}; it was answered already, or its asker ended")


async def notify_completion(
    bus: Bus,
    caller: str,
    *,
    status: str,
    message: str = "",
    changes: list[str] | None = None,
    worker_id: str | None = None,
    session_id: str | None = None,
    turn: int | None = None,
    idle: bool = True,
) -> Item:
    """Report that a worker finished its job: a `worker_complete` item to its session; idle.
    `turn`: the number of a conversation's turn it ends (core/turns.py); `idle=False`: its next
    turn is due already (a message told during this one), so it stays running."""
    if status not in ("success", "error", "max_turns"):  # max_turns: a supervisor's report (core/flights.py)
        raise BadInput(f"status: must be 'success' or 'error', got {status!r}")
    check_text(message, "message", allow_empty=True)
    changes = check_list(changes or [], "changes", check_path)
    worker = await as_sender(bus, worker_id or caller, "worker_id")
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
            data={"status": status, "changes": changes} | ({"turn": turn} if turn is not None else {}),
        ),
        worker,
    )
    if idle:
        await bus.transition(worker.id, "idle", ("running",))
    return item
