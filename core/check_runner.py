"""The check runner: a small process that starts the checks of the process that started it
and says how each ended (`python -m wavewait.core.check_runner`; core/checks.py talks to it).

Why a process of its own: a check started from the waiting process (an MCP server holding
hundreds of waits, the TUI, a join over 10,000 flights) cost that process's event loop about
1.1 ms of CPU each (the subprocess machinery of asyncio), beside the 0.65 ms the wait spends
on the report itself. Here a plain loop over pipes and pidfds starts and watches them, and the
waiting process writes one line and reads one per check.

One JSON object a line, each way:
- in: `{"id": N, "command": C, "cwd": D, "timeout": S, "slots": K?, "env": {...}?}` runs
  `/bin/sh -c C` in D for at most S seconds from its start, in the environment last given,
  once fewer than K checks run (K last given: the bound of the process; queued in order
  until then);
  `{"id": N, "cancel": true}` ends check N, running or queued (its reply follows);
- out: `{"id": N, "code": int | null, "output": TEXT, "cut": null | "timeout" | "cancel" |
  "folder" | "start"}`, once check N exited and nothing of it holds its output open, or was
  cut short, or could not start (`output` says why); `output` is the end of what it wrote
  (`KEEP_BYTES`), the caller keeps its last lines. Replies go together, at most one write
  a `WINDOW` (a reply after a quiet spell at once), as the caller's requests do.

Each check's session leader goes, as it starts, to the file its caller passed by descriptor
(`N P` a line; emptied when no check runs and it has grown past `LEADERS_BYTES`): should this
runner be KILLed, its caller ends those sessions. The caller reads it only then, so a check
costs the caller's event loop one line each way.

The rules of a check (core/checks.py) hold here: a session of its own per check; after it
exited, what it left in its process group is killed; cut short, every group of its session.
When its standard input closes (the process that started it ended), every check still
running is ended the same way, and it exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .exits import signalled
from .proc import kill_session

SHELL = "/bin/sh"
KEEP_BYTES = 64 << 10  # of a check's output while it runs: only the end is ever shown
READ_BYTES = 1 << 16
LEADERS_BYTES = 1 << 16  # the leaders' file is emptied past this size, once no check runs
#: seconds between two writes to a pipe of the runner's, each way, while checks come faster:
#: a write wakes the process at the other end (about 50 µs of the writer's CPU on a VM), so a
#: join whose flights report 500 a second sends five requests, and gets five replies, a write;
#: one after a quiet spell is written at once (core/checks.py writes its requests so too)
WINDOW = 0.01


@dataclass
class Check:
    id: int
    process: subprocess.Popen[bytes]
    pidfd: int
    deadline: float
    out: bytearray = field(default_factory=bytearray)
    code: int | None = None
    reading: bool = True  # its output is still open


class Runner:
    def __init__(self, leaders: int) -> None:
        self.leaders = leaders  # the file of the checks' session leaders (its caller's)
        self.leaders_size = 0
        self.sel = selectors.DefaultSelector()
        self.checks: dict[int, Check] = {}
        self.queued: deque[dict[str, Any]] = deque()  # requests waiting for a slot, in order
        self.slots = 1
        self.env: dict[str, str] = {}
        self.inbuf = bytearray()
        self.outbuf = bytearray()  # the replies not written yet: at most one write a WINDOW
        self.written = -WINDOW  # when the last was
        self.stdin = sys.stdin.buffer.fileno()
        self.stdout = sys.stdout.buffer.fileno()
        os.set_blocking(self.stdin, False)
        os.set_blocking(self.stdout, True)
        self.sel.register(self.stdin, selectors.EVENT_READ, None)

    def run(self) -> None:
        while True:
            now = time.monotonic()
            deadlines = [c.deadline for c in self.checks.values()]
            if self.outbuf:
                deadlines.append(self.written + WINDOW)
            timeout = min(deadlines, default=None)
            events = self.sel.select(None if timeout is None else max(0.0, timeout - now))
            for key, _ in events:
                if key.data is None:
                    if not self._requests():
                        return
                else:
                    kind, check = key.data
                    assert isinstance(check, Check)
                    if self.checks.get(check.id) is not check:
                        continue  # ended earlier in this batch (cut short by a request above)
                    self._output(check) if kind == "out" else self._exited(check)
            now = time.monotonic()
            for check in [c for c in self.checks.values() if c.deadline <= now]:
                self._cut(check, "timeout")
            self._write_out()

    def _requests(self) -> bool:
        """Read what came on stdin and act on each whole line; False once it closed."""
        try:
            chunk = os.read(self.stdin, READ_BYTES)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        self.inbuf.extend(chunk)
        *lines, rest = self.inbuf.split(b"\n")
        self.inbuf = bytearray(rest)
        for line in lines:
            if line.strip():
                self._request(json.loads(line))
        return True

    def _request(self, req: dict[str, Any]) -> None:
        if req.get("cancel"):
            if (check := self.checks.get(req["id"])) is not None:
                self._cut(check, "cancel")
            elif queued := [q for q in self.queued if q["id"] == req["id"]]:
                self.queued.remove(queued[0])
                self._reply(req["id"], None, "", "cancel")
            return
        if "env" in req:
            self.env = req["env"]
        if "slots" in req:
            self.slots = max(1, int(req["slots"]))
        self.queued.append(req)
        self._start_queued()

    def _start_queued(self) -> None:
        while self.queued and len(self.checks) < self.slots:
            self._start(self.queued.popleft())

    def _start(self, req: dict[str, Any]) -> None:
        if not os.path.isdir(req["cwd"]):
            self._reply(req["id"], None, f"its folder {req['cwd']} is gone: nothing to check", "folder")
            return
        try:
            process = subprocess.Popen(
                [SHELL, "-c", req["command"]],
                cwd=req["cwd"],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as e:
            self._reply(req["id"], None, f"the check could not start: {e}", "start")
            return
        assert process.stdout is not None
        out = process.stdout.fileno()
        os.set_blocking(out, False)
        self.leaders_size += os.pwrite(self.leaders, f"{req['id']} {process.pid}\n".encode(), self.leaders_size)
        check = Check(req["id"], process, os.pidfd_open(process.pid), time.monotonic() + float(req["timeout"]))
        self.checks[check.id] = check
        self.sel.register(out, selectors.EVENT_READ, ("out", check))
        self.sel.register(check.pidfd, selectors.EVENT_READ, ("exit", check))

    def _output(self, check: Check) -> None:
        assert check.process.stdout is not None
        try:
            chunk = os.read(check.process.stdout.fileno(), READ_BYTES)
        except BlockingIOError:
            return
        if chunk:
            check.out.extend(chunk)
            del check.out[:-KEEP_BYTES]
            return
        check.reading = False
        self.sel.unregister(check.process.stdout.fileno())
        self._maybe_done(check)

    def _exited(self, check: Check) -> None:
        self.sel.unregister(check.pidfd)
        check.code = check.process.wait()
        self._maybe_done(check)

    def _maybe_done(self, check: Check) -> None:
        """Ended once it exited and its output closed; then what it left in its group goes."""
        if check.code is None or check.reading:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):  # nothing left in it
            os.killpg(check.process.pid, signal.SIGKILL)
        self._close(check)
        self._reply(check.id, check.code, check.out.decode(errors="replace"), None)
        self._start_queued()

    def _cut(self, check: Check, why: str) -> None:
        """Out of time or cancelled: every process of its session, then its reply."""
        kill_session(check.process.pid)
        if check.code is None:
            check.process.wait()
        self._close(check)
        self._reply(check.id, None, check.out.decode(errors="replace"), why)
        self._start_queued()

    def _close(self, check: Check) -> None:
        del self.checks[check.id]
        if not self.checks and self.leaders_size > LEADERS_BYTES:  # none running: none to note
            os.ftruncate(self.leaders, 0)
            self.leaders_size = 0
        for fd in (check.pidfd, *([check.process.stdout.fileno()] if check.process.stdout else [])):
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(fd)
        os.close(check.pidfd)
        if check.process.stdout is not None:
            check.process.stdout.close()

    def _reply(self, check_id: int, code: int | None, output: str, cut: str | None) -> None:
        self._send({"id": check_id, "code": code, "output": output, "cut": cut})

    def _send(self, message: dict[str, Any]) -> None:
        self.outbuf += json.dumps(message).encode() + b"\n"

    def _write_out(self) -> None:
        now = time.monotonic()
        if not self.outbuf or now < self.written + WINDOW:
            return
        self.written = now
        out = memoryview(bytes(self.outbuf))
        self.outbuf.clear()
        while out:
            out = out[os.write(self.stdout, out) :]

    def end_all(self) -> None:
        self.queued.clear()
        for check in list(self.checks.values()):
            kill_session(check.process.pid)
            check.process.wait()
            self._close(check)


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(signalled(signum))


def main() -> None:
    """Run until stdin closes; a TERM (a kill of its parent's group) ends its checks first."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C in the terminal is its parent's to act on
    signal.signal(signal.SIGTERM, _stop)
    runner = Runner(int(sys.argv[1]))
    try:
        runner.run()
    finally:
        runner.end_all()


if __name__ == "__main__":
    main()
