"""The wait engine: one loop shared by every kind of wait and every face.

Every wait (DESIGN, "Semantics every wait shares"):
1. registers itself on the bus and subscribes to changes *before* it reads;
2. sleeps until the bus says something changed (timers only for the deadline, progress
   and liveness sweeps), then re-reads the state it needs;
3. returns as soon as its condition holds or nothing left can change the outcome;
4. on timeout or interrupt returns normally with the partial state;
5. on cancellation gives its claims back to the inbox in their original order.

A kind of wait is one `Condition` object: what it waits on (for the wait record), a
`step` from the bus's state to a result (or None: not yet), its progress line and its
result when it ends early. `run` is the engine that drives any of them; the public
functions (`wait_next`, `wait_fan_in`, ...) check their input, build a condition and run it.
"""

from __future__ import annotations

import glob
import inspect
import itertools
import math
import os
import time
import weakref
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, Literal, TypeVar, cast

import anyio

from . import signals, watch
from .admission import sweep
from .agents import SWEEP_INTERVAL, ensure_registered, name_of, resolve_agents
from .bus import Bus, Changes
from .bus.keys import agent_of, inbox_key, interrupt_key
from .delivery import Delivery, take_and_end
from .errors import BadInput
from .ids import check_id, check_type, new_id
from .limits import MAX_NAME_LEN, check_list, check_path, shown
from .model import AGENT_ITEM_TYPES, Agent, Item, ItemRef, TargetStatus, WaitKind, WaitRecord, now
from .proc import hostname, me
from .results import (
    AgentWait,
    Event,
    FanIn,
    NextMessage,
    QueuedMessage,
    Resolution,
    Result,
    Signal,
    TargetResult,
    flight_facts,
    iso,
)

# The defaults of `WaitSettings`; callers pass settings, nobody assigns these.
PROGRESS_WRITE_EVERY = 0.1  # how often the wait's record on the bus may be rewritten
PROGRESS_EVERY = 10.0  # the MCP face must report at least every 15 s
#: no gap by default: a face whose reader may take a report after the result sets one
PROGRESS_GAP = 0.0
#: a beat held back because the state keeps changing goes out anyway this share of
#: `progress_every` late (a host's idle timer must still be reset during a long burst)
BEAT_HELD_AT_MOST = 0.25
#: how often a wait re-reads with no change reported, and returns claims of dead waiters:
#: a backstop for change events the kernel dropped (its queue overflows silently)
RESCAN_EVERY = 5.0
#: on a bus whose change notices are not dropped while connected (a reconnect re-reads
#: everything), the backstop re-read runs on every this-many rescans: 100 idle waits on
#: PostgreSQL then cost a few statements a second, not 20
RELIABLE_BACKSTOP = 6

R = TypeVar("R", bound=Result)
Ending = Literal["timeout", "interrupted"]
AgentKind = Literal["agent-idle", "agent-closed"]
Match = Literal["any", "all"]


@dataclass(frozen=True)
class WaitSettings:
    """The engine's timers, in seconds. A face builds one from its flags and passes it down.

    Defaults are read from the module constants when the settings are made.
    """

    progress_every: float = field(default_factory=lambda: PROGRESS_EVERY)
    progress_write_every: float = field(default_factory=lambda: PROGRESS_WRITE_EVERY)
    #: how long the progress line must have been still before it is reported: a reader that
    #: takes a report and the result in one read may handle the report after the result
    #: (Claude Code then drops the connection). The report waits, never the result: one still
    #: held when the result is decided is dropped, and none goes out this close to the deadline
    progress_gap: float = field(default_factory=lambda: PROGRESS_GAP)
    rescan_every: float = field(default_factory=lambda: RESCAN_EVERY)
    sweep_every: float = field(default_factory=lambda: SWEEP_INTERVAL)


@dataclass
class Progress:
    elapsed: float
    total: float | None
    message: str
    received: tuple[str, ...] = ()  # ids of the targets received so far (fan-in)


#: what it returns is not used (the MCP face says whether a notification went out)
ProgressFn = Callable[[Progress], Awaitable[bool | None] | bool | None]


@dataclass
class Control:
    """A handle a face keeps to interrupt its own wait in-process (the TUI's Escape).

    `hold=True`: a wait that returns keeps its claims; `delivery` then holds them until the
    face acknowledges that its reply reached the caller, or releases them (core/delivery.py).
    """

    wait_id: str = field(default_factory=new_id)
    task_id: str | None = None  # the MCP task the wait runs as (its record says so: the TUI shows it)
    interrupted: bool = False
    hold: bool = False
    delivery: Delivery | None = None
    _changes: Changes | None = None

    def interrupt(self) -> None:
        self.interrupted = True
        if self._changes is not None:
            self._changes.poke()


