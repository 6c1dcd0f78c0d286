"""A fan-in, or join: one wait over flights, files and events, met by all, any or K of them.

With only flights and no join option it is the fan-in it always was: one message from each
listed agent, a dead, idle or closed one ending its part early. A join (docs/joins.md) adds a
wave's flights, file targets (`GLOB:N`) and event targets, a need (all, any or K), a check a
flight's report must pass, and stopping the flights left once the need is met.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from .. import freeing
from ..agents import ensure_registered, resolve_agents
from ..bus import Bus
from ..bus.keys import FILES_KEY, inbox_key
from ..checks import JOIN_TIMEOUT
from ..errors import BadInput
from ..ids import check_type, check_wave
from ..limits import MAX_AGENT_IDS, MAX_LIST_LEN, check_shell, shown
from ..model import AGENT_ITEM_TYPES, Agent, Item, ItemRef, TargetStatus
from ..results import (
    EventEntry,
    FanIn,
    FileEntry,
    TargetResult,
    event_view,
    flight_facts,
)
from ..signals import glob_base
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
from .join_checks import JoinChecks
from .join_files import FilesTarget, FileTarget, file_targets, scan
from .stop_rest import stop_rest

Status = Literal["complete", "partial", "needs_input", "unmet", "timeout", "interrupted"]
#: the share of the output budget the reports taken may fill: the rest lists the other
#: flights, above all those whose report stays queued, which the caller asks for next
REPORTS_SHARE = 0.8
#: seconds a join waits for a question its flight's record shows before it is in the caller's
#: inbox (the asker writes the two one after the other: milliseconds, longer on a busy machine)
QUESTION_GRACE = 1.0


class Join(BaseModel):
    """What a join adds to a fan-in (docs/joins.md); the defaults are today's fan-in."""

    wave: str | None = None
    files: list[FilesTarget] = Field(default_factory=list)
    events: list[str] = Field(default_factory=list)
    need: int | Literal["all", "any"] = "all"
    check: str | None = None
    check_timeout: float = JOIN_TIMEOUT
    stop_rest: bool = False

    @property
    def plain(self) -> bool:
        """Nothing of a join asked: the result keeps the fan-in's words."""
        return self == Join()


