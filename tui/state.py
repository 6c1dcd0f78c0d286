"""What the TUI shows, computed from bus records: pure functions, no Textual.

The panel's rule (its words as docs/words.md defines them):

* A flight's word is its state, the same word `wavewait agents`, `list_agents` and wait
  results give: `◷ queued` (its wave is at its limit; why it waits is beside it),
  `⠋ running`, `◌ idle`, `? needs input` (it asked a question that nobody
  has answered yet), `■ closed` (it ended cleanly, or was closed) or `✖ dead` (it died,
  with the reason).
* Whether it reported is said beside it: `✉` before its last message, and `N/M reported`
  in the summary, once an item it sent (message, completion or question) reached you:
  queued in your inbox, taken into its history, or received by your current or last wait.
  A `/send` from the TUI to the flight starts a new round: what it sent before no longer counts.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..core.ids import short
from ..core.model import Agent, WaitRecord

FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"  # rich's "dots" spinner, 10 frames
GLYPH = {"received": "✔", "queued": "◷", "idle": "◌", "dead": "✖", "closed": "■", "needs_input": "?"}
REPORTED = "✉"
QUIET_AFTER = 30.0  # a running flight silent this long is dimmed: a visible stall
WAVES_SHOWN = 6  # waves named with their totals in the header; the rest are counted
#: what each word and tone looks like: (theme variable, text attributes). Theme variables,
#: not colour names, so every theme (light ones too) keeps its contrast; `text-*` are the
#: theme's colours meant for text on its background.
ROLES: dict[str, tuple[str | None, str]] = {
    "received": ("text-success", "bold"),
    "needs_input": ("text-accent", "bold"),
    "queued": ("text-primary", "dim"),
    "running": ("text-warning", ""),
    "idle": ("text-primary", ""),
    "dead": ("text-error", "bold"),
    "closed": (None, "dim"),
    "good": ("text-success", ""),
    "bad": ("text-error", ""),
    "warn": ("text-warning", ""),
}
#: the look without a theme (before the first one is applied): the terminal's own colours
PLAIN = {
    "text-success": "green",
    "text-warning": "yellow",
    "text-primary": "cyan",
    "text-error": "red",
    "text-accent": "magenta",
}


def role_styles(variables: Mapping[str, str]) -> dict[str, str]:
    """Rich styles for ROLES from a theme's variables (`App.theme_variables`)."""
    out = {}
    for role, (variable, attrs) in ROLES.items():
        colour = variables.get(variable, PLAIN.get(variable, "")) if variable else ""
        out[role] = f"{attrs} {colour}".strip()
    return out


def spinner(t: float) -> str:
    """The spinner frame at time `t` (10 frames a second)."""
    return FRAMES[int(t * 10) % len(FRAMES)]


def word(state: str) -> str:
    """A state's word for people: `needs_input` reads `needs input`."""
    return state.replace("_", " ")


def state_label(state: str, t: float) -> str:
    """Glyph plus word, never colour alone."""
    glyph = spinner(t) if state == "running" else GLYPH.get(state, "·")
    return f"{glyph} {word(state)}"


def one_line(text: str) -> str:
    """Several lines (a death's last output) shown on one: joined by ` ⏎ `."""
    return " ⏎ ".join(part.strip() for part in text.splitlines() if part.strip())


def ago(seconds: float | None) -> str:
    """A short duration for people: 4s, 2m05s, 1h03m."""
    if seconds is None:
        return "—"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


@dataclass(frozen=True)
class FlightView:
    """One row of the flights panel, already decided; its clocks are read at paint time.

    A view holds instants, not "4s ago" strings, so it changes only when its flight does:
    with 1,000 flights the panel then rebuilds nothing when only the second changes.
    """

    id: str
    name: str
    wave: str
    state: str  # queued | running | idle | needs_input | closed | dead
    reported: bool  # a report from it reached the person (the ✉ mark)
    started_at: float
    ended_at: float | None  # set once the flight has finished: its elapsed stops
    last_message_at: float | None
    detail: str  # last message, or why it is dead
    tokens: int = 0  # a coding flight's tokens in and out so far (its usage)
    cost: float = 0.0  # and its money, where the agent reports it
    changed: str = ""  # a coding flight's changes column: `+12 −3 2f`
    spent: str = ""  # and its cost column: `1.2k $0.0123`
    changed_brief: str = ""  # the same for a narrow terminal: `+12 −3`
    spent_brief: str = ""  # and `$0.01` (money where reported, else tokens)
    #: how it can be told (docs/conversations.md): "" no conversation (`/send` instead),
    #: "open", or "closed" (closed for good with `/close`)
    talk: str = ""

    def stalled(self, t: float) -> bool:
        """Running and silent for QUIET_AFTER seconds: dimmed, a visible stall."""
        since = self.last_message_at or self.started_at
        return self.state == "running" and t - since > QUIET_AFTER

    def cells(self, t: float) -> tuple[str, ...]:
        end = t if self.ended_at is None else self.ended_at
        quiet = None if self.last_message_at is None else t - self.last_message_at
        return (
            state_label(self.state, t),
            self.name,
            short(self.id),
            self.wave or "—",
            ago(end - self.started_at),
            ago(quiet),
            self.changed,
            self.spent,
            self.detail,
        )


