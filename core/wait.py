"""The wait engine: one loop shared by every kind of wait and every face.

Every wait (DESIGN, "Semantics every wait shares"):
1. registers itself on the bus and subscribes to changes *before* it reads;
2. sleeps until the bus says something changed (timers only for the deadline, progress
   and liveness sweeps), then re-reads the state it needs;
3. returns as soon as its condition holds or nothing left can change the outcome;
4. on timeout or interrupt returns normally with the partial state;
5. on cancellation gives its claims back to the inbox in their original order.
"""

from __future__ import annotations

import glob
import inspect
import math
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import Literal

import anyio

from . import watch
from .agents import SWEEP_INTERVAL, ensure_agent, resolve_agents, sweep
from .bus import Bus, Changes
from .errors import BadInput
from .ids import check_id, check_type, new_id
from .model import AGENT_ITEM_TYPES, Agent, Item, TargetStatus, WaitKind, WaitRecord, now
from .proc import hostname, me
from .results import (
    AgentWait,
    Event,
    FanIn,
    NextMessage,
    Resolution,
    Signal,
    TargetResult,
    iso,
)

PROGRESS_WRITE_EVERY = 0.1  # how often the wait's record on the bus may be rewritten
PROGRESS_EVERY = 10.0  # the MCP face must report at least every 15 s
#: how often a wait re-reads with no change reported, and returns claims of dead waiters:
#: a backstop for change events the kernel dropped (its queue overflows silently)
RESCAN_EVERY = 5.0


@dataclass
class Progress:
    elapsed: float
    total: float | None
    message: str
    received: tuple[str, ...] = ()  # ids of the targets received so far (fan-in)


ProgressFn = Callable[[Progress], Awaitable[None] | None]


@dataclass
class Control:
    """A handle a face keeps to interrupt its own wait in-process (the TUI's Escape)."""

    wait_id: str = field(default_factory=new_id)
    interrupted: bool = False
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


