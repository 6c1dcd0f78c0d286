"""The main screen: flights panel, mirror of other processes' waits, scrollback, command line.

The screen owns the work of the view: it reads the bus when the bus's change stream says
something changed (wakes are hints, so it re-reads; `reading.py` keeps the records),
repaints from one timer at most ten times a second, and runs every command (`slash.py`)
in a worker so the screen never blocks; the person's wait runs in its own widget
(`widgets/own_wait.py`). Its widgets are given their data (attributes down) and post
messages up; the app is reached only as a `Host` (`host.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import Any

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.css.scalar import Scalar
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static

from ...core import admission, waves
from ...core.bus import Bus, Changes
from ...core.errors import WavewaitError
from ...core.ids import is_id, short
from ...core.model import Agent, WaitRecord
from ...core.proc import FramePacedHeap
from ...core.results import Result
from ...core.wait import Control, Plan
from ...words import said
from ..commands import parse
from ..demo import WAVE, launch
from ..demo_story import DemoStory
from ..flight_index import FlightIndex
from ..host import Host, host_of
from ..messages import WaitEnded, WaitProgressed
from ..reading import BusRead
from ..result_view import render_result
from ..slash import Parsed, Usage
from ..state import Budget, FlightView, Panel, mirror_view, received_ids
from ..widgets.command import CommandLine
from ..widgets.eventlog import EventLog
from ..widgets.flights import FlightsTable
from ..widgets.followlog import FollowLog
from ..widgets.guide import DemoGuide
from ..widgets.header import WaveHeader
from ..widgets.hints import CommandHints
from ..widgets.mirror import MirrorTable
from ..widgets.own_wait import OwnWait
from ..widgets.status import WaitStatus
from .flight import FlightScreen
from .merge import MergeScreen

log = logging.getLogger(__name__)

REPAINT_EVERY = 0.1  # ≤ 10 Hz, one timer
READ_EVERY = 0.1  # coalesce bursts of bus changes into at most ten reads a second
#: seconds after a read of every record before the command line's index is made again (at
#: 100,000 flights a sort of 50-100 ms, not paid by the first key of an ID typed)
INDEX_AFTER = 1.0
FLIGHT_ROWS = 5  # flight rows kept in view on a small terminal; the wait's status gives way first
LOWER_MIN = 3  # the scrollback's least: its border and two lines
STATUS_SHARE = 0.35  # the most of the screen the wait's status takes


def main_screen(app: App[Any]) -> MainScreen:
    """The main screen (the one running waits), wherever it is in `app`'s stack."""
    for screen in app.screen_stack:
        if isinstance(screen, MainScreen):
            return screen
    raise LookupError("the main screen is not mounted")


