"""The TUI as a real process on a real terminal (a pty): a closed terminal or a `kill` quits cleanly."""

from __future__ import annotations

import contextlib
import os
import pty
import shlex
import shutil
import signal
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from wavewait.core import admission
from wavewait.core.bus.file import FileBus
from wavewait.core.proc import alive, pid_start

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


@pytest.mark.long
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
                await admission.kill(bus, a, by="the test's clean-up")
        if leader >= 0:
            os.close(leader)
        await bus.close()


# ---------------------------------------------------------------------------------------------
# In tmux, as a person runs it: the demo on its own temporary bus; a closed terminal is the
# kernel's hangup (SIGHUP and SIGCONT to the TUI, every write to the terminal failing with EIO)

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
GONE_WITHIN = 20.0  # seconds for the TUI and everything it owns to be gone (a deadline, not a pace)


class Tmux:
    """A tmux server of the test's own (its socket in tmp_path) running one command at a size."""

    def __init__(self, tmp_path: Path, env: dict[str, str], argv: list[str], size: tuple[int, int] = (80, 24)):
        self.base = ["tmux", "-S", str(tmp_path / "tmux.sock")]
        self.env = env
        cols, rows = size
        subprocess.run(
            [*self.base, "new-session", "-d", "-x", str(cols), "-y", str(rows), "exec " + shlex.join(argv)],
            env=env, cwd=tmp_path, check=True,
        )  # fmt: skip
        self.pid = int(self.tmux("display-message", "-p", "#{pane_pid}").strip())

    def tmux(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, env=self.env).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p")

    def close(self) -> None:
        """Kill the session, as closing the terminal window does."""
        subprocess.run([*self.base, "kill-server"], env=self.env, check=False, capture_output=True)


async def processes_of(bus: FileBus, wave: str, count: int) -> list[tuple[str, int, str | None]]:
    """(what, pid, start time) of each flight and its supervisor, once `count` flights run."""

    async def spawned() -> bool:
        flights = [a for a in await bus.list_agents() if a.wave == wave]
        return len(flights) == count and all(a.pid and a.supervisor_pid for a in flights)

    await until(spawned, timeout=30, what=f"{count} flights of {wave} with their supervisors")
    out = []
    for a in await bus.list_agents():
        if a.wave == wave:
            assert a.pid and a.supervisor_pid
            out.append((f"{a.name} ({a.pid})", a.pid, a.pid_start))
            out.append((f"{a.name}'s supervisor ({a.supervisor_pid})", a.supervisor_pid, pid_start(a.supervisor_pid)))
    return out


def end_leftovers(procs: list[tuple[str, int, str | None]]) -> None:
    """A failed run leaves nothing behind either."""
    for _, pid, start in procs:
        if alive(pid, start):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.long