def check_timeout(value: object, field: str = "timeout") -> float:
    """A timeout in seconds: a finite number ≥ 0 (0 is an instant check)."""
    if isinstance(value, bool):
        raise BadInput(f"{field}: must be a number of seconds ≥ 0, got {value!r}")
    if not isinstance(value, (int, float)):
        try:
            value = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise BadInput(f"{field}: must be a number of seconds ≥ 0, got {value!r}") from None
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise BadInput(f"{field}: must be a finite number of seconds ≥ 0, got {value!r}")
    return float(value)


# --------------------------------------------------------------------------- a kind of wait
@dataclass
class Waiting:
    """What a condition's `step` may use: the bus, who waits, and this wait's id (for claims)."""

    bus: Bus
    caller: str
    id: str
    started: float = field(default_factory=time.monotonic)
    deadline: float | None = None  # on time.monotonic(); None: no deadline
    #: the keys that changed since the last step (`i:<inbox>`, `a:<agent>`, `w:<wait>`);
    #: None: anything may have changed (the first step, a rescan, an overflow): read it all
    changed: set[str] | None = None
    #: what the registration claimed for a condition that `claims_oldest`, until a step uses
    #: it (None: no such claim is waiting)
    first_claim: list[Item] | None = None

    def touched(self, key: str) -> bool:
        """True when `key` may have changed since the last step."""
        return self.changed is None or key in self.changed

    def agents_changed(self, among: Collection[str]) -> list[str]:
        """Those of `among` whose record may have changed since the last step."""
        if self.changed is None:
            return list(among)
        return [a for k in self.changed if (a := agent_of(k)) is not None and a in among]

    @property
    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 3)


class Condition(Generic[R]):
    """One kind of wait. Subclasses set the class attributes and implement the three methods.

    The engine registers the wait with `kind`, `tool`, `description` and the targets, wakes
    it on changes to the caller's inbox (`uses_inbox`), to the agent records (when `targets`
    is not empty) and under `watch_dirs`, and sweeps the liveness of `targets`.
    """

    kind: WaitKind
    tool: str
    uses_inbox: bool = False
    #: the condition's first read is the claim of the `claim_limit` oldest items of
    #: `claim_types` (any when None) in the caller's inbox: the engine makes it with the
    #: registration, one statement
    claims_oldest: bool = False
    claim_types: Sequence[str] | None = None
    claim_limit: int = 1

    def __init__(
        self,
        description: str,
        targets: Sequence[Agent] = (),
        other_targets: Sequence[str] = (),
        watch_dirs: Sequence[str] = (),
    ) -> None:
        self.description = description
        self.targets = list(targets)  # agents waited on; a step keeps their records fresh
        self.other_targets = list(other_targets)  # what else the record names (a signal's pattern)
        self.watch_dirs = list(watch_dirs)

    async def step(self, w: Waiting) -> R | None:
        """Read the state this wait needs; its result when the wait is over, else None."""
        raise NotImplementedError

    def progress(self) -> str:
        """One line for people: how far the wait is."""
        raise NotImplementedError

    def ended(self, why: Ending, w: Waiting) -> R:
        """The result when the wait ends before its condition holds: the partial state."""
        raise NotImplementedError

    def claimed(self) -> int:
        """How many inbox items the result carries (claimed by this wait)."""
        return 0

    def senders(self) -> list[str] | None:
        """The senders whose items this wait takes from the inbox (None: any); the bus then
        wakes it for their arrivals only, not for every item of the inbox."""
        return None

    def claim_group(self) -> str | None:
        """Waits that claim the oldest items of the same types are interchangeable: an
        arrival wakes one of them in this process (`Bus.subscribe(claim_group=...)`), not all."""
        if not self.uses_inbox or not self.claims_oldest:
            return None
        return "oldest:" + ",".join(sorted(self.claim_types) if self.claim_types else "*")

    def received(self) -> tuple[str, ...]:
        """Ids of the targets received so far, for progress reports."""
        return ()

    def live_targets(self) -> list[Agent]:
        """The targets whose liveness still matters (swept on the engine's timer)."""
        return [a for a in self.targets if not a.finished]

    def record(self, w: Waiting, timeout: float | None) -> WaitRecord:
        pid, start = me()
        return WaitRecord(
            id=w.id,
            waiter=w.caller,
            kind=self.kind,
            tool=self.tool,
            targets=[a.id for a in self.targets] + self.other_targets,
            target_names=[a.name for a in self.targets] + self.other_targets,
            description=self.description,
            host=hostname(),
            pid=pid,
            pid_start=start,
            deadline=None if timeout is None else now() + timeout,
            progress=self.progress(),
        )


