"""A spawn is resolved once into a launch plan (core/launch_plan.py): its name checked once,
its wave's settings read (or kept) once, its budget asked once, however many layers the
flight then goes through (flights, admission, agents), on both buses."""

from __future__ import annotations

import inspect
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from wavewait.core import agents, budgets, ids, spawning, waves
from wavewait.core.spawning import SpawnRequest

pytestmark = pytest.mark.anyio


def spy(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[tuple[Any, ...]]:
    """Every call of `owner.name`, through whichever module imported it (`from .ids import
    check_name` binds it there too): the calls' arguments, in order."""
    real: Callable[..., Any] = getattr(owner, name)
    calls: list[tuple[Any, ...]] = []

    if inspect.iscoroutinefunction(real):

        async def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append(args + tuple(kwargs.values()))
            return await real(*args, **kwargs)
    else:

        def counted(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            calls.append(args + tuple(kwargs.values()))
            return real(*args, **kwargs)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("wavewait.") and getattr(module, name, None) is real:
            monkeypatch.setattr(module, name, counted)
    return calls


async def test_one_spawn_checks_its_name_reads_its_wave_and_asks_its_budget_once(bus, monkeypatch, tmp_path):
    await agents.register(bus, "orchestrator")
    names = spy(monkeypatch, ids, "check_name")
    waves_named = spy(monkeypatch, ids, "check_wave")
    reads = spy(monkeypatch, waves, "get_settings")
    kept = spy(monkeypatch, waves, "set_settings")
    checked = spy(monkeypatch, budgets, "check")
    asked = spy(monkeypatch, budgets, "wave_spent")

    def request(name: str, **given: Any) -> SpawnRequest:
        return SpawnRequest(name=name, parent="orchestrator", command=["true"], cwd=str(tmp_path), wave="w", **given)

    # the wave's limit and budget given with the spawn: kept once, and what is kept is what is read
    first = await spawning.spawn(bus, request("first", max_parallel=2, budget_tokens=1000, flight_budget_tokens=50))
    assert first.status == "running" and first.budget is not None and first.budget.tokens == 50
    seen = Counter(c[:2] for c in names)
    assert seen[("first",)] + seen[("first", "name")] == 1, names
    assert seen[("w", "wave")] + len(waves_named) == 1, (names, waves_named)
    assert (len(reads), len(kept)) == (0, 1), (reads, kept)
    assert (len(checked), len(asked)) == (1, 1), (checked, asked)

    # nothing given: the wave's settings are read once, its budget asked once
    for calls in (names, waves_named, reads, kept, checked, asked):
        calls.clear()
    second = await spawning.spawn(bus, request("second"))
    assert second.status == "running"
    seen = Counter(c[:2] for c in names)
    assert seen[("second",)] + seen[("second", "name")] == 1, names
    assert seen[("w", "wave")] + len(waves_named) == 1, (names, waves_named)
    assert (len(reads), len(kept)) == (1, 0), (reads, kept)
    assert (len(checked), len(asked)) == (1, 1), (checked, asked)
    assert (await waves.get_settings(bus, "w")).max_parallel == 2
