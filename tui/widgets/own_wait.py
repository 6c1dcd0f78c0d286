"""The person's own wait: its state, its worker and its status layer.

The main screen starts it with the bus and the targets and feeds it the flights' records
to paint (attributes down); the wait runs in this widget's worker, whose `WaitProgressed`
and `WaitEnded` this widget keeps and lets go on up: the screen repaints and shows the
result, the app quits on it when it was asked to (docs/architecture.md, "A TUI view").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from textual import work

from ...core.bus import Bus
from ...core.errors import WavewaitError
from ...core.model import Agent
from ...core.results import Result
from ...core.wait import Control, Plan, Progress, run_plan
from ...words import said
from ..messages import WaitEnded, WaitProgressed
from ..result_view import received_from
from .status import WaitStatus

log = logging.getLogger(__name__)


class OwnWait(WaitStatus):
    """One wait at a time; shown (`-active`) only while it runs."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.control: Control | None = None  # the running wait's, None when none runs
        self.targets: list[tuple[str, str]] = []  # (id, name) of the flights it waits on
        self.received: set[str] = set()  # those it has heard from so far
        self.progress = ""
        self.started = 0.0
        self.timeout: float | None = None
        self.last_received: set[str] = set()  # whom the last wait heard from: the panel keeps it
        self.last_result: Result | None = None  # the app's exit value
        self.ids: set[str] = set()  # every own wait's id: the mirror leaves them out

    @property
    def waiting(self) -> bool:
        return self.control is not None

    def start(self, bus: Bus, me: str, planned: Plan, started: float) -> Control:
        """Run the wait `planned` (core/wait/entry.py: checked, its targets read)."""
        control = Control()
        self.control = control
        self.ids.add(control.wait_id)
        self.targets = [(a.id, a.name) for a in planned.agents]
        self.received = set()
        self.progress = ""
        self.started = started
        self.timeout = planned.timeout
        self.set_class(True, "-active")
        self._run(bus, me, planned, control)
        return control

    def interrupt(self) -> None:
        """Escape: the core returns `interrupted` with the partial state at once."""
        if self.control is not None:
            self.control.interrupt()

    def on_unmount(self) -> None:
        self.interrupt()

    @work(exclusive=True, group="wait", exit_on_error=False, description="waiting")
    async def _run(self, bus: Bus, me: str, planned: Plan, control: Control) -> None:
        def on_progress(p: Progress) -> None:
            self.post_message(WaitProgressed(p.message, list(p.received)))

        try:
            result: Result = await run_plan(bus, me, planned, on_progress=on_progress, control=control)
        except WavewaitError as e:
            self.post_message(WaitEnded(f"wait failed: {said(e)}", None))
            return
        except Exception as e:
            log.exception("wait failed")
            self.post_message(WaitEnded(f"wait failed: {e.__class__.__name__}: {e}", None))
            return
        self.post_message(WaitEnded(result.summary(), result))

    def on_wait_progressed(self, event: WaitProgressed) -> None:
        if self.control is None:  # the word of a wait that has ended
            event.stop()
            return
        self.progress = event.message
        self.received = set(event.received)

    def on_wait_ended(self, event: WaitEnded) -> None:
        """Keep the result; the message goes on up to the screen and the app."""
        self.control = None
        self.set_class(False, "-active")
        if event.result is not None:
            self.last_result = event.result
            heard = received_from(event.result)
            if heard is not None:
                self.last_received = heard
        self.received = set()

    def paint(self, t: float, agents: Mapping[str, Agent], roles: Mapping[str, str]) -> None:
        """Paint the running wait at wall time `t`, its targets' states from `agents` (by id)."""
        states = {i: (a.state, a.reason or "") for i, _ in self.targets if (a := agents.get(i)) is not None}
        self.render_wait(
            targets=self.targets,
            received=self.received,
            states=states,
            t=t,
            left=None if self.timeout is None else self.timeout - (t - self.started),
            progress=self.progress,
            roles=roles,
        )
