"""A join's check: a shell command run in a flight's worktree once its report arrives.

A flight counts toward a join's need only once its check passed (docs/joins.md). The check
runs in a session of its own, so ending it (its timeout, or the join ending first) ends
every process it started; what it printed is kept only as its last lines.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass

import anyio
import anyio.abc

from ..errors import BadInput
from ..limits import MAX_ARG_BYTES, shown

#: seconds a check may run unless the caller says otherwise (`--check-timeout`)
CHECK_TIMEOUT = 600.0
#: what a failed check's entry quotes: its last lines, at most this many characters
TAIL_CHARS = 2000
TAIL_LINES = 20


@dataclass(frozen=True)
class Verdict:
    passed: bool
    output: str  # the check's last lines (or why it could not run)


def check_command(value: object, field: str = "check") -> str:
    """A check: one shell command line (run by `sh -c`), bounded like any command word."""
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"{field}: must be a non-empty shell command, e.g. 'pytest -q'")
    if len(value.encode()) > MAX_ARG_BYTES or "\0" in value:
        raise BadInput(f"{field}: {shown(value)} is not a command line (at most 128 KiB, no NUL)")
    return value


def tail(text: str) -> str:
    lines = text.rstrip("\n").splitlines()[-TAIL_LINES:]
    return "\n".join(lines)[-TAIL_CHARS:]


async def run_check(command: str, cwd: str, timeout: float) -> Verdict:
    """Run `command` by `sh -c` in `cwd`; passed when it exits 0 within `timeout` seconds.
    Cancelled (the join ended), its whole session is killed before this returns."""
    if not os.path.isdir(cwd):
        return Verdict(False, f"its folder {cwd} is gone: nothing to check")
    with anyio.CancelScope(shield=True):  # a cancel mid-start would lose the handle of a running check
        process = await anyio.open_process(
            ["sh", "-c", command],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    out = bytearray()
    try:
        with anyio.move_on_after(timeout) as scope:
            assert process.stdout is not None
            async for chunk in process.stdout:
                out += chunk
                del out[: max(0, len(out) - 8 * TAIL_CHARS)]  # only the end is ever shown
            code = await process.wait()
        text = out.decode(errors="replace")
        if scope.cancelled_caught:
            return Verdict(False, tail(text + f"\n(the check ran out of its {timeout:g} s and was stopped)"))
        return Verdict(code == 0, tail(text) or f"(no output; exit code {code})")
    finally:
        _end(process)
        with anyio.CancelScope(shield=True):
            await process.wait()


def _end(process: anyio.abc.Process) -> None:
    """Kill the check's session (it leads it: start_new_session), if anything of it is left."""
    with contextlib.suppress(ProcessLookupError):  # it and all it started are gone already
        os.killpg(process.pid, signal.SIGKILL)
