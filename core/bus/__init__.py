"""The bus: state that lives outside every process.

Two backends implement `Bus`: a directory (`bus/file.py`, the default) and PostgreSQL
(`bus/postgres.py`). The wait engine and every face speak only this protocol.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from typing import Any, Protocol, Self, runtime_checkable

from ..model import Agent, Conflict, HandoffRecord, Item, ItemRef, McpTask, Task, WaitRecord
from .wave_docs import DocChange

DEFAULT_BUS = "./.wavebus"


@runtime_checkable
class Changes(Protocol):
    """A subscription to changes on the bus, as one async iterator.

    `async for _ in changes:` steps once something changed since the last step (changes in
    between coalesce). Steps are hints: re-read after each. `changed()` says what changed
    since its last call, as keys (`i:<inbox>`, `a:<agent>`, `w:<wait>`, `x:<wait>` for an
    interrupt), so a step re-reads only those; None means "anything may have changed" (a
    poke, an overflow, a reconnect): re-read everything. `poke` wakes it from this process
    (an interrupt; with a key, noted as that key alone: a join's check ended); `close` ends it.

    What a bus dispatches for an inbox is finer than what a subscription notes: an item that
    arrives (or comes back) is `i:<inbox>/<sender>` (`arrival_key`), an item that leaves is
    `i:<inbox>/` (`departure_key`), a change the bus cannot attribute (a new inbox, a foreign
    file) is `i:<inbox>`. Each is noted as `i:<inbox>`, by the subscriptions it concerns
    (`interest`).
    """

    def __aiter__(self) -> Self: ...
    async def __anext__(self) -> None: ...
    async def wait(self) -> None:
        """One step of the iteration (kept for callers that sleep on it directly)."""
        ...

    def changed(self) -> set[str] | None: ...
    def reset(self) -> None: ...
    def poke(self, key: str | None = None) -> None: ...
    def close(self) -> None: ...


class TaskStore(Protocol):
    """One queue's tasks and handoffs on a bus. Every write is atomic; `add` holds the budget
    and dedup guards against concurrent enqueues from any number of processes."""

    queue: str

    async def add(self, task: Task, max_tasks: int) -> Conflict | None:
        """Insert `task` (its `seq` is assigned) unless the queue holds `max_tasks` tasks or a
        task that is not failed has the same dedup key."""
        ...

    async def get(self, task_id: str) -> Task | None: ...
    async def some(self, task_ids: Sequence[str]) -> dict[str, Task]:
        """Those of `task_ids` that exist, in one read where the bus can."""
        ...

    async def tasks(self) -> list[Task]:
        """Every task, in enqueue order."""
        ...

    async def live(self) -> list[Task]:
        """The tasks that are `queued` or `running`, in enqueue order: what a runner's round
        reads, without reading every finished task of a long queue again."""
        ...

    async def update(self, task_id: str, only_from: Sequence[str], **changes: Any) -> Task | None:
        """Change a task if its status is in `only_from`; None when nothing changed."""
        ...

    async def complete(
        self,
        task_id: str,
        handoff: HandoffRecord,
        only_from: Sequence[str],
        *,
        run_by: str | None = None,
        not_flight: str | None = None,
    ) -> Task | None:
        """Store the handoff (under the task's own type, whatever `handoff.type` says) and set
        the status, if the status is in `only_from`: one atomic compare-and-set. `run_by`: only
        if the task's agent is that one; `not_flight`: only while no flight (an agent record
        with a supervisor) has that id. Both are conditions of the same compare-and-set, so a
        completer's checks cost no read before it (core/tasks.py, `complete_task`)."""
        ...

    async def handoff(self, task_id: str) -> HandoffRecord | None: ...
    async def handoffs_of(self, task_ids: Sequence[str]) -> dict[str, HandoffRecord]:
        """The handoffs of those of `task_ids` that have one, in one read where the bus can."""
        ...

    async def handoffs(self) -> list[HandoffRecord]: ...
    async def subscribe(self) -> Changes:
        """Wakes on any change to the queue's tasks (call before reading)."""
        ...


class Bus(Protocol):
    url: str
    #: True when agents may run on other hosts, whose pids we cannot see: supervisors then
    #: renew a lease so an agent whose host vanished is marked dead when it runs out
    multi_host: bool
    #: True when `recover()` over every inbox costs about what one inbox does (one statement),
    #: so a process sweeps the whole bus instead of inbox by inbox
    recovers_all_at_once: bool
    #: True when no change notice is dropped while connected (a reconnect wakes every
    #: subscriber to re-read): a wait's backstop re-read can then run less often
    reliable_changes: bool

    # agents
    async def put_agent(self, agent: Agent) -> None: ...
    async def get_agent(self, agent_id: str) -> Agent | None: ...
    async def get_agents(self, agent_ids: Sequence[str]) -> dict[str, Agent]:
        """The records of those of `agent_ids` that exist, in one read where the backend can."""
        ...

    async def list_agents(self) -> list[Agent]: ...
    async def update_agent(self, agent_id: str, **changes: Any) -> Agent | None: ...
    async def note_preview(self, agent_id: str, **changes: Any) -> None:
        """Record a sender's last-message preview; a backend may coalesce a burst of them, so
        it returns nothing (read the agent for its record)."""
        ...

    async def transition(
        self, agent_id: str, status: str, only_from: Sequence[str], **changes: Any
    ) -> Agent | None: ...

    # inbox items (life of a message: delivered, claimed, taken or returned)
    async def deliver(self, item: Item) -> Item: ...
    async def pending(self, inbox: str, senders: Collection[str] | None = None) -> list[ItemRef]:
        """The unclaimed items of the inbox, FIFO; with `senders`, only theirs."""
        ...

    async def claim(self, inbox: str, ref: ItemRef, wait_id: str) -> Item | None: ...
    async def claim_many(self, inbox: str, refs: Sequence[ItemRef], wait_id: str) -> list[Item]:
        """Claim these items for `wait_id` (one statement where the backend can); returns
        those it got, in FIFO order; the others went to another wait."""
        ...

    async def claim_each(
        self, inbox: str, wait_id: str, senders: Collection[str], types: Sequence[str], *, relist: bool = False
    ) -> list[Item]:
        """Claim the oldest unclaimed item of these types from each of `senders` (one per
        sender at most; where another wait is claiming one, that sender's next), FIFO: a
        fan-in's read, one statement where the backend can, shared with other waits'.
        A wait asks again for a sender only once it stopped waiting on it (it holds none of
        its items). `relist`: read the whole inbox (a rescan, the backstop for lost changes)."""
        ...

    async def claim_next(
        self, inbox: str, wait_id: str, types: Sequence[str] | None = None, limit: int = 1
    ) -> list[Item]:
        """Claim up to `limit` of the oldest unclaimed items of these types (any when None),
        in FIFO order, skipping items other waits are claiming: one statement where the
        backend can (a batched next-message wait). A wait claims this way only while it holds
        nothing in `inbox` (a retry after a lost answer returns what the wait holds)."""
        ...

    async def holds(self, inbox: str, wait_id: str) -> int | None:
        """How many items `wait_id` holds claimed in `inbox`; None if the wait's record is gone
        (recovery ended it: its claims may be another wait's now). A call renews the wait's
        lease where the backend has leases: a waiter checks right before it replies (fencing)."""
        ...

    async def release(self, inbox: str, wait_id: str) -> int: ...
    async def unclaim(self, inbox: str, ref: ItemRef, wait_id: str) -> bool: ...
    async def take(self, inbox: str, wait_id: str, taker: str, *, end: bool = False) -> list[Item]:
        """Move the claims of `wait_id` to the inbox's history, taken by `taker`; `end`: also
        end the wait (as `end_wait`), in the same statement where the backend can."""
        ...

    async def history(self, inbox: str, limit: int = 100) -> list[Item]: ...
    async def peek(self, inbox: str, after: int = 0) -> list[Item]:
        """The unclaimed items of the inbox, FIFO, without claiming; `after`: only those past
        that seq (a reader that follows an inbox reads what is new, not all of it again)."""
        ...

    # waits in progress
    async def register_wait(
        self,
        record: WaitRecord,
        *,
        claim_from: str | None = None,
        types: Sequence[str] | None = None,
        limit: int = 1,
    ) -> list[Item]:
        """Put the wait's record on the bus. With `claim_from` (an inbox), also claim up to
        `limit` of its oldest unclaimed items of `types` for the wait, as `claim_next` does: in
        the same statement where the backend can (a wait that finds its message at once)."""
        ...

    async def update_wait(self, wait_id: str, progress: str) -> None: ...
    async def end_wait(self, wait_id: str) -> None: ...
    async def list_waits(self) -> list[WaitRecord]: ...
    async def interrupt(self, wait_id: str) -> bool: ...
    async def interrupted(self, wait_id: str) -> bool: ...
    async def get_resolution(self, key: str) -> dict[str, Any] | None: ...
    async def put_resolution(self, key: str, value: dict[str, Any]) -> None: ...

    # per-wave documents (wave_docs.py): a wave's settings, its merge queue's progress
    async def get_wave_doc(self, wave: str, kind: str) -> dict[str, Any] | None:
        """The wave's document of this kind, or None when none was written."""
        ...

    async def update_wave_doc(self, wave: str, kind: str, change: DocChange) -> dict[str, Any] | None:
        """Replace the wave's document by `change(current)` as one step however many
        processes race (`change` returning None leaves it); the document now kept."""
        ...

    async def subscribe_waves(self, wave: str | None = None) -> Changes:
        """Changes to the documents of `wave` (of every wave when None)."""
        ...

    # MCP tasks (the Tasks extension's records: wavewait/mcp/tasks_ext.py)
    async def put_mcp_task(self, task: McpTask) -> None:
        """Store `task` durably (a new one, or replace it whole)."""
        ...

    async def get_mcp_task(self, task_id: str) -> McpTask | None: ...
    async def transition_mcp_task(
        self, task_id: str, status: str, only_from: Sequence[str], **changes: Any
    ) -> McpTask | None:
        """Set `status` (and `changes`) only if the task's status is one of `only_from`, as
        one step however many processes race; the new record, or None if it was not."""
        ...

    async def delete_mcp_task(self, task_id: str) -> None: ...

    # change stream and upkeep
    async def subscribe(
        self,
        *,
        inboxes: Sequence[str] = (),
        agents: bool | Sequence[str] = False,
        waits: bool = False,
        wait_id: str | None = None,
        senders: Sequence[str] | None = None,
        claim_group: str | None = None,
    ) -> Changes:
        """Changes to these inboxes, agents (all when True) and wait records (`waits`);
        `wait_id`: interrupts of that wait. `senders` and `claim_group` narrow what of the
        inboxes wakes it (`interest`): a change is routed to the waits that want it."""
        ...

    async def recover(self, inbox: str | None = None) -> int: ...
    def log_path(self, agent_id: str) -> str | None: ...
    async def close(self) -> None: ...

    # the task queue
    def tasks(self, queue: str) -> TaskStore:
        """The store of the task queue `queue` (a checked id) on this bus."""
        ...


def bus_url(explicit: str | None = None) -> str:
    """`--bus`, else `WAVEWAIT_BUS`, else `./.wavebus`."""
    return explicit or os.environ.get("WAVEWAIT_BUS") or DEFAULT_BUS


async def open_bus(url: str | None = None, *, create: bool = True) -> Bus:
    """Open the bus named by `url` (a directory path or a `postgresql://` URL).

    `create=False` is for commands that only look or act on what exists: a directory bus
    that is not there is an error instead of a new, empty bus.
    """
    url = bus_url(url)
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresBus

        return await PostgresBus.open(url)
    from .file import FileBus

    return FileBus(url, create=create)
