"""The TUI as a real process on a real terminal (a pty): a closed terminal or a `kill` quits cleanly."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from wavewait.core import agents
from wavewait.core.bus.file import FileBus
from wavewait.core.proc import alive

from conftest import clean_env, until, wavewait_cmd

pytestmark = pytest.mark.anyio


def drain(fd: int) -> None:
    """Read the TUI's output so it never blocks on a full terminal."""
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass  # the terminal closed: the process is gone


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
async def test_the_demo_ends_its_flights_when_its_terminal_goes(tmp_path: Path, sig: signal.Signals):
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
    threading.Thread(target=drain, args=(leader,), daemon=True).start()
    try:

        async def flights():
            return [a for a in await bus.list_agents() if a.wave == "wave-1"]

        async def all_spawned() -> bool:
            return len(await flights()) == 6 and all(a.pid for a in await flights())

        await until(all_spawned, timeout=30, what="the demo's six flights")
        await until(lambda: proc.poll() is None, what="the TUI running")
        proc.send_signal(sig)
        await until(lambda: proc.poll() is not None, timeout=30, what="the TUI to quit")
        left = [a for a in await flights() if not a.finished]
        assert left == [], f"still running after the TUI quit: {[a.name for a in left]}"
        assert not any(alive(a.pid, a.pid_start) for a in await flights() if a.pid)
    finally:
        if proc.poll() is None:
            proc.kill()
        for a in await bus.list_agents():  # a failed run leaves nothing behind either
            if a.pid and not a.finished:
                await agents.kill(bus, a, by="the test's clean-up")
        os.close(leader)
        await bus.close()
