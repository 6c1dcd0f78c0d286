"""The Textual face of wavewait: the app-wide part (bus, settings, screens, theme, notices).

The main screen (`screens/main.py`) does the view's work: it follows the bus, paints the
flights panel and runs the person's wait and commands. The app opens and closes the bus,
holds the settings, the theme's role styles and the notices (toasts, and a desktop
notification and a flagged window title while the terminal is not focused), and quits
with the last wait's result as its exit value.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from textual.app import App
from textual.binding import Binding
from textual.driver import Driver
from textual.notifications import SeverityLevel

from ..core import agents as agents_mod
from ..core.bus import Bus, open_bus
from ..core.errors import WavewaitError
from ..core.exits import Exit, signalled
from ..core.model import now
from ..core.proc import settle_heap
from . import demo_queue as queue_demo_mod
from .demo import DemoPlan
from .driver import hangup_safe
from .host import SWEEP_EVERY, Host, Settings
from .messages import Toast, WaitEnded
from .palette import SlashProvider
from .screens.help import HelpScreen
from .screens.main import MainScreen, main_screen
from .screens.tasks import TasksScreen, follow_guard_trips
from .state import role_styles
from .terminal import POP_TITLE, PUSH_TITLE, desktop_notification, window_title

log = logging.getLogger(__name__)

SIGNAL_GRACE = 1.5  # after SIGTERM/SIGHUP, seconds to quit cleanly before leaving regardless
TEARDOWN_GRACE = 10.0  # then at most this for the teardown (ending the demo's flights) before leaving
DESKTOP_EVERY = 5.0  # while the terminal is not focused, at most one desktop notification this often


class WaveApp(App[dict[str, Any] | None]):
    """`bus` is an open Bus, or a URL/path to open; `clock` gives wall time (injectable).

    `animate=False` repaints after every read instead of from the timer (tests, screenshots).
    `teardown` ends what this run owns (the demo's flights and temporary bus): its caller runs
    it after `run()`; a signal's forced exit (`SIGNAL_GRACE`) runs it first. It must be safe
    to call twice and from any thread.
    """

    CSS_PATH = "app.tcss"
    MODES = {"main": MainScreen}  # lazily built, and its own .tcss is loaded (toad's layout)
    DEFAULT_MODE = "main"
    TITLE = "wavewait"
    COMMANDS = App.COMMANDS | {SlashProvider}
    BINDINGS = [
        Binding("f1", "help_here", "Help", tooltip="Help for the part that has focus (again: hide it)"),
        Binding("ctrl+l", "screen.toggle_log", "Log"),  # the main screen's; bound here for the footer's order
        Binding("ctrl+t", "tasks", "Tasks"),  # shown only when a queue is named (check_action)
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
        demo: DemoPlan | None = None,
        sweep_every: float = SWEEP_EVERY,
        queue: str | None = None,
        queue_demo: bool = False,
        teardown: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self.settings = Settings(
            me=me,
            clock=clock,
            timed_repaint=animate,
            sweep_every=sweep_every,
            demo=demo,
            queue=queue_demo_mod.QUEUE if queue_demo else queue,
            queue_demo=queue_demo,
        )
        self._bus_url: str | None = bus if isinstance(bus, str) else None
        self._bus: Bus | None = None if bus is None or isinstance(bus, str) else bus
        self._owns_bus = self._bus is None  # a bus the app opens, it closes
        self.bus_ready = asyncio.Event()
        self.bus_label = bus_label
        self.roles = role_styles({})  # Rich styles of the current theme, by role (state.ROLES)
        self.frame_hook: Callable[[float], None] | None = None  # the benchmark's probe
        self.notices: list[str] = []  # every toast shown, kept (toasts expire)
        self.terminal_out: Callable[[str], None] = self._write_terminal  # tests capture it
        self._quit_after_wait = False
        self._title_flagged = False
        self._unseen = 0  # notices while the terminal was not focused
        self._desktop_at = -DESKTOP_EVERY
        self.teardown = teardown
        self._forced_exit: threading.Timer | None = None
        self._run_over = threading.Event()  # Textual's shutdown finished: no forced exit
        self.start_error: str | None = None  # why the bus could not be opened (the app ended at once)

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver, made to survive its terminal going away (see `driver.py`)."""
        return hangup_safe(super().get_driver_class())

    def run(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        """Textual's `run`; once it returned, a signal's forced exit stands down."""
        try:
            return super().run(*args, **kwargs)
        finally:
            self._run_over.set()
            if self._forced_exit is not None:
                self._forced_exit.cancel()

    @property
    def bus(self) -> Bus:
        """The open bus (the main screen waits for `bus_ready` before using it)."""
        if self._bus is None:
            raise RuntimeError("the bus is not open yet")
        return self._bus

    @property
    def main(self) -> MainScreen:
        """The main screen (the one running waits), wherever it is in the stack."""
        return main_screen(self)

    async def on_mount(self) -> None:
        if not self.is_headless:  # a closed terminal or a `kill` quits as Ctrl+Q does
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, partial(self._on_signal, loop))
        self.roles = role_styles(self.theme_variables)
        self.theme_changed_signal.subscribe(self, lambda _theme: self._theme_changed())
        try:
            if self._bus is None:
                self._bus = await open_bus(self._bus_url)
            await agents_mod.ensure_agent(self._bus, self.settings.me)
        except (WavewaitError, OSError) as e:  # one line that says what to do, not a traceback
            log.warning("cannot open the bus: %s", e)
            self.start_error = " ".join(f"cannot open the bus: {e}".split())  # its caller prints it
            self.exit(return_code=Exit.BAD_INPUT)  # the bus cannot be opened: fix it and start again
            return
        if self.bus_label is None:
            self.bus_label = self._bus.url
        settle_heap()
        self.bus_ready.set()
        if self.settings.queue:
            notice = partial(self.notice, severity="warning")
            since = now()  # trips from here on; the demo's first one may come before the watcher's first read
            self.run_worker(follow_guard_trips(self._bus, self.settings.me, notice, since), group="guards")
        if self.settings.queue_demo:
            self.run_worker(self._queue_demo(), group="demo", exit_on_error=False)
            self.action_tasks()

    async def _queue_demo(self) -> None:
        try:
            s = await queue_demo_mod.run(self.bus, self.settings.me, self.notice)
        except Exception as e:  # shown, never swallowed; the app keeps running
            log.exception("the queue demo failed")
            self.notice(f"the queue demo failed: {e.__class__.__name__}: {e}", severity="error")
            return
        self.notice(
            f"queue {s.queue} finished: {s.done} done, {s.failed} failed, {s.skipped} skipped",
            severity="information" if s.ok else "warning",
        )

    def _theme_changed(self) -> None:
        """Re-read the theme's colours; the main screen repaints with them."""
        self.roles = role_styles(self.theme_variables)
        try:
            main = self.main
        except LookupError:  # not composed yet: its first paint uses the new roles
            return
        main.theme_changed()

    async def on_unmount(self) -> None:
        self._unflag_title()
        if self._owns_bus and self._bus is not None:
            await self._bus.close()

    def notice(self, message: str, severity: SeverityLevel = "information", *, toast: bool = True) -> None:
        """A toast (agent text, so never markup) that is also kept in `notices`.

        When the terminal is not focused the toast would go unseen, so the person also gets
        a desktop notification and the window title says what happened until they are back.
        `toast=False`: no toast (the screen shows the news itself, e.g. a wait's result,
        which a toast would cover); kept and sent away all the same.
        """
        self.notices.append(message)
        if toast:
            self.notify(message, severity=severity, markup=False)
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
            import pyperclip  # type: ignore[import-untyped]  # optional, not a dependency: no stubs installed
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

    def on_toast(self, event: Toast) -> None:
        self.notice(event.message, severity=event.severity)

    # ------------------------------------------------------------------ screens, quitting
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The tasks view (ctrl+t) is there only when a queue was named."""
        if action == "tasks" and not self.settings.queue:
            return False
        return super().check_action(action, parameters)

    def action_tasks(self) -> None:
        """The tasks view of the queue given with --queue (or WAVEWAIT_QUEUE)."""
        if self.settings.queue and not isinstance(self.screen, TasksScreen):
            self.push_screen(TasksScreen(self.bus, self.settings.queue))

    def action_help(self) -> None:
        """`/help`: every command and key."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_help_here(self) -> None:
        """F1: the help of the focused part (its text and keys) beside it; F1 again hides it."""
        from textual.widgets import HelpPanel

        panels = self.screen.query(HelpPanel)
        if panels:
            panels.remove()
        else:
            self.action_show_help_panel()

    def _on_signal(self, loop: asyncio.AbstractEventLoop, sig: int, _frame: object) -> None:
        """SIGTERM, SIGHUP: quit as Ctrl+Q does; past a grace, tear down and leave anyway.

        The quit ends the waits first, so what they took is kept. The timer is for a quit
        that does not finish: the event loop can be stuck (a terminal whose output stopped
        blocks every write), so this is a plain signal handler, which Python runs in the
        main thread even while it is blocked, not one of the loop's.
        """
        if self._run_over.is_set():  # Textual's run returned: the caller's teardown is under way
            return
        if self._forced_exit is None:
            self._forced_exit = threading.Timer(SIGNAL_GRACE, self._leave_now, args=(signalled(sig),))
            self._forced_exit.daemon = True
            self._forced_exit.start()
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing left to quit
            loop.call_soon_threadsafe(self._quit_on_signal)

    def _quit_on_signal(self) -> None:
        self.run_worker(self.action_quit(), group="quit")

    def _leave_now(self, code: int) -> None:
        """The forced exit: the teardown off the event loop (it may be the stuck part), then
        leave without the rest of Textual's shutdown.

        The teardown gets its own thread and at most TEARDOWN_GRACE: anything in it can block
        too, and the exit must come. What it would write goes to /dev/null first: a warning
        it logs (the bus's recovery sweep returning a killed flight's claims), written to a
        terminal whose output stopped, blocked it there until the grace ran out, and the
        demo's supervisors outlived the TUI.
        """
        if self._run_over.is_set():  # the shutdown finished meanwhile: the caller tears down
            return
        _stdio_to_null()
        if self.teardown is not None:
            worker = threading.Thread(target=self._teardown_logged, name="wavewait-teardown", daemon=True)
            worker.start()
            worker.join(TEARDOWN_GRACE)
        os._exit(code)

    def _teardown_logged(self) -> None:
        assert self.teardown is not None
        try:
            self.teardown()
        except Exception:
            log.exception("the teardown on a forced exit failed")

    def exit_value(self) -> tuple[dict[str, Any] | None, int]:
        result = self.main.last_result
        if result is None:
            return None, Exit.OK
        return result.to_json(), result.exit_code

    async def action_quit(self) -> None:
        """Quit; a running wait is interrupted first so its partial result is printed."""
        try:
            main = self.main
        except LookupError:  # quit (a signal) before the main screen was composed
            self.exit()
            return
        if main.waiting:
            self._quit_after_wait = True
            main.interrupt_wait()
            return
        self.exit(*self.exit_value())

    def on_wait_ended(self, event: WaitEnded) -> None:
        """After the main screen showed the result: quit if that was waiting on it."""
        if self._quit_after_wait:
            self.exit(*self.exit_value())


def _stdio_to_null() -> None:
    """Point stdout and stderr (the descriptors and Python's streams, which the logging
    module's last resort writes to) at /dev/null: a forced exit writes nothing more."""
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(null, fd)
    os.close(null)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 -- open until os._exit


_HOST: type[Host] = WaveApp  # the screens' host (host.py): mypy holds the app to the protocol
