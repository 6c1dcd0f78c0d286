"""A join's checks (docs/joins.md, "Check"): one per report, run beside the wait.

The join's condition hands each report here and reads the verdicts back. Each check goes to
the process's check runner (core/checks.py) as it comes (with the others of the same 10 ms
while they come faster), with no task of its own here: its reply, handed to a callback,
settles it. A verdict that decides the join (met, or beyond reach) wakes the wait at
once with its own key (`CHECKS_KEY`), so its step reads the verdicts alone; the others are
read by the next step, which reports arriving bring, or GATHER seconds later at most: a join
over 10,000 reporting flights then steps once a report, as the plain fan-in does, not twice.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterator
from typing import Any

import anyio

from .. import checks
from ..bus.keys import CHECKS_KEY
from ..checks import Verdict
from ..model import Agent, Item
from ..proc import hostname
from .engine import Control

#: seconds a verdict that does not decide the join waits for a step to read it (the progress
#: line's "checking" names it that much longer)
GATHER = 0.05


class JoinChecks:
    """The checks of one join: those running (`running`, by flight) and their verdicts."""

    def __init__(
        self, command: str, timeout: float, control: Control, decides: Callable[[int, int], bool] | None = None
    ) -> None:
        """`decides(passed, failed)`: whether verdicts not read yet, that many passed and
        failed, would end the join (None: every verdict wakes the wait at once)."""
        self.command, self.timeout, self.control, self.decides = command, timeout, control, decides
        self.running: dict[str, Item] = {}  # reports whose check runs (or waits for a slot), by flight
        self._verdicts: dict[str, Verdict] = {}  # checks that ended, until `verdicts` reads them
        #: the checks asked and not answered, by flight: the runner asked (a runner that ended
        #: is replaced, and ids are its own) and the check's id there
        self._asked: dict[str, tuple[checks.CheckRunner, int]] = {}
        self._later: asyncio.TimerHandle | None = None  # the gathered verdicts' wake
        self._ended: asyncio.Future[None] | None = None  # once ended: set when none is asked

    def start(self, agent: Agent, item: Item) -> None:
        """Check `item`, the report of `agent`, where the flight worked."""
        self.running[agent.id] = item
        folder = agent.worktree.path if agent.worktree else agent.cwd
        if agent.host not in (None, hostname()):
            self._settle(
                agent.id, Verdict(False, f"{agent.name} runs on host {agent.host}: its folder is not here to check")
            )
        elif folder is None:
            self._settle(agent.id, Verdict(False, f"{agent.name} has no folder of its own to run the check in"))
        else:
            runner = checks.runner()
            n = runner.submit(self.command, folder, self.timeout, functools.partial(self._replied, agent.id))
            self._asked[agent.id] = (runner, n)

    def verdicts(self) -> Iterator[tuple[Item, Verdict]]:
        """The reports whose check ended since the last call, with its verdict."""
        verdicts, self._verdicts = self._verdicts, {}
        for a_id, verdict in verdicts.items():
            if (item := self.running.pop(a_id, None)) is not None:
                yield item, verdict

    async def end(self) -> None:
        """End every check still running or queued (the wait ended), and return once each
        one's session is gone; `running` keeps their reports."""
        if self._ended is None:
            self._ended = asyncio.get_running_loop().create_future()
            if self._later is not None:
                self._later.cancel()
            for runner, n in self._asked.values():
                runner.cancel(n)
            self._none_asked()
        with anyio.CancelScope(shield=True):
            await self._ended

    def _replied(self, a_id: str, reply: dict[str, Any] | None) -> None:
        self._asked.pop(a_id, None)
        if self._ended is not None:
            self._none_asked()  # a verdict after the end is not read: its report goes back
        else:
            self._settle(a_id, checks.verdict(reply, self.timeout))

    def _none_asked(self) -> None:
        if not self._asked and self._ended is not None and not self._ended.done():
            self._ended.set_result(None)

    def _settle(self, a_id: str, verdict: Verdict) -> None:
        self._verdicts[a_id] = verdict
        passed = sum(v.passed for v in self._verdicts.values())  # of the few not read yet
        if self.decides is None or self.decides(passed, len(self._verdicts) - passed):
            self.control.wake(CHECKS_KEY)  # the verdicts alone: no target or inbox re-read
        elif self._later is None:
            self._later = asyncio.get_running_loop().call_later(GATHER, self._gathered)

    def _gathered(self) -> None:
        self._later = None
        if self._verdicts and self._ended is None:  # no step read them meanwhile
            self.control.wake(CHECKS_KEY)
