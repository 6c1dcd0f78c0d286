"""A wave's settings on the bus: checked before they are kept, merged with what is kept."""

from __future__ import annotations

import pytest

from wavewait.core import waves
from wavewait.core.errors import BadInput

pytestmark = pytest.mark.anyio


async def test_settings_given_are_kept_and_the_others_stay(bus):
    assert await waves.get_settings(bus, "wave-1") == waves.WaveSettings()
    await waves.set_settings(bus, "wave-1", budget_tokens=5000, max_parallel="2")
    kept = await waves.set_settings(bus, "wave-1", budget_usd=1.5)
    assert kept == waves.WaveSettings(budget_tokens=5000, budget_usd=1.5, max_parallel=2)
    assert await waves.get_settings(bus, "wave-1") == kept
    assert await waves.get_settings(bus, "wave-2") == waves.WaveSettings()


@pytest.mark.parametrize(
    "given, word",
    [
        ({"budget_tokens": 0}, "budget_tokens"),
        ({"budget_tokens": 1.5}, "budget_tokens"),
        ({"budget_tokens": True}, "budget_tokens"),
        ({"budget_usd": float("nan")}, "budget_usd"),
        ({"budget_usd": -1}, "budget_usd"),
        ({"max_parallel": 0}, "max_parallel"),
        ({"max_parallel": "many"}, "max_parallel"),
        ({"max_parallel": 10_000}, "max_parallel"),
    ],
)
async def test_bad_settings_are_refused_before_anything_is_kept(bus, given, word):
    with pytest.raises(BadInput, match=word):
        await waves.set_settings(bus, "wave-1", **given)
    assert await bus.get_wave_doc("wave-1", waves.SETTINGS) is None
