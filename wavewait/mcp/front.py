"""Answer a host's first requests while the MCP SDK is still importing (standard library only).

Hosts give a starting server little time (Claude Code -p about 2 s, Codex about 1 s without
`required`), and importing the SDK takes 0.5 s idle and several seconds under load. So
`wavewait mcp` on stdio starts this front first: a thread reads the real stdin and forwards
every line, unchanged and in order, to the SDK server through a pipe; until the SDK answers,
the front itself answers `initialize` (for the handshake-era protocol versions) and
`tools/list` (no cursor) from `prerendered`, which is generated from the real tool
definitions and compared with the SDK's own answers by tests/mcp/test_front.py. The SDK's
answers to those ids are dropped, so the client sees exactly one answer per request, and the
SDK's session goes through the same requests as without the front.

Only what the SDK would answer the same way is answered here. The SDK takes a connection's
protocol era from the first request it reads: `initialize` opens a handshake-era one, a request
with the 2026-07-28 `_meta` envelope a 2026-era one, which refuses `initialize` and every
request without the envelope. So the front answers `initialize` only when it is the session's
first request, and `tools/list` only after that, without the envelope. Claude Code 2.1.330
opens with a 2026-era `server/discover` probe and, when that goes unanswered for about 3 s,
sends `initialize` on the same pipe: the front leaves all of that to the SDK (which refuses the
`initialize`, so the host discovers again), as without the front. Codex 0.169.0 opens with
`initialize`: that session is the one the front speeds up.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any, BinaryIO

from . import prerendered

# "0" turns the front off (on by default). It once answered an `initialize` that came after a
# 2026-era probe, which the SDK refuses (see above and docs/hosts.md); tests/mcp/test_front.py
# replays that session, and the host suite passes with the front on.
OFF = "WAVEWAIT_MCP_PRERENDER"


ENVELOPE_KEY = "io.modelcontextprotocol/protocolVersion"  # in `_meta`: a 2026-era request


def _enveloped(params: dict[str, Any]) -> bool:
    """Whether a request carries the 2026-era envelope (the SDK refuses it on a handshake-era connection)."""
    meta = params.get("_meta")
    return isinstance(meta, dict) and ENVELOPE_KEY in meta


class Front:
    """The pipes the SDK server reads and writes, and the threads that join them to stdio."""

    def __init__(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self.stdin, self.stdout = stdin, stdout
        to_sdk_r, self._to_sdk_w = os.pipe()
        self._from_sdk_r, from_sdk_w = os.pipe()
        self.sdk_stdin = os.fdopen(to_sdk_r, "r", encoding="utf-8", errors="replace")
        self.sdk_stdout = os.fdopen(from_sdk_w, "w", encoding="utf-8")
        self._answered: set[str] = set()  # ids whose answer the front sent: the SDK's is dropped
        self._sdk_spoke = threading.Event()  # the SDK answered something: it is up, stop answering
        self._seen_request = False  # a request went by: the SDK's era is decided (as the SDK does)
        self._handshake = False  # this session's initialize, its first request, was answered here
        self._lock = threading.Lock()
        self._data: dict[str, Any] = json.loads(prerendered.PAYLOAD)

    def start(self) -> None:
        threading.Thread(target=self._pump_in, name="wavewait-front-in", daemon=True).start()
        threading.Thread(target=self._pump_out, name="wavewait-front-out", daemon=True).start()

    def _write(self, line: bytes) -> None:
        with self._lock:
            self.stdout.write(line)
            self.stdout.flush()

    def _early(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        """The answer the SDK would give, for the requests answered here; else None."""
        if "id" not in msg or "method" not in msg:
            return None  # a notification or a response: only the SDK deals with those
        opening = not self._seen_request
        self._seen_request = True
        if self._sdk_spoke.is_set():
            return None
        method, params = msg.get("method"), msg.get("params")
        if params is None:
            params = {}
        if not isinstance(params, dict) or not isinstance(msg["id"], (str, int)):
            return None
        if method == "initialize":
            # Only as the session's first request: the SDK takes the era of its connection from
            # the first request it reads, and one opened by a 2026-era request (Claude Code
            # 2.1.330 sends `server/discover` first, then `initialize` when that goes
            # unanswered for ~3 s) refuses `initialize` and every request without the envelope.
            version = params.get("protocolVersion")
            if not opening or version not in self._data["versions"]:
                return None
            self._handshake = True
            return {"protocolVersion": version, **self._data["initialize"]}
        if method == "tools/list" and self._handshake and not params.get("cursor") and not _enveloped(params):
            return dict(self._data["tools_list"])
        return None

    def _pump_in(self) -> None:
        out = os.fdopen(self._to_sdk_w, "wb", buffering=0)
        try:
            for raw in self.stdin:
                try:
                    msg = json.loads(raw)
                except ValueError:
                    msg = None
                if isinstance(msg, dict) and (result := self._early(msg)) is not None:
                    self._answered.add(json.dumps(msg["id"]))
                    self._write((json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n").encode())
                out.write(raw if raw.endswith(b"\n") else raw + b"\n")
        except (BrokenPipeError, OSError):
            pass  # the SDK side is gone: the server is ending
        finally:
            out.close()  # end of input for the SDK, as the host's EOF

    def _pump_out(self) -> None:
        with os.fdopen(self._from_sdk_r, "rb") as sdk:
            for raw in sdk:
                try:
                    msg = json.loads(raw)
                except ValueError:
                    msg = None
                if isinstance(msg, dict) and "id" in msg and "method" not in msg:
                    key = json.dumps(msg["id"])
                    if key in self._answered:
                        self._answered.discard(key)
                        self._sdk_spoke.set()
                        continue
                    self._sdk_spoke.set()
                self._write(raw)


def start() -> Front | None:
    """The front on this process's stdio, running; None when turned off (WAVEWAIT_MCP_PRERENDER=0)."""
    if os.environ.get(OFF) == "0":
        return None
    f = Front(sys.stdin.buffer, sys.stdout.buffer)
    f.start()
    return f
