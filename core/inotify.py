"""The directory bus's own change stream: the kernel's inotify, read directly (Linux).

Why not watchfiles for the bus (it stays for signal waits, whose folders are anyone's):
its watcher thread wakes every few milliseconds to look for events, about 1 % of a core in
an idle process and 1.5 steps of latency per change; it watches every folder under a root
(claims/, cur/: events nobody reads); and it does not report the kernel's queue overflow.
The bus's layout is known, so this watches exactly the folders whose changes mean
something (agents/, waits/, inbox/, and each inbox a subscriber of this process named, with
its new/), sleeps in the kernel until an event comes (a wake in well under a millisecond, no
CPU while idle), and turns an overflow into a path of no known shape, which the bus reads as
"anything may have changed".

Only the inboxes subscribed to are watched (`Watch.want`), not every inbox of the bus: two
watches per flight would exhaust a user's inotify watches (192,536 on the 2-core VM) past
about 96,000 flights, and cost 2 s to place at 100,000, in every process that subscribes to
anything (the TUI subscribes to its own inbox and the agents' records only). An inbox not
watched has no kept listing (`watching`): it is listed at each read, as without a watcher.

One watcher per bus folder per process, shared by every bus object on it; the paths it
sees go to each subscriber's callback, in the watcher's thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import select
import struct
import threading
import time
from collections.abc import Callable

from .errors import WavewaitError

log = logging.getLogger(__name__)

IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_ONLYDIR = 0x01000000
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ISDIR = 0x40000000
#: a file or folder that appeared, was rewritten, or left
CHANGES = IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
#: an inbox folder: only its new/ appearing matters (claims/ and cur/ are nobody's news)
SUBFOLDERS = IN_CREATE | IN_MOVED_TO | IN_ONLYDIR
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows
READ_BYTES = 256 * 1024
BATCH_S = 0.002

OnPaths = Callable[[set[str]], None]


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6", use_errno=True)
        libc.inotify_init1, libc.inotify_add_watch  # noqa: B018 - present on Linux only
    except (OSError, AttributeError):
        return None
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    return libc


_LIBC = _libc()
AVAILABLE = _LIBC is not None


class BusWatcher:
    """The inotify watches on one bus folder, and the thread that reads them."""

    def __init__(self, root: str) -> None:
        assert _LIBC is not None
        self.root = root
        self.inbox = os.path.join(root, "inbox")
        self.subscribers: set[OnPaths] = set()
        self._paths: dict[int, str] = {}  # watch descriptor -> folder
        self._wanted: set[str] = set()  # the inboxes (folders) a subscriber named
        self._boxes: dict[str, int] = {}  # an inbox (folder) whose new/ is watched -> that watch
        self._lock = threading.Lock()  # the three above: changed by `want` and by the thread
        fd = _LIBC.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)} (see /proc/sys/fs/inotify/max_user_instances)")
        self._fd = fd
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC)
        try:
            for name in ("agents", "waits"):
                self._watch(os.path.join(root, name), CHANGES)
            self._watch(self.inbox, SUBFOLDERS)  # an inbox wanted and made later is seen
        except BaseException:
            self._close_fds(self._fd, self._stop_r, self._stop_w)
            raise
        self._thread = threading.Thread(target=self._run, name=f"wavewait-inotify {root}", daemon=True)
        self._thread.start()

    def want(self, boxes: list[str]) -> None:
        """Watch these inboxes (folders) and their new/, from now on: in place when this returns."""
        with self._lock:
            for box in boxes:
                if box not in self._wanted:
                    self._wanted.add(box)
                    self._watch_inbox(box)

    def watching(self, box: str) -> bool:
        """Whether the inbox's new/ is watched (what arrives there is seen)."""
        return box in self._boxes

    def _watch(self, path: str, mask: int) -> bool:
        assert _LIBC is not None
        wd = _LIBC.inotify_add_watch(self._fd, os.fsencode(path), mask)
        if wd < 0:
            err = ctypes.get_errno()
            if err in (2, 20):  # ENOENT, ENOTDIR: gone meanwhile, or not a folder
                return False
            if err == 28:  # ENOSPC: this user's watches are all in use
                raise WavewaitError(
                    f"the directory bus watches each inbox (inotify), and this user's watches ran out at "
                    f"{path}: raise the limit (sysctl fs.inotify.max_user_watches, see "
                    "/proc/sys/fs/inotify/max_user_watches) or use the PostgreSQL bus for a bus this large"
                )
            raise OSError(
                err, f"inotify_add_watch {path}: {os.strerror(err)} (see /proc/sys/fs/inotify/max_user_watches)"
            )
        self._paths[wd] = path
        if mask == CHANGES and os.path.dirname(os.path.dirname(path)) == self.inbox:
            self._boxes[os.path.dirname(path)] = wd
        return True

    def _watch_inbox(self, box: str) -> None:
        """An inbox folder and its new/ (made after the folder: watched when it appears);
        under `_lock`."""
        if self._watch(box, SUBFOLDERS):
            self._watch(os.path.join(box, "new"), CHANGES)

    def _run(self) -> None:
        poll = select.poll()
        poll.register(self._fd, select.POLLIN)
        poll.register(self._stop_r, select.POLLIN)
        try:
            while True:
                ready = {fd for fd, _ in poll.poll()}
                if self._stop_r in ready:
                    return
                paths = self._read()
                if paths:
                    for on_paths in list(self.subscribers):
                        on_paths(paths)
                    # a lone change is handed over at once; under a stream of them, at most one
                    # hand-over per BATCH_S (each takes the GIL and wakes the loops)
                    time.sleep(BATCH_S)
        except Exception:  # the watcher must never die silently: everyone re-reads, then timers
            log.exception("the change watcher of the bus at %s failed; waits fall back to their timers", self.root)
            for on_paths in list(self.subscribers):
                on_paths({self.root})
        finally:  # the write end stays open until `stop`: its number is never reused under it
            self._close_fds(self._fd, self._stop_r)

    def _read(self) -> set[str]:
        """Every event queued now, as the paths that changed."""
        paths: set[str] = set()
        while True:
            try:
                data = os.read(self._fd, READ_BYTES)
            except BlockingIOError:
                return paths
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, size = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size
                name = data[offset : offset + size].rstrip(b"\0").decode(errors="surrogateescape")
                offset += size
                self._event(wd, mask, name, paths)

    def _event(self, wd: int, mask: int, name: str, paths: set[str]) -> None:
        if mask & IN_Q_OVERFLOW:
            paths.add(self.root)  # events were dropped: a path of no known shape, read everything
            return
        folder = self._paths.get(wd)
        if mask & IN_IGNORED:  # the folder is gone (or moved): no longer watched
            with self._lock:
                self._paths.pop(wd, None)
                if folder is not None and self._boxes.get(os.path.dirname(folder)) == wd:
                    del self._boxes[os.path.dirname(folder)]
            return
        if folder is None:
            return
        path = os.path.join(folder, name) if name else folder
        if mask & IN_ISDIR and folder == self.inbox:
            with self._lock:
                if path in self._wanted:
                    self._watch_inbox(path)  # a wanted inbox made: what landed before its watch is read now
            paths.add(path)  # the inbox folder: anything in it may have changed
        elif mask & IN_ISDIR and os.path.dirname(folder) == self.inbox and name == "new":
            with self._lock:
                self._watch(path, CHANGES)
            paths.add(folder)
        elif mask & (IN_MOVED_FROM | IN_DELETE) and os.path.basename(folder) == "new":
            paths.add(folder)  # an item left an inbox: its new/ folder, no name arrived in it
        else:
            paths.add(path)

    def stop(self) -> None:
        """End the thread (it closes the watches); called once, by the last subscriber."""
        with contextlib.suppress(OSError):  # EPIPE: its thread ended already (and said why)
            os.write(self._stop_w, b"x")
        self._close_fds(self._stop_w)

    @staticmethod
    def _close_fds(*fds: int) -> None:
        for fd in fds:
            os.close(fd)


