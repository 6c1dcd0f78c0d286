"""A stdio relay that logs an MCP wire: `python tests/wirerelay.py LOG -- CMD ...`.

It runs CMD, copies its own stdin to CMD's and CMD's stdout to its own, byte for byte, and
appends one JSON line per message to LOG: `{"t": unix time when the relay read it, "dir":
"in" (client → server) | "out" | "exit" (the server ended: {code}), "msg": the message}`. A host started with this in front of
`wavewait mcp` shows what crossed the wire and when, without changing it. `read(LOG)` gives
the records back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO


def _pump(src: int, dst: BinaryIO, log: BinaryIO, lock: threading.Lock, direction: str) -> None:
    buf = b""
    open_ = True
    while chunk := os.read(src, 1 << 16):
        t = time.time()
        if open_:
            try:
                dst.write(chunk)
                dst.flush()
            except OSError:  # the reader is gone: keep reading (and logging) until the writer ends
                open_ = False
        buf += chunk
        *lines, buf = buf.split(b"\n")
        with lock:
            for line in lines:
                try:
                    msg = json.loads(line)
                except ValueError:
                    msg = {"unparsed": line[:2000].decode("utf-8", "replace")}
                log.write(json.dumps({"t": t, "dir": direction, "msg": msg}).encode() + b"\n")
            log.flush()
    if direction == "in":
        try:
            dst.close()
        except OSError:
            pass


def main(argv: list[str]) -> int:
    log_path, sep, *cmd = argv
    assert sep == "--" and cmd, "usage: wirerelay.py LOG -- CMD ..."
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a host ends its server with a signal
        signal.signal(sig, lambda n, _f: child.send_signal(n))
    lock = threading.Lock()
    with open(log_path, "ab") as log:
        into = threading.Thread(
            target=_pump, args=(0, child.stdin, log, lock, "in"), daemon=True
        )  # ends with the host's stdin
        into.start()
        _pump(child.stdout.fileno(), sys.stdout.buffer, log, lock, "out")
        code = child.wait()
        with lock:
            log.write(json.dumps({"t": time.time(), "dir": "exit", "msg": {"code": code}}).encode() + b"\n")
    return code


def read(path: Path) -> list[dict[str, Any]]:
    """The records of a log, in the order the relay read them."""
    if not path.exists():
        return []
    text = path.read_text()
    whole = text[: text.rfind("\n") + 1]  # a record the relay is still writing has no newline yet
    return [json.loads(line) for line in whole.splitlines() if line.strip()]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
