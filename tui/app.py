"""The Textual face of wavewait: a live flights panel, /wait with Escape, a mirror of waits.

The app is a thin adapter over `wavewait.core`: it reads the bus when the bus's change
stream says something changed (wakes are hints, so it re-reads), repaints from one timer
at most ten times a second, and runs every wait and command in a worker so the screen
never blocks. Widgets are given their data (attributes down) and post messages up.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rich.text import Text
from textual import work
from textual.app import App
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.widgets import RichLog, Static

from ..core import agents as agents_mod
from ..core import messages
from ..core.bus import Bus, open_bus
from ..core.errors import WavewaitError
from ..core.ids import resolve, short
from ..core.model import AGENT_ITEM_TYPES, Agent, WaitRecord, now
from ..core.results import FanIn, NextMessage, Result
from ..core.wait import Control, Progress, check_timeout, wait_fan_in, wait_next
from .commands import Parsed, Usage, parse
from .messages import WaitEnded, WaitProgressed
from .palette import SlashProvider
from .screens.flight import FlightScreen
from .screens.help import HelpScreen
from .screens.main import MainScreen
from .state import (
    GLYPH,
    FlightView,
    flight_view,
    mirror_view,
    received_ids,
    role_styles,
    summary,
)
from .terminal import POP_TITLE, PUSH_TITLE, desktop_notification, window_title
from .widgets.command import CommandLine
from .widgets.eventlog import EventLog
from .widgets.flights import FlightsTable
from .widgets.mirror import MirrorTable
from .widgets.status import WaitStatus

log = logging.getLogger(__name__)

EXIT = {"satisfied": 0, "timeout": 3, "interrupted": 4}
REPAINT_EVERY = 0.1  # ≤ 10 Hz, one timer
READ_EVERY = 0.1  # coalesce bursts of bus changes into at most ten reads a second
SWEEP_EVERY = 1.0  # liveness sweep, so a flight whose process vanished shows as dead
#: a full collection of a big heap stalls a frame for 50-140 ms; the heap is frozen on every
#: tick instead (constant time) and fully collected at most this often
FULL_GC_EVERY = 30.0
DEATH_TOASTS = 3  # more deaths than this in one read make one toast, not a burst
DESKTOP_EVERY = 5.0  # while the terminal is not focused, at most one desktop notification this often


class WaveApp(App[dict[str, Any] | None]):
    """`bus` is an open Bus, or a URL/path to open; `clock` gives wall time (injectable)."""

    CSS_PATH = "app.tcss"
    MODES = {"main": MainScreen}  # lazily built, and its own .tcss is loaded (toad's layout)
    DEFAULT_MODE = "main"
    TITLE = "wavewait"
    COMMANDS = App.COMMANDS | {SlashProvider}
    BINDINGS = [
        Binding("f1", "help", "Help"),
        Binding("ctrl+l", "toggle_log", "Log"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    def __init__(
        self,
        bus: Bus | str | None = None,
        *,
        me: str = "orchestrator",
        clock: Callable[[], float] = time.time,
        animate: bool = True,
        bus_label: str | None = None,
        demo: Any = None,
        sweep_every: float = SWEEP_EVERY,
    ) -> None:
        super().__init__()
        self._bus_arg = bus
        self.bus: Bus | None = bus if not isinstance(bus, (str, type(None))) else None
        self._owns_bus = self.bus is None
        self.me = me
        self.clock = clock
        self.animate = animate
        self.bus_label = bus_label
        self.demo = demo
        self.sweep_every = sweep_every
        # the latest read of the bus
        self.agents: list[Agent] = []
        self.waits: list[WaitRecord] = []
        self.heard_from: set[str] = set()
        self.rounds: dict[str, float] = {}  # flight id -> when the person last sent it work
        self._dirty = True
        self._first_read = True
        self.read_count = 0
        self._last_repaint_second = -1
        # the person's own wait
        self.control: Control | None = None
        self.wait_targets: list[tuple[str, str]] = []
        self.wait_received: set[str] = set()
        self.wait_progress = ""
        self.wait_started = 0.0
        self.wait_timeout: float | None = None
        self.last_wait_received: set[str] = set()
        self.last_result: Result | None = None
        self._quit_after_wait = False
        self.frame_hook: Callable[[float], None] | None = None  # the benchmark's probe
        self._bus_ready = asyncio.Event()
        self._own_waits: set[str] = set()  # ids of the person's waits: not mirrored
        self.notices: list[str] = []  # every toast shown, kept (toasts expire)
        self.terminal_out: Callable[[str], None] = self._write_terminal  # tests capture it
        self._title_flagged = False
        self._unseen = 0  # notices while the terminal was not focused
        self._desktop_at = -DESKTOP_EVERY
        self._view_cache: dict[str, tuple[Agent, bool, FlightView]] = {}
        self.roles = role_styles({})  # Rich styles of the current theme, by role (state.ROLES)
        self._full_gc_at = time.monotonic()

    # ------------------------------------------------------------------ set-up
    async def on_mount(self) -> None:
        if not self.is_headless:  # a closed terminal or a `kill` quits as Ctrl+Q does
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGHUP):
                loop.add_signal_handler(sig, lambda: self.run_worker(self.action_quit(), group="quit"))
        self._theme_changed()
        self.theme_changed_signal.subscribe(self, lambda _theme: self._theme_changed())
        if self.bus is None:
            self.bus = await open_bus(self._bus_arg)  # type: ignore[arg-type]
        if self.bus_label is None:
            self.bus_label = self.bus.url
        await agents_mod.ensure_agent(self.bus, self.me)
        self._bus_ready.set()

    def _theme_changed(self) -> None:
        """Re-read the theme's colours; the panel and the status repaint with them."""
        self.roles = role_styles(self.theme_variables)
        self._dirty = True
        if not self.animate and self.read_count:
            self.repaint()

    async def main_screen_ready(self) -> None:
        """Called by the main screen once composed: start following the bus."""
        await self._bus_ready.wait()
        self.say(Text(f"wavewait · you are {self.me} · bus {self.bus_label} · /help for commands", style="dim"))
        self.follow_bus()
        if self.animate:
            self.set_interval(REPAINT_EVERY, self.tick)
        if self.sweep_every:
            self.set_interval(self.sweep_every, self.sweep_liveness)
        if self.demo is not None:
            self.run_demo()

    async def on_unmount(self) -> None:
        self._unflag_title()
        if self.control is not None:
            self.control.interrupt()
        if self._owns_bus and self.bus is not None:
            await self.bus.close()

    # ------------------------------------------------------------------ reading the bus
    @work(exclusive=True, group="bus", exit_on_error=False, description="following the bus")
    async def follow_bus(self) -> None:
        """Subscribe first, then read; after each wake, read again (at most ten times a second)."""
        assert self.bus is not None
        changes = await self.bus.subscribe(agents=True, waits=True, inboxes=[self.me])
        failing = False
        try:
            while True:
                started = time.monotonic()
                try:
                    await self.read_bus()
                except WavewaitError as e:  # say so, keep the last picture, try again shortly
                    if not failing:
                        log.exception("reading the bus failed")
                        self.say_bad(f"cannot read the bus: {e}; retrying every second")
                    failing = True
                    await asyncio.sleep(1.0)
                    continue
                if failing:
                    self.say(Text("reading the bus again", style=self.roles["good"]))
                    failing = False
                await changes.wait()
                rest = READ_EVERY - (time.monotonic() - started)
                if rest > 0:
                    await asyncio.sleep(rest)
        finally:
            changes.close()

    async def read_bus(self) -> None:
        bus = self.bus
        assert bus is not None
        agents = await bus.list_agents()
        waits = await bus.list_waits()
        heard = {r.sender for r in await bus.pending(self.me) if r.type in AGENT_ITEM_TYPES}
        heard |= {i.sender for i in await bus.history(self.me, 1000) if i.type in AGENT_ITEM_TYPES}
        self._note_changes(agents, waits)
        self.agents, self.waits, self.heard_from = agents, waits, heard
        self.read_count += 1
        self._dirty = True
        if not self.animate:
            self.repaint()

    def _note_changes(self, agents: list[Agent], waits: list[WaitRecord]) -> None:
        """Turn the difference between two reads into event-log lines and death toasts."""
        before = {a.id: a for a in self.agents}
        events: EventLog = self._main.query_one(EventLog)
        deaths = []
        for a in agents:
            if a.id == self.me:
                continue
            old = before.get(a.id)
            tag = f"{a.name} ({short(a.id)})"
            if old is None:
                if not self._first_read:
                    events.add(a.id, Text(f"+ {tag} started{' in ' + a.wave if a.wave else ''}"))
                    if a.status == "dead":  # started and died between two reads
                        events.add(a.id, Text(f"✖ {tag}: dead ({a.reason or 'dead'})", style=self.roles["dead"]))
                        deaths.append(a)
                continue
            if old.status != a.status:
                line = Text(
                    f"{GLYPH.get(a.status, '·')} {tag}: {old.status} → {a.status}", style=self.roles.get(a.status, "")
                )
                if a.reason and a.status in ("dead", "closed"):
                    line.append(f" ({a.reason})")
                events.add(a.id, line)
                if a.status == "dead":
                    deaths.append(a)
            if a.last_message_at != old.last_message_at and a.last_message:
                events.add(a.id, Text(f"✉ {tag}: {a.last_message}"))
        old_waits = {w.id for w in self.waits}
        new_waits = {w.id for w in waits}
        names = {a.id: a.name for a in agents}
        for w in waits:
            if w.id not in old_waits and not self._first_read and w.id not in self._own_waits:
                events.add(
                    w.waiter,
                    Text(
                        f"⧗ {names.get(w.waiter, w.waiter)} waits ({w.tool}): {w.description}", style=self.roles["warn"]
                    ),
                )
        for w in self.waits:
            if w.id not in new_waits and w.id not in self._own_waits:
                events.add(
                    w.waiter, Text(f"⧗ wait {short(w.id)} of {names.get(w.waiter, w.waiter)} ended", style="dim")
                )
        self._first_read = False
        if len(deaths) > DEATH_TOASTS:
            self.notice(f"{len(deaths)} flights died", severity="error")
        else:
            for a in deaths:
                self.notice(f"{a.name} ({short(a.id)}) died: {a.reason or 'dead'}", severity="error")

    def sweep_liveness(self) -> None:
        live = [a for a in self.agents if not a.finished and (a.pid or a.lease_expires_at)]
        if live and self.bus is not None:
            self.run_worker(
                agents_mod.sweep(self.bus, live),
                group="sweep",
                exclusive=True,
                exit_on_error=False,
                description="liveness sweep",
            )

    # ------------------------------------------------------------------ painting
    @property
    def _main(self) -> MainScreen:
        for screen in self.screen_stack:
            if isinstance(screen, MainScreen):
                return screen
        raise LookupError("the main screen is not mounted")

    def flights(self) -> list[Agent]:
        return [a for a in self.agents if a.id != self.me]

    def flight_views(self) -> list[FlightView]:
        """One view per flight; a view is rebuilt only when its record or its word changed."""
        flights = self.flights()
        heard = self.heard_from | self.wait_received | self.last_wait_received
        got = received_ids(flights, heard, self.rounds)
        cache, views = self._view_cache, []
        for a in flights:
            received = a.id in got
            hit = cache.get(a.id)
            if hit is None or hit[0] is not a or hit[1] != received:
                hit = cache[a.id] = (a, received, flight_view(a, received))
            views.append(hit[2])
        if len(cache) > 2 * len(flights) + 100:
            live = {a.id for a in flights}
            for k in [k for k in cache if k not in live]:
                del cache[k]
        return views

    def flight_ids(self) -> list[tuple[str, str]]:
        return [(a.id, a.name) for a in self.flights()]

    def tick(self) -> None:
        """The one timer: repaint what changed, or just advance spinners and countdowns."""
        self._manage_gc()
        try:
            table = self._main.query_one(FlightsTable)
        except (LookupError, NoMatches):  # the screen is going away (quitting)
            return
        t = self.clock()
        if self._dirty or int(t) != self._last_repaint_second:
            self.repaint()
        elif self.animation_level != "none":  # TEXTUAL_ANIMATIONS=none: spinners stand still
            started = time.perf_counter()
            table.spin(t)
            if self.control is not None:
                self._paint_status(t)
            if self.frame_hook:
                self.frame_hook(time.perf_counter() - started)

    def _manage_gc(self) -> None:
        """Keep the collector's pauses out of frames.

        A big bus makes a big heap (records, rows, render caches) and the collector's older
        generations stall a frame for up to 140 ms. Freezing moves what exists out of its
        sight in constant time, so each automatic collection sees only the last tick's
        objects (acyclic ones are still freed by reference counting); cycles that were
        frozen are collected by one full pass every FULL_GC_EVERY seconds.
        """
        if time.monotonic() - self._full_gc_at >= FULL_GC_EVERY:
            gc.unfreeze()
            gc.collect()
            self._full_gc_at = time.monotonic()
        gc.freeze()

    def repaint(self) -> None:
        started = time.perf_counter()
        t = self.clock()
        self._dirty = False
        self._last_repaint_second = int(t)
        screen = self._main
        views = self.flight_views()
        screen.query_one(FlightsTable).show(views, t)
        head = Text()
        head.append(summary(views), style="bold")
        waves = sorted({v.wave for v in views if v.wave})
        if waves:
            head.append(f"  ·  {', '.join(waves)}", style="dim")
        head.append(f"  ·  you: {self.me}", style="dim")
        screen.query_one("#summary", Static).update(head)
        others_recs = [w for w in self.waits if w.id not in self._own_waits]
        names = {a.id: a.name for a in self.agents} if others_recs else {}
        others = [mirror_view(w, t, names) for w in others_recs]
        screen.query_one("#mirror-box").set_class(bool(others), "-active")
        screen.query_one(MirrorTable).show(others)
        if self.control is not None:
            self._paint_status(t)
        if self.frame_hook:
            self.frame_hook(time.perf_counter() - started)

    def _paint_status(self, t: float) -> None:
        targets = {agent_id for agent_id, _ in self.wait_targets}
        states = {a.id: (a.status, a.reason or "") for a in self.agents if a.id in targets}
        left = None if self.wait_timeout is None else self.wait_timeout - (t - self.wait_started)
        self._main.query_one(WaitStatus).render_wait(
            targets=self.wait_targets,
            received=self.wait_received,
            states=states,
            t=t,
            left=left,
            progress=self.wait_progress,
        )

    def notice(self, message: str, severity: str = "information") -> None:
        """A toast (agent text, so never markup) that is also kept in `notices`.

        When the terminal is not focused the toast would go unseen, so the person also gets
        a desktop notification and the window title says what happened until they are back.
        """
        self.notices.append(message)
        self.notify(message, severity=severity, markup=False)  # type: ignore[arg-type]
        if not self.app_focus:
            self._alert_away(message)

    def _alert_away(self, message: str) -> None:
        """A desktop notification (a burst gives one every DESKTOP_EVERY s) and a title flag."""
        self._unseen += 1
        if time.monotonic() - self._desktop_at >= DESKTOP_EVERY:
            self._desktop_at = time.monotonic()
            self.terminal_out(desktop_notification(message, tmux="TMUX" in os.environ))
        if not self._title_flagged:
            self.terminal_out(PUSH_TITLE)
            self._title_flagged = True
        more = f" (+{self._unseen - 1} more)" if self._unseen > 1 else ""
        self.terminal_out(window_title(f"● wavewait: {message}{more}"))

    def watch_app_focus(self, focused: bool) -> None:
        if focused:
            self._unflag_title()

    def _unflag_title(self) -> None:
        """Give the person's own window title back."""
        self._unseen = 0
        if self._title_flagged:
            self.terminal_out(POP_TITLE)
            self._title_flagged = False

    def copy_to_clipboard(self, text: str) -> None:
        """pyperclip first when installed (OSC 52 is ignored by some terminals), then OSC 52."""
        try:
            import pyperclip  # optional: not a dependency
        except ImportError:
            pyperclip = None
        if pyperclip is not None:
            try:
                pyperclip.copy(text)
            except pyperclip.PyperclipException as e:  # no clipboard program (headless, ssh)
                log.info("pyperclip could not copy (%s); using OSC 52 only", e)
        super().copy_to_clipboard(text)

    def _write_terminal(self, sequence: str) -> None:
        """Write straight to the terminal, as `App.bell` does (nothing when headless)."""
        if not self.is_headless and self._driver is not None:
            self._driver.write(sequence)

    def say_bad(self, message: str) -> None:
        """A line about something that went wrong, in the theme's error colour."""
        self.say(Text(message, style=self.roles["bad"]))

    def say(self, line: Text | str) -> None:
        """Write a line to the scrollback (agent text is always a Text, never markup)."""
        self._main.query_one("#scrollback", RichLog).write(line if isinstance(line, Text) else Text(line))

    def prefill(self, text: str) -> None:
        cmd = self._main.query_one(CommandLine)
        cmd.value = text
        cmd.cursor_position = len(text)
        cmd.focus()

    # ------------------------------------------------------------------ commands
    def run_command(self, line: str) -> None:
        """Run one slash command; bad input prints the usage and starts nothing."""
        self.say(Text(f"> {line}", style="bold"))
        try:
            parsed = parse(line)
        except Usage as e:
            self.say_bad(str(e))
            return
        handler: Callable[[Parsed], Awaitable[None] | None] = getattr(self, "cmd_" + parsed.command.name[1:])
        result = handler(parsed)
        if result is not None:
            self._guarded(parsed, result)

    @work(group="commands", exit_on_error=False, description="running a command")
    async def _guarded(self, parsed: Parsed, job: Awaitable[None]) -> None:
        try:
            await job
        except WavewaitError as e:
            self.say_bad(f"{e}\nusage: {parsed.command.usage}")
        except Exception as e:  # shown, never swallowed; the app keeps running
            log.exception("command %s failed", parsed.command.name)
            self.say_bad(f"{parsed.command.name} failed: {e.__class__.__name__}: {e}")

    async def cmd_wait(self, p: Parsed) -> None:
        if self.control is not None:
            self.say_bad("a wait is already running; Escape interrupts it")
            return
        timeout = check_timeout(p.args[0], "TIMEOUT")
        targets = await agents_mod.resolve_agents(self.bus, p.args[1:], "ID") if p.args[1:] else []
        if self.control is not None:
            self.say_bad("a wait is already running; Escape interrupts it")
            return
        self.start_wait(timeout, targets)

    async def cmd_send(self, p: Parsed) -> None:
        to, body = p.args
        recipient = await agents_mod.resolve_agent(self.bus, to, "ID")
        item = await messages.send(self.bus, self.me, recipient.id, body)
        self.rounds[recipient.id] = now()
        self._dirty = True
        self.say(f"sent to {recipient.name} ({short(recipient.id)}): message {short(item.id)}")

    async def cmd_spawn(self, p: Parsed) -> None:
        agent = await agents_mod.spawn(self.bus, p.args[0], p.rest, wave=p.wave, parent_id=self.me)
        self.say(
            f"spawned {agent.name} ({short(agent.id)}), pid {agent.pid}{', wave ' + agent.wave if agent.wave else ''}"
        )

    async def cmd_kill(self, p: Parsed) -> None:
        agent = await agents_mod.resolve_agent(self.bus, p.args[0], "ID")
        agent = await agents_mod.kill(self.bus, agent, by=self.me)
        self.say(
            f"{agent.name} ({short(agent.id)}) is {agent.status}{' (' + agent.reason + ')' if agent.reason else ''}"
        )

    async def cmd_close(self, p: Parsed) -> None:
        agent = await agents_mod.resolve_agent(self.bus, p.args[0], "ID")
        agent = await agents_mod.close(self.bus, agent)
        self.say(f"{agent.name} ({short(agent.id)}) is {agent.status}")

    async def cmd_interrupt(self, p: Parsed) -> None:
        waits = {w.id: w for w in await self.bus.list_waits() if w.id not in self._own_waits}
        wait_id = resolve(p.args[0], waits, "WAIT")
        await self._interrupt_other(waits[wait_id])

    async def cmd_agents(self, p: Parsed) -> None:
        agents = await self.bus.list_agents()
        if not agents:
            self.say("no agents on the bus")
        for a in agents:
            line = Text(f"  {a.name:<16} {short(a.id)}  ")
            line.append(f"{a.status:<7}", style=self.roles.get(a.status, ""))
            line.append(f" {a.wave or '—':<8} ")
            line.append(a.reason if a.status == "dead" and a.reason else (a.last_message or ""), style="dim")
            self.say(line)

    def cmd_help(self, p: Parsed) -> None:
        self.action_help()

    async def cmd_log(self, p: Parsed) -> None:
        agent_id = None
        if p.args:
            agent_id = (await agents_mod.resolve_agent(self.bus, p.args[0], "ID")).id
        self._main.query_one("#lower").set_class(True, "-show-log")
        self._main.query_one(EventLog).filter(agent_id)
        self.say("event log: " + (f"only {short(agent_id)}" if agent_id else "all flights"))

    # ------------------------------------------------------------------ the person's wait
    @property
    def waiting(self) -> bool:
        return self.control is not None

    def start_wait(self, timeout: float, targets: list[Agent]) -> Control:
        control = Control()
        self.control = control
        self._own_waits.add(control.wait_id)
        self.wait_targets = [(a.id, a.name) for a in targets]
        self.wait_received = set()
        self.wait_progress = ""
        self.wait_started = self.clock()
        self.wait_timeout = timeout
        self._main.query_one(WaitStatus).set_class(True, "-active")
        self._paint_status(self.clock())
        self._main.refresh_bindings()
        self._run_wait(timeout, [a.id for a in targets], control)
        return control

    @work(exclusive=True, group="wait", exit_on_error=False, description="waiting")
    async def _run_wait(self, timeout: float, ids: list[str], control: Control) -> None:
        def on_progress(p: Progress) -> None:
            self.post_message(WaitProgressed(p.message, list(p.received)))

        try:
            if ids:
                result: Result = await wait_fan_in(
                    self.bus, self.me, timeout, ids, on_progress=on_progress, control=control
                )
            else:
                result = await wait_next(self.bus, self.me, timeout, on_progress=on_progress, control=control)
        except WavewaitError as e:
            self.post_message(WaitEnded(f"wait failed: {e}", None))
            return
        except Exception as e:
            log.exception("wait failed")
            self.post_message(WaitEnded(f"wait failed: {e.__class__.__name__}: {e}", None))
            return
        self.post_message(WaitEnded(headline(result), result))

    def on_wait_progressed(self, event: WaitProgressed) -> None:
        if self.control is None:
            return
        self.wait_progress = event.message
        self.wait_received = set(event.received)
        self._dirty = True
        if not self.animate:
            self.repaint()

    def on_wait_ended(self, event: WaitEnded) -> None:
        self.control = None
        self._main.query_one(WaitStatus).set_class(False, "-active")
        self._main.refresh_bindings()
        if event.result is None:
            self.say_bad(event.line)
            self.notice(event.line, severity="error")
        else:
            self.last_result = event.result
            if isinstance(event.result, FanIn):
                self.last_wait_received = {r.agent_id for r in event.result.results if r.status == "received"}
            elif isinstance(event.result, NextMessage) and event.result.sender:
                self.last_wait_received = {event.result.sender}
            for line in render_result(event.result, self.roles):
                self.say(line)
            outcome = event.result.outcome()
            self.notice(event.line, severity="information" if outcome == "satisfied" else "warning")
        self.wait_received = set()
        self._dirty = True
        if not self.animate:
            self.repaint()
        if self._quit_after_wait:
            self.exit(*self.exit_value())

    def interrupt_own_wait(self) -> None:
        """Escape: the core returns `interrupted` with the partial state at once."""
        if self.control is not None:
            self.control.interrupt()

    def exit_value(self) -> tuple[dict[str, Any] | None, int]:
        if self.last_result is None:
            return None, 0
        return self.last_result.to_json(), EXIT[self.last_result.outcome()]

    async def action_quit(self) -> None:
        """Quit; a running wait is interrupted first so its partial result is printed."""
        if self.control is not None:
            self._quit_after_wait = True
            self.control.interrupt()
            return
        self.exit(*self.exit_value())

    # ------------------------------------------------------------------ other processes' waits
    def interrupt_other_wait(self, wait_id: str) -> None:
        rec = next((w for w in self.waits if w.id == wait_id), None)
        if rec is None:
            self.say(Text("that wait has already ended", style="dim"))
            return
        self.run_worker(self._interrupt_other(rec), group="commands", exit_on_error=False)

    async def _interrupt_other(self, rec: WaitRecord) -> None:
        names = {a.id: a.name for a in self.agents}
        who = names.get(rec.waiter, rec.waiter)
        if await self.bus.interrupt(rec.id):
            self.say(
                f"interrupted wait {short(rec.id)} of {who} ({rec.tool}); "
                "its call returns `interrupted` with partial results"
            )
            self.notice(f"interrupted the wait of {who}")
        else:
            self.say(Text(f"wait {short(rec.id)} of {who} has already ended", style="dim"))

    # ------------------------------------------------------------------ screens, panes
    def open_flight(self, agent_id: str) -> None:
        received = any(v.id == agent_id and v.state == "received" for v in self.flight_views())
        self.push_screen(FlightScreen(self.bus, self.me, agent_id, self.clock, received))

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_toggle_log(self) -> None:
        self._main.query_one("#lower").toggle_class("-show-log")

    # ------------------------------------------------------------------ the demo
    @work(group="demo", exit_on_error=False, description="launching the demo wave")
    async def run_demo(self) -> None:
        from .demo import launch

        try:
            flights = await launch(self.bus, self.me, self.demo, self.say)
        except Exception as e:
            log.exception("demo failed")
            self.say_bad(f"the demo could not start: {e.__class__.__name__}: {e}")
            return
        self.run_command(f"/wait {self.demo.timeout:g} " + " ".join(short(a.id) for a in flights))


