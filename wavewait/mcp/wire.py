"""What a stdio client has read of the server's output (standard library only: the front uses it).

A response is delivered once the client has read it, not once it reached a pipe: a client that
abandons a call and closes its session, or a host killed by its user, leaves it there. The
kernel says how much of what we wrote is still unread: on a pipe `FIONREAD`, on a socket (what
Node-based hosts give their children) or a terminal the output queue (`SIOCOUTQ` = `TIOCOUTQ`;
a socket counts its buffers whole, so it errs towards unread). `Wire` counts the bytes written
to the wire; the response to a watched request ends at the count after its line, and the
client has read it once `written - unread` reaches that end.

A read counts only if it came before the client closed its session (stdin): a client that
gave up may still drain our output as it ends (the MCP SDK's client does), and what it reads
then reaches no one. So the order of the two matters, down to the microsecond: a one-shot
client closes stdin right after reading its answer.
- On pipes the kernel gives that order: inotify reports each read of the wire (`IN_ACCESS`)
  and the close of stdin (`IN_CLOSE_WRITE`) in one queue, in the order they happened. A read
  wakes the watcher thread at once; the count is read, then the queue: while no read has come
  after the close, every byte counted was read before it (also at the session's end, when the
  count is read one last time).
- Elsewhere (sockets, or no inotify) the watcher reads the count every 0.2 ms at first, then
  less often, and trusts it only if stdin and the wire are both still open after: a socket
  whose peer closed drops what the peer had not read, as if it had been read (the close marks
  our end hung up first). A client that closes within the 0.2 ms after reading is then taken
  for one that did not read: its items come back (a duplicate, never a loss).
The event loop is never held: the thread does the waiting.
"""

from __future__ import annotations

import array
import ctypes
import ctypes.util
import fcntl
import os
import select
import stat
import struct
import termios
import threading
import time
from collections.abc import Callable

#: the unread count of a pipe, and the output queue of a socket or terminal (the same number)
FIONREAD = termios.FIONREAD
OUTQ = termios.TIOCOUTQ
#: seconds between two readings of the count where no event says when to look, by the age of
#: the newest unread response
POLL_STEPS = ((0.02, 0.0002), (0.2, 0.002), (float("inf"), 0.02))
#: with inotify, a look every so often all the same (the thread also notices new responses)
EVENT_WAIT = 0.05
#: seconds a read must precede the close of stdin to count. The MCP SDK's client, abandoning a
#: call, closes stdin a millisecond or so after it began to give up, reading our output all the
#: while (0.1 to 1.2 ms from the read to the close, measured with tests/mcp/test_read_delivery.py
#: on 2 loaded cores); reading an answer, making one more call and ending took it 4.5 ms and
#: more. A client that ends within this of reading is taken for one that gave up as the
#: response came: its items come back (a duplicate, never a loss).
SETTLE = 0.003
IN_ACCESS, IN_CLOSE_WRITE, IN_Q_OVERFLOW = 0x001, 0x008, 0x4000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows
_CLOSED = select.POLLHUP | select.POLLERR | select.POLLNVAL | getattr(select, "POLLRDHUP", 0)


