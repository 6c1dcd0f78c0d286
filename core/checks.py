"""A check: one shell command line run by `/bin/sh -c` in a folder, passed when it exits 0.

The one runner of the merge queue's check (in the merged tree, docs/merging.md) and of a
join's (in a flight's worktree, docs/joins.md). Three rules, the same for both:

- **Bounded.** At most `max_checks()` run at once in a process (one per core unless
  `WAVEWAIT_MAX_CHECKS` says otherwise), shared by every merge and join of that process: a
  join of 500 flights does not start 500 test suites. A check waits for a slot before it
  starts; its own timeout counts from its start.
- **Contained.** It is started by the process's check runner (core/check_runner.py, a small
  process of its own, so a check costs the waiting process a line each way, not the start and
  watch of a process on its event loop), in a session of its own: its timeout, or its caller ending first,
  kills every process of that session (one that starts a session of its own, by `setsid`,
  leaves it). It has ended once it exited and nothing of it holds its output open; what it
  left running in its process group is killed then. Only its last lines are kept
  (`TAIL_LINES`, `TAIL_CHARS`).
- **Without the caller's credentials.** It runs code a flight wrote (a `conftest.py`, a
  Makefile), so it gets the caller's environment without any `WAVEWAIT_` variable: no
  agent secret or id, no bus address, no MCP token.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from .proc import session_groups

#: a join's check may run this long unless the caller says otherwise (`--check-timeout`)
JOIN_TIMEOUT = 600.0
#: the merge queue's check may run this long (a whole test suite on the merged tree)
MERGE_TIMEOUT = 3600.0
#: what a check's verdict quotes: its last lines, at most this many characters of them
TAIL_LINES = 40
TAIL_CHARS = 4000
#: the variables of the caller's environment a check does not get: wavewait's own
DROPPED_PREFIX = "WAVEWAIT_"

log = logging.getLogger("wavewait.checks")


@dataclass(frozen=True)
class Verdict:
    passed: bool
    output: str  # its last lines, or why it could not run
    why: str = ""  # one line: its exit code, or why it did not finish


def max_checks() -> int:
    """Checks at once in this process: `WAVEWAIT_MAX_CHECKS`, else one per core it may use."""
    raw = os.environ.get("WAVEWAIT_MAX_CHECKS", "").strip()
    if raw:
        try:
            if (n := int(raw)) >= 1:
                return n
        except ValueError:
            pass
        log.warning("WAVEWAIT_MAX_CHECKS=%r is not a whole number of at least 1; using one per core", raw)
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without wavewait's variables (its identity, secret, bus)."""
    return {k: v for k, v in (os.environ if environ is None else environ).items() if not k.startswith(DROPPED_PREFIX)}


def tail(text: str) -> str:
    lines = text.rstrip("\n").splitlines()[-TAIL_LINES:]
    return "\n".join(lines)[-TAIL_CHARS:]