def flight_state(agent: Agent) -> str:
    """The flight's one word (the core's `Agent.state`)."""
    return agent.state


def tokens(n: int) -> str:
    """12345 → `12.3k`: a token count for a narrow column."""
    return f"{n / 1_000_000:.1f}M" if n >= 1_000_000 else f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def money(usd: float) -> str:
    """0.0123 → `$0.0123`, 12.5 → `$12.50`: cents are enough once it is a dollar."""
    return f"${usd:.2f}" if usd >= 1 else f"${usd:.4f}"


def changed_cell(agent: Agent) -> str:
    """A coding flight's changes, for a narrow column: `+12 −3 2f` (lines added, deleted, files)."""
    c = agent.changes
    return "" if c is None else f"+{c.added} −{c.deleted} {c.files}f"


UNKNOWN = "?"  # a coding flight that ended without saying what it spent: unknown, never 0


def spent_cell(agent: Agent) -> str:
    """A coding flight's cost, for a narrow column: `1.2k $0.0123` (tokens in and out, money);
    `?` for one that ended with no usage known (a Codex flight killed in its first turn)."""
    u = agent.usage
    if u is None:
        return UNKNOWN if agent.events and agent.finished else ""
    return tokens(u.input_tokens + u.output_tokens) + ("" if u.cost_usd is None else f" {money(u.cost_usd)}")


def count(n: int) -> str:
    """A line count in at most four characters: 999, 1.2k, 12k, 1.2M."""
    if n < 1000:
        return str(n)
    if n < 10_000:
        return f"{n // 100 / 10:.1f}k"  # floored: 9,999 is 9.9k, never a 5-character 10.0k
    return f"{n // 1000}k" if n < 1_000_000 else f"{n / 1_000_000:.1f}M"


def changed_brief(agent: Agent) -> str:
    """A coding flight's changes in the fewest characters: `+12 −3` (lines added, deleted)."""
    c = agent.changes
    return "" if c is None else f"+{count(c.added)} −{count(c.deleted)}"


def spent_brief(agent: Agent) -> str:
    """A coding flight's cost in the fewest characters: money where its agent reports it
    (`$0.21`, `$0.0050`, `$123`), else its tokens (`12.5k`), else `?` once it ended unknown."""
    u = agent.usage
    if u is None or u.cost_usd is None:
        return tokens(u.input_tokens + u.output_tokens) if u is not None else spent_cell(agent)
    usd = u.cost_usd
    return f"${usd:.0f}" if usd >= 100 else f"${usd:.2f}" if usd >= 0.01 else money(usd)


def flight_detail(agent: Agent, reported: bool) -> str:
    """What the last column says: why it died, its open question, or its last message."""
    if agent.status == "dead":
        return one_line(agent.reason or "dead")
    if agent.state == "needs_input":
        return f"asks: {one_line(agent.question or '')}"
    if agent.status == "queued":  # why it has not started: a slot, memory, load
        return one_line(agent.reason or "queued: its wave is at its limit")
    message = one_line(agent.last_message or "")
    return f"{REPORTED} {message}" if reported and message else message


def flight_view(agent: Agent, received: bool) -> FlightView:
    return FlightView(
        id=agent.id,
        name=agent.name,
        wave=agent.wave or "",
        state=flight_state(agent),
        reported=received,
        started_at=agent.started_at or agent.created_at,  # a queued one: since it was queued
        ended_at=agent.ended_at if agent.finished and agent.ended_at else None,
        last_message_at=agent.last_message_at,
        detail=flight_detail(agent, received),
        tokens=agent.usage.input_tokens + agent.usage.output_tokens if agent.usage else 0,
        cost=(agent.usage.cost_usd or 0.0) if agent.usage else 0.0,
        changed=changed_cell(agent),
        spent=spent_cell(agent),
        changed_brief=changed_brief(agent),
        spent_brief=spent_brief(agent),
        talk="" if agent.conversation is None else "closed" if agent.closed_for_good else "open",
    )