# --------------------------------------------------------------------------- the engine
async def run(
    bus: Bus,
    caller: str,
    condition: Condition[R],
    *,
    timeout: float | None,
    on_progress: ProgressFn | None = None,
    control: Control | None = None,
    settings: WaitSettings | None = None,
) -> R:
    """Wait on `condition` until its step gives a result, the timeout passes or someone
    interrupts; a timeout or interrupt returns the condition's partial result."""
    control = control or Control()
    w = Waiting(bus, caller, control.wait_id)
    return await _Engine(w, condition, timeout, control, settings or WaitSettings(), on_progress).run()


class _Engine(Generic[R]):
    """One wait's loop: register, subscribe, then step on every wake until a result."""

    def __init__(
        self,
        w: Waiting,
        condition: Condition[R],
        timeout: float | None,
        control: Control,
        settings: WaitSettings,
        on_progress: ProgressFn | None,
    ) -> None:
        self.w, self.c, self.timeout, self.control, self.s = w, condition, timeout, control, settings
        self.on_progress = on_progress
        self.deadline = w.deadline = None if timeout is None else w.started + timeout
        t = time.monotonic()
        # the timers, as monotonic times; next_write is set while a progress line waits to be written
        self.next_progress = t  # when the progress report is next looked at (a beat, or a held report)
        self.next_beat = t  # when the line is reported again even if it did not change
        self.next_rescan = t + settings.rescan_every
        self.next_sweep = t + settings.sweep_every
        self.next_write: float | None = None
        self.rescans = 0
        self.written, self.written_at = "", t  # the progress line on the wait's record, and when
        self.reported: str | None = None  # the progress line last given to the face
        self.line, self.still_since = "", t  # the latest progress line, and since when it is so

    async def run(self) -> R:
        w, c = self.w, self.c
        record = c.record(w, self.timeout)
        record.task_id = self.control.task_id
        self.written = record.progress
        changes = await w.bus.subscribe(
            inboxes=[w.caller] if c.uses_inbox else [],
            agents=[a.id for a in c.targets],
            wait_id=w.id,
            senders=c.senders(),
            claim_group=c.claim_group(),
        )
        self.control._changes = changes
        files: watch.Subscription | None = None
        cancelled = True
        try:
            if c.watch_dirs:  # still before the first read
                files = watch.subscribe(c.watch_dirs, prefixes=c.watch_dirs, wakes=changes)
            if c.uses_inbox:
                await _recover(w.bus, w.caller)
            if c.targets:
                await sweep(w.bus, c.targets)
            _changed(changes)  # the first step reads everything: what changed so far is in it
            w.changed = None
            if c.claims_oldest:  # registered and the first claim made in one step
                w.first_claim = await w.bus.register_wait(
                    record, claim_from=w.caller, types=c.claim_types, limit=c.claim_limit
                )
            else:
                await w.bus.register_wait(record)
            result = await self._loop(changes)
            cancelled = False
            return result
        finally:
            if files is not None:
                files.close()
            changes.close()
            with anyio.CancelScope(shield=True):
                await self._finish(cancelled)

    async def _loop(self, changes: Changes) -> R:
        while True:
            result = await self.c.step(self.w)  # read first: even an interrupt returns the state as it is now
            await self._progress(self.c.progress(), done=result is not None)
            if result is not None:
                return result
            if self.control.interrupted or (
                self.w.touched(interrupt_key(self.w.id)) and await self.w.bus.interrupted(self.w.id)
            ):
                return self.c.ended("interrupted", self.w)
            if not await self._sleep(changes):
                return self.c.ended("timeout", self.w)

    async def _sleep(self, changes: Changes) -> bool:
        """Until a change, a progress beat or a due record write (True), or the deadline (False).

        Rescans (the backstop for dropped change events) and liveness sweeps run on the way;
        a death a sweep records is itself a change, which wakes this wait.
        """
        while True:
            t = time.monotonic()
            if self.deadline is not None and t >= self.deadline:
                return False
            timers = (self.deadline, self.next_progress, self.next_rescan, self.next_write)
            wake_at = min(x for x in (*timers, self.next_sweep if self.c.targets else None) if x is not None)
            with anyio.move_on_after(max(0.0, wake_at - t)):
                await anext(changes)
                self.w.changed = _changed(changes)
                return True
            t = time.monotonic()
            if t >= self.next_rescan:  # the backstop: recover, and read everything once
                self.next_rescan = t + self.s.rescan_every
                self.rescans += 1
                if self.c.uses_inbox:
                    await _recover(self.w.bus, self.w.caller)
                if self.c.watch_dirs or not self.w.bus.reliable_changes or self.rescans % RELIABLE_BACKSTOP == 0:
                    self.w.changed = None
                    return True
                continue
            if t >= self.next_progress or (self.next_write is not None and t >= self.next_write):
                self.w.changed = set()  # a beat: nothing new to read
                return True
            if self.c.targets and t >= self.next_sweep:
                self.next_sweep = t + self.s.sweep_every
                await sweep(self.w.bus, self.c.live_targets())

    async def _progress(self, msg: str, done: bool) -> None:
        """Write the progress line to the wait's record (at most every `progress_write_every`,
        so a fan-in over 1,000 flights does not rewrite it on every wake; a record naming
        more than 1,000 targets, longer in proportion: each write is a whole record) and
        report it to the face when it changed or a beat is due. Once the result is decided
        nothing is reported: the result says everything, and a report sent just before it
        can reach the caller's handler after it."""
        if done:  # a finished wait's record is about to go, and its result is on its way
            return
        t = time.monotonic()
        if msg != self.written:
            every = self.s.progress_write_every * max(1.0, len(self.c.targets) / 1000)
            if t - self.written_at >= every:
                await self.w.bus.update_wait(self.w.id, msg)
                self.written, self.written_at, self.next_write = msg, t, None
            else:
                self.next_write = self.written_at + every
        if msg != self.line:
            self.line, self.still_since = msg, t
        await self._report(msg, t)

    async def _report(self, msg: str, t: float) -> None:
        """Give the face the line when it changed or a beat is due, once it has been still for
        `progress_gap` (or, in a burst that never stops, once it is BEAT_HELD_AT_MOST of a beat late).
        Until then `next_progress` wakes the wait for it; a result decided first drops it."""
        if msg == self.reported and t < self.next_beat:
            self.next_progress = self.next_beat
            return
        ready = self.still_since + self.s.progress_gap
        overdue = t >= self.next_beat + BEAT_HELD_AT_MOST * self.s.progress_every
        if t < ready and not overdue:
            self.next_progress = ready  # held: the state is still changing
            return
        if self.s.progress_gap and self.deadline is not None and self.deadline - t < self.s.progress_gap:
            self.next_progress = self.deadline  # the timeout result is due: it says it
            return
        self.reported, self.next_beat = msg, t + self.s.progress_every
        self.next_progress = self.next_beat
        if self.on_progress is not None:
            report = Progress(elapsed=self.w.elapsed, total=self.timeout, message=msg, received=self.c.received())
            r = self.on_progress(report)
            if inspect.isawaitable(r):
                await r

    async def _finish(self, cancelled: bool) -> None:
        """Take the claims of a wait that returned (or hand them to the face's delivery, which
        keeps the wait's record); give them back if it was cancelled."""
        bus, caller = self.w.bus, self.w.caller
        if self.c.uses_inbox and self.control.hold and not cancelled:
            self.control.delivery = Delivery(bus, caller, self.w.id, self.c.claimed())
            return
        if self.c.uses_inbox and not cancelled:
            await take_and_end(bus, caller, self.w.id)
            return
        try:
            if self.c.uses_inbox:
                await bus.release(caller, self.w.id)
        finally:
            await bus.end_wait(self.w.id)