class Wire:
    """The fd a stdio client reads, the bytes written to it, and the watched responses' ends.

    `sent` is called by whichever thread writes the fd, after each line; `watch`, `unwatch` and
    `check` by the event loop; `on_read` is called from the watcher thread with the keys of the
    responses the client has read (each once)."""

    def __init__(self, fd: int, stdin_fd: int = 0) -> None:
        # its own descriptors of both: the writer's may be closed or moved while a last
        # reading is still to come (the server's end settles what was read)
        self.fd, self.stdin_fd = _dup(fd), _dup(stdin_fd)
        self.written = 0  # bytes written to `fd`, counted after each write returned
        #: held by a writer from its write to its `sent`, so a last look sees whole lines
        self.writing = threading.Lock()
        self.on_read: Callable[[list[str]], None] | None = None
        self._ioctl = _unread_request(self.fd)
        self._watched: set[str] = set()  # keys of responses whose end is wanted
        self._ends: dict[str, int] = {}  # written and not yet read: key → `written` after its line
        self._last_end = 0.0  # monotonic time of the newest end
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._look = threading.Lock()  # one reading of count and events at a time, in order
        self._recent: dict[str, float] = {}  # read, not yet reported: key → when it was seen read
        self._reported: set[str] = set()  # reported read, still watched
        self._closed_at: float | None = None  # when stdin was seen closed (or the wire hung up)
        self._events = _Order.open(self.fd, self.stdin_fd) if self._ioctl == FIONREAD else None

    def watch(self, key: str) -> None:
        """The response to request `key` is coming: record where it ends."""
        with self._cond:
            self._watched.add(key)

    def unwatch(self, key: str) -> None:
        with self._cond:
            self._watched.discard(key)
            self._ends.pop(key, None)
            self._recent.pop(key, None)
            self._reported.discard(key)

    @property
    def watching(self) -> bool:
        return bool(self._watched)

    def sent(self, nbytes: int, key: str | None = None) -> None:
        """`nbytes` more are in the fd; `key`: the line was the response to that request."""
        with self._cond:
            self.written += nbytes
            if key is None or key not in self._watched:
                return
            self._watched.discard(key)
            if self._ioctl is None:  # a file or a device: nothing reads it later, it is out
                self._notify([key])
                return
            self._ends[key] = self.written
            self._last_end = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="wavewait-wire", daemon=True)
                self._thread.start()
            self._cond.notify()

    def check(self, final: bool = False) -> list[str]:
        """The keys of the responses the client has read, each once, when it did not close
        stdin within `SETTLE` after (`final`: the session is ending, a read it did not close
        on counts now)."""
        # a last look waits for a line being written to be counted (not for a writer blocked
        # on a full pipe: its line is unread anyway)
        writing = self.writing.acquire(timeout=0.2) if final else False
        try:
            with self._look:
                self._look_at_reads()
                return self._report(final)
        finally:
            if writing:
                self.writing.release()

    def _report(self, final: bool) -> list[str]:
        """The reads that stood `SETTLE` without a close (all of them if `final` and none came)."""
        now = time.monotonic()
        out = []
        for key, at in list(self._recent.items()):
            if self._closed_at is not None and self._closed_at - at < SETTLE:
                del self._recent[key]  # closed on the heels of the read: taken as given up
            elif now - at >= SETTLE or self._closed_at is not None or final:
                del self._recent[key]
                out.append(key)
        self._reported.update(out)
        # at the end, also those reported whose news may not have reached the loop yet
        return sorted(self._reported) if final else out

    def _look_at_reads(self) -> None:
        """Move the responses read (counted before stdin closed) to `_recent`, with the time."""
        with self._cond:
            if not self._ends:
                if self._events is not None:
                    self._events.take()
                    self._closed_at = self._closed_at or self._events.closed_at
                return
            written, ends = self.written, dict(self._ends)  # counted before the count is read
        if self._events is not None:
            self._events.take()
        consumed = written - self._unread()
        if self._events is not None:
            self._events.take()
            self._closed_at = self._closed_at or self._events.closed_at
            if self._events.read_after_close:  # the count may hold reads after the close
                return
        elif self._closed():
            self._closed_at = self._closed_at or time.monotonic()
            return
        now = time.monotonic()
        with self._cond:
            for key, end in ends.items():
                if end <= consumed:
                    self._ends.pop(key, None)
                    self._recent[key] = now

    def _unread(self) -> int:
        assert self._ioctl is not None
        buf = array.array("i", [0])
        try:
            fcntl.ioctl(self.fd, self._ioctl, buf, True)
        except OSError:  # the fd is gone: count nothing more as read
            return self.written
        return buf[0]

    def _closed(self) -> bool:
        """Stdin or the wire has hung up: a count read before this is not evidence of a read."""
        p = select.poll()
        p.register(self.fd, 0)
        p.register(self.stdin_fd, getattr(select, "POLLRDHUP", 0))
        try:
            return any(ev & _CLOSED for _, ev in p.poll(0))
        except OSError:
            return True

    def _notify(self, keys: list[str]) -> None:
        if keys and self.on_read is not None:
            self.on_read(keys)

    def _watch(self) -> None:
        while True:
            with self._cond:
                while not self._ends and not self._recent:
                    self._cond.wait()
                age = time.monotonic() - self._last_end
            every = SETTLE / 4 if self._recent else EVENT_WAIT
            if self._events is not None:
                self._events.wait(every)
            else:
                time.sleep(min(every, next(every for upto, every in POLL_STEPS if age < upto)))
            self._notify(self.check())