class MainScreen(Screen[None]):
    CSS_PATH = "main.tcss"
    AUTO_FOCUS = "#command"
    HELP = """
## wavewait
Type `/help` for the commands. **Escape** interrupts your running wait and keeps what was
received. **F1** shows the help of the focused part.
"""
    BINDINGS = [
        # not a priority binding: the command palette keeps its own Escape
        Binding(
            "escape", "interrupt", "Interrupt wait", tooltip="Interrupt the running wait; partial results are kept"
        ),
        Binding("slash", "focus_command", "Command", show=False),  # from a panel: start a command
        # one press reaches the panel from anywhere (Tab walks every part), and back from it
        Binding(
            "shift+tab", "focus_flights", "Flights", tooltip="The flights panel: a, d, Enter, c, m, t act on a flight"
        ),
        Binding("shift+tab", "focus_line", "Command line", tooltip="Back to the command line"),
        # the panel's keys pressed elsewhere (the scrollback, the mirror) say where they work
        Binding("a", "panel_key('a')", show=False),
        Binding("d", "panel_key('d')", show=False),
        Binding("enter", "panel_key('Enter')", show=False),
        Binding("t", "panel_key('t')", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.read = BusRead()  # the latest read of the bus
        self.rounds: dict[str, float] = {}  # flight id -> when the person last sent it work
        self._dirty = True
        self._last_repaint_second = -1
        self._panel = Panel("")  # the rows and counts; its `me` is set on mount
        #: the command line's index, and the BusRead generation and count of `added` it holds
        self._index: tuple[int, int, FlightIndex] = (-1, 0, FlightIndex())
        self._unpainted: dict[str, FlightView] | None = None  # views the table lacks; None: all
        self._heap = FramePacedHeap()  # the collector's pauses kept out of frames
        self.budgets: dict[str, Budget] = {}  # the shown waves' budgets, kept on the bus (core/waves.py)
        self._budgets_of: set[str] = set()  # the waves whose budgets were read
        self._wave_changes: Changes | None = None
        # the person's own wait
        self.own_wait = OwnWait(id="status")
        self.merging = False  # a /merge runs (one at a time)
        self.result_in_view = False  # the last wait's result is the scrollback's newest: no toast covers it
        self.story: DemoStory | None = None  # `wavewait demo`: the step its guide shows

    @property
    def host(self) -> Host:
        """The app this screen runs in, as far as the screen uses it (its bus, settings, roles)."""
        return host_of(self.app)

    @property
    def bus(self) -> Bus:
        return self.host.bus

    @property
    def me(self) -> str:
        return self.host.settings.me

    def compose(self) -> ComposeResult:
        yield WaveHeader(id="summary")
        yield FlightsTable(id="flights")
        with Vertical(id="mirror-box"):
            yield Static("Waits by other processes  (select one, then i or Enter interrupts it)", id="mirror-title")
            yield MirrorTable(id="mirror")
        with Horizontal(id="lower"):
            yield FollowLog(id="scrollback", wrap=True, markup=False, highlight=False)
            yield EventLog(id="events")
        yield self.own_wait
        if self.host.settings.demo is not None:
            self.story = DemoStory()
            yield DemoGuide(id="guide")
        yield CommandHints(self.flight_index, id="hints")
        yield CommandLine(self.flight_index, id="command")
        yield Footer()

    def on_mount(self) -> None:
        # after each layout (a resize, the mirror or the hints shown, a toast, the status grown)
        self.screen_layout_refresh_signal.subscribe(self, lambda _screen: self._fit_layout())
        self.run_worker(self.start(), exit_on_error=False, group="start")

    async def start(self) -> None:
        """Once the app's bus is open: greet, follow the bus, start the timers (and the demo)."""
        await self.host.bus_ready.wait()
        settings = self.host.settings
        self.say(Text(f"wavewait · you are {self.me} · bus {self.host.bus_label} · /help for commands", style="dim"))
        self.follow_bus()
        self.follow_budgets()
        if settings.timed_repaint:
            self.set_interval(REPAINT_EVERY, self.tick)
        if settings.sweep_every:
            self.set_interval(settings.sweep_every, self.sweep_liveness)
        if settings.demo is not None:
            self.run_demo()

    def theme_changed(self) -> None:
        """The panel and the status repaint with the theme's colours."""
        self._dirty = True
        self._repaint_unless_timed()

    def _repaint_unless_timed(self) -> None:
        if not self.host.settings.timed_repaint and self.read_count:
            self.repaint()

    # ------------------------------------------------------------------ reading the bus
    @work(exclusive=True, group="bus", exit_on_error=False, description="following the bus")
    async def follow_bus(self) -> None:
        """Subscribe first, then read; after each wake, read again (at most ten times a second)."""
        changes = await self.bus.subscribe(agents=True, waits=True, inboxes=[self.me])
        failing = False
        try:
            while True:
                started = time.monotonic()
                try:
                    await self.read_bus(None if failing else changes.changed())
                except WavewaitError as e:  # say so, keep the last picture, try again shortly
                    if not failing:
                        log.exception("reading the bus failed")
                        self.say_bad(f"cannot read the bus: {e}; retrying every second")
                    failing = True
                    await asyncio.sleep(1.0)
                    continue
                if failing:
                    self.say(Text("reading the bus again", style=self.host.roles["good"]))
                    failing = False
                await changes.wait()
                rest = READ_EVERY - (time.monotonic() - started)
                if rest > 0:
                    await asyncio.sleep(rest)
        finally:
            changes.close()

    @work(exclusive=True, group="budgets", exit_on_error=False, description="following the waves' budgets")
    async def follow_budgets(self) -> None:
        """The budgets of the waves the header shows: read again when a wave's settings change
        (subscribed first) or a wave is shown that was not read (`repaint` pokes)."""
        changes = await self.bus.subscribe_waves()
        self._wave_changes = changes
        try:
            while True:
                names = self._panel.shown_waves()
                shown = [w for w in names if is_id(w)]  # a wave whose name is no id keeps no settings
                try:
                    found = {w: await waves.get_settings(self.bus, w) for w in shown}
                except WavewaitError as e:  # the header keeps what it showed; the next change reads again
                    log.warning("reading the waves' budgets failed: %s", e)
                else:
                    self.budgets = {
                        w: (s.budget_tokens, s.budget_usd)
                        for w, s in found.items()
                        if s.budget_tokens is not None or s.budget_usd is not None
                    }
                    self._budgets_of = set(names)
                    self._dirty = True
                    self._repaint_unless_timed()
                await changes.wait()
        finally:
            self._wave_changes = None
            changes.close()

    async def read_bus(self, changed: set[str] | None = None) -> None:
        """Read what `changed` names, or everything when it is None (`reading.py`), and show what changed."""
        generation = self.read.generation
        noted = await self.read.read(self.bus, self.me, self.own_waits, changed, self.host.roles)
        if self.read.generation != generation:  # the command line's index, made while nobody types
            self.set_timer(INDEX_AFTER, self.flight_index)
        if noted.events:
            events = self.query_one(EventLog)
            for agent_id, line in noted.events:
                events.add(agent_id, line)
        for message, severity in noted.notices:
            if self.result_in_view:  # a line below the result, not a toast over it
                self.say(Text(message, style=self.host.roles["bad" if severity == "error" else "needs_input"]))
            self.host.notice(message, severity=severity, toast=not self.result_in_view)
        self._dirty = True
        self._repaint_unless_timed()

    @property
    def agents(self) -> list[Agent]:
        return self.read.agents

    @property
    def waits(self) -> list[WaitRecord]:
        return self.read.waits

    @property
    def read_count(self) -> int:
        return self.read.count

    def sweep_liveness(self) -> None:
        live = [a for a in self.agents if not a.finished and (a.pid or a.lease_expires_at)]
        if live:
            self.run_worker(
                admission.sweep(self.bus, live),
                group="sweep",
                exclusive=True,
                exit_on_error=False,
                description="liveness sweep",
            )

    # ------------------------------------------------------------------ painting
    def flights(self) -> list[Agent]:
        return [a for a in self.agents if a.id != self.me]

    def flight_views(self) -> list[FlightView]:
        """One view per flight, in order."""
        self._refresh_panel()
        return self._panel.views

    def _refresh_panel(self) -> None:
        """Bring the panel's views up to the records read, and note for the table which views
        changed (all of them after the first read, a full read or a new flight). Asking for
        the views between a read and a repaint leaves the table's work for the repaint."""
        panel = self._panel
        panel.me = self.me
        heard = self.read.heard_from | self.own_wait.received | self.own_wait.last_received
        got = received_ids(self.read.by_id, heard, self.rounds)
        stale = self.read.take_stale()
        changed = None if stale is None else panel.update(self.read.by_id, stale, got)
        if changed is None:
            panel.rebuild(self.agents, got)
            self._unpainted = None
        elif self._unpainted is not None:
            self._unpainted.update((v.id, v) for v in changed)

    def flight_index(self) -> FlightIndex:
        """The flights by short id and by name, for the command line: made after a read of every
        record, kept up with the flights that came since."""
        generation, taken, index = self._index
        read = self.read
        if generation != read.generation:
            index, taken = FlightIndex((a.id, a.name) for a in self.flights()), len(read.added)
        for a_id in read.added[taken:]:
            if a_id != self.me:
                index.add(a_id, read.by_id[a_id].name)
        self._index = (read.generation, len(read.added), index)
        return index

    def tick(self) -> None:
        """The one timer: repaint what changed, or just advance spinners and countdowns."""
        self._heap.tick()
        try:
            table = self.query_one(FlightsTable)
        except NoMatches:  # the screen is going away (quitting)
            return
        t = self.host.settings.clock()
        if self._dirty or int(t) != self._last_repaint_second:
            self.repaint()
        elif self.app.animation_level != "none":  # TEXTUAL_ANIMATIONS=none: spinners stand still
            started = time.perf_counter()
            table.spin(t)
            if self.waiting:
                self.own_wait.paint(t, self.read.by_id, self.host.roles)
            self._probe(started)

    def repaint(self) -> None:
        started = time.perf_counter()
        t = self.host.settings.clock()
        self._dirty = False
        self._last_repaint_second = int(t)
        self._refresh_panel()
        unpainted, self._unpainted = self._unpainted, {}
        table = self.query_one(FlightsTable)
        table.roles = self.host.roles
        if unpainted is None:
            table.show(self._panel.views, t)
        else:
            table.show_changed(list(unpainted.values()), t)
        if self._wave_changes is not None and not set(self._panel.shown_waves()) <= self._budgets_of:
            self._wave_changes.poke()  # a wave newly shown: read its budget
        bad = self.host.roles["bad"]  # a wave that spent its budget stands out
        waves = [
            (part, bad if spent_all else "dim") for part, spent_all in self._panel.wave_parts(budgets=self.budgets)
        ]
        totals = bool(self._panel.spent() or self.budgets)  # the waves' totals may take a second line
        self.query_one(WaveHeader).show(self._panel.summary_parts(), waves, self.me, lines=2 if totals else 1)
        others_recs = [w for w in self.waits if w.id not in self.own_waits]
        by_id = self.read.by_id  # the waiters' names only: not a map of every flight each repaint
        names = {w.waiter: by_id[w.waiter].name for w in others_recs if w.waiter in by_id}
        others = [mirror_view(w, t, names) for w in others_recs]
        self.query_one("#mirror-box", Vertical).set_class(bool(others), "-active")
        self.query_one(MirrorTable).show(others)
        if self.waiting:
            self.own_wait.paint(t, self.read.by_id, self.host.roles)
        self._show_guide()
        self.call_after_refresh(self._fit_layout)  # a flight more, of the five kept in view
        self._probe(started)

    def _probe(self, started: float) -> None:
        if self.host.frame_hook is not None:
            self.host.frame_hook(time.perf_counter() - started)

    def _fit_layout(self) -> None:
        """Share a small terminal: FLIGHT_ROWS flights stay in view and the wait's status
        gives way first (it takes what is left, and summarises when that is short of a line
        per target). Toasts stand over the scrollback, and over the status only when the
        scrollback is too short for them: never on the panels, the mirror or the command line.
        """
        table, status = self.query_one(FlightsTable), self.query_one(WaitStatus)
        rows = 1 + min(FLIGHT_ROWS, max(1, table.row_count))  # the header and the rows
        if table.styles.min_height != Scalar.from_number(rows):
            table.styles.min_height = rows
        fixed = [self.query_one(WaveHeader), self.query_one("#mirror-box"), self.query_one(CommandHints)]
        guide = list(self.query(DemoGuide))
        fixed += [*guide, self.query_one(CommandLine), self.query_one(Footer)]
        used = sum(w.outer_size.height for w in fixed if w.display)
        height = self.size.height
        status.fit(min(height - used - rows - LOWER_MIN, int(height * STATUS_SHARE)) - 1)  # less its border
        try:
            rack = self.get_child_by_id("textual-toastrack")  # Textual's, one per screen
        except NoMatches:
            return
        above = [w for w in (fixed[0], table, fixed[1]) if w.display]
        top = max((w.region.bottom for w in above), default=0)
        below = [w for w in (status, *guide, self.query_one(CommandHints), self.query_one(CommandLine)) if w.display]
        tops = [w.region.y for w in below if w.region.height]
        if not tops:
            return
        bottom = min(tops)
        toasts = [toast for holder in rack.children for toast in holder.children]  # a holder has no size
        wanted = sum(toast.outer_size.height + toast.styles.margin.top for toast in toasts)
        if (
            wanted > bottom - top and status.display
        ):  # the scrollback is too short: over the status, as little as can be
            bottom = min([top + wanted] + [w.region.y for w in below[1:] if w.region.height])
        margin, room = height - bottom, max(1, bottom - top)
        if rack.styles.margin.bottom != margin or rack.styles.max_height != Scalar.from_number(room):
            rack.styles.margin = (0, 0, margin, 0)
            rack.styles.max_height = room  # older toasts scroll off the top
            rack.call_after_refresh(rack.scroll_end, animate=False, immediate=True)  # the newest in view

    # ------------------------------------------------------------------ scrollback, command line
    def say_bad(self, message: str) -> None:
        """A line about something that went wrong, in the theme's error colour."""
        self.say(Text(message, style=self.host.roles["bad"]))

    def say(self, line: Text | str) -> None:
        """Write a line to the scrollback (agent text is always a Text, never markup)."""
        self.query_one("#scrollback", FollowLog).write(line if isinstance(line, Text) else Text(line))

    def prefill(self, text: str) -> None:
        cmd = self.query_one(CommandLine)
        cmd.value = text
        cmd.cursor_position = len(text)
        cmd.focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "interrupt":  # hidden where there is nothing to interrupt
            return self.waiting
        if action in ("focus_flights", "focus_line"):  # Shift+Tab says where it goes from here
            return isinstance(self.focused, FlightsTable) == (action == "focus_line")
        return True

    def action_focus_command(self) -> None:
        self.prefill("/")

    def action_focus_flights(self) -> None:
        self.query_one(FlightsTable).focus()

    def action_focus_line(self) -> None:
        self.query_one(CommandLine).focus()

    def action_panel_key(self, key: str) -> None:
        """a, d or Enter where no part takes it: they act on the flight selected in the panel."""
        what = {"a": "allows a flight's request", "d": "denies a flight's request", "t": "tells a flight"}.get(
            key, "opens a flight"
        )
        self.host.notice(f"{key} {what} in the flights panel: Shift+Tab goes there, ↑/↓ select")

    def action_interrupt(self) -> None:
        self.interrupt_wait()

    def action_toggle_log(self) -> None:
        lower = self.query_one("#lower", Horizontal)
        lower.toggle_class("-show-log")
        if lower.has_class("-show-log"):
            self._log_at_end()

    def _log_at_end(self) -> None:
        """The event log opens at its end, following (it was hidden: nothing scrolled it)."""
        events = self.query_one(EventLog)
        events.follow_from_end()

    def on_input_changed(self, event: Input.Changed) -> None:
        if isinstance(event.input, CommandLine):
            self.query_one(CommandHints).line = event.value

    def on_input_submitted(self, event: Input.Submitted) -> None:
        line = event.value.strip()
        cmd = self.query_one(CommandLine)
        cmd.value = ""
        if line:
            cmd.remember(line)
            self.run_command(line)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if isinstance(event.data_table, FlightsTable) and event.row_key.value is not None:
            self.open_flight(event.row_key.value)

    def on_flights_table_answer_requested(self, event: FlightsTable.AnswerRequested) -> None:
        """a: allow at once; d: a deny on the command line, for the reason to be typed."""
        if event.answer == "allow":
            self.run_command(f"/reply {short(event.agent_id)} allow")
        else:
            self.prefill(f"/reply {short(event.agent_id)} deny ")

    def on_flights_table_tell_requested(self, event: FlightsTable.TellRequested) -> None:
        self.prefill(f"/tell {short(event.agent_id)} ")

    def on_flights_table_merge_view_requested(self, event: FlightsTable.MergeViewRequested) -> None:
        self.run_command(f"/merge {event.wave} --watch")

    def on_mirror_table_interrupt_requested(self, event: MirrorTable.InterruptRequested) -> None:
        self.interrupt_other_wait(event.wait_id)

    def open_flight(self, agent_id: str) -> None:
        """Enter on a flight: open it, or, when it needs input, offer a reply on the command line."""
        agent = next((a for a in self.agents if a.id == agent_id), None)
        if agent is not None and agent.state == "needs_input" and agent.asked_by == "merge" and agent.wave:
            self.say(Text(f"{agent.name}: {agent.question}", style=self.host.roles["needs_input"]))
            self.run_command(f"/merge {agent.wave} --watch")  # its branch stopped the merge: show it
            return
        if agent is not None and agent.state == "needs_input":
            self.prefill(f"/reply {short(agent_id)} ")
            self.say(Text(f"{agent.name} asks: {agent.question}", style=self.host.roles["needs_input"]))
            return
        received = any(v.id == agent_id and v.reported for v in self.flight_views())
        talks = agent is not None and agent.conversation is not None
        self.app.push_screen(FlightScreen(self.bus, self.me, agent_id, self.host.settings.clock, received, talks))

    # ------------------------------------------------------------------ commands
    def run_command(self, line: str) -> None:
        """Run one slash command; bad input prints the usage and starts nothing."""
        self.result_in_view = False  # what the command says comes below it: toasts again
        self.say(Text(f"> {line}", style="bold"))
        try:
            parsed = parse(line)
        except Usage as e:
            self.say_bad(str(e))
            return
        result = parsed.command.run(self, parsed)
        if result is not None:
            self._guarded(parsed, result)

    @work(group="commands", exit_on_error=False, description="running a command")
    async def _guarded(self, parsed: Parsed, job: Awaitable[None]) -> None:
        try:
            await job
        except WavewaitError as e:
            self.say_bad(f"{said(e)}\nusage: {parsed.command.usage}")
        except Exception as e:  # shown, never swallowed; the app keeps running
            log.exception("command %s failed", parsed.command.name)
            self.say_bad(f"{parsed.command.name} failed: {e.__class__.__name__}: {e}")

    def sent_work(self, agent_id: str, at: float) -> None:
        """A new round of `agent_id` from `at`, the time its message was sent: a report after
        it is the new round's, even one that came in before this was called."""
        self.rounds[agent_id] = at
        self._dirty = True

    def open_merge(self, what: str, watch: Bus | None = None) -> MergeScreen:
        """The merge view of `what`, shown over this screen (following the bus with `watch`)."""
        view = MergeScreen(what, watch=watch)
        self.app.push_screen(view)
        return view

    def show_log(self, agent_id: str | None) -> None:
        """Show the event log, of one flight or of all."""
        self.query_one("#lower", Horizontal).set_class(True, "-show-log")
        self.query_one(EventLog).filter(agent_id)
        self._log_at_end()

    # ------------------------------------------------------------------ the person's wait
    @property
    def waiting(self) -> bool:
        return self.own_wait.waiting

    @property
    def last_result(self) -> Result | None:
        """The last wait's result: the app's exit value."""
        return self.own_wait.last_result

    @property
    def own_waits(self) -> set[str]:
        return self.own_wait.ids

    def start_wait(self, planned: Plan) -> Control:
        own = self.own_wait
        control = own.start(self.bus, self.me, planned, self.host.settings.clock())
        own.paint(own.started, self.read.by_id, self.host.roles)
        self.refresh_bindings()
        return control

    def on_wait_progressed(self, event: WaitProgressed) -> None:
        self._dirty = True
        self._repaint_unless_timed()

    def on_wait_ended(self, event: WaitEnded) -> None:
        """Show the result (the wait kept it); the message goes on up to the app, whose exit value it is.

        The result is the news: no toast of its own over it (the person away from the
        terminal is still told), and the toasts up now go, as the result says what they said.
        """
        self.refresh_bindings()
        if self.story is not None:
            self.story.wait_ended()
        self.app.clear_notifications()
        if event.result is None:
            self.say_bad(event.line)
            self.host.notice(event.line, severity="error", toast=False)
        else:
            for line in render_result(event.result, self.host.roles):
                self.say(line)
            satisfied = event.result.outcome() == "satisfied"
            self.host.notice(event.line, severity="information" if satisfied else "warning", toast=False)
        self.result_in_view = True
        self._dirty = True
        self._repaint_unless_timed()

    def interrupt_wait(self) -> None:
        self.own_wait.interrupt()

    # ------------------------------------------------------------------ other processes' waits
    def interrupt_other_wait(self, wait_id: str) -> None:
        rec = next((w for w in self.waits if w.id == wait_id), None)
        if rec is None:
            self.say(Text("that wait has already ended", style="dim"))
            return
        self.run_worker(self.interrupt_other(rec), group="commands", exit_on_error=False)

    async def interrupt_other(self, rec: WaitRecord) -> None:
        names = {a.id: a.name for a in self.agents}
        who = names.get(rec.waiter, rec.waiter)
        if await self.bus.interrupt(rec.id):
            self.say(
                f"interrupted wait {short(rec.id)} of {who} ({rec.tool}); "
                "its call returns as interrupted, with partial results"
            )
            self.host.notice(f"interrupted the wait of {who}")
        else:
            self.say(Text(f"wait {short(rec.id)} of {who} has already ended", style="dim"))

    # ------------------------------------------------------------------ the demo
    @work(group="demo", exit_on_error=False, description="launching the demo wave")
    async def run_demo(self) -> None:
        demo = self.host.settings.demo
        assert demo is not None
        try:
            flights = await launch(self.bus, self.me, demo, self.say)
        except Exception as e:
            log.exception("demo failed")
            self.say_bad(f"the demo could not start: {e.__class__.__name__}: {e}")
            return
        if flights:
            self.run_command(f"/wait {demo.timeout:g} --wave {WAVE}")

    def _show_guide(self) -> None:
        """The demo's guide says the step of the story the person is at (`demo_story.py`)."""
        if self.story is None:
            return
        flights = [a for a in self.agents if a.wave == WAVE and a.parent_id == self.me]
        self.query_one(DemoGuide).show(self.story.step(flights, self.waiting, self.last_result))
