"""What a test run leaves running: the warm processes its commands started (wavewait/warm.py).

A warm process is detached (parent 1) and outlives the command that started it by
`WAVEWAIT_WARM_IDLE` seconds, so a test run would leave one per key it used. Each process the
run starts carries the run's mark in its environment (`RUN_MARK`, set by tests/conftest.py);
one started by an agent CLI that passes on only a few variables (Codex: HOME, TMPDIR, PATH...)
is known by a HOME or TMPDIR inside the run's temporary folder. The session's end stops them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from wavewait import warm_procs

RUN_MARK = "PYTEST_WAVEWAIT_RUN"  # not a WAVEWAIT_ setting: in no warm key, kept by clean_env
STOP_GRACE = 10.0  # seconds a warm process has to end once asked, before it is killed


def environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (entry.decode(errors="replace").partition("=") for entry in raw.split(b"\0") if entry)
    return {k: v for k, _, v in pairs}


def warm_processes(mark: str, temp: Path | None = None) -> list[int]:
    """The warm processes of the run marked `mark` (or whose HOME or TMPDIR is in `temp`)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or not warm_procs.is_warm(int(name)):
            continue
        env = environ(int(name))
        inside = temp is not None and any(env.get(k) and Path(env[k]).is_relative_to(temp) for k in ("HOME", "TMPDIR"))
        if env.get(RUN_MARK) == mark or inside:
            found.append(int(name))
    return found


def end(pids: list[int]) -> list[int]:
    """Ask each to end (SIGTERM: `wavewait warm stop`'s way); kill those still there after
    STOP_GRACE (a command left running in one). Return those that had to be killed."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    left = pids
    while left and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the processes' end: no event to wait on for a non-child
        left = [p for p in left if warm_procs.is_warm(p)]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left
