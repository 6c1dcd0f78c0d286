"""The wait engine: one loop shared by every kind of wait and every face.

Every wait (what docs/tools.md, "Rules every tool shares", promises every caller):
1. registers itself on the bus and subscribes to changes *before* it reads;
2. sleeps until the bus says something changed (timers only for the deadline and progress;
   the liveness of its flights is swept for all waits of the process at once, liveness.py),
   then re-reads the state it needs;
3. returns as soon as its condition holds or nothing left can change the outcome;
4. on timeout or interrupt returns normally with the partial state;
5. on cancellation gives its claims back to the inbox in their original order.

A kind of wait is one `Condition` object: what it waits on (for the wait record), a
`step` from the bus's state to a result (or None: not yet), its progress line and its
result when it ends early. `run` is the engine that drives any of them. Each kind lives in a module of its own beside this one
(docs/words.md, "Kinds of wait", names them): its condition, and the public function
(`wait_next`, `wait_fan_in`, ...) that checks its input, builds the condition and runs it.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
import weakref
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

import anyio

from .. import watch
from ..admission import sweep
from ..agents import SWEEP_INTERVAL
from ..bus import Bus, Changes
from ..bus.keys import FILES_KEY, agent_key, agent_of, inbox_key, interrupt_key
from ..delivery import Delivery, take_and_end
from ..errors import BadInput
from ..ids import new_id
from ..model import AGENT_ITEM_TYPES, Agent, Item, WaitKind, WaitRecord, now
from ..proc import command_process, hostname
from ..results import (
    Result,
)
from . import liveness

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
#: there, a wait on more targets than this re-reads the next this-many of them (their records
#: and queued items) on every rescan, not all of them every RELIABLE_BACKSTOP: re-reading
#: 100,000 flights took 5.5 s of the wait's step, and a report arriving then waited for it
BACKSTOP_SLICE = 500

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
        self.wake()

    def wake(self, key: str | None = None) -> None:
        """Step the wait now: something it reads changed in this process. `key` says what (a
        join's check ended: `CHECKS_KEY`), so the step re-reads that alone; None: anything."""
        if self._changes is not None:
            self._changes.poke(key)


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
    #: with `changed`, the senders whose items arrived in the caller's inbox (a wait by
    #: sender: a fan-in); None: unknown, any of them may have sent
    arrived: set[str] | None = None
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
    is not empty) and under `watch_dirs`, and has the liveness of `live_targets` swept.
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

    async def finish(self, w: Waiting, result: R) -> R:
        """Last work once the result is decided, before the claims are settled: give back what
        the result does not carry, act on it (a join's stop_rest). The result as it ends."""
        return result

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

    def wake_at(self) -> float | None:
        """When (time.monotonic()) the step must run again though nothing changed: a grace the
        condition gives something on its way; None: only changes and the engine's timers."""
        return None

    def live_targets(self) -> list[Agent]:
        """The targets whose liveness still matters (swept by the process's sweeper, liveness.py)."""
        return [a for a in self.targets if not a.finished]

    def record(self, w: Waiting, timeout: float | None) -> WaitRecord:
        pid, start = command_process()
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
        self.next_write: float | None = None
        self.rescans = 0
        self.backstop_at = 0  # where the next slice of the targets starts (BACKSTOP_SLICE)
        self.writing: asyncio.Task[None] | None = None  # the progress line being written
        #: raised by the step after it: a progress write or a liveness sweep that failed
        self.failed: Exception | None = None
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
        swept: liveness.Sweeper | None = None
        cancelled = True
        try:
            if c.watch_dirs:  # still before the first read
                files = watch.subscribe(c.watch_dirs, prefixes=c.watch_dirs, wakes=changes, key=FILES_KEY)
            if c.uses_inbox:
                await recover(w.bus, w.caller)
            if c.targets:
                await sweep(w.bus, c.targets)
                swept = liveness.sweeper(w.bus)  # taken and joined in one step: none ends between
                swept.add(w.id, c.live_targets, self.s.sweep_every, self._failed)
            changes.reset()  # the first step reads everything: what changed so far is in it
            w.changed = w.arrived = None
            if c.claims_oldest:  # registered and the first claim made in one step
                w.first_claim = await w.bus.register_wait(
                    record, claim_from=w.caller, types=c.claim_types, limit=c.claim_limit
                )
            else:
                await w.bus.register_wait(record)
            result = await c.finish(w, await self._loop(changes))
            cancelled = False
            return result
        finally:
            if swept is not None:
                swept.remove(w.id)
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

        Rescans (the backstop for dropped change events) run on the way. A death the
        process's liveness sweep records is a change, which wakes this wait.
        """
        while True:
            t = time.monotonic()
            if self.deadline is not None and t >= self.deadline:
                return False
            due = self.c.wake_at()  # no step runs while this wait sleeps: it holds until then
            timers = (self.deadline, self.next_progress, self.next_rescan, self.next_write, due)
            wake_at = min(x for x in timers if x is not None)
            with anyio.move_on_after(max(0.0, wake_at - t)):
                await anext(changes)
                self.w.changed = _changed(changes)
                self.w.arrived = _arrivals(changes)
                return True
            t = time.monotonic()
            if t >= self.next_rescan:  # the backstop: recover, and read everything once
                self.next_rescan = t + self.s.rescan_every
                self.rescans += 1
                if self.c.uses_inbox:
                    await recover(self.w.bus, self.w.caller)
                if not self.w.bus.reliable_changes:
                    self.w.changed = self.w.arrived = None
                    return True
                if len(self.c.targets) > BACKSTOP_SLICE:
                    self._backstop_slice()
                    return True
                if self.rescans % RELIABLE_BACKSTOP == 0:
                    self.w.changed = self.w.arrived = None
                    return True
                if self.c.watch_dirs:  # the watcher's events may be dropped too: scan them
                    self.w.changed, self.w.arrived = {FILES_KEY}, set()
                    return True
                continue
            if t >= self.next_progress or any(x is not None and t >= x for x in (self.next_write, due)):
                self.w.changed, self.w.arrived = set(), set()  # a beat or a grace: nothing new to read
                return True

    def _backstop_slice(self) -> None:
        """Mark the next BACKSTOP_SLICE targets changed, and arrived from: the step re-reads
        their records and their queued items. Every target is re-read once in
        len(targets) / BACKSTOP_SLICE rescans (100,000 flights: 17 minutes; 2,000: 20 s)."""
        start = self.backstop_at % len(self.c.targets)
        ids = [a.id for a in self.c.targets[start : start + BACKSTOP_SLICE]]
        self.backstop_at = start + len(ids)
        self.w.changed = {agent_key(a) for a in ids} | {inbox_key(self.w.caller), FILES_KEY}
        self.w.arrived = set(ids)

    async def _progress(self, msg: str, done: bool) -> None:
        """Write the progress line to the wait's record (at most every `progress_write_every`,
        so a fan-in over 1,000 flights does not rewrite it on every wake; a record naming
        more than 1,000 targets, longer in proportion: each write is a whole record) and
        report it to the face when it changed or a beat is due. Once the result is decided
        nothing is reported: the result says everything, and a report sent just before it
        can reach the caller's handler after it."""
        if self.failed is not None:
            raise self.failed
        if done:  # a finished wait's record is about to go, and its result is on its way
            return
        t = time.monotonic()
        if msg != self.written:
            every = self.s.progress_write_every * max(1.0, len(self.c.targets) / 1000)
            busy = self.writing is not None and not self.writing.done()
            if t - self.written_at >= every and not busy:
                self.writing = asyncio.create_task(self._write(msg), name="wavewait-wait-progress")
                self.written, self.written_at, self.next_write = msg, t, None
            else:  # due later, or once the write under way is done
                self.next_write = max(self.written_at + every, t + self.s.progress_write_every if busy else t)
        if msg != self.line:
            self.line, self.still_since = msg, t
        await self._report(msg, t)

    async def _write(self, msg: str) -> None:
        """Write the progress line to the wait's record beside the steps, not in them: on
        PostgreSQL the record of a wait on 100,000 flights is rewritten whole (150 ms), and a
        report arriving meanwhile would wait for it. A failure wakes the wait, whose next
        step raises it (`_progress`), as if written there."""
        try:
            await self.w.bus.update_wait(self.w.id, msg)
        except Exception as e:
            self._failed(e)

    def _failed(self, e: Exception) -> None:
        """Work done beside the steps failed: wake the wait, whose next step raises it."""
        self.failed = e
        self.control.wake()

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
        if self.writing is not None:  # the record goes with the wait: the line is not needed
            self.writing.cancel()
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


async def recover(bus: Bus, inbox: str) -> None:
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


def _arrivals(changes: Changes) -> set[str] | None:
    """Who sent, with what `_changed` last said; None from a stream that does not say."""
    arrivals: Callable[[], set[str] | None] | None = getattr(changes, "arrivals", None)
    return arrivals() if arrivals is not None else None


def names_of(agents: Sequence[Agent]) -> str:
    return ", ".join(a.name for a in agents)


#: the item types a wait takes from flights: their reports, the types `model.is_report` accepts
AGENT_TYPES = sorted(AGENT_ITEM_TYPES)
#: a progress line names at most this many targets per list ("... and 9,980 more")
NAMES_SHOWN = 20


async def claim_oldest(w: Waiting, types: Sequence[str] | None, limit: int = 1) -> list[Item]:
    """Claim up to `limit` of the oldest pending items of these types in the caller's inbox
    (FIFO), when the inbox may have changed since the last step (one before found none)."""
    if w.first_claim is not None:  # the registration made this step's claim
        got, w.first_claim = w.first_claim, None
        return got
    if not w.touched(inbox_key(w.caller)):
        return []
    return await w.bus.claim_next(w.caller, w.id, types, limit)  # one statement on PostgreSQL
