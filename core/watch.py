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
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import Protocol, Self

from watchfiles._rust_notify import RustNotify

from . import freeing

log = logging.getLogger(__name__)

STEP_MS = 3  # single-event latency is about 1.5 x step + 1 ms; idle cost about 0.2 % of a core per watcher
DEBOUNCE_MS = 50
TIMEOUT_MS = 500  # how often the thread looks at its stop flag


class _Pokeable(Protocol):
    def poke(self, key: str | None = None) -> None: ...


class Wakeup:
    """What a wait sleeps on: a flag raised by its change stream, or by a poke from this process.

    Both buses' subscriptions are one of these; they differ only in what raises the flag.
    Iterate it (`async for _ in changes:`): each step returns once something changed since
    the last one (several changes in between make one step); then re-read.
    """

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def poke(self, key: str | None = None) -> None:
        """Wake the subscriber from this process (an in-process interrupt, say); thread-safe.
        `key` says what changed, for a subscription that keeps keys (`Keyed`)."""
        self._call_soon(self._event.set)

    def _call_soon(self, callback: Callable[..., object], *args: object) -> None:
        """On the subscriber's loop: from its own thread a plain `call_soon` (a join's check
        verdict pokes once a report: `call_soon_threadsafe` would write the loop's wake-up
        socket each time, and read it back), from another thread the thread-safe one."""
        try:
            here = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            here = False
        (self.loop.call_soon if here else self.loop.call_soon_threadsafe)(callback, *args)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> None:
        await self._event.wait()
        self._event.clear()

    async def wait(self) -> None:
        """Sleep until something changed (or a poke); the same as one step of the iteration."""
        await self.__anext__()

    def changed(self) -> set[str] | None:
        """The keys that changed since the last call; None: unknown, re-read everything."""
        return None

    def reset(self) -> None:
        """Forget every change so far, and the wake they raised: the caller reads everything
        next (a wait's first step). What changes from now on wakes it again."""
        self._event.clear()

    def arrivals(self) -> set[str] | None:
        """The senders whose items arrived in what the last `changed` reported, for a
        subscription by sender; None: unknown (re-read every sender)."""
        return None


#: a subscription that collected more keys than this since its last step re-reads everything
MAX_KEYS = 4096
#: a subscription by sender that collected more arrivals than this re-reads every sender
MAX_ARRIVALS = 65_536
#: the key that means "anything may have changed" (an overflow, a reconnect, a lost root)
EVERYTHING = "*"