#: a process returns the claims of dead waits (at a wait's start and on its rescans) at most
#: this often per inbox, or per bus where one sweep covers every inbox: a server looping
#: next-message waits, or holding 100 idle ones, would otherwise pay it per message or per wait
RECOVER_EVERY = 1.0
_recovered: weakref.WeakKeyDictionary[Bus, dict[str | None, float]] = weakref.WeakKeyDictionary()


async def _recover(bus: Bus, inbox: str) -> None:
    scope = None if bus.recovers_all_at_once else inbox
    last = _recovered.setdefault(bus, {})
    t = time.monotonic()
    if t - last.get(scope, -math.inf) >= RECOVER_EVERY:
        last[scope] = t
        await bus.recover(scope)


def _changed(changes: Changes) -> set[str] | None:
    """What changed, by key; None (read everything) from a stream that does not say."""
    changed: Callable[[], set[str] | None] | None = getattr(changes, "changed", None)
    return changed() if changed is not None else None


def _names(agents: Sequence[Agent]) -> str:
    return ", ".join(a.name for a in agents)


_AGENT_TYPES = sorted(AGENT_ITEM_TYPES)
#: a progress line names at most this many targets per list ("... and 9,980 more")
NAMES_SHOWN = 20


async def _claim_oldest(w: Waiting, types: Sequence[str] | None, limit: int = 1) -> list[Item]:
    """Claim up to `limit` of the oldest pending items of these types in the caller's inbox
    (FIFO), when the inbox may have changed since the last step (one before found none)."""
    if w.first_claim is not None:  # the registration made this step's claim
        got, w.first_claim = w.first_claim, None
        return got
    if not w.touched(inbox_key(w.caller)):
        return []
    return await w.bus.claim_next(w.caller, w.id, types, limit)  # one statement on PostgreSQL