class FanInCondition(Condition[FanIn]):
    """One message from each target flight (a dead, idle or closed one ends its part early),
    and, in a join, its files and events, until `need` of them are met.

    Takes at most one message (the oldest) per flight; messages from others stay.
    """

    kind = "fan_in"
    tool = "wait"
    uses_inbox = True

    def __init__(
        self,
        targets: Sequence[Agent],
        budget: int | None = None,
        join: Join | None = None,
        files: Sequence[FileTarget] = (),
    ) -> None:
        self.join = join or PLAIN
        self.files = list(files)
        self.events: dict[str, Item | None] = dict.fromkeys(self.join.events)
        watch = sorted({glob_base(f.pattern) for f in self.files})
        what = [f"{f.min_count} file(s) matching {f.shown}" for f in self.files] + [f"a {t} event" for t in self.events]
        description = f"a message from each of {names_of(targets)}" if targets else ""
        description = "; ".join([d for d in (description, *what) if d])
        super().__init__(description, targets, other_targets=[f.shown for f in self.files], watch_dirs=watch)
        total = len(targets) + len(self.files) + len(self.events)
        need = self.join.need
        self.need = total if need == "all" else 1 if need == "any" else need
        self.state: dict[str, Agent] = {a.id: a for a in targets}
        self.place = {a_id: i for i, a_id in enumerate(self.state)}  # the caller's order
        self.got: dict[str, Item] = {}  # claims by sender, in the order received
        self.entries: dict[str, TargetResult] = {}  # their lines of the result
        self.budget = budget  # characters of entries one result may carry (about their JSON)
        self.used = 0
        self.full = False  # the budget is full: a report that comes now stays queued
        self.left: dict[str, None] = {}  # targets whose report stays queued: it did not fit
        self.stepped = False  # the inbox was read once
        # targets without a message yet, in target order; how many of them still run
        self.waiting: dict[str, None] = dict.fromkeys(self.state)
        self.running = sum(1 for a in targets if a.pending)  # queued ones will run: wait for them too
        # the waiting targets that stopped running (dead, idle, closed), kept as they change,
        # so a progress line over 10,000 targets does not look at every one
        self.stopped: dict[str, None] = dict.fromkeys(a.id for a in targets if not a.pending)
        # waiting targets with an open question, kept as they change: the join returns for them
        self.asking: dict[str, None] = dict.fromkeys(a.id for a in targets if a.state == "needs_input")
        # coding flights, whose entries carry their branch, changes and usage: listed now, as
        # a pass over 100,000 records after the result would delay its answer (75 ms)
        self.coding = [a.id for a in targets if a.preset or a.worktree]
        self.met_flights = 0  # entries received (their check passed, or there is none)
        self.asked = 0  # questions this wait took (an ask, a permission): the caller answers them
        self.answered: list[Item] = []  # questions answered before this wait took them: taken, they ask nothing
        #: asking flights whose question to the caller is not in the inbox (yet): until when it is waited for
        self.on_the_way: dict[str, float] = {}
        self.checks: JoinChecks | None = None  # with a check: each report's (wait_fan_in sets it)
        self.checking: dict[str, Item] = {}  # reports whose check runs: the checks' own, or none

    def _update(self, agent: Agent) -> bool:
        """Keep the record and the count of running targets; True if it stopped running."""
        old = self.state[agent.id]
        self.state[agent.id] = agent
        if agent.id in self.waiting:
            if agent.state == "needs_input":
                self.asking[agent.id] = None
            else:
                self.asking.pop(agent.id, None)
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
        or a target stopped running (agents first: a message sent before a death is seen);
        files when their folders changed, events while the need is not met."""
        stopped = False
        if changed := w.agents_changed(self.waiting):
            for agent in (await w.bus.get_agents(changed)).values():
                stopped = self._update(agent) or stopped
        if self.waiting and (stopped or w.touched(inbox_key(w.caller))):
            if self.full:
                await self._leave(w, changed if stopped else ())
            else:
                await self._claim(w)
        if self.asking:
            await self._take_questions(w)
        self._read_verdicts()
        if self.files and w.touched(FILES_KEY):  # a folder of theirs changed, or a rescan
            await scan(self.files, w.deadline)
        if self.events and w.touched(inbox_key(w.caller)) and self.met() < self.need:
            await self._claim_events(w)
        return self._decide(w)

    def _decide(self, w: Waiting) -> FanIn | None:
        if self.asking or self.asked:
            return None if self._question_on_the_way(w) else self._result("needs_input", w)
        met, left = self.met(), len(self.left)
        unsettled = self.running + len(self.checking) + sum(not f.met for f in self.files)
        unsettled += sum(item is None for item in self.events.values())
        if self._settling:  # all, without a check: every target settled, however it ended
            return None if unsettled else self._result("partial" if left else "complete", w)
        if met >= self.need:
            return self._result("complete", w)
        if met + left >= self.need:  # met once what stays queued is taken
            return self._result("partial", w)
        return self._result("unmet", w) if met + left + unsettled < self.need else None

    def verdicts_decide(self, passed: int, failed: int) -> bool:
        """Would verdicts not read yet (`passed` and `failed` of the checks running) end the
        join, as `_decide` would count them? Those wake it at once (core/wait/join_checks.py)."""
        met, left = self.met() + passed, len(self.left)
        unsettled = self.running + len(self.checking) - passed - failed + sum(not f.met for f in self.files)
        unsettled += sum(item is None for item in self.events.values())
        return bool(self.asking or self.asked) or met + left >= self.need or met + left + unsettled < self.need

    @property
    def _settling(self) -> bool:
        """Need all without a check: a flight is met once it settled (reported or ended), as a
        fan-in's. With a check every flight must pass it, so `all` is K = every target."""
        return self.join.need == "all" and self.join.check is None

    def met(self) -> int:
        # settled: taken or ended; a report left queued (the output budget) is counted once taken
        flights = len(self.state) - self.running - self.asked - len(self.left) if self._settling else self.met_flights
        return flights + sum(f.met for f in self.files) + sum(i is not None for i in self.events.values())

    async def _claim(self, w: Waiting) -> None:
        """The oldest pending message of each waited-on target, claimed in one go (where
        another wait took one first, that target's next); one that would overflow the
        budget goes back to its place."""
        # theirs only (a wake by its senders' arrivals, or the first step: the bus's change
        # stream was listening before it); a rescan, the backstop for lost changes, reads all
        everything = w.changed is None and self.stepped
        self.stepped = True
        claimed = await w.bus.claim_each(w.caller, w.id, self.waiting, AGENT_TYPES, relist=everything)
        while answered := [i for i in claimed if await self._answered(w, i)]:
            # taken with the wait, asking nothing: the sender's next report is what counts
            self.answered += answered
            gone = {i.id for i in answered}
            again = await w.bus.claim_each(w.caller, w.id, {i.sender for i in answered}, AGENT_TYPES)
            claimed = [i for i in claimed if i.id not in gone] + [i for i in again if i.id not in gone]
        if self.join.need != "all" and self.join.check is None:
            claimed.sort(key=lambda i: i.seq)  # the first K reports, by their place in the inbox
        for item in claimed:
            ref = ItemRef(item.seq, item.type, item.sender, item.id)
            if self._beyond_need(item) and await w.bus.unclaim(w.caller, ref, w.id):
                continue  # a report past the first K stays queued, at its place, for the next call
            if (self.full or self._overflows(item)) and await w.bus.unclaim(w.caller, ref, w.id):
                self.full = True  # it stays queued, at its place, for the next call
                self._settle(item.sender)
                self.left[item.sender] = None
                continue
            self._got(item)

    async def _answered(self, w: Waiting, item: Item) -> bool:
        """A question answered (or withdrawn) before this wait took it: its flight's record has
        no longer that question open (read again to be sure: the record may have moved on)."""
        if item.type != "question" or item.sender not in self.waiting:
            return False
        qid = (item.data or {}).get("question_id", item.id)
        if self.state[item.sender].question_id == qid:
            return False
        if (fresh := await w.bus.get_agent(item.sender)) is not None:
            self._update(fresh)
        return fresh is not None and fresh.question_id != qid

    async def _take_questions(self, w: Waiting) -> None:
        """The open questions of the flights asking, taken from the inbox where they wait: the
        join returns with each question whole in its flight's entry. One not there (asked of
        someone else, or not delivered yet) is shown from its flight's record."""
        asking = {a: self.state[a].question_id for a in self.asking}
        for ref in await w.bus.pending(w.caller, list(asking)):
            mine = ref.type == "question" and ref.sender in self.asking and asking[ref.sender] == ref.id
            if mine and (item := await w.bus.claim(w.caller, ref, w.id)) is not None:
                self._got(item)

    def _question_on_the_way(self, w: Waiting) -> bool:
        """A flight's record shows a question to the caller that is not in the inbox: an asker
        marks its record first, then delivers (so whoever takes the question can answer it at
        once). Wait for it, up to QUESTION_GRACE, so that the join returns it whole and taken,
        not the record's shortened line with the question left queued; one still not there
        (taken by an earlier wait, its asker gone) is shown from the record."""
        t = time.monotonic()
        self.on_the_way = {
            a: self.on_the_way.get(a, t + QUESTION_GRACE) for a in self.asking if self.state[a].question_to == w.caller
        }
        return any(due > t for due in self.on_the_way.values())

    def wake_at(self) -> float | None:
        return min(self.on_the_way.values(), default=None)

    async def _leave(self, w: Waiting, stopped: Sequence[str]) -> None:
        """The budget is full: the targets whose report is queued now are settled, and their
        reports stay at their place for the next call. Only the senders the change stream
        names are read (and those that stopped: a report sent before a death), so a fan-in
        over 100,000 flights reads the few that sent, not all it waits on."""
        senders: Collection[str] = self.waiting
        if w.arrived is not None and w.changed is not None:
            senders = {s for s in (*w.arrived, *stopped) if s in self.waiting}
        if not senders:
            return
        for ref in await w.bus.pending(w.caller, senders):
            if ref.sender not in self.waiting or ref.type not in AGENT_TYPES:
                continue
            if ref.type != "question":
                self._settle(ref.sender)
                self.left[ref.sender] = None
            elif (item := await w.bus.claim(w.caller, ref, w.id)) is not None:
                self._got(item)  # a question is taken all the same: the caller must answer it

    def _beyond_need(self, item: Item) -> bool:
        """A report the need does not take: K are met already (a question is always taken:
        the caller must answer it; with a check, every report is a candidate)."""
        return (
            self.join.need != "all" and self.join.check is None and item.type != "question" and self.met() >= self.need
        )

    def _settle(self, sender: str) -> None:
        """`sender` is waited on no more: its report was taken, or stays queued."""
        del self.waiting[sender]
        self.stopped.pop(sender, None)
        self.asking.pop(sender, None)
        if self.state[sender].pending:
            self.running -= 1

    def _got(self, item: Item) -> None:
        self.got[item.sender] = item
        self.used += self._cost(item)
        self._settle(item.sender)
        if self.join.check is not None and item.type != "question":
            assert self.checks is not None
            self.checks.start(self.state[item.sender], item)  # counted once its check passed
            return
        self._entry(item, "needs_input" if item.type == "question" else "received")  # a question awaits an answer

    def _entry(self, item: Item, word: TargetStatus, output: str | None = None) -> None:
        # made now, as each report comes: the result over 10,000 targets is then a list, not 10,000 models
        self.entries[item.sender] = TargetResult(
            agent_id=item.sender,
            name=self.state[item.sender].name,
            status=word,
            message=item.body,
            message_id=item.id,
            output=output,
            turn=turn if isinstance(turn := item.data.get("turn"), int) else None,
        )
        self.met_flights += word == "received"
        self.asked += word == "needs_input"

    def _read_verdicts(self) -> None:
        for item, verdict in self.checks.verdicts() if self.checks is not None else ():
            self._entry(
                item, "received" if verdict.passed else "check_failed", None if verdict.passed else verdict.output
            )

    async def _claim_events(self, w: Waiting) -> None:
        for t, item in self.events.items():
            if item is None and self.met() < self.need:
                got = await w.bus.claim_next(w.caller, w.id, [t], 1)
                if got:
                    self.events[t] = got[0]

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
        """Would `item` push the result past the budget? The first message is always taken,
        and a question too: the caller must answer it."""
        if self.budget is None or not self.got or item.type == "question":
            return False
        return self.used + self._cost(item) > self.budget * REPORTS_SHARE

    def _cost(self, item: Item) -> int:
        """The characters `item`'s entry will take in the result, with its flight's facts."""
        agent = self.state[item.sender]
        entry = TargetResult(agent_id=item.sender, name=agent.name, status="received", message=item.body)
        entry.message_id = item.id
        if agent.preset or agent.worktree:
            entry = entry.model_copy(update=flight_facts(agent))
        return entry.chars()

    def progress(self) -> str:
        """Built from counts and at most NAMES_SHOWN names per list, not from every name."""
        if self.join.plain:
            return self._flights_line()
        parts = [f"met {self.met()} / need {self.need}"]
        if self.state:
            parts.append(self._flights_line())
        if self.checking:
            parts.append(f"checking {self._names_of(self.checking, len(self.checking))}")
        parts += [f"{len(f.found)}/{f.min_count} files {f.shown}" for f in self.files]
        parts += [f"{t} event {'met' if item else 'pending'}" for t, item in self.events.items()]
        return " · ".join(parts)

    def _flights_line(self) -> str:
        got: Collection[str] = self.got
        if len(self.state) <= NAMES_SHOWN:  # few: in target order, as people read the list
            got = [a for a in self.state if a in self.got]
        msg = f"{len(self.got)}/{len(self.state)} received"
        msg += f": {self._names_of(got, len(got))}" if got else ""
        msg += f" · {len(self.left):,} more queued (the answer is full)" if self.left else ""
        # a target that stopped is news, never "waiting on": a death changes the line
        ended: Collection[str] = self.stopped
        if len(self.state) <= NAMES_SHOWN:
            ended = [a for a in self.waiting if a in self.stopped]
        msg += f" · {self._names_of(ended, len(ended), with_status=True)}" if ended else ""
        if self.on_the_way:  # only for an instant: the join returns with the question
            msg += f" · {self._names_of(self.on_the_way, len(self.on_the_way))} asked (the question on its way)"
        running = (a for a in self.waiting if a not in self.stopped)
        return msg + (f" · waiting on {self._names_of(running, self.running)}" if self.running else "")

    def ended(self, why: Ending, w: Waiting) -> FanIn:
        return self._result(why, w)

    def claimed(self) -> int:
        return len(self.got) + len(self.answered) + sum(i is not None for i in self.events.values())

    def received(self) -> tuple[str, ...]:
        return tuple(self.got)

    def entry_of(self, a_id: str) -> TargetResult:
        return self._plain(a_id)

    def status_of(self, a_id: str) -> TargetStatus:
        return self._status(a_id)

    def _plain(self, a_id: str) -> TargetResult:
        """The entry of a target whose report was not taken: `reported` when it waits in the
        inbox, else its state, and why it ended."""
        agent = self.state[a_id]
        reason = agent.reason if agent.finished else None
        if a_id in self.checking:
            reason = "its check was still running when the wait ended: stopped, its report is back in your inbox"
        entry = TargetResult(agent_id=a_id, name=agent.name, status=self._status(a_id), reason=reason)
        if entry.status == "needs_input":  # its question, from its record (the item was not taken)
            entry.message, entry.message_id = agent.question, agent.question_id
        return entry

    def _status(self, a_id: str) -> TargetStatus:
        return "reported" if a_id in self.left else self.state[a_id].state

    def _entries(self) -> tuple[list[TargetResult], dict[str, int] | None]:
        """The result's entries, in the caller's order, within the budget: every report taken
        (counted in it as it came); then the targets with news (a report left queued, ended,
        asking, checked); then the others, each group in order while it fits, the first
        NAMES_SHOWN of them in any case (a small fan-in keeps an entry per target). The
        targets left out, by status: counted from what the wait keeps, so a fan-in over
        100,000 flights that ended sizes a few hundred entries, not every target."""
        if self.budget is None:
            return [self.entries.get(a) or self._plain(a) for a in self.state], None
        shown: dict[str, TargetResult] = {}
        room = self._fill(shown, self._news(), self.budget - self.used)
        if room is not None:
            self._fill(shown, self._rest(shown), room)
        omitted: Counter[str] = Counter()
        if hidden := len(self.left) - sum(a in self.left for a in shown):
            omitted["reported"] = hidden
        omitted.update(self._status(a) for a in itertools.chain(self.waiting, self.checking) if a not in shown)
        place = self.place
        results = sorted((*self.entries.values(), *shown.values()), key=lambda e: place[e.agent_id])
        return results, dict(omitted) or None

    def _fill(self, shown: dict[str, TargetResult], ids: Iterable[str], room: int) -> int | None:
        """Add the entries of `ids` to `shown` while they fit `room`: the room left, or None
        once one did not fit (the rest are counted, not sized one by one)."""
        for a_id in ids:
            entry = self._plain(a_id)
            if len(shown) >= NAMES_SHOWN and entry.chars() > room:
                return None
            shown[a_id] = entry
            room -= entry.chars()
        return room

    def _news(self) -> Iterator[str]:
        """Targets without a report taken that have news, in the caller's order."""
        for a_id, agent in self.state.items():
            ended = a_id not in self.entries and (agent.finished or agent.state == "needs_input")
            if ended or a_id in self.left or a_id in self.checking:
                yield a_id

    def _rest(self, shown: Collection[str]) -> Iterator[str]:
        return (a for a in self.state if a not in self.entries and a not in shown)

    def _result(self, status: Status, w: Waiting) -> FanIn:
        results, omitted = self._entries()
        fan = FanIn(status=status, results=results, elapsed_sec=w.elapsed, need=self.need, met=self.met())
        fan.omitted = omitted
        fan.more_waiting = len(self.left) or None
        if self.files:
            fan.files = [
                FileEntry(
                    glob=f.shown,
                    min_count=f.min_count,
                    status="met" if f.met else "pending",
                    matched=len(f.found),
                    files=f.found,
                )
                for f in self.files
            ]
        if self.events:
            fan.events = [
                EventEntry(type=t, status="met" if item else "pending", event=event_view(item) if item else None)
                for t, item in self.events.items()
            ]
        return fan

    async def finish(self, w: Waiting, result: FanIn) -> FanIn:
        """Reports whose check still ran go back to the inbox; so does every report and event
        taken when the join returns `needs_input`: the same join, run again once the question
        is answered, takes them again (nothing taken is lost, as on a timeout)."""
        if self.checks is not None:
            await self.checks.end()  # the checks end with the wait, before their reports go back
        for a_id, item in list(self.checking.items()):
            del self.got[a_id]
            await w.bus.unclaim(w.caller, ItemRef(item.seq, item.type, item.sender, item.id), w.id)
        await self._as_they_are(w, result)
        if result.status == "needs_input":
            await self._give_back(w, result)
        return result

    async def _as_they_are(self, w: Waiting, result: FanIn) -> None:
        """The shown entries of flights still running or queued, from their records as they are
        now. A wait returns on the change it woke for (a question, the K-th report, its
        deadline), and a death recorded an instant before may not have reached it yet: the
        person's panel would say `dead` beside a result that says `running`. Only the entries
        shown are read again (a few hundred at most, in one call), so a fan-in over 100,000
        flights does not pay for the ones it counts."""
        shown = {e.agent_id: i for i, e in enumerate(result.results) if e.status in ("running", "queued")}
        if not shown:
            return
        for a_id, agent in (await w.bus.get_agents(list(shown))).items():
            if agent.state != self.state[a_id].state:
                self._update(agent)
                result.results[shown[a_id]] = self._plain(a_id)
        result.met = self.met()

    async def _give_back(self, w: Waiting, result: FanIn) -> None:
        """Reports and events go back to their place in the inbox; their entries say so
        (`reported`). The questions stay taken: the caller answers them."""
        entries = {e.agent_id: e for e in result.results}
        for a_id, item in list(self.got.items()):
            if item.type == "question":
                continue
            if await w.bus.unclaim(w.caller, ItemRef(item.seq, item.type, item.sender, item.id), w.id):
                del self.got[a_id]
                if (shown_ := entries.get(a_id)) is not None:
                    shown_.status = "reported"
        for t, event in self.events.items():
            if event is not None and await w.bus.unclaim(
                w.caller, ItemRef(event.seq, event.type, event.sender, event.id), w.id
            ):
                self.events[t] = None
        for entry in result.events or ():
            if self.events.get(entry.type) is None:
                entry.status, entry.event = "pending", None

    def losers(self) -> list[str]:
        """The flights a met join did not count (still waiting, checking, or failed its check)."""
        return [a for a in self.state if (e := self.entries.get(a)) is None or e.status != "received"]