def headline(result: Result) -> str:
    """One line for the toast and the result block's head."""
    if isinstance(result, FanIn):
        got = sum(r.status == "received" for r in result.results)
        word = {"complete": "fan-in complete", "timeout": "fan-in timed out", "interrupted": "interrupted"}[
            result.status
        ]
        return f"{word}: {got}/{len(result.results)} received"
    if isinstance(result, NextMessage):
        if result.status == "received":
            return f"message from {result.name}"
        return "timed out: no message" if result.status == "timeout" else "interrupted: no message"
    return result.outcome()


def render_result(result: Result, roles: dict[str, str]) -> list[Text]:
    """The result block in the scrollback: every requested flight with its status."""
    lines = [Text(headline(result), style="bold")]
    if isinstance(result, FanIn):
        width = max((len(r.name) for r in result.results), default=0)
        for r in result.results:
            glyph = "✓" if r.status == "received" else GLYPH.get(r.status, "…")
            line = Text(f"  {glyph} {r.name:<{width}}  {short(r.agent_id)}  ")
            line.append(f"{r.status:<8}", style=roles.get(r.status, ""))
            if r.message is not None:
                line.append("  " + r.message)
            elif r.reason:
                line.append(f"  ({r.reason})", style=roles["bad"] if r.status == "dead" else "dim")
            lines.append(line)
    elif isinstance(result, NextMessage):
        if result.status == "received":
            lines = [
                Text(f"From: {result.name} ({short(result.sender or '')})", style="bold"),
                Text(result.message or ""),
            ]
        elif result.status == "timeout":
            lines = [Text("No messages.", style="bold")]
    return lines