#: the most messages one next-message wait returns (`max_messages`)
MAX_MESSAGES = 100


# --------------------------------------------------------------------------- next message
class NextItem(Condition[NextMessage]):
    """The oldest message (or completion, or question) in the caller's inbox, and up to
    `limit - 1` more already queued behind it, as long as their text fits `budget`."""

    kind = "next"
    tool = "wait"
    uses_inbox = True
    claims_oldest = True
    claim_types = _AGENT_TYPES

    def __init__(self, limit: int = 1, budget: int | None = None) -> None:
        super().__init__("next message" if limit == 1 else f"next messages (up to {limit})")
        self.claim_limit, self.budget = limit, budget
        self.got: list[Item] = []

    async def step(self, w: Waiting) -> NextMessage | None:
        items = await _claim_oldest(w, self.claim_types, self.claim_limit)
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
        """The first item always; the next ones while their text fits the budget. The rest go
        back to the inbox at their place, for the next call."""
        if self.budget is None:
            return items
        used, kept = len(items[0].body), items[:1]
        for i, item in enumerate(items[1:], 1):
            used += len(item.body)
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
        NextItem(max_messages, budget),
        timeout=timeout,
        on_progress=on_progress,
        control=control,
        settings=settings,
    )


# --------------------------------------------------------------------------- fan-in
class OnePerAgent(Condition[FanIn]):
    """One message from each target; a dead, idle or closed target ends its part early.

    Takes at most one message (the oldest) per target; messages from others stay.
    """

    kind = "fan_in"
    tool = "wait"
    uses_inbox = True

    def __init__(self, targets: Sequence[Agent], budget: int | None = None) -> None:
        super().__init__(f"a message from each of {_names(targets)}", targets)
        self.state: dict[str, Agent] = {a.id: a for a in targets}
        self.got: dict[str, Item] = {}  # claims by sender, in the order received
        self.entries: dict[str, TargetResult] = {}  # their lines of the result
        self.budget = budget  # characters of message bodies one result may carry
        self.used = 0
        self.full = False  # the budget ended the wait: the rest stays queued
        self.stepped = False  # the inbox was read once
        # targets without a message yet, in target order; how many of them still run
        self.waiting: dict[str, None] = dict.fromkeys(self.state)
        self.running = sum(1 for a in targets if a.pending)  # queued ones will run: wait for them too
        # the waiting targets that stopped running (dead, idle, closed), kept as they change,
        # so a progress line over 10,000 targets does not look at every one
        self.stopped: dict[str, None] = dict.fromkeys(a.id for a in targets if not a.pending)

    def _update(self, agent: Agent) -> bool:
        """Keep the record and the count of running targets; True if it stopped running."""
        old = self.state[agent.id]
        self.state[agent.id] = agent
        if agent.id in self.waiting and old.pending != agent.pending:
            self.running += 1 if agent.pending else -1
            if agent.pending:
                self.stopped.pop(agent.id, None)
            else:
                self.stopped[agent.id] = None
            return not agent.pending
        return False

    async def step(self, w: Waiting) -> FanIn | None:
        """Re-read only the targets whose records changed, and the inbox only when it changed
        or a target stopped running (agents first: a message sent before a death is seen)."""
        stopped = False
        if changed := w.agents_changed(self.waiting):
            for agent in (await w.bus.get_agents(changed)).values():
                stopped = self._update(agent) or stopped
        if stopped or w.touched(inbox_key(w.caller)):
            await self._claim(w)
            if self.full:
                return self._result("partial", w)
        return self._result("complete", w) if self.running == 0 else None

    async def _claim(self, w: Waiting) -> None:
        """The oldest pending message of each waited-on target, claimed in one go (where
        another wait took one first, that target's next); one that would overflow the
        budget goes back to its place."""
        # theirs only (a wake by its senders' arrivals, or the first step: the bus's change
        # stream was listening before it); a rescan, the backstop for lost changes, reads all
        everything = w.changed is None and self.stepped
        self.stepped = True
        claimed = await w.bus.claim_each(w.caller, w.id, self.waiting, _AGENT_TYPES, relist=everything)
        for item in claimed:
            ref = ItemRef(item.seq, item.type, item.sender, item.id)
            if self._overflows(item) and await w.bus.unclaim(w.caller, ref, w.id):
                self.full = True  # it stays queued, at its place, for the next call
                continue
            self._got(item)

    def _got(self, item: Item) -> None:
        self.got[item.sender] = item
        word: TargetStatus = "needs_input" if item.type == "question" else "received"  # awaits an answer
        name = self.state[item.sender].name
        # made now, as each report comes: the result over 10,000 targets is then a list, not 10,000 models
        self.entries[item.sender] = TargetResult(
            agent_id=item.sender, name=name, status=word, message=item.body, message_id=item.id
        )
        self.used += len(item.body)
        del self.waiting[item.sender]
        self.stopped.pop(item.sender, None)
        if self.state[item.sender].pending:
            self.running -= 1

    def live_targets(self) -> list[Agent]:
        return [a for a_id in self.waiting if not (a := self.state[a_id]).finished]

    def senders(self) -> list[str]:
        return list(self.state)

    def _names_of(self, ids: Iterable[str], count: int, with_status: bool = False) -> str:
        """The first NAMES_SHOWN of `ids` (`count` in all) by name, and how many more."""
        shown = [self.state[a] for a in itertools.islice(ids, NAMES_SHOWN)]
        names = [f"{a.name} {a.status}" if with_status else a.name for a in shown]
        more = count - len(names)
        return ", ".join(names) + (f" and {more:,} more" if more > 0 else "")

    def _overflows(self, item: Item) -> bool:
        """Would `item` push the result past the budget? The first message is always taken."""
        return self.budget is not None and bool(self.got) and self.used + len(item.body) > self.budget

    def progress(self) -> str:
        """Built from counts and at most NAMES_SHOWN names per list, not from every name."""
        got: Collection[str] = self.got
        if len(self.state) <= NAMES_SHOWN:  # few: in target order, as people read the list
            got = [a for a in self.state if a in self.got]
        msg = f"{len(self.got)}/{len(self.state)} received"
        msg += f": {self._names_of(got, len(got))}" if got else ""
        # a target that stopped is news, never "waiting on": a death changes the line
        ended: Collection[str] = self.stopped
        if len(self.state) <= NAMES_SHOWN:
            ended = [a for a in self.waiting if a in self.stopped]
        msg += f" · {self._names_of(ended, len(ended), with_status=True)}" if ended else ""
        running = (a for a in self.waiting if a not in self.stopped)
        return msg + (f" · waiting on {self._names_of(running, self.running)}" if self.running else "")

    def ended(self, why: Ending, w: Waiting) -> FanIn:
        return self._result(why, w)

    def claimed(self) -> int:
        return len(self.got)

    def received(self) -> tuple[str, ...]:
        return tuple(self.got)

    def _result(self, status: Literal["complete", "partial", "timeout", "interrupted"], w: Waiting) -> FanIn:
        results = []
        for a_id, agent in self.state.items():
            entry = self.entries.get(a_id)
            if entry is None:
                reason = agent.reason if agent.finished else None
                entry = TargetResult(agent_id=a_id, name=agent.name, status=agent.state, reason=reason)
            results.append(entry)
        return FanIn(status=status, results=results, elapsed_sec=w.elapsed)


