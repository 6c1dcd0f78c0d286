"""The check a merge runs after each branch is merged: a shell command in the scratch worktree,
in its own process group, bounded in time and in the output it keeps."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from contextlib import suppress

CHECK_TIMEOUT = 3600.0  # seconds one check may run
CHECK_TAIL_LINES = 40  # lines of a failing check's output kept
CHECK_TAIL_BYTES = 64 << 10
CHECK_OUTPUT_CHARS = 4000  # characters of those lines kept (a wave's progress document is bounded)


def run_check(
    command: str, cwd: str, timeout: float = CHECK_TIMEOUT, started: Callable[[int], None] | None = None
) -> tuple[int, str]:
    """Run the check (a shell command line) in `cwd`: its exit code and its last lines.

    Its own process group, so a timeout (or our end: `started` is told its id) ends everything
    it started."""
    p = subprocess.Popen(
        ["/bin/sh", "-c", command],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    if started is not None:
        started(p.pid)
    assert p.stdout is not None
    tail = bytearray()
    timed_out = threading.Event()

    def stop() -> None:
        timed_out.set()
        with suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)

    timer = threading.Timer(timeout, stop)
    timer.start()
    try:
        while chunk := p.stdout.read(65536):
            tail.extend(chunk)
            del tail[:-CHECK_TAIL_BYTES]
        code = p.wait()
    finally:
        timer.cancel()
        p.stdout.close()
    lines = tail.decode("utf-8", "replace").splitlines()[-CHECK_TAIL_LINES:]
    if timed_out.is_set():
        lines.append(f"[wavewait: the check took longer than {timeout:g} s and was stopped]")
        code = code or 124
    return code, "\n".join(lines)[-CHECK_OUTPUT_CHARS:]


async def run_check_async(command: str, cwd: str) -> tuple[int, str]:
    """`run_check` in a worker thread. Cancelled (the request ended, the server is stopping),
    it kills the check's process group, so the thread ends at once: the process waits for its
    worker threads before it exits, and a check may run for an hour."""
    lock = threading.Lock()
    group: list[int] = []
    cancelled = False

    def kill(pgid: int) -> None:
        with suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)

    def started(pgid: int) -> None:
        with lock:
            group.append(pgid)
            if cancelled:  # cancelled while the thread was starting it
                kill(pgid)

    try:
        return await asyncio.to_thread(run_check, command, cwd, started=started)
    except asyncio.CancelledError:
        with lock:
            cancelled = True
            for pgid in group:
                kill(pgid)
        raise
