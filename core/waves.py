"""A wave's settings, kept on the bus: its budgets and its limit of running flights.

Whoever spawns into a wave may set them (`spawn`, `spawn_agent`, `run-queue`); every process
that starts, stops or shows a flight of the wave reads them from the bus, so they hold
across processes and restarts. A setting given again replaces the one kept; one not given
leaves it.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, ValidationError

from .bus import Bus
from .errors import BadInput
from .model import Record

SETTINGS = "settings"  # the kind of the wave document (bus/wave_docs.py)
MAX_PARALLEL = 1000


class WaveSettings(Record):
    budget_tokens: int | None = Field(default=None, gt=0)  # input + output tokens of all its flights
    budget_usd: float | None = Field(default=None, gt=0)  # money, where the agents report it
    max_parallel: int | Literal["auto"] | None = None  # running flights at once; more are queued


def check_settings(**given: Any) -> dict[str, Any]:
    """The settings given (None: not given), checked before any work, as a user can act on."""
    out: dict[str, Any] = {}
    tokens, usd, parallel = given.get("budget_tokens"), given.get("budget_usd"), given.get("max_parallel")
    if tokens is not None:
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
            raise BadInput(f"budget_tokens: give a whole number of tokens above 0, got {tokens!r}")
        out["budget_tokens"] = tokens
    if usd is not None:
        if isinstance(usd, bool) or not isinstance(usd, int | float) or not math.isfinite(usd) or usd <= 0:
            raise BadInput(f"budget_usd: give an amount of US dollars above 0, got {usd!r}")
        out["budget_usd"] = float(usd)
    if parallel is not None:
        out["max_parallel"] = parse_max_parallel(parallel)
    return out


def parse_max_parallel(value: object) -> int | Literal["auto"]:
    """`N` (1..MAX_PARALLEL) or `auto`, from a tool argument or a command line word."""
    if value == "auto":
        return "auto"
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PARALLEL:
        raise BadInput(f"max_parallel: give a number from 1 to {MAX_PARALLEL} or 'auto', got {value!r}")
    return value


async def get_settings(bus: Bus, wave: str) -> WaveSettings:
    """The wave's settings (all unset when none were kept, or what is kept is not readable)."""
    doc = await bus.get_wave_doc(wave, SETTINGS)
    try:
        return WaveSettings.model_validate(doc or {})
    except ValidationError:
        return WaveSettings()


async def set_settings(bus: Bus, wave: str, **given: Any) -> WaveSettings:
    """Keep the settings given (checked) on the bus; those not given stay as they were."""
    changes = check_settings(**given)
    if not changes:
        return await get_settings(bus, wave)

    def merge(doc: dict[str, Any] | None) -> dict[str, Any]:
        return {**(doc or {}), **changes}

    return WaveSettings.model_validate(await bus.update_wave_doc(wave, SETTINGS, merge) or {})