def parse_need(text: str) -> int | Literal["all", "any"]:
    """`--need all|any|K` as a person types it (checked against the targets by the wait)."""
    if text in ("all", "any"):
        return text  # type: ignore[return-value]
    if not text.isdigit():
        raise BadInput(f"--need: 'all', 'any' or a whole number, got {shown(text)}")
    return int(text)


#: a plain fan-in's join (no other target, need all): one, not a model made per wait
PLAIN = Join()


def _need(value: object, total: int, named: int = 0) -> int | Literal["all", "any"]:
    """`need`: all, any or a whole number from 1 to the number of targets (a target named twice
    counts once: `named`, the count as given, says so when they differ)."""
    if value == "all" or value == "any":
        return value
    k = value if isinstance(value, int) and not isinstance(value, bool) else None
    if k is None or not 1 <= k <= total:
        twice = f"; {named - total} of the {named} named twice, which count once" if named > total else ""
        raise BadInput(
            f"{{need}}: 'all', 'any' or a whole number from 1 to {total} (the number of targets{twice}), "
            f"got {shown(value)}",
            fields=("need",),
        )
    return k


@dataclass(frozen=True)
class Targets:
    """A join checked and what it waits on read: the join as counted (a target named twice is
    one), its flights (the ids', then the wave's) and its file targets. Read once, before the
    wait: the faces show them (core/wait/entry.py)."""

    join: Join
    agents: list[Agent]
    files: list[FileTarget]


