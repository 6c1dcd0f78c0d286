"""`wavewait serve`: the TUI in a browser through textual-serve, one real process per session."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

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

    async def start(*args: str) -> Served:
        port = free_port()
        proc = subprocess.Popen(
            wavewait_cmd("serve", "--port", str(port), *args),
            env=clean_env(),
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
        assert [sys.executable.encode(), b"-m", b"wavewait", b"--bus", str(bus).encode()] in cmdlines

        served.proc.send_signal(signal.SIGTERM)

        async def closed() -> bool:  # at once, not after aiohttp's 60 s shutdown timeout
            msg = await ws.receive(timeout=15)
            return msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)

        await until(closed, timeout=15, what="the server to close the session")
    out, _ = served.proc.communicate(timeout=15)
    assert served.proc.returncode == 0, out
    await until(lambda: not any(map(alive, session)), timeout=15, what="the session's processes to end")


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