class _Wait:
    """The shared loop. A kind supplies `step()`, which reads state and says if it is done."""

    def __init__(
        self,
        bus: Bus,
        caller: str,
        *,
        kind: WaitKind,
        tool: str,
        timeout: float | None,
        targets: Sequence[Agent] = (),
        description: str = "",
        on_progress: ProgressFn | None = None,
        control: Control | None = None,
        inbox: bool = False,
        extra_targets: Sequence[str] = (),
    ) -> None:
        self.bus, self.caller, self.kind, self.tool = bus, caller, kind, tool
        self.control = control or Control()
        self.id = self.control.wait_id
        self.targets = list(targets)
        self.timeout = timeout
        self.description = description
        self.on_progress = on_progress
        self.uses_inbox = inbox
        self.extra_targets = list(extra_targets)
        self.started = time.monotonic()
        self.deadline = None if timeout is None else self.started + timeout
        self.extra_changes: Changes | None = None
        self.received: dict[str, Item] = {}  # a fan-in's claims by sender; ids go out with progress

    @property
    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 3)

    async def run(
        self,
        step: Callable[[], Awaitable[bool]],
        progress: Callable[[], str],
    ) -> Literal["done", "timeout", "interrupted"]:
        pid, start = me()
        record = WaitRecord(
            id=self.id,
            waiter=self.caller,
            kind=self.kind,
            tool=self.tool,
            targets=[a.id for a in self.targets] + self.extra_targets,
            target_names=[a.name for a in self.targets] + self.extra_targets,
            description=self.description,
            host=hostname(),
            pid=pid,
            pid_start=start,
            deadline=None if self.timeout is None else now() + self.timeout,
            progress=progress(),
        )
        await self.bus.register_wait(record)
        changes = await self.bus.subscribe(
            inboxes=[self.caller] if self.uses_inbox else [],
            agents=bool(self.targets),
            wait_id=self.id,
        )
        self.control._changes = changes
        cancelled = True
        try:
            if self.uses_inbox:
                await self.bus.recover(self.caller)
            if self.targets:
                await sweep(self.bus, self.targets)
            outcome = await self._loop(changes, step, progress, record.progress)
            cancelled = False
            return outcome
        finally:
            changes.close()
            with anyio.CancelScope(shield=True):
                await self._finish(cancelled)

    async def _loop(
        self,
        changes: Changes,
        step,
        progress,
        registered: str,
    ) -> Literal["done", "timeout", "interrupted"]:
        last_msg, written, written_at, next_write = None, registered, time.monotonic(), None
        next_progress = time.monotonic()
        next_sweep = time.monotonic() + SWEEP_INTERVAL
        next_rescan = time.monotonic() + RESCAN_EVERY
        while True:
            done = await step()  # read first: even an interrupt returns the state as it is now
            msg = progress()
            if msg != written and not done:  # a finished wait's record is about to go
                # the record is for live views: rewrite it at most every PROGRESS_WRITE_EVERY,
                # so a fan-in over 1,000 flights does not rewrite it on every wake
                if time.monotonic() - written_at >= PROGRESS_WRITE_EVERY:
                    await self.bus.update_wait(self.id, msg)
                    written, written_at, next_write = msg, time.monotonic(), None
                else:
                    next_write = written_at + PROGRESS_WRITE_EVERY
            if msg != last_msg or time.monotonic() >= next_progress:
                await self._report(msg)
                last_msg, next_progress = msg, time.monotonic() + PROGRESS_EVERY
            if done:
                return "done"
            if self.control.interrupted or await self.bus.interrupted(self.id):
                return "interrupted"
            while True:  # sleep until a change, the deadline, a progress beat, a sweep or a rescan
                t = time.monotonic()
                if self.deadline is not None and t >= self.deadline:
                    return "timeout"
                timers = (self.deadline, next_progress, next_rescan, next_write, next_sweep if self.targets else None)
                wake_at = min(x for x in timers if x is not None)
                woke = False
                with anyio.move_on_after(max(0.0, wake_at - t)):
                    await self._next_change(changes)
                    woke = True
                t = time.monotonic()
                if woke or t >= next_progress or (next_write is not None and t >= next_write):
                    break
                if t >= next_rescan:
                    next_rescan = t + RESCAN_EVERY
                    if self.uses_inbox:
                        await self.bus.recover(self.caller)
                    break
                if self.targets and t >= next_sweep:
                    # liveness only: a death it records is a change, which wakes this wait
                    next_sweep = t + SWEEP_INTERVAL
                    await sweep(self.bus, [a for a in self.targets if not a.finished])

    async def _next_change(self, changes: Changes) -> None:
        if self.extra_changes is None:
            await changes.wait()
            return
        async with anyio.create_task_group() as tg:

            async def one(c: Changes) -> None:
                await c.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(one, changes)
            tg.start_soon(one, self.extra_changes)

    async def _report(self, msg: str) -> None:
        if self.on_progress is None:
            return
        r = self.on_progress(
            Progress(elapsed=self.elapsed, total=self.timeout, message=msg, received=tuple(self.received))
        )
        if inspect.isawaitable(r):
            await r

    async def _finish(self, cancelled: bool) -> None:
        try:
            if self.uses_inbox:
                if cancelled:
                    await self.bus.release(self.caller, self.id)
                else:
                    await self.bus.take(self.caller, self.id, self.caller)
        finally:
            await self.bus.end_wait(self.id)


def _names(agents: Sequence[Agent]) -> str:
    return ", ".join(a.name for a in agents)


# --------------------------------------------------------------------------- next message
async def wait_next(
    bus: Bus,
    caller: str,
    timeout: float,
    *,
    on_progress: ProgressFn | None = None,
    control: Control | None = None,
) -> NextMessage:
    """The oldest message (or completion, or question) in the caller's inbox, FIFO."""
    timeout = check_timeout(timeout)
    await ensure_agent(bus, caller)
    w = _Wait(
        bus,
        caller,
        kind="next",
        tool="wait",
        timeout=timeout,
        inbox=True,
        on_progress=on_progress,
        control=control,
        description="next message",
    )
    got: list[Item] = []

    async def step() -> bool:
        for ref in await bus.pending(caller):
            if ref.type in AGENT_ITEM_TYPES and (item := await bus.claim(caller, ref, w.id)):
                got.append(item)
                return True
        return False

    outcome = await w.run(step, lambda: "received a message" if got else "no message yet")
    if not got:
        return NextMessage(status="timeout" if outcome == "timeout" else "interrupted", elapsed_sec=w.elapsed)
    item = got[0]
    sender = await bus.get_agent(item.sender)
    return NextMessage(
        status="received",
        sender=item.sender,
        name=sender.name if sender else item.sender,
        message=item.body,
        sent_at=iso(item.sent_at),
        type=item.type,
        elapsed_sec=w.elapsed,
    )


