"""The TUI's heap pacing (core/proc.py, FramePacedHeap): the full collection that walks the
whole heap runs only once the frozen heap grew, not every `full_every` seconds whatever it
held (at 100,000 flights one pass stalls the screen 1-3 s)."""

from __future__ import annotations

import gc

from wavewait.core.proc import FULL_GC_GROWTH, FramePacedHeap


class Cycle:
    def __init__(self) -> None:
        self.me = self


def full_passes(heap: FramePacedHeap, ticks: int) -> int:
    seen: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            seen.append(1)

    gc.callbacks.append(note)
    try:
        for _ in range(ticks):
            heap.tick()
    finally:
        gc.callbacks.remove(note)
    return len(seen)


def test_a_heap_that_does_not_grow_is_not_walked_again_and_one_that_grows_is():
    gc.unfreeze()  # what other tests of this process froze (the TUI's) is not this heap's past
    heap = FramePacedHeap(full_every=0.0)
    try:
        heap.tick()  # the first frame freezes the heap
        assert full_passes(heap, 1) == 1  # the first full pass: nothing known of the heap yet
        assert full_passes(heap, 20) == 0  # the same heap: frozen each frame, not walked
        kept = [Cycle() for _ in range(int(gc.get_freeze_count() * FULL_GC_GROWTH) + 1000)]
        assert full_passes(heap, 2) == 1  # grew past its share (frozen by the first): its cycles collected
        assert full_passes(heap, 5) == 0
        del kept
    finally:
        gc.unfreeze()