async def read_targets(bus: Bus, from_agents: Sequence[str], join: Join) -> Targets:
    """Check `join` and read its flights: the listed ids, then the wave's flights; at least
    one target in all, and a need the targets can meet."""
    if join.wave is not None:
        check_wave(join.wave)
    if len(join.files) + len(join.events) > MAX_LIST_LEN:
        raise BadInput(f"files, events: at most {MAX_LIST_LEN:,} targets of these kinds")
    for i, t in enumerate(join.events):
        check_type(t, f"events[{i}]")
        if t in AGENT_ITEM_TYPES:
            raise BadInput(f"events[{i}]: {t!r} is a flight's report; wait for flights by id or wave instead")
    if join.check is not None:
        check_shell(join.check)
    if not check_timeout(join.check_timeout, "check_timeout"):
        raise BadInput("{check_timeout}: must be more than 0 seconds", fields=("check_timeout",))
    files = file_targets(join.files)
    named = len(from_agents) + len(join.files) + len(join.events)  # as given, before duplicates go
    # a target named twice is one target: the need is checked against the targets as counted
    join = join.model_copy(update={"events": list(dict.fromkeys(join.events))})
    targets = await resolve_agents(bus, from_agents, "from_agents") if from_agents else []
    if join.wave is not None:
        known = {a.id for a in targets}
        targets += [a for a in await bus.list_agents() if a.wave == join.wave and a.id not in known]
        if len(targets) > MAX_AGENT_IDS:
            raise BadInput(
                f"{{wave}}: {join.wave} and the ids name more than {MAX_AGENT_IDS:,} flights", fields=("wave",)
            )
    if not targets and not files and not join.events:
        what = (
            f"{{wave}}: {join.wave} has no flights"
            if join.wave
            else "{from_agents}: list at least one agent id or prefix"
        )
        raise BadInput(f"{what} (or omit every target for the next message)", fields=("wave", "from_agents"))
    _need(join.need, len(targets) + len(files) + len(join.events), named)  # checked: it is used as given
    return Targets(join, targets, files)


