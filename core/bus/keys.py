"""The change keys of the bus, and what one subscription listens for.

A module of its own so that both backends, the wait engine and the faces can name keys
without importing the package that picks between the backends (`open_bus`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..ids import check_id

#: NOTIFY payloads must stay under 8,000 bytes; keys are joined by spaces up to this
PAYLOAD_BYTES = 7900
#: the prefixes of every agent's and every wait's key, for subscriptions to all of them
#: and statements that notify many waits
AGENT_PREFIX = "a:"
WAIT_PREFIX = "w:"


def inbox_key(inbox: str) -> str:
    return f"i:{inbox}"


def arrival_key(inbox: str, sender: str) -> str:
    """An item from `sender` arrived in `inbox`, or came back to it."""
    return f"i:{inbox}/{sender}"


def departure_key(inbox: str) -> str:
    """An item left `inbox` (claimed or taken): news for people looking, not for waits."""
    return f"i:{inbox}/"


def agent_key(agent_id: str) -> str:
    return f"{AGENT_PREFIX}{agent_id}"


def wait_key(wait_id: str) -> str:
    return f"{WAIT_PREFIX}{wait_id}"


def agent_of(key: str) -> str | None:
    """The agent a key is about (`agent_key`); None for any other key."""
    return key[len(AGENT_PREFIX) :] if key.startswith(AGENT_PREFIX) else None


def is_wait_key(key: str) -> bool:
    return key.startswith(WAIT_PREFIX)


def interrupt_key(wait_id: str) -> str:
    """An interrupt of one wait: a key of its own, so the wait's own record writes (its
    registration, progress, end: `w:`) never wake it."""
    return f"x:{wait_id}"


def wave_key(wave: str) -> str:
    """A change of a wave's documents (`wave_key("")`: the prefix of every wave's)."""
    return f"v:{wave}"  # w: is a wait's


def queue_key(queue: str) -> str:
    """A change of a task queue's tasks (the task store's own key)."""
    return f"q:{queue}"


#: keys a wait's own process pokes it with (never on the bus): a join's check ended, a folder
#: its file targets live in changed. A poke with one of these re-reads only what it names,
#: not every target and the whole inbox (a poke without a key means "anything")
CHECKS_KEY = "p:checks"
FILES_KEY = "p:files"


def payload(*keys: str) -> str:
    """Keys as one NOTIFY payload (space-separated)."""
    return " ".join(keys)


def payloads(keys: Sequence[str]) -> list[str]:
    """Keys coalesced into as few NOTIFY payloads as fit (each under PAYLOAD_BYTES)."""
    out: list[str] = []
    chunk: list[str] = []
    size = 0
    for key in dict.fromkeys(keys):
        if chunk and size + 1 + len(key) > PAYLOAD_BYTES:
            out.append(payload(*chunk))
            chunk, size = [], 0
        chunk.append(key)
        size += len(key) + (1 if size else 0)
    if chunk:
        out.append(payload(*chunk))
    return out


def split_payload(text: str) -> list[str]:
    """The keys a NOTIFY payload names (`payload`)."""
    return text.split(" ")


class Interest(NamedTuple):
    """What one subscription listens for, as `watch.Keyed` takes it (both buses build theirs
    from `interest`)."""

    keys: frozenset[str]
    prefixes: tuple[str, ...]
    routes: dict[str, str]
    trees: tuple[str, ...]
    pool: tuple[str, str] | None


def interest(
    *,
    inboxes: Sequence[str] = (),
    agents: bool | Sequence[str] = False,
    waits: bool = False,
    wait_id: str | None = None,
    senders: Sequence[str] | None = None,
    claim_group: str | None = None,
) -> Interest:
    """The keys of a subscription (`Bus.subscribe`), its arguments checked.

    An inbox: every change of it, by default; with `senders`, what arrives from them (a
    fan-in); with `claim_group`, what arrives, waking one subscription of the group per item
    (waits that claim the oldest items of the same types). Both also hear changes the bus
    cannot attribute (`i:<inbox>`), never what leaves.
    """
    keys, routes, trees = set(), {}, []
    pool = None
    for inbox in inboxes:
        key = inbox_key(check_id(inbox, "inbox"))
        keys.add(key)
        if senders is not None:
            routes.update({arrival_key(inbox, check_id(s, "sender")): key for s in senders})
        elif claim_group is not None:
            if len(inboxes) != 1:
                raise ValueError("a claim group is on one inbox")
            pool = (key, claim_group)
        else:
            trees.append(key)
    prefixes = []
    if agents is True:
        prefixes.append(AGENT_PREFIX)
    elif agents:
        keys.update(agent_key(check_id(a, "agent")) for a in agents)
    if waits:
        prefixes.append(WAIT_PREFIX)
    if wait_id is not None:
        keys.add(interrupt_key(check_id(wait_id, "wait")))
    return Interest(frozenset(keys), tuple(prefixes), routes, tuple(trees), pool)