@needs_tmux
@pytest.mark.parametrize("how", ["terminal-closed", "SIGHUP", "SIGTERM"])
async def test_the_demo_ends_its_flights_and_removes_its_bus_when_its_terminal_goes(tmp_path: Path, how: str):
    """`wavewait demo` at 80x24 in tmux: the session killed (the kernel's hangup), or a SIGHUP
    or SIGTERM sent to it, ends every flight of the demo and its supervisor, and removes the
    demo's temporary bus, as Ctrl+Q does."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = clean_env(TERM="xterm-256color", TMPDIR=str(temp))
    term = Tmux(tmp_path, env, wavewait_cmd("demo", "--seed", "1"))
    procs: list[tuple[str, int, str | None]] = []
    tui_start = pid_start(term.pid)
    try:
        await until(lambda: len(list(temp.glob("wavewait-demo-*"))) == 1, timeout=30, what="the demo's bus")
        (bus_dir,) = temp.glob("wavewait-demo-*")
        bus = FileBus(bus_dir)
        try:
            procs = await processes_of(bus, "wave-1", 6)

            # the long-lived ones are up: the slow flight's wait made and, the terminal closed,
            # the question asked (ASK_AFTER, 22 s in: a flight blocked in `wavewait ask` ends
            # too; the signals reach the TUI the same way, so they do not wait for it again)
            ask = how == "terminal-closed"

            async def up() -> bool:
                asked = not ask or any(a.state == "needs_input" for a in await bus.list_agents())
                return asked and any(w.waiter != "orchestrator" for w in await bus.list_waits())

            await until(up, timeout=30, what="migrator's wait" + (" and doc-writer's question" if ask else ""))
        finally:
            await bus.close()
        assert alive(term.pid, tui_start), "the TUI should still run"
        if how == "terminal-closed":
            term.close()
        else:
            os.kill(term.pid, getattr(signal, how))
        await until(lambda: not alive(term.pid, tui_start), timeout=GONE_WITHIN, what="the TUI to quit")

        def left() -> list[str]:
            return [what for what, pid, start in procs if alive(pid, start)]

        await until(lambda: not left(), timeout=GONE_WITHIN, what="every flight and supervisor to end")
        await until(lambda: not bus_dir.exists(), timeout=GONE_WITHIN, what="the demo's bus to be removed")
    finally:
        term.close()
        end_leftovers(procs)


@needs_tmux
@pytest.mark.parametrize("how", ["terminal-closed", "SIGHUP"])
async def test_the_plain_tui_leaves_a_persons_flights_running_when_its_terminal_goes(tmp_path: Path, how: str):
    """The TUI on a person's bus is a window on their flights, not their owner: it quits on a
    hangup, and the flight it did not start keeps running, still `running` on the bus."""
    bus_dir = tmp_path / "bus"
    bus = FileBus(bus_dir)
    env = clean_env(TERM="xterm-256color", WAVEWAIT_BUS=str(bus_dir))
    worker = await admission.spawn(bus, "worker", [sys.executable, "-c", "import time; time.sleep(600)"], wave="mine")
    procs = await processes_of(bus, "mine", 1)
    term = Tmux(tmp_path, env, wavewait_cmd("--bus", str(bus_dir)))
    tui_start = pid_start(term.pid)
    try:
        await until(lambda: "worker" in term.screen(), timeout=30, what="the TUI showing the worker")
        if how == "terminal-closed":
            term.close()
        else:
            os.kill(term.pid, signal.SIGHUP)
        await until(lambda: not alive(term.pid, tui_start), timeout=GONE_WITHIN, what="the TUI to quit")
        assert [what for what, pid, start in procs if not alive(pid, start)] == []
        after = await bus.get_agent(worker.id)
        assert after is not None and after.status == "running", after
    finally:
        term.close()
        await admission.kill(bus, worker, by="the test's clean-up")
        end_leftovers(procs)
        await bus.close()


@pytest.mark.long
async def test_the_demo_ends_its_flights_when_its_terminal_output_is_stopped(tmp_path: Path):
    """The terminal stopped taking output (XOFF, a stalled connection): every write blocks, so
    Textual's shutdown cannot finish. A SIGTERM still ends the demo's flights and supervisors
    and removes its bus, from the forced exit's own thread, and the TUI leaves with 128+15."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        wavewait_cmd("demo", "--seed", "1"),
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=clean_env(TERM="xterm-256color", TMPDIR=str(temp)),
        start_new_session=True,
    )
    reader = threading.Thread(target=drain, args=(leader, bytearray()), daemon=True)
    reader.start()
    procs: list[tuple[str, int, str | None]] = []
    try:
        await until(lambda: len(list(temp.glob("wavewait-demo-*"))) == 1, timeout=30, what="the demo's bus")
        (bus_dir,) = temp.glob("wavewait-demo-*")
        bus = FileBus(bus_dir)
        try:
            procs = await processes_of(bus, "wave-1", 6)
        finally:
            await bus.close()
        termios.tcflow(follower, termios.TCOOFF)  # the terminal's output stops: writes block
        proc.send_signal(signal.SIGTERM)
        await until(lambda: proc.poll() is not None, timeout=GONE_WITHIN, what="the TUI to leave")
        assert proc.returncode == 128 + signal.SIGTERM, "the forced exit, not a normal quit"
        left = [what for what, pid, start in procs if alive(pid, start)]
        assert left == [], f"still running after the TUI left: {left}"
        assert not bus_dir.exists(), "the demo's bus is removed"
    finally:
        with contextlib.suppress(termios.error):
            termios.tcflow(follower, termios.TCOON)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        end_leftovers(procs)
        os.close(follower)
        os.close(leader)
