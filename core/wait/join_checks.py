"""A join's checks (docs/joins.md, "Check"): one per report, run beside the wait.

The join's condition hands each report here and reads the verdicts back; the checks run in
the wait's task group, through the one check runner (core/checks.py), and a verdict wakes
the wait with its own key (`CHECKS_KEY`), so its step reads the verdicts alone.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import anyio.abc

from ..bus.keys import CHECKS_KEY
from ..checks import Verdict, run_check
from ..model import Agent, Item
from ..proc import hostname
from .engine import Control


class JoinChecks:
    """The checks of one join: those running (`running`, by flight) and their verdicts."""

    def __init__(self, command: str, timeout: float, control: Control, tg: anyio.abc.TaskGroup) -> None:
        self.command, self.timeout, self.control, self.tg = command, timeout, control, tg
        self.running: dict[str, Item] = {}  # reports whose check runs (or waits for a slot), by flight
        self._verdicts: dict[str, Verdict] = {}  # checks that ended, until `verdicts` reads them
        self._scopes: set[anyio.CancelScope] = set()  # one per running check: the wait's end cancels them

    def start(self, agent: Agent, item: Item) -> None:
        """Check `item`, the report of `agent`, where the flight worked."""
        self.running[agent.id] = item
        self.tg.start_soon(self._check, agent)

    def verdicts(self) -> Iterator[tuple[Item, Verdict]]:
        """The reports whose check ended since the last call, with its verdict."""
        for a_id, verdict in list(self._verdicts.items()):
            del self._verdicts[a_id]
            if (item := self.running.pop(a_id, None)) is not None:
                yield item, verdict

    def cancel(self) -> None:
        """End every check still running (the wait ended); `running` keeps their reports."""
        for scope in self._scopes:
            scope.cancel()

    async def _check(self, agent: Agent) -> None:
        folder = agent.worktree.path if agent.worktree else agent.cwd
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            if agent.host not in (None, hostname()):
                verdict = Verdict(False, f"{agent.name} runs on host {agent.host}: its folder is not here to check")
            elif folder is None:
                verdict = Verdict(False, f"{agent.name} has no folder of its own to run the check in")
            else:
                verdict = await run_check(self.command, folder, self.timeout)
            self._verdicts[agent.id] = verdict
            self.control.wake(CHECKS_KEY)  # the verdicts alone: no target or inbox re-read
        self._scopes.discard(scope)
