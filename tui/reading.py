"""The main screen's latest read of the bus, and what changed since the read before.

A wake names the keys that changed (wakes are hints, so they are read again): with 10,000
flights a wake costs what changed, not the whole bus. What changed becomes event-log lines
and notices, which `read` returns for the screen to show.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from rich.text import Text
from textual.notifications import SeverityLevel

from ..core.bus import Bus
from ..core.bus.keys import agent_of, inbox_key, is_wait_key
from ..core.ids import short
from ..core.model import Agent, McpTask, WaitRecord, is_report
from .state import GLYPH

DEATH_TOASTS = 3  # more deaths than this in one read make one toast, not a burst


def _order(a: Agent) -> tuple[float, str]:
    """Where a flight is in the bus's order (both buses list agents so)."""
    return a.created_at, a.id


@dataclass
class Noted:
    """What a read found changed: event-log lines (by flight) and notices, in order."""

    events: list[tuple[str, Text]] = field(default_factory=list)
    notices: list[tuple[str, SeverityLevel]] = field(default_factory=list)


class BusRead:
    """The records last read: `agents` in the bus's order, `by_id` the same kept from read
    to read, the waits, whom this inbox heard from, and which flights changed (`take_stale`)."""

    def __init__(self) -> None:
        self._agents: list[Agent] | None = []  # None: to be made again from `by_id`
        self._unordered = False  # `by_id` holds a flight out of the bus's order
        self.by_id: dict[str, Agent] = {}
        self.waits: list[WaitRecord] = []
        self.woken: dict[str, McpTask | None] = {}  # wait id → its task, for waits run as tasks that ended
        self.heard_from: set[str] = set()
        self.count = 0
        self._first = True
        self._stale: set[str] | None = None  # flights read since `take_stale`; None: all
        self.generation = 0  # counts the reads of every record (a flight may have gone)
        self.added: list[str] = []  # flights that came by the reads since (the command line's index)

    @property
    def agents(self) -> list[Agent]:
        """The records in the bus's order, made when asked after a read changed them: a read
        of the few flights that changed costs those, not a list of all 100,000."""
        if self._agents is None:
            if self._unordered:
                self.by_id = dict(sorted(self.by_id.items(), key=lambda kv: _order(kv[1])))
                self._unordered = False
            self._agents = list(self.by_id.values())
        return self._agents

    def take_stale(self) -> set[str] | None:
        """The flights read since the last call (None: all of them), and start again."""
        stale, self._stale = self._stale, set()
        return stale

    async def read(
        self, bus: Bus, me: str, own_waits: Collection[str], changed: set[str] | None, roles: Mapping[str, str]
    ) -> Noted:
        """Read what `changed` names (agent records, waits, `me`'s inbox), or everything when
        it is None or on the first read; the waits in `own_waits` are the person's own."""
        full = changed is None or not self.count
        keys = changed or set()
        if full:
            fresh = await bus.list_agents()
        else:
            ids = [a for k in keys if (a := agent_of(k)) is not None]
            fresh = list((await bus.get_agents(ids)).values()) if ids else []
        waits = await bus.list_waits() if full or any(is_wait_key(k) for k in keys) else self.waits
        # a wait that ends files what it took into the history, which no inbox change announces
        ended = waits is not self.waits and bool({w.id for w in self.waits} - {w.id for w in waits})
        if ended:  # a wait run as a task ended: its result is what wakes the agent (shown in the log)
            gone = {w.id for w in waits}
            for w in self.waits:
                if w.id not in gone and w.task_id is not None and w.id not in own_waits:
                    self.woken[w.id] = await bus.get_mcp_task(w.task_id)
        heard = self.heard_from
        if full or ended or inbox_key(me) in keys:
            heard = {r.sender for r in await bus.pending(me) if is_report(r.type)}
            heard |= {i.sender for i in await bus.history(me, 1000) if is_report(i.type)}
        noted = Noted()
        if full or fresh:
            self._note_changes(noted, me, own_waits, fresh, waits, roles)
            self._take(fresh, full)
        elif waits is not self.waits:
            self._note_changes(noted, me, own_waits, [], waits, roles)
        self.waits, self.heard_from = waits, heard
        self.count += 1
        return noted

    def _take(self, fresh: list[Agent], full: bool) -> None:
        """Fold the records just read into `agents` (ordered as the bus lists them)."""
        if full:
            self.by_id = {a.id: a for a in fresh}
            self._agents, self._unordered = fresh, False
            self._stale = None
            self.generation += 1
            self.added = []
            return
        if self._stale is not None:
            self._stale.update(a.id for a in fresh)
        by_id = self.by_id
        last = next(reversed(by_id.values()), None)
        for a in sorted((a for a in fresh if a.id not in by_id), key=_order):
            if last is not None and _order(a) < _order(last):
                self._unordered = True  # it goes before one kept: sorted when `agents` is asked
            last = by_id[a.id] = a
            self.added.append(a.id)
        by_id.update((a.id, a) for a in fresh)
        self._agents = None

    def _note_changes(
        self,
        noted: Noted,
        me: str,
        own_waits: Collection[str],
        agents: list[Agent],
        waits: list[WaitRecord],
        roles: Mapping[str, str],
    ) -> None:
        """Turn the difference between the records just read and the last ones into
        event-log lines and death toasts (`agents`: only the records read this time)."""
        before = self.by_id
        events = noted.events
        deaths: list[Agent] = []
        asks: list[Agent] = []
        for a in agents:
            if a.id == me:
                continue
            old = before.get(a.id)
            tag = f"{a.name} ({short(a.id)})"
            if old is None:
                if a.state == "needs_input":
                    asks.append(a)
                if not self._first:
                    events.append((a.id, Text(f"+ {tag} started{' in ' + a.wave if a.wave else ''}")))
                    if a.status == "dead":  # started and died between two reads
                        events.append((a.id, Text(f"✖ {tag}: dead ({a.reason or 'dead'})", style=roles["dead"])))
                        deaths.append(a)
                continue
            if old.status != a.status:
                line = Text(
                    f"{GLYPH.get(a.status, '·')} {tag}: {old.status} → {a.status}", style=roles.get(a.status, "")
                )
                if a.reason and a.status in ("dead", "closed"):
                    line.append(f" ({a.reason})")
                events.append((a.id, line))
                if a.status == "dead":
                    deaths.append(a)
            if a.last_message_at != old.last_message_at and a.last_message:
                events.append((a.id, Text(f"✉ {tag}: {a.last_message}")))
            if a.question_id and a.question_id != old.question_id and a.state == "needs_input":
                asks.append(a)
        old_waits = {w.id for w in self.waits}
        new_waits = {w.id for w in waits}
        names = {a.id: a.name for a in agents}

        def name_of(agent_id: str) -> str:
            known = before.get(agent_id)
            return names.get(agent_id) or (known.name if known else agent_id)

        for w in waits:
            if w.id not in old_waits and not self._first and w.id not in own_waits:
                who = name_of(w.waiter)
                events.append((w.waiter, Text(f"⧗ {who} waits ({w.tool}): {w.description}", style=roles["warn"])))
        for w in self.waits:
            if w.id not in new_waits and w.id not in own_waits:
                who = name_of(w.waiter)
                if w.id in self.woken:
                    task = self.woken.pop(w.id)
                    said = task.status_message if task and task.status_message else (task.status if task else "gone")
                    line = Text(f"⏰ {who} woken: task {short(w.task_id or '')} {said}", style="bold")
                    events.append((w.waiter, line))
                    continue
                events.append((w.waiter, Text(f"⧗ wait {short(w.id)} of {who} ended", style="dim")))
        self._first = False
        for a in asks:
            what = f"/merge {a.wave} --watch" if a.asked_by == "merge" else f"/reply {short(a.id)} ANSWER"
            said = f"{a.name} ({short(a.id)}) needs input: {a.question} · {what}"
            events.append((a.id, Text(f"? {said}", style=roles["needs_input"])))
            noted.notices.append((said, "warning"))
        if len(deaths) > DEATH_TOASTS:
            noted.notices.append((f"{len(deaths)} flights died", "error"))
        else:
            noted.notices.extend((f"{a.name} ({short(a.id)}) died: {a.reason or 'dead'}", "error") for a in deaths)