# --------------------------------------------------------------------------- fan-in
async def wait_fan_in(
    bus: Bus,
    caller: str,
    timeout: float,
    from_agents: Sequence[str],
    *,
    on_progress: ProgressFn | None = None,
    control: Control | None = None,
) -> FanIn:
    """Wait for one message from each listed agent; dead, idle or closed ones end early.

    Takes at most one message (the oldest) per listed agent; messages from others stay.
    """
    timeout = check_timeout(timeout)
    if not from_agents:
        raise BadInput("from_agents: list at least one agent id or prefix (or omit it for the next message)")
    targets = await resolve_agents(bus, from_agents, "from_agents")
    await ensure_agent(bus, caller)
    w = _Wait(
        bus,
        caller,
        kind="fan_in",
        tool="wait",
        timeout=timeout,
        targets=targets,
        inbox=True,
        on_progress=on_progress,
        control=control,
        description=f"a message from each of {_names(targets)}",
    )
    received = w.received
    state: dict[str, Agent] = {a.id: a for a in targets}

    async def step() -> bool:
        waiting = [a_id for a_id in state if a_id not in received]
        # agents first, then the inbox: a message sent before a death or idle is then seen
        for a_id in waiting:
            state[a_id] = await bus.get_agent(a_id) or state[a_id]
        w.targets = list(state.values())
        wanted = set(waiting)
        for ref in await bus.pending(caller):
            if ref.sender in wanted and ref.type in AGENT_ITEM_TYPES:
                item = await bus.claim(caller, ref, w.id)
                if item is not None:
                    received[ref.sender] = item
                    wanted.discard(ref.sender)
        return all(a_id in received or state[a_id].status != "running" for a_id in state)

    def progress() -> str:
        got = [state[a].name for a in state if a in received]
        rest = [s.name for a, s in state.items() if a not in received]
        msg = f"{len(got)}/{len(state)} received"
        msg += f": {', '.join(got)}" if got else ""
        return msg + (f" · waiting on {', '.join(rest)}" if rest else "")

    outcome = await w.run(step, progress)
    results = []
    for a_id, agent in state.items():
        if a_id in received:
            item = received[a_id]
            word: TargetStatus = "needs_input" if item.type == "question" else "received"  # awaits an answer
            results.append(TargetResult(agent_id=a_id, name=agent.name, status=word, message=item.body))
        else:
            results.append(
                TargetResult(
                    agent_id=a_id, name=agent.name, status=agent.state, reason=agent.reason if agent.finished else None
                )
            )
    status = {"done": "complete", "timeout": "timeout", "interrupted": "interrupted"}[outcome]
    return FanIn(status=status, results=results, elapsed_sec=w.elapsed)


# --------------------------------------------------------------------------- typed events
def event_view(item: Item) -> dict:
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


async def wait_event(
    bus: Bus,
    caller: str,
    timeout: float = 300,
    types: Sequence[str] | None = None,
    *,
    on_progress: ProgressFn | None = None,
    control: Control | None = None,
) -> Event:
    """One event of the given types from the caller's inbox, FIFO; others stay queued."""
    timeout = check_timeout(timeout, "timeout_secs")
    if types is not None:
        if isinstance(types, str) or not isinstance(types, Sequence) or not types:
            raise BadInput("types: give a non-empty list of event types, or omit it for all types")
        types = [check_type(t, f"types[{i}]") for i, t in enumerate(types)]
    await ensure_agent(bus, caller)
    wanted = set(types) if types else None
    w = _Wait(
        bus,
        caller,
        kind="event",
        tool="wait_for_event",
        timeout=timeout,
        inbox=True,
        on_progress=on_progress,
        control=control,
        description=f"an event of type {', '.join(types)}" if types else "any event",
    )
    got: list[Item] = []

    async def step() -> bool:
        for ref in await bus.pending(caller):
            if (wanted is None or ref.type in wanted) and (item := await bus.claim(caller, ref, w.id)):
                got.append(item)
                return True
        return False

    outcome = await w.run(step, lambda: "event received" if got else "no event yet")
    if got:
        return Event(**event_view(got[0]))
    return Event(type="timeout" if outcome == "timeout" else "interrupted")