async def wait_fan_in(
    bus: Bus,
    caller: str,
    timeout: float,
    from_agents: Sequence[str],
    *,
    join: Join | None = None,
    on_progress: ProgressFn | None = None,
    control: Control | None = None,
    settings: WaitSettings | None = None,
    budget: int | None = None,
    targets: Targets | None = None,
) -> FanIn:
    """Wait for one message from each listed agent; dead, idle or closed ones end early. A
    `join` adds a wave, files and events, and a need of all, any or K (docs/joins.md).
    `targets`, read for this join by `read_targets`, saves reading them again.

    `budget` (characters of the result's entries) bounds what it takes and shows: once the
    reports taken fill it, the next ones stay queued and the wait ends "partial" when the rest
    settled; the first report and every question are always taken. Entries of targets without
    a report taken are shown while they fit, the others counted by status in `omitted`.
    """
    timeout = check_timeout(timeout)
    join = join or PLAIN
    found = await read_targets(bus, from_agents, join) if targets is None else targets
    join, agents, files = found.join, found.agents, found.files
    await ensure_registered(bus, caller)
    control = control or Control()
    condition = FanInCondition(agents, budget, join, files)
    if join.check is not None:
        condition.checks = JoinChecks(join.check, join.check_timeout, control, condition.verdicts_decide)
        condition.checking = condition.checks.running
    try:
        fan = await run(
            bus, caller, condition, timeout=timeout, on_progress=on_progress, control=control, settings=settings
        )
    finally:
        if condition.checks is not None:  # cancelled, the wait did not finish: its checks end here
            await condition.checks.end()
    if join.stop_rest and fan.status == "complete":
        fan = await stop_rest(
            bus,
            fan,
            condition.losers(),
            entry_of=condition.entry_of,
            status_of=condition.status_of,
            place=condition.place,
        )
    # coding flights' entries carry their branch, changes and usage as their records say now
    fresh = await bus.get_agents(condition.coding) if condition.coding else {}
    for entry in fan.results:
        if (agent := fresh.get(entry.agent_id)) is not None:
            for key, value in flight_facts(agent).items():
                setattr(entry, key, value)
    # 100,000 records take 60-90 ms to free: not between the result and its answer
    freeing.later(agents, condition.state, condition.place, condition.left)
    return fan
