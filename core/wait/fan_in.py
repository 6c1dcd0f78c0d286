"""A fan-in: one message from each listed agent; a dead, idle or closed one ends its part early."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Sequence
from typing import Literal

from ..agents import ensure_registered, resolve_agents
from ..bus import Bus
from ..bus.keys import inbox_key
from ..errors import BadInput
from ..model import Agent, Item, ItemRef, TargetStatus
from ..results import (
    FanIn,
    TargetResult,
    flight_facts,
)
from .engine import (
    AGENT_TYPES,
    NAMES_SHOWN,
    Condition,
    Control,
    Ending,
    ProgressFn,
    Waiting,
    WaitSettings,
    check_timeout,
    names_of,
    run,
)


class FanInCondition(Condition[FanIn]):
    """One message from each target; a dead, idle or closed target ends its part early.

    Takes at most one message (the oldest) per target; messages from others stay.
    """

    kind = "fan_in"
    tool = "wait"
    uses_inbox = True

    def __init__(self, targets: Sequence[Agent], budget: int | None = None) -> None:
        super().__init__(f"a message from each of {names_of(targets)}", targets)
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
        claimed = await w.bus.claim_each(w.caller, w.id, self.waiting, AGENT_TYPES, relist=everything)
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
        FanInCondition(targets, budget),
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