class _Order:
    """The order of the client's reads of the wire and its close of stdin, from inotify."""

    def __init__(self, ifd: int, wire_wd: int, stdin_wd: int) -> None:
        self.ifd, self.wire_wd, self.stdin_wd = ifd, wire_wd, stdin_wd
        self.closed = False  # the client closed stdin
        self.closed_at: float | None = None  # when that was read from the queue
        self.read_after_close = False  # and read the wire after that (or the order was lost)

    @classmethod
    def open(cls, wire_fd: int, stdin_fd: int) -> _Order | None:
        """None where inotify cannot watch both (no pipe for stdin, no inotify, out of watches)."""
        try:
            if not stat.S_ISFIFO(os.fstat(stdin_fd).st_mode):
                return None
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        except (OSError, AttributeError):
            return None
        ifd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if ifd < 0:
            return None
        wire_wd = libc.inotify_add_watch(ifd, f"/proc/self/fd/{wire_fd}".encode(), IN_ACCESS)
        stdin_wd = libc.inotify_add_watch(ifd, f"/proc/self/fd/{stdin_fd}".encode(), IN_CLOSE_WRITE)
        if wire_wd < 0 or stdin_wd < 0:
            os.close(ifd)
            return None
        return cls(ifd, wire_wd, stdin_wd)

    def wait(self, timeout: float) -> None:
        """Until an event is queued (a read of the wire, the close of stdin), or `timeout`."""
        p = select.poll()
        p.register(self.ifd, select.POLLIN)
        p.poll(timeout * 1000)

    def take(self) -> None:
        """Read the events queued so far, in order."""
        while True:
            try:
                data = os.read(self.ifd, 4096)
            except BlockingIOError:
                return
            for wd, mask, _, _ in _events(data):
                if mask & IN_Q_OVERFLOW:
                    self.read_after_close = True  # the order is lost: trust no reading from here
                elif wd == self.stdin_wd and mask & IN_CLOSE_WRITE:
                    self.closed = True
                    self.closed_at = self.closed_at or time.monotonic()
                elif wd == self.wire_wd and mask & IN_ACCESS and self.closed:
                    self.read_after_close = True


def _events(data: bytes) -> list[tuple[int, int, int, int]]:
    out, i = [], 0
    while i + _EVENT.size <= len(data):
        wd, mask, cookie, size = _EVENT.unpack_from(data, i)
        out.append((wd, mask, cookie, size))
        i += _EVENT.size + size
    return out


def _dup(fd: int) -> int:
    """A non-inheritable duplicate of `fd`, or -1 (which every check here takes as gone)."""
    try:
        return os.dup(fd)
    except OSError:
        return -1


def _unread_request(fd: int) -> int | None:
    """The ioctl that gives the unread count of `fd`, or None when nothing reads it later."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return None
    if stat.S_ISFIFO(mode):
        return FIONREAD
    if stat.S_ISSOCK(mode) or os.isatty(fd):
        return OUTQ
    return None
