"""A join's checks (docs/joins.md, "Check"): one per report, run beside the wait.

The join's condition hands each report here and reads the verdicts back. Each check goes to
the process's check runner (core/checks.py) as it comes, with no task of its own here: its
reply settles it, and a verdict wakes the wait with its own key (`CHECKS_KEY`), so its step
reads the verdicts alone.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from typing import Any

import anyio

from .. import checks
from ..bus.keys import CHECKS_KEY
from ..checks import Verdict
from ..model import Agent, Item
from ..proc import hostname
from .engine import Control


class JoinChecks:
    """The checks of one join: those running (`running`, by flight) and their verdicts."""

    def __init__(self, command: str, timeout: float, control: Control) -> None:
        self.command, self.timeout, self.control = command, timeout, control
        self.running: dict[str, Item] = {}  # reports whose check runs (or waits for a slot), by flight
        self._verdicts: dict[str, Verdict] = {}  # checks that ended, until `verdicts` reads them
        self._asked: dict[str, tuple[int, asyncio.Future[dict[str, Any] | None]]] = {}  # by flight
        self._ended = False

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
            n, reply = checks.runner().submit(self.command, folder, self.timeout)
            self._asked[agent.id] = (n, reply)
            reply.add_done_callback(functools.partial(self._replied, agent.id))

    def verdicts(self) -> Iterator[tuple[Item, Verdict]]:
        """The reports whose check ended since the last call, with its verdict."""
        for a_id, verdict in list(self._verdicts.items()):
            del self._verdicts[a_id]
            if (item := self.running.pop(a_id, None)) is not None:
                yield item, verdict

    async def end(self) -> None:
        """End every check still running or queued (the wait ended), and return once each
        one's session is gone; `running` keeps their reports."""
        self._ended = True
        asked = list(self._asked.values())
        self._asked.clear()
        if not asked:
            return
        runner = checks.runner()
        for n, _ in asked:
            runner.cancel(n)
        with anyio.CancelScope(shield=True):
            await asyncio.gather(*(reply for _, reply in asked))

    def _replied(self, a_id: str, reply: asyncio.Future[dict[str, Any] | None]) -> None:
        if self._ended or reply.cancelled():
            return
        self._asked.pop(a_id, None)
        self._settle(a_id, checks.verdict(reply.result(), self.timeout))

    def _settle(self, a_id: str, verdict: Verdict) -> None:
        self._verdicts[a_id] = verdict
        self.control.wake(CHECKS_KEY)  # the verdicts alone: no target or inbox re-read