async def wait_fan_in(
    bus: Bus,
    caller: str,
    timeout: float,
    from_agents: Sequence[str],
    *,
    on_progress: ProgressFn | None = None,
    control: Control | None = None,
    settings: WaitSettings | None = None,
    budget: int | None = None,
) -> FanIn:
    """Wait for one message from each listed agent; dead, idle or closed ones end early.

    `budget` (characters of message bodies) ends the wait as "partial" once what it took
    fills it: a message that would overflow it goes back to the inbox (the first is always taken).
    """
    timeout = check_timeout(timeout)
    if not from_agents:
        raise BadInput("from_agents: list at least one agent id or prefix (or omit it for the next message)")
    targets = await resolve_agents(bus, from_agents, "from_agents")
    await ensure_registered(bus, caller)
    fan = await run(
        bus,
        caller,
        OnePerAgent(targets, budget),
        timeout=timeout,
        on_progress=on_progress,
        control=control,
        settings=settings,
    )
    # coding flights' entries carry their branch, changes and usage as their records say now
    coding = [a.id for a in targets if a.preset or a.worktree]
    fresh = await bus.get_agents(coding) if coding else {}
    for entry in fan.results:
        if (agent := fresh.get(entry.agent_id)) is not None:
            for key, value in flight_facts(agent).items():
                setattr(entry, key, value)
    return fan


