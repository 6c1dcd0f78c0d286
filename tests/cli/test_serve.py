"""`wavewait serve`: the TUI in a browser through textual-serve, one real process per session."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from wavewait.core.bus.file import FileBus
from wavewait.core.model import Agent
from wavewait.core.proc import pid_start

from browsertools import Chromium, Tab, chromium_or_skip
from conftest import clean_env, until, wavewait_cmd

aiohttp = pytest.importorskip("aiohttp")
pytest.importorskip("textual_serve")

pytestmark = pytest.mark.anyio


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> Iterator[int]:
    """Every live process below `pid` (Linux /proc), so a test can see what a session left."""
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids = (task / "children").read_text().split()
        except OSError:
            continue
        for kid in map(int, kids):
            yield kid
            yield from descendants(kid)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Served:
    def __init__(self, proc: subprocess.Popen[str], port: int) -> None:
        self.proc, self.port = proc, port
        self.url = f"http://127.0.0.1:{port}"


@pytest.fixture
async def serve(tmp_path: Path):
    """Start `wavewait serve --port P ARGS...` and wait, with a deadline, until it answers."""
    started: list[subprocess.Popen[str]] = []

    async def start(*args: str, **env: str) -> Served:
        port = free_port()
        proc = subprocess.Popen(
            wavewait_cmd("serve", "--port", str(port), *args),
            env=clean_env(**env),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        started.append(proc)
        served = Served(proc, port)
        async with aiohttp.ClientSession() as http:

            async def answers() -> bool:
                assert proc.poll() is None, proc.communicate()[0]
                try:
                    async with http.get(served.url + "/") as r:
                        return r.status == 200
                except aiohttp.ClientConnectionError:
                    return False

            await until(answers, timeout=30, what=f"wavewait serve on port {port}")
        return served

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


async def test_serve_answers_with_the_page_of_the_demo_and_exits_on_sigterm(serve):
    served = await serve()
    async with aiohttp.ClientSession() as http:
        async with http.get(served.url + "/") as r:
            page = await r.text()
    assert r.status == 200 and r.content_type == "text/html"
    assert f'data-session-websocket-url="ws://127.0.0.1:{served.port}/ws"' in page
    assert "wavewait demo" in page  # the title
    served.proc.send_signal(signal.SIGTERM)
    out, _ = served.proc.communicate(timeout=15)
    assert served.proc.returncode == 0, out


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads the process tree from /proc")
async def test_a_browser_session_runs_this_python_and_ends_with_the_server(serve, tmp_path):
    bus = tmp_path / "a bus; $(echo not run)"  # the session command goes through a shell
    served = await serve("--bus", str(bus))
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(served.url + "/ws?width=120&height=40")
        screen = b""

        async def painted() -> bool:
            nonlocal screen
            msg = await ws.receive(timeout=30)
            assert msg.type == aiohttp.WSMsgType.BINARY, msg
            screen += msg.data
            return b"wavewait" in screen  # the status line

        await until(painted, timeout=30, what="the TUI's first screen over the websocket")

        session = list(descendants(served.proc.pid))
        cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1] for pid in session]
        assert [sys.executable.encode(), b"-P", b"-m", b"wavewait", b"--bus", str(bus).encode()] in cmdlines

        served.proc.send_signal(signal.SIGTERM)

        async def closed() -> bool:  # at once, not after aiohttp's 60 s shutdown timeout
            msg = await ws.receive(timeout=15)
            return msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)

        await until(closed, timeout=15, what="the server to close the session")
    out, _ = served.proc.communicate(timeout=15)
    assert served.proc.returncode == 0, out
    await until(lambda: not any(map(alive, session)), timeout=15, what="the session's processes to end")


DEMO_FLIGHTS = ("file-reader", "schema-check", "test-runner", "doc-writer", "linter", "migrator")
SCREENSHOTS = "WAVEWAIT_TEST_SCREENSHOTS"  # a folder: the test leaves its picture there as browser.png


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Chromium]:
    """Headless Chromium at 1280x800; skipped without it, failed under CI=true (.ci/run installs it)."""
    folder = tmp_path / "chromium"
    folder.mkdir()
    browser = Chromium(chromium_or_skip(), folder, size=(1280, 800))
    yield browser
    browser.stop()


async def session_processes(served: Served, bus: FileBus) -> list[tuple[str, int, str | None]]:
    """(what, pid, start time) of everything the tab's session runs: the processes below the
    server (the shell, the TUI, the supervisors and their flights) and, from the demo's bus,
    each flight and its supervisor, once all six run."""

    async def flights() -> list[Agent]:
        return [a for a in await bus.list_agents() if a.wave == "wave-1"]

    async def spawned() -> bool:
        return len(wave := await flights()) == len(DEMO_FLIGHTS) and all(a.pid and a.supervisor_pid for a in wave)

    await until(spawned, timeout=30, what="the demo's six flights with their supervisors")
    out = []
    for pid in descendants(served.proc.pid):
        with contextlib.suppress(OSError):  # one that ended meanwhile is not waited on
            out.append((Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip(), pid))
    for a in await flights():
        assert a.pid and a.supervisor_pid
        out += [(f"{a.name} ({a.pid})", a.pid), (f"{a.name}'s supervisor ({a.supervisor_pid})", a.supervisor_pid)]
    return [(what, pid, pid_start(pid)) for what, pid in out]


def shows_the_panel(screen: str) -> bool:
    """The demo's flights panel: its header (`N/6 reported · … · wave-1`), then a row per flight
    with its wave (the scrollback's and the wait's lines about a flight have no wave in them)."""
    rows = screen.splitlines()
    return (
        bool(rows)
        and "reported" in rows[0]
        and "wave-1" in rows[0]
        and all(any(name in row and "wave-1" in row for row in rows[1:]) for name in DEMO_FLIGHTS)
    )


def shows_the_help(screen: str) -> bool:
    return "/wait TIMEOUT [ID ...]" in screen and "/send ID MESSAGE" in screen and "Keys" in screen


async def text_when(tab: Tab, shows: Callable[[str], bool], what: str, timeout: float = 30) -> str:
    """The terminal's text, once `shows` holds of it."""
    screen = ""

    async def shown() -> bool:
        nonlocal screen
        screen = await tab.screen()
        return shows(screen)

    try:
        await until(shown, timeout=timeout, what=what)
    except AssertionError as e:
        raise AssertionError(f"{e}; the page shows:\n{screen}") from None
    return screen


