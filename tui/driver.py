"""Textual's terminal driver, made to outlive its terminal.

When the terminal goes away (a tmux session killed, an ssh connection dropped, a window
closed) the kernel sends the TUI SIGHUP and SIGCONT, and every write to the terminal fails
with EIO. Textual's output thread dies on the first failed write; the writes after it fill
the thread's queue, and the app's own thread then blocks for ever on the next one (in its
shutdown at the latest). The quit a hangup asks for never finished, so what the app had
to end on its way out (the demo's flights, its temporary bus) was left running.

Output to a terminal that is gone has no reader: it is dropped, and the app shuts down as
it does on Ctrl+Q. Only the Linux/macOS driver writes through such a thread; any other
driver is used as it is.
"""

from __future__ import annotations

import errno
from typing import Any, TextIO

from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver

GONE = (errno.EIO, errno.EPIPE, errno.ENXIO, errno.EBADF)  # what a vanished terminal answers


class TerminalOut:
    """The terminal as Textual's output thread writes to it: once a write says the terminal
    is gone, the rest are dropped instead of failing (any other error still raises)."""

    def __init__(self, file: TextIO) -> None:
        self._file = file
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self._file.write(text)
            except OSError as e:
                self._lost(e)
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._file.flush()
            except OSError as e:
                self._lost(e)

    def _lost(self, e: OSError) -> None:
        if e.errno not in GONE:
            raise e
        self.gone = True

    def fileno(self) -> int:
        return self._file.fileno()

    def isatty(self) -> bool:
        return self._file.isatty()


class HangupSafeDriver(LinuxDriver):
    """LinuxDriver whose output thread writes through `TerminalOut`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the file LinuxDriver hands its output thread (textual 8.2: sys.__stderr__)
        if self._file is not None:
            self._file = TerminalOut(self._file)  # type: ignore[assignment]  # a file in all it is used for


def hangup_safe(driver: type[Driver]) -> type[Driver]:
    """The driver to run with: `driver` itself unless it is Textual's LinuxDriver."""
    return HangupSafeDriver if driver is LinuxDriver else driver
