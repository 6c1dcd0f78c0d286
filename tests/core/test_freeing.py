"""What a wait over 100,000 flights leaves behind is emptied later, in the worker thread, a
slice at a time: small containers at once, big ones after the answer (core/freeing.py)."""

from __future__ import annotations

import pytest

from wavewait.core import freeing

from conftest import until

pytestmark = pytest.mark.anyio


async def test_big_containers_are_emptied_later_and_small_ones_at_once(monkeypatch):
    monkeypatch.setattr(freeing, "DELAY", 0.05)
    big_list, big_dict, small = list(range(25_000)), dict.fromkeys(range(9_000)), [1, 2]
    freeing.later(big_list, big_dict, small)
    assert small == [] and len(big_list) == 25_000 and len(big_dict) == 9_000  # not on this thread
    await until(lambda: not big_list and not big_dict, 10, "the worker to empty them")


async def test_keys_are_dropped_in_slices_at_once_when_few():
    dropped: list[list[int]] = []
    freeing.in_slices(3, lambda: [1, 2, 3], lambda ks: dropped.append(list(ks)))
    assert dropped == [[1, 2, 3]]
    freeing.in_slices(5_000, lambda: list(range(5_000)), lambda ks: dropped.append(list(ks)))
    await until(lambda: sum(map(len, dropped)) == 5_003, 10, "every key dropped")
    assert max(len(d) for d in dropped) == freeing.SLICE