# --------------------------------------------------------------------------- typed events
def event_view(item: Item) -> dict[str, Any]:
    """The seed 004 shape of an inbox item."""
    base = {"event_id": item.id, "type": item.type}
    if item.type == "worker_complete":
        return base | {
            "worker_id": item.sender,
            "status": item.data.get("status", "success"),
            "changes": item.data.get("changes", []),
            "message": item.body,
        }
    if item.type == "question":
        return base | {"from": item.sender, "question_id": item.data.get("question_id", item.id), "body": item.body}
    if item.type == "message":
        return base | {"from": item.sender, "body": item.body}
    return base | {"from": item.sender, "body": item.body} | {k: v for k, v in item.data.items() if k not in base}


class OneEvent(Condition[Event]):
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
        got = await _claim_oldest(w, self.claim_types)
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
        bus, caller, OneEvent(types), timeout=timeout, on_progress=on_progress, control=control, settings=settings
    )


# --------------------------------------------------------------------------- agents idle/closed
class AgentsState(Condition[AgentWait]):
    """Until the targets are idle (or closed) / closed; `match` any or all (seed 001)."""

    kind = "agents"
    tool = "wait_agent"

    def __init__(
        self,
        wait_id: str,
        targets: Sequence[Agent],
        kind: AgentKind,
        match: Match,
        description: str,
        deadline_ts: float | None,
    ) -> None:
        super().__init__(description, targets)
        self.wait_id, self.wait_kind, self.match, self.deadline_ts = wait_id, kind, match, deadline_ts
        self.state: dict[str, Agent] = {a.id: a for a in targets}
        self.wanted = ("idle", "closed") if kind == "agent-idle" else ("closed",)

    def _split(self) -> tuple[list[str], list[str], list[str]]:
        ok = [a for a, s in self.state.items() if s.status in self.wanted]
        dead = [a for a, s in self.state.items() if s.status == "dead"]
        pending = [a for a in self.state if a not in ok and a not in dead]
        return ok, pending, dead

    async def step(self, w: Waiting) -> AgentWait | None:
        changed = w.agents_changed(self.state)
        if not changed and w.changed is not None:
            return None  # nothing it depends on changed since the last step said "not yet"
        self.state.update(await w.bus.get_agents(changed))
        self.targets = list(self.state.values())
        ok, pending, dead = self._split()
        if pending and (self.match == "all" or not ok):
            return None
        satisfied = bool(ok) if self.match == "any" else not dead
        if not satisfied:
            return self._result("agent_dead")
        return self._result("agent_idle" if self.wait_kind == "agent-idle" else "agent_closed")

    def progress(self) -> str:
        ok, _pending, dead = self._split()
        msg = f"{len(ok)}/{len(self.state)} {self.wait_kind.removeprefix('agent-')}"
        if dead:
            msg += f" · dead: {', '.join(self.state[a].name for a in dead)}"
        return msg

    def ended(self, why: Ending, w: Waiting) -> AgentWait:
        return self._result("timed_out" if why == "timeout" else "interrupted")

    def _result(
        self, status: Literal["agent_closed", "agent_idle", "agent_dead", "timed_out", "interrupted"]
    ) -> AgentWait:
        ok, pending, dead = self._split()
        return AgentWait(
            wait_id=self.wait_id,
            agent_id=next(iter(self.state)),
            kind=self.wait_kind,
            match=self.match,
            resolution=Resolution(
                status=status, resolved=ok, pending=pending, dead=dead, timeout_at=iso(self.deadline_ts)
            ),
        )


