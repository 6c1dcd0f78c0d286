"""What the screens need from the app that runs them: a `Host` (bus, settings, roles, notices).

A screen takes its app through this protocol, never through the app's class: the app
imports the screens, so a screen that imported the app back would close a cycle.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from textual.app import App
from textual.notifications import SeverityLevel

from ..core.bus import Bus
from .demo import DemoPlan

SWEEP_EVERY = 1.0  # liveness sweep, so a flight whose process vanished shows as dead


@dataclass(frozen=True)
class Settings:
    """What the app was started with; the screens read it, nothing changes it."""

    me: str = "orchestrator"
    clock: Callable[[], float] = time.time  # wall time (injectable: the tests freeze it)
    timed_repaint: bool = True  # repaint from one 10 Hz timer; False: after every read (tests)
    sweep_every: float = SWEEP_EVERY  # 0: no liveness sweep
    demo: DemoPlan | None = None  # launch this demo wave once the bus is open
    queue: str | None = None  # the task queue the tasks view shows (ctrl+t)
    queue_demo: bool = False  # run the demo task graph (`wavewait demo --queue`)


class Host(Protocol):
    """The app as its screens see it (`tui/app.py: WaveApp` is the one host)."""

    @property
    def bus(self) -> Bus:
        """The open bus (only once `bus_ready` is set)."""
        ...

    @property
    def bus_ready(self) -> asyncio.Event: ...

    @property
    def bus_label(self) -> str | None: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def roles(self) -> Mapping[str, str]:
        """Rich styles of the current theme, by role (`state.ROLES`)."""
        ...

    @property
    def frame_hook(self) -> Callable[[float], None] | None:
        """The benchmark's probe of each repaint's time, if any."""
        ...

    def notice(self, message: str, severity: SeverityLevel = "information", *, toast: bool = True) -> None:
        """A toast that is kept (and reaches the person when the terminal is not focused);
        `toast=False`: kept and sent away only, where the screen shows it itself."""

    def action_help(self) -> None: ...

    def action_tasks(self) -> None: ...


def host_of(app: App[Any]) -> Host:
    """The host a screen or widget runs in (`app` is the WaveApp, which mypy holds to `Host`)."""
    return cast("Host", app)
