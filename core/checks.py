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
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from .check_runner import WINDOW
from .proc import kill_session, python_module

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


#: what is called with a check's reply (None: the runner ended first)
Replied = Callable[[dict[str, Any] | None], None]


class CheckRunner:
    """A check runner (core/check_runner.py) serving one event loop: the checks' processes are
    started and watched there, so a check costs that loop a line written and a line read. Its
    replies are read on the loop itself (`add_reader`: no thread, no hand-over between
    threads) and handed to the asker's callback there (no future, no task per check); the
    requests go together, at most one write per `WINDOW`. It ends with this process (its
    standard input closes), or when its loop has ended and another asks for a runner."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.pid, self.loop = os.getpid(), loop
        #: where the runner notes each check's session leader as it starts it (an unlinked
        #: file, read only should the runner be KILLed): not a line to read here per check
        self.leaders = tempfile.TemporaryFile()  # noqa: SIM115 -- as long as the runner is
        self.process = subprocess.Popen(
            [*python_module("wavewait.core.check_runner"), str(self.leaders.fileno())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=environment(),
            pass_fds=(self.leaders.fileno(),),
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin.fileno(), self.process.stdout.fileno()
        self.asked: dict[int, Replied] = {}
        self.ids = itertools.count(1)
        self.env: dict[str, str] | None = None  # the environment it was last given
        self.raw: dict[bytes, bytes] | None = None  # os.environ's store when it was built
        self.slots = 0  # the bound it was last given
        self.pending = bytearray()  # requests not written yet (`_flush` is due)
        self.flushed = -WINDOW  # the loop's time of the last write
        self.inbuf = bytearray()
        self.alive = True
        os.set_blocking(self.stdout, False)
        loop.add_reader(self.stdout, self._readable)

    def submit(self, command: str, cwd: str, timeout: float, replied: Replied) -> int:
        """Start a check, its id returned; `replied` is called on the loop with its reply."""
        n = next(self.ids)
        request: dict[str, Any] = {"id": n, "command": command, "cwd": cwd, "timeout": timeout}
        # the environment and the bound as they are now (a variable set since the last check
        # reaches this one), read again only when the environment changed: CPython keeps
        # os.environ in a dict of bytes, which compares in a microsecond, where building it
        # costs 0.1 ms a check; the runner keeps the last of each it was given
        raw = getattr(os.environ, "_data", None)
        if raw is None or raw != self.raw:
            self.raw = dict(raw) if raw is not None else None
            if (env := environment()) != self.env:
                request["env"] = self.env = env
            if (slots := max_checks()) != self.slots:
                request["slots"] = self.slots = slots
        self.asked[n] = replied
        self._write(request)
        return n

    def cancel(self, n: int) -> None:
        """End check `n`: every process of its session; its reply follows."""
        if n in self.asked:
            self._write({"id": n, "cancel": True})

    def _write(self, request: dict[str, Any]) -> None:
        if not self.pending:  # the first since the last write: those until it's due go with it
            due = self.flushed + WINDOW - self.loop.time()
            if due > 0:
                self.loop.call_later(due, self._flush)
            else:
                self.loop.call_soon(self._flush)  # the rest of this step's still go with it
        self.pending += json.dumps(request).encode() + b"\n"

    def _flush(self) -> None:
        self.flushed = self.loop.time()
        lines, self.pending = bytes(self.pending), bytearray()
        if not self.alive:
            return
        try:
            out = memoryview(lines)
            while out:  # (a blocking pipe: a write is cut short only by a signal)
                out = out[os.write(self.stdin, out) :]
        except OSError as e:  # it ended: its end of file on stdout settles what was asked
            log.warning("the check runner (pid %d) is gone: %s", self.process.pid, e)

    def _readable(self) -> None:
        try:
            chunk = os.read(self.stdout, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            self._ended()
            return
        self.inbuf += chunk
        *lines, rest = self.inbuf.split(b"\n")
        self.inbuf = bytearray(rest)
        for line in lines:
            reply = json.loads(line)
            if (replied := self.asked.pop(reply["id"], None)) is not None:
                replied(reply)

    def _ended(self) -> None:
        """It ended (its stdout closed): what it did not answer fails, and the sessions of
        the checks it left running (it was KILLed) are ended here."""
        self.close()
        orphans = [leader for n, leader in self.started().items() if n in self.asked]
        left, self.asked = list(self.asked.values()), {}
        code = self.process.poll()
        if left or code:
            log.warning(
                "the check runner (pid %d) ended with %s, %d checks unanswered", self.process.pid, code, len(left)
            )
        for leader in orphans:
            kill_session(leader)
        for replied in left:
            replied(None)

    def started(self) -> dict[int, int]:
        """The session leader of each check the runner started, by id (those since it last
        had none running, at least: it empties the file then)."""
        leaders: dict[int, int] = {}
        for line in os.pread(self.leaders.fileno(), 1 << 24, 0).decode().splitlines():
            n, _, leader = line.partition(" ")
            if leader.isdigit():  # a line it wrote whole
                leaders[int(n)] = int(leader)
        return leaders

    def close(self) -> None:
        """Stop reading it and close its stdin: it ends every check still running, and exits."""
        if not self.alive:
            return
        self.alive = False
        if not self.loop.is_closed():
            self.loop.remove_reader(self.stdout)
        with contextlib.suppress(OSError):
            assert self.process.stdin is not None
            self.process.stdin.close()


_runners: dict[asyncio.AbstractEventLoop, CheckRunner] = {}
_runners_lock = threading.Lock()


def runner() -> CheckRunner:
    """The check runner of the running event loop, started again if it ended (or this is a
    fork of its owner). A process runs one loop at a time: the runner of a loop that has
    ended is closed here (a loop still running in another thread keeps its own)."""
    loop = asyncio.get_running_loop()
    if (current := _runners.get(loop)) is not None and current.alive and current.pid == os.getpid():
        return current
    with _runners_lock:
        for old_loop, old in list(_runners.items()):
            if old.pid != os.getpid():
                del _runners[old_loop]  # a fork's copy: its parent's runner, not ours to close
            elif old_loop is not loop and (old_loop.is_closed() or not old_loop.is_running()):
                del _runners[old_loop]
                old.close()
        current = _runners.get(loop)
        if current is None or not current.alive:
            current = _runners[loop] = CheckRunner(loop)
        return current


async def run_check(command: str, cwd: str, timeout: float) -> Verdict:
    """Run `command` by `/bin/sh -c` in `cwd` once a slot is free; passed when it exits 0
    within `timeout` seconds of its start. Cancelled, its session is killed before this returns."""
    checks = runner()
    reply: asyncio.Future[dict[str, Any] | None] = checks.loop.create_future()

    def replied(got: dict[str, Any] | None) -> None:
        if not reply.done():
            reply.set_result(got)

    n = checks.submit(command, cwd, timeout, replied)
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
