"""Answer a host's first requests while the MCP SDK is still importing (standard library only,
and the bounds in core/limits.py).

Hosts give a starting server little time (Claude Code -p about 2 s, Codex about 1 s without
`required`), and importing the SDK takes 0.5 s idle and several seconds under load. So
`wavewait mcp` on stdio starts this front first (wavewait/command.py starts it before anything
else is imported): a thread reads the real stdin and forwards every line, unchanged and in
order, to the SDK server through a pipe; until the SDK answers anything, the front itself
answers the requests of a session's opening from `prerendered`, which is generated from the
SDK's own answers by `python -m wavewait.mcp.prerender` and compared with them by
tests/mcp/test_front.py. The SDK's answers to those ids are dropped, so the client sees
exactly one answer per request, and the SDK's session goes through the same requests as
without the front. Once the SDK has answered, the front hands stdin (a pipe or socket) over
at the next line's end: it closes its pipe, and the server's reader on the event loop reads
stdin itself from there (stdio.LoopStdin). Then the server closes its pipe to the front,
which forwards what is in it and ends, and writes the client's fd itself, counting what it
wrote as the front did (stdio.ReportingStdout, wire.py). A request and its response then
cost no thread wake and no copy.

Only what the SDK would answer the same way is answered here. The SDK takes a connection's
protocol era from the first request it reads: `initialize` opens a handshake-era connection,
a request with the 2026-07-28 `_meta` envelope a 2026-era one, which refuses `initialize` and
every request without the envelope. The front decides the era by the same rule, then:

- handshake era (Codex 0.169.0): `initialize` (a handshake version) when it is the session's
  first request, and `tools/list` (no cursor, no envelope) after it;
- 2026 era (Claude Code 2.1.330): `server/discover`, `tools/list`, `prompts/list` and
  `resources/list` carrying a supported envelope and no other parameter (their results do not
  depend on the client), and the acknowledgement that opens a `subscriptions/listen` stream
  for list changes (the SDK's own acknowledgement is dropped; the stream is the SDK's).

Claude Code waits for the probe's answer, then for the listen acknowledgement, before it asks
for the lists. When its `server/discover` probe goes unanswered for about 3 s, it sends
`initialize` on the same pipe; the SDK refuses that (the connection is 2026-era) and the host
discovers again. The front once answered that `initialize` itself, which left the host in the
handshake era and every later `tools/call` refused (docs/hosts.md).

A line over the request limit (`MAX_REQUEST_BYTES`) is read and dropped as it streams in, never
held whole, and answered here with an error that names the limit; the session goes on.
`Lines` splits stdin this way for the front and for the server's own reader (stdio.LoopStdin).
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..core.limits import MAX_REQUEST_BYTES
from . import prerendered
from .wire import Wire

# "0" turns the front off (on by default; the host suite passes with it on).
OFF = "WAVEWAIT_MCP_PRERENDER"


ENVELOPE_KEY = "io.modelcontextprotocol/protocolVersion"  # in `_meta`: a 2026-era request
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"  # the envelope's other required key
SUBSCRIPTION_KEY = "io.modelcontextprotocol/subscriptionId"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
# 2026-era requests answered here (with no other parameter than the envelope); their results do
# not depend on the client's info or capabilities (tests/mcp/test_front.py compares).
MODERN_ANSWERED = ("server/discover", "tools/list", "prompts/list", "resources/list")
LIST_CHANGED = ("toolsListChanged", "promptsListChanged", "resourcesListChanged")


#: bytes kept from the start of an oversized line: where its id is looked for
HEAD = 4096
#: JSON-RPC's "Invalid Request"
INVALID_REQUEST = -32600


@dataclass
class Oversized:
    """A line longer than the limit, dropped as it streamed in: its first bytes and its size."""

    head: bytes
    size: int


class Lines:
    """Split a byte stream into lines, holding at most `limit` bytes of one: a longer line is
    counted and dropped up to its newline, and comes out as an `Oversized`."""

    def __init__(self, limit: int = MAX_REQUEST_BYTES) -> None:
        self.limit = limit
        self._buf = bytearray()
        self._dropping: Oversized | None = None

    def feed(self, data: bytes) -> list[bytes | Oversized]:
        out: list[bytes | Oversized] = []
        start = 0
        while start < len(data):
            nl = data.find(b"\n", start)
            end = len(data) if nl < 0 else nl
            if self._dropping is not None:
                self._dropping.size += end - start
            else:
                self._buf += data[start:end]
                if len(self._buf) > self.limit:
                    self._dropping = Oversized(bytes(self._buf[:HEAD]), len(self._buf))
                    self._buf = bytearray()
            if nl < 0:
                break
            out.append(self._take(b"\n"))
            start = nl + 1
        return out

    def end(self) -> list[bytes | Oversized]:
        """What is left at the end of the stream (a last line without its newline)."""
        return [self._take(b"")] if self._buf or self._dropping is not None else []

    def _take(self, newline: bytes) -> bytes | Oversized:
        if self._dropping is not None:
            line: bytes | Oversized = self._dropping
            self._dropping = None
        else:
            line = bytes(self._buf) + newline
            self._buf = bytearray()
        return line


#: a line's head as most clients write it: `jsonrpc`, then an integer or plain string `id`
_PLAIN_HEAD = re.compile(rb'\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?(?:0|[1-9]\d*)|"[^"\\]*")\s*[,}]')


def head_id(head: bytes) -> str | int | None:
    """The id of the JSON-RPC request whose line starts with `head`, if it can be read there:
    the top-level object's members are read in order until `id` or the cut (every line the
    server reads passes here: the common head is matched at once)."""
    if m := _PLAIN_HEAD.match(head):
        try:
            plain: str | int = json.loads(m.group(1).decode("utf-8", "replace"))
            return plain
        except ValueError:  # a control character in the string: read as below
            pass
    text = head.decode("utf-8", "replace")
    decoder = json.JSONDecoder()

    def skip(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    i = skip(0)
    if not text.startswith("{", i):
        return None
    i += 1
    try:
        while True:
            i = skip(i)
            key, i = decoder.raw_decode(text, i)
            i = skip(i)
            if not isinstance(key, str) or not text.startswith(":", i):
                return None
            value, i = decoder.raw_decode(text, skip(i + 1))
            i = skip(i)
            if i >= len(text):  # the cut: a number there may go on (4 of 42)
                return None
            if key == "id":
                return value if type(value) in (str, int) else None
            if not text.startswith(",", i):
                return None
            i += 1
    except ValueError:  # the cut fell inside a member: the id, if any, comes after it
        return None


def too_large(line: Oversized, limit: int = MAX_REQUEST_BYTES) -> dict[str, Any]:
    """The error answering an oversized request (JSON-RPC, with its id or null), on stdio and HTTP."""
    message = (
        f"request too large: {line.size:,} bytes, over the limit of {limit / (1 << 20):g} MiB ({limit:,} "
        "bytes) for one request; it was not read and nothing was done. A message may be at most 1 MiB: "
        "put large content in a file and send its path"
    )
    error = {"code": INVALID_REQUEST, "message": message, "data": {"limit": limit, "size": line.size}}
    return {"jsonrpc": "2.0", "id": head_id(line.head), "error": error}


def _enveloped(params: dict[str, Any]) -> bool:
    """Whether a request carries the 2026-era envelope (the SDK refuses it on a handshake-era connection)."""
    meta = params.get("_meta")
    return isinstance(meta, dict) and ENVELOPE_KEY in meta


def queue_named(argv: list[str], environ: Mapping[str, str]) -> bool:
    """Whether the server may have a queue, whose tools the pre-rendered list lacks: `--queue`
    (or any abbreviation argparse takes for it) or WAVEWAIT_QUEUE (wavewait.core.tasks.queue_name)."""
    return bool(environ.get("WAVEWAIT_QUEUE")) or any(a.startswith("--q") for a in argv)


class Front:
    """The pipes the SDK server reads and writes, and the threads that join them to stdio."""

    def __init__(self, stdin: Iterable[bytes | Oversized], stdout: BinaryIO, tools: bool = True) -> None:
        """`tools`: answer `tools/list` too (the pre-rendered list is that of a server without a queue)."""
        self.stdin, self.stdout, self._tools = stdin, stdout, tools
        self.wire = Wire.of(stdout)  # what the client has read of what was written (delivery.py)
        to_sdk_r, self._to_sdk_w = os.pipe()
        self._from_sdk_r, from_sdk_w = os.pipe()
        self.sdk_stdin = os.fdopen(to_sdk_r, "r", encoding="utf-8", errors="replace")
        self.sdk_stdout = os.fdopen(from_sdk_w, "w", encoding="utf-8")
        self._answered: set[str] = set()  # ids whose answer the front sent: the SDK's is dropped
        self._sdk_spoke = threading.Event()  # the SDK answered something: it is up, stop answering
        self._era: str | None = None  # "handshake" or "modern": as the SDK decides it, by the first request
        self._handshake = False  # this session's initialize, its first request, was answered here
        self._acked: set[str] = set()  # subscriptions/listen ids acknowledged here: the SDK's ack is dropped
        # when each tools/call read before the SDK was up arrived: the host's clock for it runs from there
        self._arrived: dict[str, float] = {}
        self._data: dict[str, Any] = json.loads(prerendered.PAYLOAD)
        #: set by the server whose reader can take stdin over (stdio.LoopStdin.take_over)
        self.hand_over = False
        self._takeable = isinstance(stdin, FdLines) and _pipe_or_socket(stdin.fd)
        self._handed: FdLines | None = None
        self.reading = True  # the front's thread reads stdin (until the host's EOF or the hand-over)
        self.relayed = threading.Event()  # the SDK's pipe ended and every line of it was forwarded

    def start(self) -> None:
        threading.Thread(target=self._pump_in, name="wavewait-front-in", daemon=True).start()
        threading.Thread(target=self._pump_out, name="wavewait-front-out", daemon=True).start()

    def _write(self, line: bytes) -> None:
        """Write a line of the front's own."""
        with self.wire.lock:
            self.stdout.write(line)
            self.stdout.flush()
            self.wire.own(len(line))

    def _forward(self, line: bytes | None) -> None:
        """Forward the SDK's next line, or drop it (None): the wire counts both."""
        with self.wire.lock:
            if line is not None:
                self.stdout.write(line)
                self.stdout.flush()
            self.wire.sdk_line(0 if line is None else len(line))

    def _early(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        """The answer the SDK would give, for the requests answered here; else None."""
        if "id" not in msg or "method" not in msg:
            return None  # a notification or a response: only the SDK deals with those
        method, params = msg.get("method"), msg.get("params")
        if params is None:
            params = {}
        id_ = msg["id"]
        request = msg.get("jsonrpc") == "2.0" and type(id_) in (str, int) and isinstance(method, str)
        request = request and isinstance(params, dict)
        opening = self._era is None
        if opening:  # the SDK's rule (mcp.server.runner.serve_dual_era_loop)
            if not request:  # the SDK may not count it as the first request: answer nothing
                self._era = "unknown"
            else:
                modern = method != "initialize" and _enveloped(params)
                self._era = "modern" if modern else "handshake"
        if self._sdk_spoke.is_set() or not request or self._era == "unknown":
            return None
        if self._era == "modern":
            return self._early_modern(id_, method, params)
        if method == "initialize":
            # Only as the session's first request: a connection opened by a 2026-era request
            # (Claude Code 2.1.330 sends `server/discover` first, then `initialize` when that
            # goes unanswered for ~3 s) refuses `initialize` and every request without the envelope.
            version, info = params.get("protocolVersion"), params.get("clientInfo")
            if not opening or version not in self._data["versions"] or not isinstance(params.get("capabilities"), dict):
                return None
            if not (
                isinstance(info, dict) and isinstance(info.get("name"), str) and isinstance(info.get("version"), str)
            ):
                return None  # the SDK refuses it: invalid parameters
            self._handshake = True
            return {"protocolVersion": version, **self._data["initialize"]}
        if (
            method == "tools/list"
            and self._tools
            and self._handshake
            and not params.get("cursor")
            and not _enveloped(params)
        ):
            return dict(self._data["tools_list"])
        return None

    def _early_modern(self, id_: str | int, method: object, params: dict[str, Any]) -> dict[str, Any] | None:
        """On a 2026-era connection: each request carries its envelope and is answered on its own."""
        meta = params.get("_meta")
        if not isinstance(meta, dict) or meta.get(ENVELOPE_KEY) not in self._data["modern_versions"]:
            return None
        if CAPABILITIES_KEY not in meta:
            return None
        rest = {k: v for k, v in params.items() if k != "_meta"}
        if method in MODERN_ANSWERED and not rest and (self._tools or method != "tools/list"):
            return dict(self._data["modern"][method])
        if method == "subscriptions/listen" and isinstance(id_, str) and set(rest) == {"notifications"}:
            asked = rest["notifications"]
            if (
                isinstance(asked, dict)
                and set(asked) <= set(LIST_CHANGED)
                and all(type(v) is bool for v in asked.values())
            ):
                # The SDK's first frame on a listen stream, before any event, is acknowledged
                # here; the stream itself (its events, its end) is the SDK's.
                self._acked.add(id_)
                honored = {k: True for k in LIST_CHANGED if asked.get(k)}
                ack = {"_meta": {SUBSCRIPTION_KEY: id_}, "notifications": honored}
                self._write((json.dumps({"jsonrpc": "2.0", "method": ACKNOWLEDGED, "params": ack}) + "\n").encode())
        return None

    def _pump_in(self) -> None:
        # buffered: its write goes on after a partial one (a signal can cut a blocking write to a
        # pipe short; an unbuffered file returns the count and the rest of the line was lost)
        out = os.fdopen(self._to_sdk_w, "wb")
        try:
            for raw in self.stdin:
                if isinstance(raw, Oversized):  # answered here; the SDK never sees it
                    self._write((json.dumps(too_large(raw)) + "\n").encode())
                    continue
                if self._sdk_spoke.is_set():  # it answers everything now: no need to parse the line
                    out.write(raw if raw.endswith(b"\n") else raw + b"\n")  # (a parse holds the GIL)
                    out.flush()
                    if self._handing_over():
                        return  # the pipe's end (below) tells the server's reader to read stdin itself
                    continue
                try:
                    msg = json.loads(raw)
                except ValueError:
                    msg = None
                if isinstance(msg, dict) and msg.get("method") == "tools/call" and not self._sdk_spoke.is_set():
                    self._arrived[json.dumps(msg.get("id"))] = time.monotonic()
                if isinstance(msg, dict) and (result := self._early(msg)) is not None:
                    self._answered.add(json.dumps(msg["id"]))
                    self._write((json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n").encode())
                out.write(raw if raw.endswith(b"\n") else raw + b"\n")
                out.flush()
        except (BrokenPipeError, OSError):
            pass  # the SDK side is gone: the server is ending
        finally:
            self.reading = False
            out.close()  # end of input for the SDK, as the host's EOF

    def _handing_over(self) -> bool:
        """Whether to stop here and let the server read stdin on its event loop: the SDK is
        up (nothing is answered here any more), a reader there can take a pipe or socket over,
        and every line read so far went through the pipe (what follows them is in the fd, or
        begun in `FdLines.lines`). Each request then costs no thread wake and no copy."""
        stdin = self.stdin
        if not (self.hand_over and self._takeable and isinstance(stdin, FdLines) and stdin.between_reads()):
            return False
        self._handed = stdin
        return True

    def take_stdin(self) -> FdLines | None:
        """stdin, to be read from where the front stopped, once the front's pipe has ended
        because it handed stdin over; None when it ended with stdin (the host closed it)."""
        handed, self._handed = self._handed, None
        return handed

    def relay_done(self) -> bool:
        """Whether the server may write the client's fd itself: nothing of the SDK's is left to
        drop, the front writes nothing of its own any more (its reader has ended), and the
        client's end is a pipe or socket (a write that would block can be told there)."""
        return (
            self._sdk_spoke.is_set()
            and not self.reading
            and not self._answered
            and not self._acked
            and self.wire.counts_unread
        )

    def _pump_out(self) -> None:
        try:
            self._relay()
        finally:
            self.relayed.set()

    def _relay(self) -> None:
        with os.fdopen(self._from_sdk_r, "rb") as sdk:
            for raw in sdk:
                if self._sdk_spoke.is_set() and not self._answered and not self._acked:
                    self._forward(raw)  # nothing of the SDK's left to drop: no parse (it holds the GIL)
                    continue
                try:
                    msg = json.loads(raw)
                except ValueError:
                    msg = None
                if isinstance(msg, dict) and "id" in msg and "method" not in msg:
                    key = json.dumps(msg["id"])
                    if key in self._answered:
                        self._answered.discard(key)
                        self._sdk_spoke.set()
                        self._forward(None)
                        continue
                    self._sdk_spoke.set()
                elif isinstance(msg, dict) and msg.get("method") == ACKNOWLEDGED and self._acked:
                    meta = (msg.get("params") or {}).get("_meta") or {}
                    if meta.get(SUBSCRIPTION_KEY) in self._acked:
                        self._acked.discard(meta[SUBSCRIPTION_KEY])
                        self._forward(None)
                        continue
                self._forward(raw)

    def queued(self, request_id: object) -> float:
        """Seconds tools/call `request_id` waited here for the SDK to start (0 for one it read at once)."""
        arrived = self._arrived.pop(json.dumps(request_id), None)
        return 0.0 if arrived is None else max(0.0, time.monotonic() - arrived)


_running: Front | None = None


def queued(request_id: object) -> float:
    """Seconds tools/call `request_id` waited in this process's front for the SDK to start: a host
    can call a tool the front listed before the SDK is up, and its time limit runs from the call
    (without the front it could not have called before), so a wait's max-block counts from there."""
    return 0.0 if _running is None else _running.queued(request_id)


class FdLines:
    """The lines read from `fd` with `os.read`: no buffered file object, whose lock this
    daemon thread would hold while it blocks, so the interpreter can end while it reads
    (a blocked `sys.stdin.buffer` aborts the process at shutdown: "could not acquire lock").
    A line over `limit` bytes comes out as an `Oversized`, having been dropped as it came."""

    def __init__(self, fd: int, chunk: int = 1 << 16, limit: int = MAX_REQUEST_BYTES) -> None:
        self.fd, self.chunk = fd, chunk
        self.lines = Lines(limit)  # a line begun in the last read
        self._ready: deque[bytes | Oversized] = deque()
        self._eof = False

    def __iter__(self) -> Iterator[bytes | Oversized]:
        return self

    def __next__(self) -> bytes | Oversized:
        while not self._ready:
            if self._eof:
                raise StopIteration
            data = os.read(self.fd, self.chunk)
            self._ready.extend(self.lines.feed(data) if data else self.lines.end())
            self._eof = not data
        return self._ready.popleft()

    def between_reads(self) -> bool:
        """Whether every line of the last read came out (what is left is in `lines`), and
        the stream goes on: another reader can take the fd over from here."""
        return not self._ready and not self._eof


def _pipe_or_socket(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def start() -> Front | None:
    """The front on this process's stdio, running; None when turned off (WAVEWAIT_MCP_PRERENDER=0)."""
    if os.environ.get(OFF) == "0":
        return None
    global _running
    f = _running = Front(FdLines(0), sys.stdout.buffer, tools=not queue_named(sys.argv[1:], os.environ))
    f.start()
    return f
