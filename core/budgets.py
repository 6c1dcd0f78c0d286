"""Budgets: what a wave may spend, and what one flight may (docs/budgets.md).

Two caps, each in tokens (input + output, as the agents report them) and in money (where the
agent reports it):

* the **wave's budget** (`budget_tokens`, `budget_usd`), kept in the wave's settings on the
  bus (core/waves.py): a spawn into a wave whose flights together have spent it is refused
  before anything starts, and a running flight of the wave that reports more usage once it
  is spent is stopped;
* a **flight's own cap** (`flight_budget_tokens`, `flight_budget_usd`), on its record: the
  flight is stopped once it has spent it.

A flight is stopped by its own supervisor, the process that reads its usage events, the
moment an event takes it past a cap: it is `dead` with a reason that starts `budget:` and
says which budget, what it was and what was spent. Nothing else needs to run for it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .bus import Bus
from .errors import BadInput, BudgetSpent
from .ids import is_id
from .model import Agent, FlightBudget, Usage
from .waves import WaveSettings, check_settings, get_settings, set_settings

REASON = "budget"  # a budget death's reason starts with this word (docs/words.md)


def used(usage: Usage | None) -> tuple[int, float]:
    """Tokens in and out, and money (0 where not reported), of one flight's usage."""
    if usage is None:
        return 0, 0.0
    return usage.input_tokens + usage.output_tokens, usage.cost_usd or 0.0


def total(agents: Iterable[Agent]) -> tuple[int, float]:
    """What these flights spent together."""
    tokens, usd = 0, 0.0
    for a in agents:
        t, u = used(a.usage)
        tokens, usd = tokens + t, usd + u
    return tokens, usd


async def wave_spent(bus: Bus, wave: str) -> tuple[int, float]:
    """What the flights of `wave` spent so far, ended ones included."""
    return total(a for a in await bus.list_agents() if a.wave == wave)


def tokens_words(n: int) -> str:
    return f"{n:,} tokens"


def money_words(usd: float) -> str:
    return f"${usd:,.4f}" if usd < 1 else f"${usd:,.2f}"


def reached(budget: WaveSettings | FlightBudget, tokens: int, usd: float) -> tuple[str, str] | None:
    """The first cap `tokens` and `usd` reached, and the spend, in words (`200,000 tokens`,
    `201,345 tokens`), or None when none is."""
    cap_tokens = budget.budget_tokens if isinstance(budget, WaveSettings) else budget.tokens
    cap_usd = budget.budget_usd if isinstance(budget, WaveSettings) else budget.usd
    if cap_tokens is not None and tokens >= cap_tokens:
        return tokens_words(cap_tokens), tokens_words(tokens)
    if cap_usd is not None and usd >= cap_usd:
        return money_words(cap_usd), money_words(usd)
    return None


@dataclass(frozen=True)
class BudgetArgs:
    """What one spawn was given about budgets, checked: the wave's budget to keep (the
    `budget_tokens` / `budget_usd` given) and the flight's own cap."""

    wave: dict[str, Any] = field(default_factory=dict)
    flight: FlightBudget | None = None


def check(
    wave: str | None,
    *,
    budget_tokens: object = None,
    budget_usd: object = None,
    flight_budget_tokens: object = None,
    flight_budget_usd: object = None,
) -> BudgetArgs:
    """What a face was given (None: not given), checked before any work; keeps nothing."""
    keep = check_settings(budget_tokens=budget_tokens, budget_usd=budget_usd)
    if keep and wave is None:
        raise BadInput(
            "{budget_tokens}, {budget_usd}: a budget is the wave's; give {wave} too, "
            "or cap this one flight with {flight_budget_tokens} / {flight_budget_usd}",
            fields=("budget_tokens", "budget_usd", "wave", "flight_budget_tokens", "flight_budget_usd"),
        )
    return BudgetArgs(keep, flight_cap(flight_budget_tokens, flight_budget_usd))


def flight_cap(tokens: object = None, usd: object = None) -> FlightBudget | None:
    """A flight's own cap (None: none), checked."""
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0):
        raise BadInput(f"flight_budget_tokens: give a whole number of tokens above 0, got {tokens!r}")
    if usd is not None and (
        isinstance(usd, bool) or not isinstance(usd, int | float) or not math.isfinite(usd) or usd <= 0
    ):
        raise BadInput(f"flight_budget_usd: give an amount of US dollars above 0, got {usd!r}")
    if tokens is None and usd is None:
        return None
    return FlightBudget(tokens=tokens, usd=None if usd is None else float(usd))


async def admit(bus: Bus, wave: str | None, keep: dict[str, Any] | None = None) -> WaveSettings | None:
    """Before a spawn into `wave` starts anything: keep the wave's settings it was given
    (`keep`, from `check` and a limit; they replace those kept), then refuse it (BudgetSpent)
    if the wave's flights have spent the budget. Returns the wave's settings, read this once
    (None: no wave, or a wave whose name is no id, which has no settings kept)."""
    if wave is None:
        return None
    if keep:
        settings = await set_settings(bus, wave, **keep)
    elif not is_id(wave):  # a wave whose name is no id has no settings kept
        return None
    else:
        settings = await get_settings(bus, wave)
    await refuse_spent(bus, wave, settings)
    return settings


async def refuse_spent(bus: Bus, wave: str, settings: WaveSettings) -> None:
    """BudgetSpent if the flights of `wave` have spent the budget in its `settings`."""
    if settings.budget_tokens is None and settings.budget_usd is None:
        return
    tokens, usd = await wave_spent(bus, wave)
    hit = reached(settings, tokens, usd)
    if hit is not None:
        raise BudgetSpent(
            f"wave {wave!r} has spent its budget: {hit[1]} of {hit[0]}, by its flights; nothing was started. "
            "Raise the wave's budget (--budget-tokens / --budget-usd, or budget_tokens / budget_usd), "
            "or spawn into another wave"
        )


async def crossed(bus: Bus, agent: Agent, usage: Usage) -> str | None:
    """Why a running flight that now spent `usage` must stop (None: it may go on): its own
    cap, else its wave's budget, spent."""
    tokens, usd = used(usage)
    if agent.budget is not None and (hit := reached(agent.budget, tokens, usd)) is not None:
        return f"{REASON}: its own cap of {hit[0]} is spent (spent {hit[1]})"
    if agent.wave is None or not is_id(agent.wave):
        return None
    settings = await get_settings(bus, agent.wave)
    if settings.budget_tokens is None and settings.budget_usd is None:
        return None
    others = total(a for a in await bus.list_agents() if a.wave == agent.wave and a.id != agent.id)
    hit = reached(settings, others[0] + tokens, others[1] + usd)
    if hit is None:
        return None
    return (
        f"{REASON}: wave {agent.wave!r} has spent its budget of {hit[0]} "
        f"(spent {hit[1]} by all its flights; this one {tokens_words(tokens)}"
        f"{', ' + money_words(usd) if usd else ''})"
    )