_lock = threading.Lock()
_watchers: dict[str, BusWatcher] = {}


class Watch:
    """One subscriber's hold on the shared watcher of a bus folder."""

    def __init__(self, watcher: BusWatcher, on_paths: OnPaths) -> None:
        self._watcher: BusWatcher | None = watcher
        self._on_paths = on_paths

    def want(self, boxes: list[str]) -> None:
        """Watch these inbox folders too (`BusWatcher.want`)."""
        if self._watcher is not None:
            self._watcher.want(boxes)

    def watching(self, box: str) -> bool:
        """Whether this inbox folder's new/ is watched."""
        return self._watcher is not None and self._watcher.watching(box)

    def close(self) -> None:
        with _lock:
            w, self._watcher = self._watcher, None
            if w is None:
                return
            w.subscribers.discard(self._on_paths)
            if not w.subscribers and _watchers.get(w.root) is w:
                del _watchers[w.root]
                w.stop()


def watch_bus(root: str, on_paths: OnPaths) -> Watch:
    """Watch the bus at `root`; the watches are in place when this returns (subscribe, then read)."""
    with _lock:
        w = _watchers.get(root)
        if w is None:
            w = _watchers[root] = BusWatcher(root)
        w.subscribers.add(on_paths)
    return Watch(w, on_paths)