# --------------------------------------------------------------------------- agents idle/closed
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
) -> AgentWait:
    """Until the agents are idle (or closed) / closed; `match` any or all (seed 001)."""
    check_id(id, "id")
    if kind not in ("agent-idle", "agent-closed"):
        raise BadInput(f"kind: must be 'agent-idle' or 'agent-closed', got {kind!r}")
    if match not in ("any", "all"):
        raise BadInput(f"match: must be 'any' or 'all', got {match!r}")
    if not isinstance(description, str) or not description.strip():
        raise BadInput("description: say in a few words what is being waited for")
    deadline_ts = _parse_deadline(timeout_at)
    key = f"wait_agent.{caller}.{id}"
    stored = await bus.get_resolution(key)
    if stored is not None:
        return AgentWait.model_validate(stored)
    targets = await resolve_agents(bus, [agent_id, *agent_ids], "agentIds")
    await ensure_agent(bus, caller)
    timeout = None if deadline_ts is None else max(0.0, deadline_ts - now())
    w = _Wait(
        bus,
        caller,
        kind="agents",
        tool="wait_agent",
        timeout=timeout,
        targets=targets,
        on_progress=on_progress,
        control=control,
        description=description,
    )
    state: dict[str, Agent] = {a.id: a for a in targets}
    wanted = ("idle", "closed") if kind == "agent-idle" else ("closed",)

    def split() -> tuple[list[str], list[str], list[str]]:
        ok = [a for a, s in state.items() if s.status in wanted]
        dead = [a for a, s in state.items() if s.status == "dead"]
        pending = [a for a in state if a not in ok and a not in dead]
        return ok, pending, dead

    async def step() -> bool:
        for a_id in state:
            state[a_id] = await bus.get_agent(a_id) or state[a_id]
        w.targets = list(state.values())
        ok, pending, _dead = split()
        if match == "any":
            return bool(ok) or not pending
        return not pending

    def progress() -> str:
        ok, _pending, dead = split()
        msg = f"{len(ok)}/{len(state)} {kind.removeprefix('agent-')}"
        if dead:
            msg += f" · dead: {', '.join(state[a].name for a in dead)}"
        return msg

    outcome = await w.run(step, progress)
    ok, pending, dead = split()
    if outcome == "done":
        satisfied = bool(ok) if match == "any" else not dead
        status = ("agent_idle" if kind == "agent-idle" else "agent_closed") if satisfied else "agent_dead"
    else:
        status = "timed_out" if outcome == "timeout" else "interrupted"
    result = AgentWait(
        wait_id=id,
        agent_id=targets[0].id,
        kind=kind,
        match=match,
        resolution=Resolution(status=status, resolved=ok, pending=pending, dead=dead, timeout_at=iso(deadline_ts)),
    )
    if outcome == "done":
        await bus.put_resolution(key, result.to_json())
    return result


def _parse_deadline(value: str | None) -> float | None:
    if value is None:
        return None
    from datetime import datetime

    try:
        dt = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise BadInput(f"timeoutAt: {value!r} is not an ISO-8601 time such as 2026-01-31T12:00:00Z") from None
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


def matches(pattern: str) -> list[str]:
    return sorted(os.path.abspath(p) for p in glob.glob(pattern, recursive=True))


async def wait_signal(
    bus: Bus,
    caller: str,
    pattern: str,
    *,
    timeout: float = 1800,
    min_count: int = 1,
    on_progress: ProgressFn | None = None,
    control: Control | None = None,
) -> Signal:
    """Until at least `min_count` files match `pattern` (an absolute path or glob)."""
    timeout = check_timeout(timeout, "timeout_sec")
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        raise BadInput(f"min_count: must be a whole number ≥ 1, got {min_count!r}")
    if not os.path.isabs(pattern):
        raise BadInput(f"signal_path: {pattern!r} must be absolute here (faces resolve relative paths)")
    base = glob_base(pattern)
    w = _Wait(
        bus,
        caller,
        kind="signal",
        tool="wave_wait_for_signal",
        timeout=timeout,
        on_progress=on_progress,
        control=control,
        extra_targets=[pattern],
        description=f"{min_count} file(s) matching {pattern}",
    )
    sub = watch.subscribe([base], prefixes=[base])  # before the first read
    w.extra_changes = sub
    found: list[str] = []

    async def step() -> bool:
        found[:] = matches(pattern)
        return len(found) >= min_count

    try:
        outcome = await w.run(step, lambda: f"{len(found)}/{min_count} files")
    finally:
        sub.close()
    if outcome == "done":
        return Signal(matched=found, elapsed_sec=w.elapsed)
    if outcome == "interrupted":
        return Signal(interrupted=True, partial_matches=found, elapsed_sec=w.elapsed)
    return Signal(timed_out=True, partial_matches=found, elapsed_sec=w.elapsed)