@pytest.mark.long
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads the process tree from /proc")
async def test_the_demo_in_chromium_shows_its_panel_takes_keys_and_ends_when_its_tab_closes(serve, chromium, tmp_path):
    """`wavewait serve` in a real browser: the page loads and connects, xterm.js draws the
    demo's flights panel, `/help` typed in the page opens the help, and closing the tab ends
    the session's TUI, every flight and supervisor, and removes the demo's bus; the server
    stays up for the next tab."""
    temp = tmp_path / "tmp"  # where each session's demo makes its temporary bus
    temp.mkdir()
    served = await serve("--seed", "1", TMPDIR=str(temp))
    procs: list[tuple[str, int, str | None]] = []
    try:
        async with chromium.tab(served.url + "/") as tab:

            async def connected() -> bool:  # the page's script ran and the TUI's first bytes came
                return await tab.evaluate(
                    "document.readyState == 'complete' && document.body.classList.contains('-first-byte')"
                )

            await until(connected, timeout=30, what="the page to load and the session's first bytes")
            assert await tab.evaluate("document.querySelector('#terminal .xterm-screen') !== null")  # xterm.js's

            await until(lambda: len(list(temp.glob("wavewait-demo-*"))) == 1, timeout=30, what="the demo's bus")
            (bus_dir,) = temp.glob("wavewait-demo-*")
            bus = FileBus(bus_dir)
            try:
                procs = await session_processes(served, bus)
            finally:
                await bus.close()
            assert any("-m wavewait demo --seed 1" in what for what, _, _ in procs), procs

            assert not shows_the_help(await text_when(tab, shows_the_panel, "the demo's flights panel"))
            picture = tmp_path / "browser.png"
            await tab.screenshot(picture)
            assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            if os.environ.get(SCREENSHOTS):
                shutil.copyfile(picture, Path(os.environ[SCREENSHOTS]) / "browser.png")

            await tab.evaluate("document.querySelector('.xterm-helper-textarea').focus()")
            await tab.type("/help\r")
            await text_when(tab, shows_the_help, "the help, opened by /help typed in the page")

            await tab.close()

        def left() -> list[str]:
            return [what for what, pid, start in procs if start is not None and pid_start(pid) == start]

        try:
            await until(lambda: not left(), timeout=20, what="the session's processes to end")
        except AssertionError as e:
            raise AssertionError(f"{e}; still running: {left()}") from None
        await until(lambda: not bus_dir.exists(), timeout=20, what="the demo's bus to be removed")
        assert served.proc.poll() is None, "the server should keep serving other tabs"
    finally:
        for _, pid, start in procs:  # a failed run leaves nothing behind either
            if start is not None and pid_start(pid) == start:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


BAD_INPUT = [
    (["--port", "nope"], "argument --port: must be a port number 1-65535, got 'nope'"),
    (["--port", "0"], "argument --port: must be a port number 1-65535, got '0'"),
    (["--port", "70000"], "argument --port: must be a port number 1-65535, got '70000'"),
    (["--demo", "--bus", "somewhere"], "--demo runs on a temporary bus of its own"),
    (["--agent", "bad/agent"], "agent: 'bad/agent' is not a valid id"),
]


@pytest.mark.parametrize("args,message", BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_exits_2_naming_what_was_wrong(args, message):
    done = subprocess.run(wavewait_cmd("serve", *args), env=clean_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_a_port_in_use_exits_2_naming_the_address():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run(
            wavewait_cmd("serve", "--port", str(port)), env=clean_env(), capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 2, done
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_without_textual_serve_exits_2_with_the_pip_hint(tmp_path):
    (tmp_path / "textual_serve.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'textual_serve'\", name='textual_serve')\n"
    )
    done = subprocess.run(
        wavewait_cmd("serve"), env=clean_env(PYTHONPATH=str(tmp_path)), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done
    assert "pip install 'wavewait[serve]'" in done.stderr
    assert "Traceback" not in done.stderr
