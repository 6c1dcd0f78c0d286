"""A flight's conversation on the bus: the tells waiting for its supervisor, and its transcript.

Both are inboxes beside the flight's own, so they travel wherever the bus does (a flight on
another machine over PostgreSQL), keep their order, and are taken once:

- `<id>.tell`: each tell is an item for the flight's supervisor (core/turns.py), which claims
  it, writes it to the agent, says where it went (a resolution `tell.<item id>`) and only
  then takes it (claim → write → acknowledge). A tell nobody took stays until the flight is
  resumed (core/conversation.py), whoever's supervisor died meanwhile.
- `<id>.talk`: the transcript, one item an entry (a user message, what the agent said, a
  tool call, a tool's result cut short, a turn's end and usage), read as a tail and paged by
  `seq`; its supervisor trims it to KEPT entries, so it stays bounded.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

from .bus import Bus
from .ids import new_id
from .model import Item, WaitRecord, now
from .proc import hostname, pid_start
from .talk.base import Entry

KEPT = 2000  # entries of a transcript kept on the bus; the oldest go beyond it
TRIM_EVERY = 100  # the supervisor trims after this many appends
PAGE_MAX = 1000  # entries one read returns at most
TELL = "tell"
ENTRY = "transcript"


def short_wait(waiter: str, tool: str) -> WaitRecord:
    """The record of a wait that claims for a moment and ends (a tell given, withdrawn, entries
    trimmed): the bus's recovery returns its claims if this process dies meanwhile."""
    me = os.getpid()
    return WaitRecord(
        id=new_id(),
        waiter=waiter,
        kind="next",
        tool=tool,
        host=hostname(),
        pid=me,
        pid_start=pid_start(me),
        started_at=now(),
    )


def tells_inbox(agent_id: str) -> str:
    return f"{agent_id}.tell"


def talk_inbox(agent_id: str) -> str:
    return f"{agent_id}.talk"


def resolution_key(item_id: str) -> str:
    return f"tell.{item_id}"


def tell_item(
    agent_id: str, text: str, by: str, *, now_: bool = False, prompt: bool = False, only: bool = False
) -> Item:
    """A tell for the flight's supervisor: `now_` interrupts its running turn first; `only`: that
    is all (an interrupt without a message)."""
    return Item(
        id=new_id(),
        type=TELL,
        to=tells_inbox(agent_id),
        sender=by,
        body=text,
        data={"now": now_ or only, "prompt": prompt} | ({"only": True} if only else {}),
    )


async def append(bus: Bus, agent_id: str, entries: list[Entry]) -> None:
    """Keep these entries of the flight's conversation, in order."""
    for e in entries:
        data: dict[str, Any] = {k: v for k, v in asdict(e).items() if k != "text"}
        await bus.deliver(
            Item(id=new_id(), type=ENTRY, to=talk_inbox(agent_id), sender=agent_id, body=e.text, data=data)
        )


def entry_view(item: Item) -> dict[str, Any]:
    """An entry as the faces show it (`transcript --json`, the MCP tool)."""
    d = item.data
    out: dict[str, Any] = {"seq": item.seq, "at": item.sent_at, "kind": d.get("kind"), "turn": d.get("turn")}
    if d.get("by"):
        out["by"] = d["by"]
    out["text"] = item.body
    if d.get("data"):
        out["data"] = d["data"]
    return out


def line(entry: dict[str, Any]) -> str:
    """An entry as one line for people: `transcript` without --json."""
    kind, turn, text = entry.get("kind"), entry.get("turn"), str(entry.get("text", ""))
    if kind == "user":
        head = f"[{turn}] told by {entry.get('by')}:" if entry.get("by") != "prompt" else f"[{turn}] prompt:"
    elif kind == "agent":
        head = f"[{turn}] agent:"
    elif kind == "tool":
        head = f"[{turn}]   ↳"
    elif kind == "result":
        head = f"[{turn}]     ="
    else:
        head = f"[{turn}] ·"
    return f"{head} {text}"


async def read(bus: Bus, agent_id: str, *, tail: int = 200, before: int | None = None) -> list[Item]:
    """The last `tail` entries (before the entry `before`, to page back), oldest first."""
    items = [i for i in await bus.peek(talk_inbox(agent_id)) if i.type == ENTRY]
    items.sort(key=lambda i: i.seq)
    if before is not None:
        items = [i for i in items if i.seq < before]
    return items[-min(tail, PAGE_MAX) :] if tail > 0 else []


async def follow(bus: Bus, agent_id: str, after: int) -> AsyncIterator[list[Item]]:
    """The entries after `after`, then each batch as it comes (until the caller stops)."""
    changes = await bus.subscribe(inboxes=[talk_inbox(agent_id)])
    try:
        while True:
            items = sorted(
                (i for i in await bus.peek(talk_inbox(agent_id), after) if i.type == ENTRY),
                key=lambda i: i.seq,
            )
            if items:
                after = items[-1].seq
                yield items
            await changes.wait()
    finally:
        changes.close()


async def trim(bus: Bus, agent_id: str, keep: int = KEPT) -> int:
    """Drop the oldest entries beyond `keep` (claimed by a short wait of the supervisor's,
    then taken: the bus's history keeps them a while longer)."""
    inbox = talk_inbox(agent_id)
    pending = await bus.pending(inbox)
    extra = len(pending) - keep
    if extra <= 0:
        return 0
    record = short_wait(agent_id, "transcript_trim")
    got = await bus.register_wait(record, claim_from=inbox, types=[ENTRY], limit=extra)
    try:
        await bus.take(inbox, record.id, agent_id, end=True)
    except BaseException:
        await bus.release(inbox, record.id)
        await bus.end_wait(record.id)
        raise
    return len(got)
