"""What the client has read of the server's stdout (standard library only: the front uses it).

A response is delivered once the client has read it, not once it reached the pipe. The kernel
says how much of what was written is still unread: FIONREAD on a pipe (what the MCP SDK and
most clients give their server), the send queue (SIOCOUTQ) on a Unix socket (what Node-based
hosts give their children). Against the bytes written so far, that tells how far the client
has read, and so whether the line carrying a response was read.

Lines are counted in the order the SDK writes them. With the front (front.py) between the SDK
and fd 1, the front forwards the SDK's lines in order, drops a few of the session's opening and
writes a few of its own; it reports each SDK line it forwarded or dropped (`sdk_line`) and the
bytes of its own (`own`), so a watched SDK line's end is known as an offset on the client's fd.
"""

from __future__ import annotations

import array
import fcntl
import os
import select
import stat
import termios
import threading
from typing import IO, Any

#: seconds `read` waits for a writer to finish its write and count it
LOCK_WAIT = 0.05


class Wire:
    """The client's end of our stdout: bytes written to it, and the end of each watched line."""

    def __init__(self, fd: int | None) -> None:
        """`fd` None: a stream with no file descriptor (a test's buffer), where what was
        written counts as read."""
        self.fd = fd
        mode = os.fstat(fd).st_mode if fd is not None else stat.S_IFREG
        # a pipe counts what is unread; a Unix socket what its peer has not taken (never less)
        self._unread_op: int | None = (
            termios.FIONREAD if stat.S_ISFIFO(mode) else termios.TIOCOUTQ if stat.S_ISSOCK(mode) else None
        )
        self._socket = stat.S_ISSOCK(mode)
        #: held by the writer across a write and its count (`sdk_line`, `own`), so that `read`
        #: never sees bytes the client has taken but not yet counted
        self.lock = threading.Lock()
        self._sent = 0  # bytes written to the fd
        self._lines = 0  # SDK lines written (or dropped by the front) so far
        self._ends: dict[int, int | None] = {}  # watched SDK line → the offset just after it (None: not yet)

    @property
    def counts_unread(self) -> bool:
        """Whether the kernel says what is unread here: a pipe or a Unix socket."""
        return self._unread_op is not None

    def watch(self, line: int) -> None:
        """Keep the end offset of SDK line `line` (counted from 0) once it is written."""
        self._ends.setdefault(line, None)

    def forget(self, line: int) -> None:
        self._ends.pop(line, None)

    def sdk_line(self, written: int) -> None:
        """The next SDK line went to the fd (`written` bytes; 0 when the front dropped it).
        Called with `lock` held, around the write."""
        self._sent += written
        if self._lines in self._ends and written:
            self._ends[self._lines] = self._sent
        self._lines += 1

    def own(self, written: int) -> None:
        """Bytes of the front's own went to the fd (with `lock` held, around the write)."""
        self._sent += written

    def read(self, line: int, *, wait: bool = True) -> bool:
        """Whether the client has read SDK line `line` (watched) to its end. A line not yet
        written, or a fd whose unread count cannot be had, counts as unread, except a terminal
        or a file, where what was written is there to read. `wait` False (on the event loop):
        a lock held by a writer makes it unread now, to be asked again."""
        # a writer blocked on a full pipe holds the lock: then what it is writing counts as
        # unread (it is), and a line written but not yet counted too (a duplicate, never a loss)
        locked = self.lock.acquire(timeout=LOCK_WAIT) if wait else self.lock.acquire(blocking=False)
        if not locked and not wait:
            return False
        try:
            end, sent = self._ends.get(line), self._sent
            if end is None:
                return False
            if self._unread_op is None:
                return True
            unread = self.unread()
        finally:
            if locked:
                self.lock.release()
        return unread is not None and sent - unread >= end

    @classmethod
    def of(cls, stream: IO[Any]) -> Wire:
        try:
            return cls(stream.fileno())
        except (OSError, ValueError):  # io.UnsupportedOperation is both
            return cls(None)

    def unread(self) -> int | None:
        """Bytes written to the fd that the client has not read; None if that cannot be told
        (a socket whose peer is gone has dropped what it did not read: the count says 0)."""
        if self._unread_op is None or self.fd is None:
            return 0
        if self._socket and _peer_gone(self.fd):
            return None
        buf = array.array("i", [0])
        try:
            fcntl.ioctl(self.fd, self._unread_op, buf)
        except OSError:
            return None
        return buf[0]


def _peer_gone(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLOUT | select.POLLHUP | select.POLLERR)
    return any(ev & (select.POLLHUP | select.POLLERR) for _, ev in poller.poll(0))
