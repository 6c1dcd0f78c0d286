"""Process identity and liveness on this host.

A pid alone is not an identity: pids are reused. We pair it with the process start time
from /proc, and treat zombies as gone (they have ended; only the reaping is left).
"""

from __future__ import annotations

import os
import socket
from functools import cache


@cache
def hostname() -> str:
    """This host's name on the bus; `WAVEWAIT_HOST` overrides it (containers, tests of two hosts)."""
    return os.environ.get("WAVEWAIT_HOST") or socket.gethostname()


def pid_start(pid: int, *, zombie_ok: bool = False) -> str | None:
    """The kernel's start time of `pid` (clock ticks since boot), or None if it is gone.

    A zombie counts as gone, unless `zombie_ok`: a parent recording its own child, which
    may have ended before it looked, still needs the child's identity.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # the command name is in parentheses and may hold spaces; fields resume after ')'
    rest = stat[stat.rfind(")") + 2 :].split()
    if rest and rest[0] in ("Z", "X") and not zombie_ok:
        return None
    return rest[19] if len(rest) > 19 else None


def alive(pid: int | None, start: str | None = None) -> bool:
    """True if `pid` runs and, when `start` is given, is the same process as then."""
    if not pid or pid <= 0:
        return False
    current = pid_start(pid)
    if current is None:
        return False
    return start is None or current == start


_me: tuple[int, str | None] = (0, None)


def me() -> tuple[int, str | None]:
    """This process's pid and start time, read once per process (every wait's record names them)."""
    global _me
    pid = os.getpid()
    if _me[0] != pid:  # the first call, or a forked child
        _me = (pid, pid_start(pid))
    return _me