async def wait_agents(
    bus: Bus,
    caller: str,
    *,
    id: str,
    agent_id: str,
    agent_ids: Sequence[str] = (),
    kind: str,
    description: str,
    match: str = "all",
    timeout_at: str | None = None,
    on_progress: ProgressFn | None = None,
    control: Control | None = None,
    settings: WaitSettings | None = None,
) -> AgentWait:
    """Until the agents are idle (or closed) / closed; `match` any or all (seed 001).

    A wait that resolved is stored under its `id`: asking again gives the same answer.
    """
    check_id(id, "id")
    if kind not in ("agent-idle", "agent-closed"):
        raise BadInput(f"kind: must be 'agent-idle' or 'agent-closed', got {kind!r}")
    if match not in ("any", "all"):
        raise BadInput(f"match: must be 'any' or 'all', got {match!r}")
    if not isinstance(description, str) or not description.strip() or len(description) > 10 * MAX_NAME_LEN:
        raise BadInput(
            f"description: say in a few words (at most {10 * MAX_NAME_LEN:,} characters) what is being waited for"
        )
    deadline_ts = parse_deadline(timeout_at)
    key = f"wait_agent.{caller}.{id}"
    stored = await bus.get_resolution(key)
    if stored is not None:
        return AgentWait.model_validate(stored)
    targets = await resolve_agents(bus, [agent_id, *agent_ids], "agentIds")
    await ensure_registered(bus, caller)
    timeout = None if deadline_ts is None else max(0.0, deadline_ts - now())
    # both checked above
    condition = AgentsState(id, targets, cast(AgentKind, kind), cast(Match, match), description, deadline_ts)
    result = await run(
        bus, caller, condition, timeout=timeout, on_progress=on_progress, control=control, settings=settings
    )
    if result.resolution.status not in ("timed_out", "interrupted"):
        await bus.put_resolution(key, result.to_json())
    return result


def parse_deadline(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        if len(value) > MAX_NAME_LEN:
            raise ValueError
        dt = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise BadInput(f"timeoutAt: {shown(value)} is not an ISO-8601 time such as 2026-01-31T12:00:00Z") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


# --------------------------------------------------------------------------- file signals
def glob_base(pattern: str) -> str:
    """The deepest folder of `pattern` without glob characters: what to watch."""
    parts = []
    for part in pattern.split(os.sep):
        if glob.has_magic(part):
            break
        parts.append(part)
    base = os.sep.join(parts) or os.sep
    return base if not os.path.isfile(base) or base != pattern else os.path.dirname(base)


def scan_root(pattern: str) -> str:
    """The folder a scan of `pattern` starts in and never leaves: its literal folders."""
    parts = pattern.split(os.sep)
    literal = next((i for i, part in enumerate(parts) if glob.has_magic(part)), len(parts) - 1)
    return os.sep.join(parts[:literal]) or os.sep


class FilesMatching(Condition[Signal]):
    """Until at least `min_count` files match `pattern` (an absolute path or glob)."""

    kind = "signal"
    tool = "wave_wait_for_signal"

    def __init__(self, pattern: str, min_count: int) -> None:
        base = glob_base(pattern)
        super().__init__(f"{min_count} file(s) matching {pattern}", other_targets=[pattern], watch_dirs=[base])
        self.pattern, self.min_count = pattern, min_count
        self.root = scan_root(pattern)
        self.found: list[str] = []
        self.note: str | None = None  # why the last scan may have missed files

    async def step(self, w: Waiting) -> Signal | None:
        # off the event loop, never following a link, bounded in entries and by the deadline
        res = await signals.scan_async(self.pattern, root=self.root, deadline=w.deadline)
        self.found, self.note = res.matched, res.note()
        return Signal(matched=self.found, elapsed_sec=w.elapsed) if len(self.found) >= self.min_count else None

    def progress(self) -> str:
        return f"{len(self.found)}/{self.min_count} files" + (f" ({self.note})" if self.note else "")

    def ended(self, why: Ending, w: Waiting) -> Signal:
        if why == "interrupted":
            return Signal(interrupted=True, partial_matches=self.found, elapsed_sec=w.elapsed)
        return Signal(timed_out=True, partial_matches=self.found, elapsed_sec=w.elapsed)


async def wait_signal(
    bus: Bus,
    caller: str,
    pattern: str,
    *,
    timeout: float = 1800,
    min_count: int = 1,
    on_progress: ProgressFn | None = None,
    control: Control | None = None,
    settings: WaitSettings | None = None,
) -> Signal:
    """Until at least `min_count` files match `pattern` (an absolute path or glob)."""
    timeout = check_timeout(timeout, "timeout_sec")
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        raise BadInput(f"min_count: must be a whole number ≥ 1, got {min_count!r}")
    if not os.path.isabs(check_path(pattern, "signal_path")):
        raise BadInput(f"signal_path: {shown(pattern, 300)} must be absolute here (faces resolve relative paths)")
    signals.check_pattern(pattern, scan_root(pattern))  # its levels and names bounded before the wait starts
    return await run(
        bus,
        caller,
        FilesMatching(pattern, min_count),
        timeout=timeout,
        on_progress=on_progress,
        control=control,
        settings=settings,
    )
