"""Big structures a wait leaves behind, taken apart after its answer, off the event loop.

A fan-in over 100,000 flights leaves 100,000 agent records and as many change keys behind.
Freeing them takes 60-90 ms each (measured), and on the event loop that time would come
between the wait's result and its answer; a thread doing it at once takes the loop's time
all the same (the GIL). So one worker thread starts on them a moment later (DELAY: the
answer is out by then) and takes them apart a slice at a time, letting the loop run
between slices.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

#: what one slice takes apart (about a millisecond), and below what size it is done at once
SLICE = 2_000
#: seconds before the worker starts on a job, and the pause it leaves the loop between slices
DELAY = 0.25
PAUSE = 0.001

_jobs: queue.SimpleQueue[tuple[float, Callable[[], Sequence[Any]], Callable[[Sequence[Any]], None]]]
_jobs = queue.SimpleQueue()
_worker: threading.Thread | None = None
_lock = threading.Lock()


def in_slices(size: int, keys: Callable[[], Sequence[Any]], drop: Callable[[Sequence[Any]], None]) -> None:
    """Call `drop` on `keys()` (`size` of them) a slice at a time: at once when they are
    few, else later, in the worker (which lists them then)."""
    if size <= SLICE:
        drop(keys())
        return
    _submit(keys, drop)


def later(*containers: list[Any] | dict[Any, Any]) -> None:
    """Empty these lists and dicts (the last references to what they hold), later, in the worker."""
    for c in containers:
        if len(c) <= SLICE:
            c.clear()
        elif isinstance(c, dict):
            _submit(partial(list, c), partial(_pop, c))
        else:
            _submit(partial(_places, c), partial(_clear_tail, c))


def _submit(keys: Callable[[], Sequence[Any]], drop: Callable[[Sequence[Any]], None]) -> None:
    global _worker
    _jobs.put((time.monotonic() + DELAY, keys, drop))
    with _lock:
        if _worker is None:
            _worker = threading.Thread(target=_work, name="wavewait-free", daemon=True)
            _worker.start()


def _work() -> None:
    while True:
        at, keys, drop = _jobs.get()
        time.sleep(max(0.0, at - time.monotonic()))
        ks = keys()
        for i in range(0, len(ks), SLICE):
            drop(ks[i : i + SLICE])
            time.sleep(PAUSE)  # the GIL back to the event loop between slices


def _pop(d: dict[Any, Any], keys: Sequence[Any]) -> None:
    for k in keys:
        d.pop(k, None)


def _places(lst: list[Any]) -> range:
    return range(len(lst))


def _clear_tail(lst: list[Any], places: Sequence[int]) -> None:
    """Drop as many items as `places` holds, from the end (a slice is never empty)."""
    del lst[-len(places) :]