def received_ids(
    agents: Mapping[str, Agent],
    heard_from: set[str],
    rounds: dict[str, float],
) -> set[str]:
    """Apply the panel's rule to the agents (by id) heard from: heard from, and not since
    given new work by the person. Costs the senders heard from, not the whole wave."""
    out = set()
    for agent_id in heard_from:
        a = agents.get(agent_id)
        if a is None:
            continue
        started = rounds.get(agent_id)
        if started is not None and (a.last_message_at or 0) < started:
            continue
        out.add(agent_id)
    return out


def summary(views: Sequence[FlightView]) -> str:
    """`3/5 reported · 1 needs input · 1 dead · 1 running` (zero counts left out)."""
    return summary_of(len(views), sum(v.reported for v in views), Counter(v.state for v in views))


def summary_of(total: int, reported: int, states: Mapping[str, int]) -> str:
    return " · ".join(summary_parts(total, reported, states))


def summary_parts(total: int, reported: int, states: Mapping[str, int]) -> list[str]:
    """The counts one by one, most telling first: a narrow header drops them whole from the right."""
    if not total:
        return ["no flights yet"]
    parts = [f"{reported}/{total} reported"]
    order = ("needs_input", "dead", "running", "queued", "idle", "closed")
    return parts + [f"{states[s]} {word(s)}" for s in order if states.get(s)]


def _order(a: Agent) -> tuple[float, str]:
    """Where a flight goes in the panel: the buses list agents in this order."""
    return a.created_at, a.id


class Panel:
    """The flights panel's rows in order, with its counts, kept up to date by the flights
    that changed: with 10,000 flights a repaint costs what changed, not the wave."""

    def __init__(self, me: str) -> None:
        self.me = me  # the person's own record is not a flight
        self.views: list[FlightView] = []
        self._pos: dict[str, int] = {}
        self._got: set[str] = set()
        self.states: Counter[str] = Counter()
        self.waves: Counter[str] = Counter()
        self.reported = 0
        self.tokens: Counter[str] = Counter()  # what the coding flights spent, by wave ("" for none)
        self.cost: defaultdict[str, float] = defaultdict(float)

    def rebuild(self, agents: Iterable[Agent], got: set[str]) -> None:
        self.views = [flight_view(a, a.id in got) for a in agents if a.id != self.me]
        self._pos = {v.id: i for i, v in enumerate(self.views)}
        self._got = got
        self.states = Counter(v.state for v in self.views)
        self.waves = Counter(v.wave for v in self.views if v.wave)
        self.reported = sum(v.reported for v in self.views)
        self.tokens, self.cost = Counter(), defaultdict(float)
        for v in self.views:
            self.tokens[v.wave] += v.tokens
            self.cost[v.wave] += v.cost

    def update(self, agents: Mapping[str, Agent], ids: Iterable[str], got: set[str]) -> list[FlightView] | None:
        """Rebuild the views of `ids` and of the flights whose reported mark changed, and add
        those of new flights after the others; the views that differ or are new, or None when
        a new flight goes before one shown (then `rebuild`). New flights come last in the
        buses' order (by creation) as a rule, so a growing wave costs what it adds, not all
        it holds."""
        touched = set(ids) | (got ^ self._got)
        touched.discard(self.me)
        fresh = sorted((agents[i] for i in touched if i not in self._pos and i in agents), key=_order)
        if fresh and self.views:
            last = agents.get(self.views[-1].id)
            if last is None or _order(fresh[0]) <= _order(last):
                return None
        self._got = got
        out = []
        for agent_id in touched:
            a = agents.get(agent_id)
            pos = self._pos.get(agent_id)
            if a is None or pos is None:
                continue
            old, new = self.views[pos], flight_view(a, agent_id in got)
            if new != old:
                self.views[pos] = new
                self._count(old, -1)
                self._count(new, 1)
                out.append(new)
        for a in fresh:
            new = flight_view(a, a.id in got)
            self._pos[a.id] = len(self.views)
            self.views.append(new)
            self._count(new, 1)
            out.append(new)
        return out

    def _count(self, v: FlightView, n: int) -> None:
        self.states[v.state] += n
        self.reported += n * v.reported
        self.tokens[v.wave] += n * v.tokens
        self.cost[v.wave] += n * v.cost
        if v.wave:
            self.waves[v.wave] += n
            if not self.waves[v.wave]:
                del self.waves[v.wave]

    def summary(self) -> str:
        """The counts: `3/5 reported · 1 needs input · 2 running`."""
        return summary_of(len(self.views), self.reported, self.states)

    def summary_parts(self) -> list[str]:
        """`summary`'s counts one by one (the header fits them whole)."""
        return summary_parts(len(self.views), self.reported, self.states)

    def spent(self) -> int:
        """The tokens the coding flights shown spent, all waves together."""
        return sum(self.tokens.values())

    def shown_waves(self, most: int = WAVES_SHOWN) -> list[str]:
        """The waves the header names (at most `most`), in its order."""
        return sorted(self.waves)[:most]

    def by_wave(self, most: int = WAVES_SHOWN, budgets: Mapping[str, Budget] | None = None) -> str:
        """Each wave shown and what its coding flights spent, so the totals are never a sum
        across waves: `refactor 48.1k tok $0.4210 · docs 2.0k tok · lint` (flights in no
        wave that spent: `no wave 1.2k tok`); a wave with a budget (`budgets`: tokens, money)
        shows spent / budget: `refactor 48.1k/200.0k tok $0.42/$5.00`; past `most` waves,
        how many more."""
        return " · ".join(text for text, _ in self.wave_parts(most, budgets))

    def wave_parts(
        self, most: int = WAVES_SHOWN, budgets: Mapping[str, Budget] | None = None
    ) -> list[tuple[str, bool]]:
        """`by_wave`'s parts, each with whether that wave has spent its budget (shown as bad)."""
        names = sorted(self.waves) + ([""] if self.tokens[""] else [])
        caps = budgets or {}
        parts = [
            (
                (w or "no wave") + spent(self.tokens[w], self.cost[w], caps.get(w)),
                over(self.tokens[w], self.cost[w], caps.get(w)),
            )
            for w in names[:most]
        ]
        more = len(names) - most
        return parts + ([(f"+{more} more waves", False)] if more > 0 else [])


