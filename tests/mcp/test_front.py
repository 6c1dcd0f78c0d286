"""The front that answers `initialize` and `tools/list` while the SDK imports never says anything
the SDK would not: the pre-rendered answers are the SDK's current ones, and a server with the
front answers exactly as one without it (over raw JSON-RPC, for every handshake version, and for
a session that opens in the 2026 era as Claude Code 2.1.330 does)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

from wavewait.command import mcp_on_stdio
from wavewait.mcp import prerendered
from wavewait.mcp.delivery import Deliveries
from wavewait.mcp.front import OFF, SUBSCRIPTION_KEY, FdLines, Front
from wavewait.mcp.prerender import ask_sdk, payload
from wavewait.mcp.stdio import LoopStdin, ReportingStdout

ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def req(id_: int | str, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, **({"params": params} if params is not None else {})}


def initialize(id_: int | str, version: str = LATEST_HANDSHAKE_VERSION) -> dict[str, Any]:
    return req(
        id_, "initialize", {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    )


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}

# What Claude Code 2.1.330 sent when the SDK took longer than its probe bound (~2.8 s) to answer
# (recorded from the host suite): a 2026-era `server/discover` probe, then, unanswered, the
# handshake on the same pipe, and tools/call with a `_meta` that has no envelope. The SDK takes
# the probe as opening a 2026-era connection and refuses the rest; the front used to answer
# `initialize` and `tools/list` itself, so the host went on in the handshake era and every
# tools/call got "params._meta is missing the required envelope key(s)".
PROBE_THEN_HANDSHAKE = [
    req("server-discover-probe-1", "server/discover", {"_meta": ENVELOPE}),
    initialize(0),
    INITIALIZED,
    req(1, "tools/list"),
    req(2, "tools/call", {"name": "list_agents", "arguments": {}, "_meta": {"progressToken": 2}}),
]


# Claude Code 2.1.330 opening a session in the 2026 era, as recorded from the host suite (its
# envelope, clientInfo trimmed): it waits for the probe's answer, then for the listen stream's
# acknowledgement, before it asks for the lists.
CLAUDE_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "claude-code", "title": "Claude Code", "version": "2.1.330"},
    "io.modelcontextprotocol/clientCapabilities": {
        "roots": {"listChanged": True},
        "elicitation": {"form": {}, "url": {}},
    },
}
LISTEN = {"toolsListChanged": True, "promptsListChanged": True, "resourcesListChanged": True}
CLAUDE_SESSION = [
    req("server-discover-probe-1", "server/discover", {"_meta": CLAUDE_META}),
    req("listen:0", "subscriptions/listen", {"_meta": CLAUDE_META, "notifications": LISTEN}),
    req(0, "server/discover", {"_meta": CLAUDE_META}),
    req(1, "prompts/list", {"_meta": CLAUDE_META}),
    req(2, "resources/list", {"_meta": CLAUDE_META}),
    req(3, "tools/list", {"_meta": CLAUDE_META}),
    req(
        4,
        "tools/call",
        {"name": "list_agents", "arguments": {}, "_meta": {**CLAUDE_META, "progressToken": 4, "toolUseId": "t"}},
    ),
]


def test_the_prerendered_answers_are_the_sdks_own():
    assert json.loads(prerendered.PAYLOAD) == payload(), "run `python -m wavewait.mcp.prerender`"


@pytest.mark.parametrize("version", [HANDSHAKE_PROTOCOL_VERSIONS[0], HANDSHAKE_PROTOCOL_VERSIONS[-1], "1999-01-01"])
def test_a_server_with_the_front_answers_as_one_without(version):
    assert ask_sdk(version, env={OFF: "1"}) == ask_sdk(version)  # on vs off


# Codex 0.169.0's opening (handshake era), as recorded from the host suite.
CODEX_SESSION = [
    req(
        0,
        "initialize",
        {
            "protocolVersion": "2025-06-18",
            "capabilities": {"experimental": {"codex/auth-change": {}}, "elicitation": {"form": {}, "url": {}}},
            "clientInfo": {"name": "codex-mcp-client", "title": "Codex", "version": "0.169.0"},
        },
    ),
    INITIALIZED,
    req(1, "tools/list", {"_meta": {"progressToken": 0}}),
    req(2, "tools/call", {"name": "list_agents", "arguments": {}, "_meta": {"progressToken": 1}}),
]


def test_a_codex_session_goes_as_without_the_front(tmp_path):
    on = exchange(CODEX_SESSION, {OFF: "1"}, tmp_path / "on")
    assert on == exchange(CODEX_SESSION, {OFF: "0"}, tmp_path / "off")
    assert on["2"]["isError"] is False


def test_an_initialize_the_sdk_refuses_is_the_sdks_to_refuse(tmp_path):
    frames = [req(0, "initialize", {**initialize(0)["params"], "clientInfo": {"name": "t"}}), req(1, "tools/list")]
    on = exchange(frames, {OFF: "1"}, tmp_path / "on")
    assert on == exchange(frames, {OFF: "0"}, tmp_path / "off")
    assert on["0"]["error"]["code"] == -32602


def exchange(
    frames: list[dict[str, Any]], env: dict[str, str], bus: Path, *args: str, deadline: float = 60
) -> dict[str, Any]:
    """Send `frames` at once to a fresh `wavewait mcp`; its answer to each request, by id (a
    listen stream's acknowledgement as `ack ID`)."""
    want = {
        f"ack {f['id']}" if f["method"] == "subscriptions/listen" else json.dumps(f["id"]) for f in frames if "id" in f
    }
    base = {k: v for k, v in os.environ.items() if not k.startswith("WAVEWAIT_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "wavewait", "mcp", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=base | {"WAVEWAIT_BUS": str(bus)} | env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    lines: queue.Queue[bytes] = queue.Queue()
    out = proc.stdout
    threading.Thread(target=lambda: [lines.put(x) for x in iter(out.readline, b"")], daemon=True).start()
    proc.stdin.write(b"".join((json.dumps(f) + "\n").encode() for f in frames))
    proc.stdin.flush()
    got: dict[str, Any] = {}
    end = time.monotonic() + deadline
    try:
        while want - got.keys():
            msg = json.loads(lines.get(timeout=max(0.01, end - time.monotonic())))
            if "id" in msg and "method" not in msg:
                key = json.dumps(msg["id"])
            elif msg.get("method") == "notifications/subscriptions/acknowledged":
                key = f"ack {msg['params']['_meta']['io.modelcontextprotocol/subscriptionId']}"
            else:
                continue
            assert key not in got, f"two answers to {key}"
            got[key] = msg.get("result", {"error": msg.get("error")}) if "id" in msg else msg["params"]
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    return got


def test_a_session_opened_by_a_2026_probe_goes_as_without_the_front(tmp_path):
    on = exchange(PROBE_THEN_HANDSHAKE, {OFF: "1"}, tmp_path / "on")
    off = exchange(PROBE_THEN_HANDSHAKE, {OFF: "0"}, tmp_path / "off")
    assert on == off
    assert off["0"]["error"]["code"] == -32022  # initialize refused: the host re-discovers


def test_a_2026_session_goes_as_without_the_front(tmp_path):
    """Claude Code's opening, answered by the front while the SDK imports, as the SDK answers it."""
    partial = {"toolsListChanged": True, "resourcesListChanged": False}
    frames = [*CLAUDE_SESSION, req("listen:1", "subscriptions/listen", {"_meta": ENVELOPE, "notifications": partial})]
    on = exchange(frames, {OFF: "1"}, tmp_path / "on")
    off = exchange(frames, {OFF: "0"}, tmp_path / "off")
    assert on == off
    assert off["ack listen:0"]["notifications"] == LISTEN and off["4"]["isError"] is False
    assert off["ack listen:1"]["notifications"] == {"toolsListChanged": True}


@pytest.mark.parametrize(("args", "env"), [(["--queue", "q"], {}), (["--que=q"], {}), ([], {"WAVEWAIT_QUEUE": "q"})])
def test_with_a_queue_the_tools_list_is_the_sdks(tmp_path, args, env):
    """A queue adds its tools to the list, which the pre-rendered one does not have."""
    handshake = [initialize(0), INITIALIZED, req(1, "tools/list")]
    for frames in (handshake, CLAUDE_SESSION[:-1]):
        on = exchange(frames, {OFF: "1"} | env, tmp_path / "on", *args)
        off = exchange(frames, {OFF: "0"} | env, tmp_path / "off", *args)
        assert on == off
    assert len(on["3"]["tools"]) > len(json.loads(prerendered.PAYLOAD)["tools_list"]["tools"])  # the queue's


def test_the_front_answers_initialize_only_as_the_first_request():
    """In process, with an SDK that never answers: what the front itself sends back."""
    for frames, answered in (
        (PROBE_THEN_HANDSHAKE, ["server-discover-probe-1"]),
        ([initialize(0), INITIALIZED, req(1, "tools/list")], [0, 1]),
        ([req(7, "ping"), initialize(0), req(1, "tools/list")], []),
        ([initialize(0), INITIALIZED, req(1, "tools/list", {"_meta": ENVELOPE})], [0]),
        (CLAUDE_SESSION, ["server-discover-probe-1", "ack listen:0", 0, 1, 2, 3]),
        (CODEX_SESSION, [0, 1]),
        ([{**CLAUDE_SESSION[0], "id": None}, initialize(0), *CLAUDE_SESSION[2:4]], []),  # not a request to the SDK
        ([{**initialize(0), "jsonrpc": "1.0"}, initialize(1)], []),
        ([req(0, "initialize", {**initialize(0)["params"], "clientInfo": {"name": "t"}}), req(1, "tools/list")], []),
        (
            [
                req(
                    0,
                    "initialize",
                    {"protocolVersion": LATEST_HANDSHAKE_VERSION, "clientInfo": {"name": "t", "version": "0"}},
                )
            ],
            [],
        ),
        ([initialize(0), *CLAUDE_SESSION[:2]], [0]),  # a handshake session: no 2026 answers
        ([req(0, "server/discover", {"_meta": ENVELOPE, "x": 1}), req(1, "tools/list", {"_meta": ENVELOPE})], [1]),
        ([req(0, "tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}})], []),
        ([req(0, "tools/list", {"_meta": {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": "2027-01-01"}})], []),
        ([req(0, "tools/list", {"_meta": ENVELOPE, "cursor": "c"})], []),
    ):
        stdout = io.BytesIO()
        front = Front(io.BytesIO(b"".join((json.dumps(f) + "\n").encode() for f in frames)), stdout)
        front._pump_in()  # reads to EOF, forwarding everything to the (silent) SDK pipe
        front.sdk_stdin.close()
        front.sdk_stdout.close()
        sent = [json.loads(x) for x in stdout.getvalue().splitlines()]
        got = [m["id"] if "id" in m else f"ack {m['params']['_meta'][SUBSCRIPTION_KEY]}" for m in sent]
        assert got == answered, frames


@pytest.mark.parametrize(
    ("argv", "early"),
    [
        (["mcp"], True),
        (["mcp", "--max-block", "240", "--bus", "/tmp/b"], True),
        (["mcp", "--transport", "stdio"], True),
        (["mcp", "--transport=http"], False),
        (["mcp", "--transport", "http", "--port", "0"], False),
        (["mcp", "--print-config", "codex"], False),
        (["mcp", "--help"], False),
        (["wait", "mcp"], False),
        ([], False),
        (["--bus", "/tmp/b", "mcp"], True),  # the options that may come before the command
        (["--bus=/tmp/b", "--agent", "me", "mcp", "--max-block", "240"], True),
        (["--bus", "/tmp/b", "mcp", "--transport", "http"], False),
        (["--bus", "/tmp/b", "mcp", "--help"], False),
        (["--verbose", "mcp"], False),  # not an option before a command: the CLI says so
        (["--bus", "/tmp/b"], False),
    ],
)
def test_the_front_starts_before_the_cli_imports_only_for_the_stdio_server(argv, early):
    assert mcp_on_stdio(argv) is early


def test_a_call_read_before_the_sdk_is_up_counts_its_wait_from_arrival(monkeypatch):
    """A host's time limit for a tools/call runs from when it sent it: the time the call waited in
    the front for the SDK is taken off the wait's max-block (toolkit.max_block)."""
    clock = iter([100.0, 103.5])
    monkeypatch.setattr("wavewait.mcp.front.time.monotonic", lambda: next(clock))
    call = req(4, "tools/call", {"name": "wait", "arguments": {"timeout": 10}})
    front = Front(io.BytesIO((json.dumps(call) + "\n").encode()), io.BytesIO())
    front._pump_in()
    front.sdk_stdin.close()
    front.sdk_stdout.close()
    assert front.queued("4") == 0.0  # ids as sent: 4, not "4"
    assert front.queued(4) == 3.5
    assert front.queued(4) == 0.0  # once


def test_the_front_reads_lines_across_reads_without_a_buffered_file():
    """The front's reader uses os.read (a buffered stdin blocked in a daemon thread aborts
    the interpreter at exit); lines split across reads come out whole, the last one too."""
    r, w = os.pipe()
    for part in (b'{"a":1}\n{"b"', b":2}\n", b'{"c":3}'):
        os.write(w, part)
    os.close(w)
    assert list(FdLines(r, chunk=5)) == [b'{"a":1}\n', b'{"b":2}\n', b'{"c":3}']
    os.close(r)


async def _served(front: Front) -> tuple[LoopStdin, ReportingStdout]:
    """The server's stdin and stdout over `front`, as server.py joins them, the front started."""
    stdin = await LoopStdin.open(front.sdk_stdin.fileno())
    assert stdin is not None
    stdin.take_over, front.hand_over = front.take_stdin, True
    stdout = ReportingStdout(front.sdk_stdout, Deliveries(), direct=True, front=front)
    front.start()
    return stdin, stdout


async def _until(done: Callable[[], bool], failing: str, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not done():
        assert time.monotonic() < deadline, failing
        await asyncio.sleep(0.01)


def test_once_the_sdk_is_up_the_server_reads_stdin_itself_from_where_the_front_stopped():
    """After the SDK's first answer the front hands stdin over at the next line's end: its
    thread ends, its pipe closes, and the server's reader on the event loop goes on reading
    stdin, a line the front had begun included, with nothing lost, doubled or reordered."""
    host_r, host_w = os.pipe()  # the host's end of our stdin
    front = Front(FdLines(host_r), io.BytesIO())
    got: list[str] = []

    async def serve() -> None:
        stdin = await LoopStdin.open(front.sdk_stdin.fileno())
        assert stdin is not None
        stdin.take_over, front.hand_over = front.take_stdin, True
        pump = threading.Thread(target=front._pump_in)
        pump.start()
        os.write(host_w, b'{"n":1}\n')
        got.append(await anext(stdin))  # through the front: the SDK has not spoken
        assert pump.is_alive()
        front._sdk_spoke.set()  # as _pump_out does at the SDK's first answer
        os.write(host_w, b'{"n":2}\n{"n":')  # a line, and the start of the next in the same read
        got.append(await anext(stdin))
        await asyncio.to_thread(pump.join, 10)
        assert not pump.is_alive(), "the front still reads stdin after the SDK spoke"
        os.write(host_w, b'3}\n{"n":4}\n')  # read by the server's own reader now
        got.extend([await anext(stdin), await anext(stdin)])
        os.close(host_w)
        assert [line async for line in stdin] == []  # the host's EOF ends it

    asyncio.run(asyncio.wait_for(serve(), 30))
    front.sdk_stdout.close()
    os.close(host_r)
    assert got == ['{"n":1}\n', '{"n":2}\n', '{"n":3}\n', '{"n":4}\n']


@pytest.mark.parametrize("client", ["pipe", "socket"])
def test_once_the_front_has_read_its_last_line_the_server_writes_the_clients_fd_itself(client):
    """After the hand-over of stdin, the server's stdout closes its pipe to the front, which
    forwards what was in it and ends; the next lines go to the client's fd (a pipe, or a
    socket as Node-based hosts give) from the event loop, in order, and each line is counted on
    the wire as the front counted it: read only once the client has read it."""
    host_r, host_w = os.pipe()  # the host's end of our stdin
    if client == "pipe":
        out_r, out_w = os.pipe()
        reader = os.fdopen(out_r, "rb", buffering=0)
    else:
        ours, theirs = socket.socketpair()
        out_w = os.dup(ours.fileno())
        ours.close()
        reader = theirs.makefile("rb", buffering=0)
    front = Front(FdLines(host_r), os.fdopen(out_w, "wb"))
    read: list[bytes] = []

    def host_reads() -> None:
        read.append(reader.readline())

    async def serve() -> None:
        stdin, stdout = await _served(front)
        await stdout.write('{"jsonrpc":"2.0","id":1,"result":{}}\n')  # the SDK's first answer
        await stdout.flush()
        await asyncio.to_thread(host_reads)
        os.write(host_w, b'{"jsonrpc":"2.0","id":2,"method":"ping"}\n')
        assert await anext(stdin) == '{"jsonrpc":"2.0","id":2,"method":"ping"}\n'
        await _until(lambda: not front.reading, "the front still reads stdin")  # handed over at the line's end
        front.wire.watch(1)  # the SDK's second line, as the deliveries watch a held response
        await stdout.write('{"jsonrpc":"2.0","id":2,"result":{}}\n')
        await stdout.flush()
        assert front.relayed.is_set(), "the front still relays the server's lines"
        assert not front.wire.read(1, wait=False)  # written, not yet read by the client
        await asyncio.to_thread(host_reads)
        assert front.wire.read(1, wait=False)
        front.wire.watch(2)  # and the lines after it
        await stdout.write('{"jsonrpc":"2.0","id":3,"result":{}}\n')
        await stdout.flush()
        await asyncio.to_thread(host_reads)
        assert front.wire.read(2, wait=False)
        os.close(host_w)
        assert [line async for line in stdin] == []

    asyncio.run(asyncio.wait_for(serve(), 30))
    reader.close()
    assert read == [b'{"jsonrpc":"2.0","id":%d,"result":{}}\n' % n for n in (1, 2, 3)]


def test_a_server_whose_client_stopped_reading_still_stops_while_the_front_holds_its_last_lines():
    """The take-over waits for the front to forward what its pipe held; a client that stopped
    reading (its pipe full) holds that wait, and cancelling it (a signal ends the server so)
    returns at once; the lines held stay for the next flush, nothing is cut or lost."""
    host_r, host_w = os.pipe()
    out_r, out_w = os.pipe()
    front = Front(FdLines(host_r), os.fdopen(out_w, "wb"))
    big = '{"jsonrpc":"2.0","id":1,"result":{"x":"' + "y" * 200_000 + '"}}\n'  # over the client's pipe

    async def serve() -> None:
        stdin, stdout = await _served(front)
        await stdout.write(big)  # the SDK's first answer: the front forwards it and blocks, unread
        await stdout.flush()
        # the front read the answer: the next line hands stdin over
        await _until(front._sdk_spoke.is_set, "the front did not see the SDK's answer")
        os.write(host_w, b'{"jsonrpc":"2.0","id":2,"method":"ping"}\n')
        assert await anext(stdin) == '{"jsonrpc":"2.0","id":2,"method":"ping"}\n'
        await _until(lambda: not front.reading, "the front still reads stdin")
        await stdout.write('{"jsonrpc":"2.0","id":2,"result":{}}\n')
        started = time.monotonic()
        with anyio.move_on_after(0.5) as scope:  # cancelled as the server's task group is on a signal
            await stdout.flush()
        assert scope.cancelled_caught and time.monotonic() - started < 5
        assert not front.relayed.is_set()
        reader = await asyncio.to_thread(os.fdopen, out_r, "rb")
        got = [await asyncio.to_thread(reader.readline)]  # the client reads again
        await stdout.flush()  # the held line goes now, after the front's last one
        got.append(await asyncio.to_thread(reader.readline))
        assert got == [big.encode(), b'{"jsonrpc":"2.0","id":2,"result":{}}\n']
        os.close(host_w)
        reader.close()

    asyncio.run(asyncio.wait_for(serve(), 60))
