"""Process identity and liveness on this host.

A pid alone is not an identity: pids are reused. We pair it with the process start time
from /proc, and treat zombies as gone (they have ended; only the reaping is left).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from functools import cache

log = logging.getLogger(__name__)

#: a full collection of a big heap stalls a frame for 50-140 ms; a UI freezes the heap on
#: every frame instead (constant time) and collects it fully at most this often
FULL_GC_EVERY = 30.0
FULL_GC_GROWTH = 0.25  # of the frozen heap, since the last full pass: what makes the next one due


@cache  # once per process
def settle_heap() -> None:
    """Keep what start-up made (modules, schemas, a server's tools) out of the collector's walks.

    A process serving many waits makes a full collection every few seconds, and each walked
    the whole heap, nearly all of it start-up's and never garbage: 45-50 ms at 60 MB, a pause
    for every wait it serves (bench_scale.py's one-inbox rows: p99 67 ms, 15 ms frozen).
    Once a long-running process is set up; later calls (a test process mounting many apps)
    do nothing, so what start-up left as garbage stays, and only that (little)."""
    gc.freeze()


def freeze_heap_for_forks() -> None:
    """Collect once, then freeze what is left: forked children share these pages, and a
    collector that never walks them never writes to them (a warm server's fork stays cheap)."""
    gc.collect()
    gc.freeze()


_paused = 0  # bulk reads under way (`collector_paused`), in any thread
_paused_lock = threading.Lock()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic collection while a bulk read makes many objects that all live on (a
    listing of 100,000 agent records): each collection would walk the records made so far,
    and they come faster than it frees anything (a third of the listing's time at 100,000;
    reference counting still frees what is dropped). The collector runs again when the last
    such read ends (a UI freezes the new records at its next frame: `FramePacedHeap`)."""
    global _paused
    with _paused_lock:
        ours = _paused > 0 or gc.isenabled()  # else paused by someone else: left as it is
        if ours:
            _paused += 1
            gc.disable()
    try:
        yield
    finally:
        if ours:
            with _paused_lock:
                _paused -= 1
                if _paused == 0:
                    gc.enable()


class FramePacedHeap:
    """Keep the collector's pauses out of a UI's frames: call `tick` once per frame.

    A big bus makes a big heap (records, rows, render caches) and the collector's older
    generations stall a frame for up to 140 ms. Freezing moves what exists out of its
    sight in constant time, so each automatic collection sees only the last frame's
    objects (acyclic ones are still freed by reference counting). Cycles that were frozen
    are collected by one full pass, at most every `full_every` seconds, and only once the
    frozen heap grew by FULL_GC_GROWTH since the last one: the collector's own rule for its
    oldest generation. A full pass walks the whole heap (1-3 s at 100,000 flights), so a
    heap that stays the same size is not walked every 30 s.
    """

    def __init__(self, full_every: float = FULL_GC_EVERY) -> None:
        self.full_every = full_every
        self._full_at = time.monotonic()
        self._frozen_after_full = 0  # objects frozen just after the last full pass

    def tick(self) -> None:
        due = time.monotonic() - self._full_at >= self.full_every
        if due and gc.get_freeze_count() > self._frozen_after_full * (1 + FULL_GC_GROWTH):
            gc.unfreeze()
            gc.collect()
            self._full_at = time.monotonic()
            gc.freeze()
            self._frozen_after_full = gc.get_freeze_count()
            return
        gc.freeze()


def python_module(module: str) -> list[str]:
    """How this wavewait starts one of its modules as a process of its own: this Python, with
    `-P` so that the folder it starts in (the caller's, or a flight's worktree, which may hold
    a `wavewait` folder of its own) is not put first on `sys.path`: the code that runs is this
    installation's, never one found where it runs."""
    return [sys.executable, "-P", "-m", module]


@cache
def hostname() -> str:
    """This host's name on the bus; `WAVEWAIT_HOST` overrides it (containers, tests of two hosts)."""
    return os.environ.get("WAVEWAIT_HOST") or socket.gethostname()


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, ...), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # the command name is in parentheses and may hold spaces; fields resume after ')'
    return stat[stat.rfind(")") + 2 :].split()


def pid_start(pid: int, *, zombie_ok: bool = False) -> str | None:
    """The kernel's start time of `pid` (clock ticks since boot), or None if it is gone.

    A zombie counts as gone, unless `zombie_ok`: a parent recording its own child, which
    may have ended before it looked, still needs the child's identity.
    """
    rest = _stat(pid)
    if rest is None or (rest and rest[0] in ("Z", "X") and not zombie_ok):
        return None
    return rest[19] if len(rest) > 19 else None


MAX_ANCESTORS = 256  # deeper than any real process tree; a bound, not a limit anyone meets


def ancestors(pid: int | None = None) -> list[tuple[int, str | None]]:
    """The parent of `pid` (default: this process), its parent, and so on up to pid 1, each
    with its start time: who started this process, as the kernel says, whatever its
    environment says."""
    out: list[tuple[int, str | None]] = []
    rest = _stat(os.getpid() if pid is None else pid)
    while rest is not None and len(rest) > 19 and len(out) < MAX_ANCESTORS:
        ppid = int(rest[1]) if rest[1].isdigit() else 0
        if ppid <= 0:
            break
        rest = _stat(ppid)
        if rest is None or len(rest) <= 19:
            break
        out.append((ppid, rest[19]))
    return out


def group_members(pgid: int) -> list[int]:
    """The processes of process group `pgid` on this host, as /proc lists them."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            rest = _stat(int(entry))
            if rest is not None and len(rest) > 2 and rest[2] == str(pgid):
                out.append(int(entry))
    return out


def session_groups(sid: int) -> set[int]:
    """The process groups of the running (not zombie) processes of session `sid` on this host,
    as /proc lists them (a process that made a group of its own, as `timeout` does, is still in
    its session)."""
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            rest = _stat(int(entry))
            if rest is not None and len(rest) > 3 and rest[3] == str(sid) and rest[2].isdigit() and rest[0] not in "ZX":
                out.add(int(rest[2]))
    return out


MAX_SESSION_SCANS = 16  # each scan that finds a new group follows a process that just made one


def kill_session(sid: int) -> None:
    """KILL every process group of session `sid`, its leader's first, and scan the session
    again until a scan finds no group that was not killed: a process that made a group of its
    own between a scan and the kills (as `timeout` does as it starts) is in the next scan."""
    killed: set[int] = set()
    groups = {sid}
    for _ in range(MAX_SESSION_SCANS):
        for group in groups - killed:
            with contextlib.suppress(ProcessLookupError, PermissionError):  # gone already
                os.killpg(group, signal.SIGKILL)
        killed |= groups
        groups = session_groups(sid)
        if groups <= killed:
            return
    log.warning("session %d still made new process groups after %d scans", sid, MAX_SESSION_SCANS)


def cmdline(pid: int) -> list[str]:
    """The arguments `pid` was started with (empty if it is gone or they cannot be read)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(64 * 1024)
    except OSError:
        return []
    return raw.decode("utf-8", "replace").split("\0")[:-1] if raw else []


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


#: (this process's pid, the launcher it runs a command for): set in a warm start's child
_launcher: tuple[int, tuple[int, str | None]] = (0, (0, None))


def run_for(pid: int, start: str | None) -> None:
    """This process runs the command of launcher `pid` (a warm start's child, wavewait/warm.py),
    which its host started and may kill: the child ends with it."""
    global _launcher
    _launcher = (os.getpid(), (pid, start))


def command_process() -> tuple[int, str | None]:
    """The process its host started for this command (pid, start time): this one, or the
    launcher a warm start's child runs it for. Waits and tasks are known by it, so what a
    wait had claimed goes back as soon as the host killed it, as for a cold command."""
    return _launcher[1] if _launcher[0] == os.getpid() else me()


def end_processes(procs: list[tuple[int, str | None]], grace: float) -> list[int]:
    """Let these processes (pid, start time) end by themselves for up to `grace` seconds, then
    KILL those still running and wait (bounded) for them to go; return the pids killed.

    For what must not outlive its owner (the demo's flights and supervisors, whose bus is
    removed next): a supervisor slowed by a busy machine past the grace would otherwise run
    on after its owner left, writing to a bus that is gone.
    """
    deadline = time.monotonic() + grace
    left = [(pid, start) for pid, start in procs if alive(pid, start)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)  # polled: another process's children give no event to wait on
        left = [(pid, start) for pid, start in left if alive(pid, start)]
    for pid, _ in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    gone_by = time.monotonic() + 2.0  # a KILL is not caught: only the kernel's reaping is left
    while any(alive(pid, start) for pid, start in left) and time.monotonic() < gone_by:
        time.sleep(0.01)
    return [pid for pid, _ in left]