class _Runner:
    """This process's check runner (core/check_runner.py), started on its first check: the
    checks' processes are started and watched there, so a check costs the waiting process's
    event loop a line written and a line read. A thread of its own reads the replies and hands
    each to the event loop that asked. It ends with this process (its standard input closes)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "wavewait.core.check_runner"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=environment(),
        )
        self.lock = threading.Lock()
        self.asked: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[dict[str, Any] | None]]] = {}
        self.ids = itertools.count(1)
        self.env: dict[str, str] | None = None  # the environment it was last given
        self.raw: dict[bytes, bytes] | None = None  # os.environ's store when it was built
        self.sessions: dict[int, int] = {}  # the running checks' session leaders, by id
        self.alive = True
        threading.Thread(target=self._read, name="wavewait-check-replies", daemon=True).start()

    def submit(self, command: str, cwd: str, timeout: float) -> tuple[int, asyncio.Future[dict[str, Any] | None]]:
        """Start a check; its future is the reply, or None if the runner ended first."""
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[dict[str, Any] | None] = loop.create_future()
        slots = max_checks()
        # the environment as it is now (a variable set since the last check reaches this one),
        # built again only when it changed: CPython keeps os.environ in a dict of bytes, which
        # compares in a microsecond, where building it costs 0.1 ms a check
        raw = getattr(os.environ, "_data", None)
        with self.lock:
            n = next(self.ids)
            request: dict[str, Any] = {"id": n, "command": command, "cwd": cwd, "timeout": timeout, "slots": slots}
            if raw is None or raw != self.raw:
                self.raw = dict(raw) if raw is not None else None
                if (env := environment()) != self.env:
                    request["env"] = self.env = env
            self.asked[n] = (loop, reply)
            self._write(request)
        return n, reply

    def cancel(self, n: int) -> None:
        """End check `n`: every process of its session; its reply follows."""
        with self.lock:
            if n in self.asked:
                self._write({"id": n, "cancel": True})

    def _write(self, request: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            self.process.stdin.flush()
        except OSError as e:  # it ended: the reader thread settles what was asked
            log.warning("the check runner (pid %d) is gone: %s", self.process.pid, e)
            self.alive = False

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            reply = json.loads(line)
            with self.lock:
                if "pid" in reply:  # started: its session is known here too
                    self.sessions[reply["id"]] = reply["pid"]
                    continue
                self.sessions.pop(reply["id"], None)
                asked = self.asked.pop(reply["id"], None)
            if asked is not None:
                _hand(*asked, reply)
        with self.lock:
            self.alive = False
            left, self.asked = list(self.asked.values()), {}
            orphans, self.sessions = list(self.sessions.values()), {}
        code = self.process.wait()
        if left or code:
            log.warning(
                "the check runner (pid %d) ended with %d, %d checks unanswered", self.process.pid, code, len(left)
            )
        for leader in orphans:  # it died without ending them: their sessions go here
            for group in {leader} | session_groups(leader):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)
        for loop, reply in left:
            _hand(loop, reply, None)


def _hand(
    loop: asyncio.AbstractEventLoop, reply: asyncio.Future[dict[str, Any] | None], value: dict[str, Any] | None
) -> None:
    """Settle `reply` on its loop (from the reader thread); a loop closed meanwhile asks no more."""
    try:
        loop.call_soon_threadsafe(_settle, reply, value)
    except RuntimeError:
        log.debug("a check's reply came after its event loop closed")


def _settle(reply: asyncio.Future[dict[str, Any] | None], value: dict[str, Any] | None) -> None:
    if not reply.done():  # cancelled meanwhile
        reply.set_result(value)


_runner: _Runner | None = None
_runner_lock = threading.Lock()


def runner() -> _Runner:
    """The process's check runner, started again if it ended (or this is a fork of its owner)."""
    global _runner
    with _runner_lock:
        if _runner is None or not _runner.alive or _runner.pid != os.getpid():
            _runner = _Runner()
        return _runner


async def run_check(command: str, cwd: str, timeout: float) -> Verdict:
    """Run `command` by `/bin/sh -c` in `cwd` once a slot is free; passed when it exits 0
    within `timeout` seconds of its start. Cancelled, its session is killed before this returns."""
    checks = runner()
    n, reply = checks.submit(command, cwd, timeout)
    try:
        got = await asyncio.shield(reply)
    except anyio.get_cancelled_exc_class():
        checks.cancel(n)
        with anyio.CancelScope(shield=True):
            await reply
        raise
    return verdict(got, timeout)


def verdict(reply: dict[str, Any] | None, timeout: float) -> Verdict:
    """What the runner's reply to a check means (None: the runner ended first)."""
    if reply is None:
        why = "the check runner ended before the check did"
        return Verdict(False, f"{why}: run it again (the log of the waiting process says why)", why)
    text: str = reply["output"]
    if reply["cut"] in ("folder", "start"):
        return Verdict(False, text, text)
    if reply["cut"] is not None:
        why = "the check was stopped: its caller ended first"
        if reply["cut"] == "timeout":
            why = f"the check ran out of its {timeout:g} s and was stopped"
        return Verdict(False, tail(f"{text.rstrip()}\n({why})"), why)
    code = reply["code"]
    why = f"the check exited with {code}"
    return Verdict(code == 0, tail(text) or f"(no output; exit code {code})", why)
