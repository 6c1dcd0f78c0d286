"""A check: one shell command line run by `/bin/sh -c` in a folder, passed when it exits 0.

The one runner of the merge queue's check (in the merged tree, docs/merging.md) and of a
join's (in a flight's worktree, docs/joins.md). Three rules, the same for both:

- **Bounded.** At most `max_checks()` run at once in a process (one per core unless
  `WAVEWAIT_MAX_CHECKS` says otherwise), shared by every merge and join of that process: a
  join of 500 flights does not start 500 test suites. A check waits for a slot before it
  starts; its own timeout counts from its start.
- **Contained.** It runs in a session of its own: its timeout, or its caller ending first,
  kills every process of that session (one that starts a session of its own, by `setsid`,
  leaves it). It has ended once it exited and nothing of it holds its output open; what it
  left running in its process group is killed then. Only its last lines are kept
  (`TAIL_LINES`, `TAIL_CHARS`).
- **Without the caller's credentials.** It runs code a flight wrote (a `conftest.py`, a
  Makefile), so it gets the caller's environment without any `WAVEWAIT_` variable: no
  agent secret or id, no bus address, no MCP token.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

import anyio
import anyio.abc
from anyio.lowlevel import RunVar

from .proc import session_groups

#: a join's check may run this long unless the caller says otherwise (`--check-timeout`)
JOIN_TIMEOUT = 600.0
#: the merge queue's check may run this long (a whole test suite on the merged tree)
MERGE_TIMEOUT = 3600.0
#: what a check's verdict quotes: its last lines, at most this many characters of them
TAIL_LINES = 40
TAIL_CHARS = 4000
KEEP_BYTES = 64 << 10  # of its output while it runs: only the end is ever shown
#: the variables of the caller's environment a check does not get: wavewait's own
DROPPED_PREFIX = "WAVEWAIT_"
SHELL = "/bin/sh"

log = logging.getLogger("wavewait.checks")
_slots: RunVar[anyio.CapacityLimiter] = RunVar("wavewait_check_slots")


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


def slots() -> anyio.CapacityLimiter:
    """The process's check slots (one limiter per event loop: a process runs one)."""
    try:
        return _slots.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(max_checks())
        _slots.set(limiter)
        return limiter


def environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without wavewait's variables (its identity, secret, bus)."""
    return {k: v for k, v in (os.environ if environ is None else environ).items() if not k.startswith(DROPPED_PREFIX)}


def tail(text: str) -> str:
    lines = text.rstrip("\n").splitlines()[-TAIL_LINES:]
    return "\n".join(lines)[-TAIL_CHARS:]


async def run_check(command: str, cwd: str, timeout: float) -> Verdict:
    """Run `command` by `/bin/sh -c` in `cwd` once a slot is free; passed when it exits 0
    within `timeout` seconds of its start. Cancelled, its session is killed before this returns."""
    async with slots():
        if not os.path.isdir(cwd):
            why = f"its folder {cwd} is gone: nothing to check"
            return Verdict(False, why, why)
        with anyio.CancelScope(shield=True):  # a cancel mid-start would lose the handle of a running check
            process = await anyio.open_process(
                [SHELL, "-c", command],
                cwd=cwd,
                env=environment(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        exited = False
        try:
            verdict, exited = await _watch(process, timeout)
            return verdict
        finally:
            _end(process, whole_session=not exited)
            with anyio.CancelScope(shield=True):
                await process.wait()


async def _watch(process: anyio.abc.Process, timeout: float) -> tuple[Verdict, bool]:
    """Its verdict, read until it and whatever holds its output ended; and whether it did."""
    out = bytearray()
    code: int | None = None
    with anyio.move_on_after(timeout):
        assert process.stdout is not None
        async for chunk in process.stdout:
            out.extend(chunk)
            del out[:-KEEP_BYTES]
        code = await process.wait()
    text = out.decode(errors="replace")
    if code is None:
        why = f"the check ran out of its {timeout:g} s and was stopped"
        return Verdict(False, tail(f"{text.rstrip()}\n({why})"), why), False
    why = f"the check exited with {code}"
    return Verdict(code == 0, tail(text) or f"(no output; exit code {code})", why), True


def _end(process: anyio.abc.Process, *, whole_session: bool) -> None:
    """Kill the check's process group (it leads it: start_new_session); cut short, its whole
    session: every group a process of it made too (a group's id is not reused while one of it
    lives). The session is looked up in /proc, milliseconds a check: only when it was cut short."""
    for group in {process.pid} | (session_groups(process.pid) if whole_session else set()):
        with contextlib.suppress(ProcessLookupError, PermissionError):  # gone already
            os.killpg(group, signal.SIGKILL)
