"""The change stream of directories, one watcher per watched root per process.

Every wait in a process shares the watcher of a root, so 100 waits cost one inotify
descriptor and one thread. Changes are *hints*: a subscriber is told "something under
these paths changed" and must re-read what it needs; a coalesced or dropped event (the
kernel drops past 16,384 queued, silently) therefore never loses anything.

Why watchfiles' `RustNotify` and not its public `watch`/`awatch`: a wait must subscribe
*before* it reads, so the inotify watches must be in place when `subscribe` returns.
`RustNotify.__init__` installs them before it returns; the public generators create their
`RustNotify` only once iterated, in their own time (in a thread, for `awatch`), so a change
between subscribing and that moment would be missed. The public `watch` also polls its
`stop_event` under the GIL every step. `_RootWatcher` is the one place that touches the
private class; tests/core/test_watch.py pins what it relies on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol, Self

from watchfiles._rust_notify import RustNotify

log = logging.getLogger(__name__)

STEP_MS = 3  # single-event latency is about 1.5 x step + 1 ms; idle cost about 0.2 % of a core per watcher
DEBOUNCE_MS = 50
TIMEOUT_MS = 500  # how often the thread looks at its stop flag


class _Pokeable(Protocol):
    def poke(self) -> None: ...


class Wakeup:
    """What a wait sleeps on: a flag raised by its change stream, or by a poke from this process.

    Both buses' subscriptions are one of these; they differ only in what raises the flag.
    Iterate it (`async for _ in changes:`): each step returns once something changed since
    the last one (several changes in between make one step); then re-read.
    """

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def poke(self) -> None:
        """Wake the subscriber from this process (an in-process interrupt, say); thread-safe."""
        self.loop.call_soon_threadsafe(self._event.set)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> None:
        await self._event.wait()
        self._event.clear()

    async def wait(self) -> None:
        """Sleep until something changed (or a poke); the same as one step of the iteration."""
        await self.__anext__()


class Subscription(Wakeup):
    """A set of path prefixes and a flag that the watcher raises when one of them changes."""

    def __init__(self, prefixes: Iterable[str], wakes: _Pokeable | None = None) -> None:
        super().__init__()
        self.prefixes = tuple(os.path.abspath(p) for p in prefixes)
        self._wakes: _Pokeable = wakes if wakes is not None else self
        self._watchers: list[_RootWatcher] = []

    def _matches(self, path: str) -> bool:
        return any(path == p or path.startswith(p + os.sep) for p in self.prefixes)

    def _notify(self, paths: set[str]) -> None:
        if any(self._matches(p) for p in paths):
            self._wakes.poke()

    def close(self) -> None:
        for w in self._watchers:
            _release(w, self)
        self._watchers.clear()


class _RootWatcher:
    """One inotify watcher (watchfiles' private `RustNotify`, see above) and its thread."""

    def __init__(self, roots: tuple[str, ...]) -> None:
        self.roots = roots
        self.subscribers: set[Subscription] = set()
        self._stop = threading.Event()
        self._notify = RustNotify(list(roots), False, False, 50, True, True)
        self._thread = threading.Thread(target=self._run, name=f"wavewait-watch {' '.join(roots)}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                # no stop event: Rust would take the GIL to read it every step; the timeout
                # brings us back to look at `_stop` ourselves
                changes = self._notify.watch(DEBOUNCE_MS, STEP_MS, TIMEOUT_MS, None)
                if isinstance(changes, str):
                    continue  # 'timeout', 'stop' or 'signal'
                paths = {p for _, p in changes}
                for sub in list(self.subscribers):
                    sub._notify(paths)
        except Exception:  # the watcher must never die silently
            log.exception("watcher of %s failed; waits on it fall back to their timers", self.roots)
            for sub in list(self.subscribers):
                sub._wakes.poke()
        finally:
            self._notify.close()

    def stop(self) -> None:
        self._stop.set()


_lock = threading.Lock()
_watchers: dict[tuple[str, ...], _RootWatcher] = {}


def _watch_root(path: str) -> str:
    """The nearest existing directory at or above `path` (a glob's base may not exist yet)."""
    p = Path(path)
    while not p.is_dir():
        if p.parent == p:
            break
        p = p.parent
    return str(p)


def subscribe(
    roots: Iterable[str | Path],
    prefixes: Iterable[str | Path] | None = None,
    *,
    wakes: _Pokeable | None = None,
) -> Subscription:
    """Watch `roots` recursively and wake the returned subscription on changes under `prefixes`.

    Call this *before* reading state. `prefixes` default to the roots themselves. Callers
    that pass the same set of roots share one watcher (one inotify descriptor, one thread).
    With `wakes`, changes wake that stream instead (a signal wait adds its folder to the
    bus's change stream this way); close the subscription all the same.
    """
    paths = [os.path.abspath(r) for r in roots]
    sub = Subscription([str(p) for p in (prefixes if prefixes is not None else paths)], wakes)
    key = tuple(sorted({_watch_root(r) for r in paths}))
    with _lock:
        w = _watchers.get(key)
        if w is None:
            w = _watchers[key] = _RootWatcher(key)
        w.subscribers.add(sub)
        sub._watchers.append(w)
    return sub


def _release(w: _RootWatcher, sub: Subscription) -> None:
    with _lock:
        w.subscribers.discard(sub)
        if not w.subscribers and _watchers.get(w.roots) is w:
            del _watchers[w.roots]
            w.stop()
