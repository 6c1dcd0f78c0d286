"""The TUI as a real process on a real terminal (a pty): a closed terminal or a `kill` quits cleanly."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from wavewait.core import agents
from wavewait.core.bus.file import FileBus
from wavewait.core.proc import alive

from conftest import clean_env, until, wavewait_cmd

pytestmark = pytest.mark.anyio


QUIT_WITHIN = 2.0  # seconds from the signal to the process's exit (the bound)
RESTORE = b"\x1b[?1049l"  # leave the alternate screen: the terminal is given back


def drain(fd: int, out: bytearray) -> None:
    """Read the TUI's output (so it never blocks on a full terminal), keeping it."""
    try:
        while chunk := os.read(fd, 65536):
            out.extend(chunk)
    except OSError:
        pass  # the terminal closed: the process is gone


@pytest.mark.parametrize(
    ("sig", "terminal_closed"),
    [(signal.SIGHUP, False), (signal.SIGTERM, False), (signal.SIGHUP, True)],
    ids=["hup", "term", "hup-terminal-gone"],
)
async def test_the_demo_ends_its_flights_when_its_terminal_goes(
    tmp_path: Path, sig: signal.Signals, terminal_closed: bool
):
    """`terminal_closed`: the terminal itself went (a tmux pane killed, an ssh session dropped),
    so every write to it fails; the TUI must still end its wait and flights, and quit."""
    bus = FileBus(tmp_path / "bus")
    env = clean_env(TERM="xterm-256color")
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        wavewait_cmd("--bus", str(tmp_path / "bus"), "demo", "--seed", "1"),
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        start_new_session=True,
    )
    os.close(follower)
    output = bytearray()
    reader = threading.Thread(target=drain, args=(leader, output), daemon=True)
    reader.start()
    try:

        async def flights():
            return [a for a in await bus.list_agents() if a.wave == "wave-1"]

        async def all_spawned() -> bool:
            return len(await flights()) == 6 and all(a.pid for a in await flights())

        await until(all_spawned, timeout=30, what="the demo's six flights")

        async def its_wait_took_a_report() -> bool:  # the TUI's own fan-in holds a claim
            return any(i.taken_by for i in await bus.history("orchestrator", 100)) or any(
                w.waiter == "orchestrator" and "1/" in w.progress for w in await bus.list_waits()
            )

        await until(its_wait_took_a_report, timeout=30, what="the TUI's wait to receive a report")
        assert proc.poll() is None, "the TUI should still run"
        if terminal_closed:
            os.close(leader)
            leader = -1
        proc.send_signal(sig)
        signalled = time.monotonic()
        await until(lambda: proc.poll() is not None, timeout=30, what="the TUI to quit")
        took = time.monotonic() - signalled
        assert took <= QUIT_WITHIN, f"the TUI took {took:.2f}s to quit after {sig.name}"
        left = [a for a in await flights() if not a.finished]
        assert left == [], f"still running after the TUI quit: {[a.name for a in left]}"
        assert not any(alive(a.pid, a.pid_start) for a in await flights() if a.pid)
        # its wait ended cleanly: nothing it took is lost (in history, none left claimed) ...
        assert await bus.list_waits() == [] or all(w.waiter != "orchestrator" for w in await bus.list_waits())
        assert any(i.taken_by for i in await bus.history("orchestrator", 100)), "the report it took"
        # ... and the terminal was given back, if it was still there
        if not terminal_closed:
            await until(lambda: RESTORE in output, timeout=5, what="the alternate screen left")
    finally:
        if proc.poll() is None:
            proc.kill()
        for a in await bus.list_agents():  # a failed run leaves nothing behind either
            if a.pid and not a.finished:
                await agents.kill(bus, a, by="the test's clean-up")
        if leader >= 0:
            os.close(leader)
        await bus.close()