class Keyed(Wakeup):
    """A subscription to keys of a bus (`i:<inbox>`, `a:<agent>`, `w:<wait>`, ...) that
    also says which of them changed, so a wake re-reads only those.

    `keys` and `prefixes` are noted as they come. A key `<root>/<child>` (an arrival in an
    inbox from a sender, `i:<inbox>/<sender>`) reaches the subscriptions that asked for that
    exact key (`routes`), for every child of the root (`trees`), or one member of a `pool`
    on the root, and is noted as its root (`i:<inbox>`): the waiter reads the inbox, and only
    the waiters that want the sender were woken. A subscription by sender (`routes`) also
    keeps who sent (`arrivals`), so a fan-in over 100,000 flights reads the few that sent,
    not all it waits on; the root itself (a change the bus cannot attribute) makes that unknown.

    A pool (root, tag) is a set of interchangeable subscriptions of one loop (waits that claim
    the oldest items of the same types from one inbox): each arrival wakes one member that is
    not woken already, not all of them; a member that closes hands a wake on to another, so an
    item its wait did not take is not left with everyone asleep.

    A poke without a key (an interrupt from this process) or an overflow means "anything":
    `changed` then returns None once, and the wait re-reads all it needs. A poke with a key
    (a join's check ended, a watched folder changed: `CHECKS_KEY`, `FILES_KEY`) is noted as
    that key alone, so the wait re-reads only what it names.
    """

    def __init__(
        self,
        fanout: Fanout,
        keys: Iterable[str] = (),
        prefixes: Iterable[str] = (),
        *,
        routes: Mapping[str, str] | None = None,
        trees: Iterable[str] = (),
        pool: tuple[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.keys = frozenset(keys)
        self.prefixes = tuple(prefixes)
        self.routes = dict(routes or {})
        self.trees = frozenset(trees)
        self.pool_spec = pool
        self._pool: _Pool | None = None  # set by `Fanout.add`
        self._fanout = fanout
        self._changed: set[str] = set()
        self._all = False
        self.roots = frozenset(self.routes.values())  # the keys its arrivals are noted as
        self._arrived: set[str] | None = set()  # senders since `changed` was last called
        self._last_arrived: set[str] | None = None  # those `changed` last reported

    def _woken(self) -> None:
        self._event.set()
        if self._pool is not None:
            self._pool.asleep.pop(self, None)

    def _note(self, keys: Iterable[str], arrived: set[str] | None = None) -> None:
        """Record changed keys (and, by sender, who sent: None is unknown) and wake (on the
        subscriber's loop)."""
        if not self._all:
            self._changed.update(keys)
            if EVERYTHING in self._changed or len(self._changed) > MAX_KEYS:
                self._all = True
                self._changed = set()
        if self.routes:
            if arrived is None or self._arrived is None:
                self._arrived = None
            else:
                self._arrived.update(arrived)
                if len(self._arrived) > MAX_ARRIVALS:
                    self._arrived = None
        self._woken()

    def _note_all(self) -> None:
        self._all, self._changed = True, set()
        self._woken()

    async def __anext__(self) -> None:
        await self._event.wait()
        self._event.clear()
        self._rest()  # woken no more: the next arrival may be its

    def poke(self, key: str | None = None) -> None:
        if key is None:
            self._call_soon(self._note_all)
        else:
            self._call_soon(self._note, (key,), set())  # nobody sent: senders stay known

    def changed(self) -> set[str] | None:
        out, everything = self._changed, self._all
        self._changed, self._all = set(), False
        self._last_arrived = None if everything or not self.routes else self._arrived
        self._arrived = set()
        return None if everything else out

    def arrivals(self) -> set[str] | None:
        return self._last_arrived

    def reset(self) -> None:
        """As `Wakeup.reset`; a pool member is asleep again, so the next arrival may wake it.
        (Left woken, the pool passed it over: an item that came back to the inbox after the
        caller's first read woke nobody, and the wait slept through it to its timeout.)"""
        self.changed()
        super().reset()
        self._rest()

    def _rest(self) -> None:
        if self._pool is not None and self in self._pool.members:
            self._pool.asleep[self] = None

    def close(self) -> None:
        self._fanout.remove(self)
        if self._pool is not None:  # what this member's wait left in the inbox goes to another
            self._pool.wake(1)


class _Pool:
    """Interchangeable subscriptions of one loop on one root: an arrival wakes one of them.

    Touched only on its loop (members are added, woken and closed there)."""

    def __init__(self, root: str, loop: asyncio.AbstractEventLoop) -> None:
        self.root, self.loop = root, loop
        self.members: set[Keyed] = set()
        #: members not woken, longest asleep first (dicts keep insertion order)
        self.asleep: dict[Keyed, None] = {}

    def wake(self, n: int) -> None:
        """Wake up to `n` members that are not woken already (each notes the root)."""
        while n > 0 and self.asleep:
            next(iter(self.asleep))._note((self.root,))  # which takes it out of `asleep`
            n -= 1


class _Batch:
    """What a loop has not yet been handed: keys per subscription, arrivals per pool."""

    def __init__(self) -> None:
        self.keys: dict[Keyed, set[str]] = {}
        self.arrived: dict[Keyed, set[str] | None] = {}  # by sender, for subscriptions with routes
        self.pools: dict[_Pool, int] = {}


class Fanout:
    """A process's changes, handed to the subscriptions that asked for them by key (a dict
    lookup per key, not a match against every subscription). Thread-safe: a watcher thread
    and an event loop may both dispatch; each subscriber is woken on its own loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # key -> {subscription: the key it notes}
        self._by_key: dict[str, dict[Keyed, str]] = {}
        self._by_prefix: dict[str, set[Keyed]] = {}
        self._by_tree: dict[str, set[Keyed]] = {}
        self._pools: dict[tuple[str, str, asyncio.AbstractEventLoop], _Pool] = {}
        self._pools_of: dict[str, set[_Pool]] = {}  # root -> its pools
        self._subs: set[Keyed] = set()
        # what is not yet handed to the subscribers, per loop: a loop that falls behind its
        # watcher gets one pending hand-over with the keys merged, not a queue that grows
        self._pending: dict[asyncio.AbstractEventLoop, _Batch] = {}

    def __len__(self) -> int:
        return len(self._subs)

    def add(self, sub: Keyed) -> Keyed:
        with self._lock:
            self._subs.add(sub)
            for k in sub.keys:
                self._by_key.setdefault(k, {})[sub] = k
            for k, noted in sub.routes.items():
                self._by_key.setdefault(k, {})[sub] = noted
            for p in sub.prefixes:
                self._by_prefix.setdefault(p, set()).add(sub)
            for t in sub.trees:
                self._by_tree.setdefault(t, set()).add(sub)
            if sub.pool_spec is not None:
                root, tag = sub.pool_spec
                pool = self._pools.get((root, tag, sub.loop))
                if pool is None:
                    pool = self._pools[(root, tag, sub.loop)] = _Pool(root, sub.loop)
                    self._pools_of.setdefault(root, set()).add(pool)
                pool.members.add(sub)
                pool.asleep[sub] = None
                sub._pool = pool
        return sub

    def remove(self, sub: Keyed) -> None:
        """At once it hears nothing more; its keys (100,000 for a fan-in over as many flights)
        are taken out of the index a slice at a time, in a thread where they are many."""
        freeing.in_slices(len(sub.keys) + len(sub.routes), lambda: [*sub.keys, *sub.routes], partial(self._forget, sub))
        with self._lock:
            self._subs.discard(sub)
            for table, names in ((self._by_prefix, sub.prefixes), (self._by_tree, sub.trees)):
                for name in names:
                    members = table.get(name)
                    if members is not None:
                        members.discard(sub)
                        if not members:
                            del table[name]
            pool = sub._pool
            if pool is not None and sub in pool.members:
                pool.members.discard(sub)
                pool.asleep.pop(sub, None)
                if not pool.members:
                    assert sub.pool_spec is not None
                    self._pools.pop((pool.root, sub.pool_spec[1], pool.loop), None)
                    of = self._pools_of.get(pool.root)
                    if of is not None:
                        of.discard(pool)
                        if not of:
                            del self._pools_of[pool.root]

    def _forget(self, sub: Keyed, keys: Iterable[str]) -> None:
        with self._lock:
            for k in keys:
                subs = self._by_key.get(k)
                if subs is not None:
                    subs.pop(sub, None)
                    if not subs:
                        del self._by_key[k]

    def dispatch(self, keys: Iterable[str]) -> None:
        """Wake the subscriptions of these keys (EVERYTHING wakes all, to re-read all). A key
        given twice (two arrivals from one sender) wakes two members of a pool."""
        hits: dict[Keyed, list[str]] = {}
        senders: dict[Keyed, set[str] | None] = {}
        arrivals: dict[_Pool, int] = {}
        with self._lock:
            for key in keys:
                if key == EVERYTHING:
                    hits = {sub: [EVERYTHING] for sub in self._subs}
                    senders, arrivals = {}, {}
                    break
                for sub, noted in self._by_key.get(key, {}).items():
                    if sub not in self._subs:  # removed, its keys still going
                        continue
                    hits.setdefault(sub, []).append(noted)
                    if noted != key:  # an arrival by a route: who sent it
                        if (got := senders.setdefault(sub, set())) is not None:
                            got.add(key.partition("/")[2])
                    elif key in sub.roots:  # the root itself: any sender may have sent
                        senders[sub] = None
                for prefix, subs in self._by_prefix.items():
                    if key.startswith(prefix):
                        for sub in subs:
                            hits.setdefault(sub, []).append(key)
                root, sep, child = key.partition("/")
                if sep:
                    for sub in self._by_tree.get(root, ()):
                        hits.setdefault(sub, []).append(root)
                    if child:  # an arrival: one member of each pool on the inbox
                        for pool in self._pools_of.get(root, ()):
                            arrivals[pool] = arrivals.get(pool, 0) + 1
        to_schedule: list[asyncio.AbstractEventLoop] = []
        with self._lock:
            for sub, ks in hits.items():
                batch = self._batch(sub.loop, to_schedule)
                got = batch.keys.setdefault(sub, set())
                if EVERYTHING not in got:
                    got.update(ks)
                    if len(got) > MAX_KEYS:  # bounded: the subscriber re-reads everything
                        batch.keys[sub] = {EVERYTHING}
                if sub.routes:
                    _merge(batch.arrived, sub, senders.get(sub, set()))
            for pool, n in arrivals.items():
                batch = self._batch(pool.loop, to_schedule)
                batch.pools[pool] = batch.pools.get(pool, 0) + n
        for loop in to_schedule:
            try:
                loop.call_soon_threadsafe(self._hand_over, loop)
            except RuntimeError:  # that subscriber's loop is closed: nobody waits there any more
                with self._lock:
                    self._pending.pop(loop, None)

    def _batch(self, loop: asyncio.AbstractEventLoop, to_schedule: list[asyncio.AbstractEventLoop]) -> _Batch:
        """The loop's pending hand-over (under the lock); a new one is scheduled."""
        batch = self._pending.get(loop)
        if batch is None:
            batch = self._pending[loop] = _Batch()
            to_schedule.append(loop)
        return batch

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        """On `loop`: give its subscribers the keys gathered since the last hand-over, then
        wake a member of each pool per arrival."""
        with self._lock:
            batch = self._pending.pop(loop, None)
        if batch is None:
            return
        for sub, keys in batch.keys.items():
            sub._note(keys, batch.arrived.get(sub, set()))
        for pool, n in batch.pools.items():
            if pool.members:
                pool.wake(n)

    def everything(self) -> None:
        self.dispatch([EVERYTHING])


def _merge(arrived: dict[Keyed, set[str] | None], sub: Keyed, senders: set[str] | None) -> None:
    """Add `senders` to what `sub` is handed (None, or past MAX_ARRIVALS: unknown)."""
    got = arrived.setdefault(sub, set())
    if got is None:
        return
    if senders is None:
        arrived[sub] = None
        return
    got.update(senders)
    if len(got) > MAX_ARRIVALS:
        arrived[sub] = None


class Subscription(Wakeup):
    """A set of path prefixes and a flag that the watcher raises when one of them changes.

    With `on_paths`, the changed paths under the prefixes are handed to it instead (in the
    watcher's thread): the directory bus turns them into keys for its `Fanout`.
    """

    def __init__(
        self,
        prefixes: Iterable[str],
        wakes: _Pokeable | None = None,
        on_paths: Callable[[set[str]], None] | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__()
        self.prefixes = tuple(os.path.abspath(p) for p in prefixes)
        self._wakes: _Pokeable = wakes if wakes is not None else self
        self._key = key  # what a change under the prefixes is noted as by `wakes`
        self._on_paths = on_paths
        self._watchers: list[_RootWatcher] = []

    def _matches(self, path: str) -> bool:
        return any(path == p or path.startswith(p + os.sep) for p in self.prefixes)

    def _notify(self, paths: set[str]) -> None:
        if self._on_paths is not None:
            mine = {p for p in paths if self._matches(p)}
            if mine:
                self._on_paths(mine)
        elif any(self._matches(p) for p in paths):
            self._wakes.poke(self._key)

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
                if sub._on_paths is not None:
                    sub._on_paths({EVERYTHING})
                else:
                    sub._wakes.poke()  # anything: the watcher is gone
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
    on_paths: Callable[[set[str]], None] | None = None,
    key: str | None = None,
) -> Subscription:
    """Watch `roots` recursively and wake the returned subscription on changes under `prefixes`.

    Call this *before* reading state. `prefixes` default to the roots themselves. Callers
    that pass the same set of roots share one watcher (one inotify descriptor, one thread).
    With `wakes`, changes wake that stream instead (a signal wait adds its folder to the
    bus's change stream this way), noted as `key` where that stream keeps keys; with
    `on_paths`, the changed paths go to it (called in the watcher's thread). Close the
    subscription all the same.
    """
    paths = [os.path.abspath(r) for r in roots]
    sub = Subscription([str(p) for p in (prefixes if prefixes is not None else paths)], wakes, on_paths, key)
    shared = tuple(sorted({_watch_root(r) for r in paths}))  # the watcher these roots share
    with _lock:
        w = _watchers.get(shared)
        if w is None:
            w = _watchers[shared] = _RootWatcher(shared)
        w.subscribers.add(sub)
        sub._watchers.append(w)
    return sub


def _release(w: _RootWatcher, sub: Subscription) -> None:
    with _lock:
        w.subscribers.discard(sub)
        if not w.subscribers and _watchers.get(w.roots) is w:
            del _watchers[w.roots]
            w.stop()