#: a wave's budget as the header shows it: tokens, money (None: not set)
Budget = tuple[int | None, float | None]


def over(n: int, usd: float, budget: Budget | None) -> bool:
    """Whether a wave that spent `n` tokens and `usd` has spent its budget (what refuses its spawns)."""
    cap_tokens, cap_usd = budget or (None, None)
    return (cap_tokens is not None and n >= cap_tokens) or (cap_usd is not None and usd >= cap_usd)


def spent(n: int, usd: float, budget: Budget | None = None) -> str:
    """` 48.1k tok $0.4210`, or nothing when no tokens were spent; against a budget,
    spent / budget: ` 48.1k/200.0k tok $0.4210/$5.00`."""
    cap_tokens, cap_usd = budget or (None, None)
    if cap_tokens is None and cap_usd is None:
        return "" if not n else f" {tokens(n)} tok" + (f" {money(usd)}" if usd > 0 else "")
    out = f" {tokens(n)}/{tokens(cap_tokens)} tok" if cap_tokens is not None else (f" {tokens(n)} tok" if n else "")
    if cap_usd is not None:
        out += f" {money(usd)}/{money(cap_usd)}"
    elif usd > 0:
        out += f" {money(usd)}"
    return out


@dataclass(frozen=True)
class MirrorView:
    """One wait made by another process, as the mirror panel shows it."""

    id: str
    waiter: str
    tool: str
    targets: str
    countdown: str
    progress: str
    task: bool = False  # runs as an MCP task: the host has its answer, the agent idles until the wake

    def cells(self) -> tuple[str, ...]:
        progress = f"{TASK_MARK} · {self.progress}" if self.task else self.progress
        return (short(self.id), self.waiter, self.tool, self.targets, self.countdown, progress)


#: what the mirror says of a wait that runs as a task (the host backgrounded the call)
TASK_MARK = "background task, agent idle"


def mirror_view(rec: WaitRecord, now: float, names_by_id: dict[str, str] | None = None) -> MirrorView:
    """`names_by_id` turns the waiter's id into its name when the bus knows it."""
    names = rec.target_names or [short(t) for t in rec.targets]
    waiter = (names_by_id or {}).get(rec.waiter, rec.waiter)
    targets = ", ".join(names) if names else (rec.description or "next message")
    left = "—" if rec.deadline is None else ago(rec.deadline - now)
    return MirrorView(
        id=rec.id,
        waiter=waiter,
        tool=rec.tool,
        targets=targets,
        countdown=left,
        progress=rec.progress or "started",
        task=rec.task_id is not None,
    )
