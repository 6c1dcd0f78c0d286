"""The flights' names and short ids, sorted, for what the command line offers as an ID is typed.

Why sorted: each key typed after `/kill ` asked for every flight three times (the inline
suggestion, the hint's list of flights, Tab) and tested each one: at 100,000 flights the
hint's list alone took about 400 ms, and a key reached the screen 1.1-1.7 s later. In sorted lists a prefix is two binary searches. A flight that comes is
put in its place; the index is made again only after a read of every record (a flight's
name and id never change).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable
from itertools import islice
from operator import itemgetter

from ..core.ids import short

_FIRST = itemgetter(0)
_LAST_CHAR = "\U0010ffff"  # after every character: `token + _LAST_CHAR` ends the range of `token…`


class FlightIndex:
    """(id, name) of every flight, by short id and by name."""

    def __init__(self, flights: Iterable[tuple[str, str]] = ()) -> None:
        pairs = list(flights)
        self.by_short: list[tuple[str, str, str]] = sorted((short(i), i, n) for i, n in pairs)
        self.by_name: list[tuple[str, str]] = sorted((n, i) for i, n in pairs)

    def __len__(self) -> int:
        return len(self.by_name)

    def add(self, agent_id: str, name: str) -> None:
        """A flight that came: in its place in both lists (a memmove, not a sort)."""
        insort(self.by_short, (short(agent_id), agent_id, name))
        insort(self.by_name, (name, agent_id))

    def complete_id(self, token: str) -> str | None:
        """The first short id (in order) that starts with `token` and is longer."""
        lo, hi = _span(self.by_short, token)
        return next((s for s, _, _ in islice(self.by_short, lo, hi) if s != token), None)

    def only_name(self, token: str) -> str | None:
        """The id of the one flight whose name starts with `token`; None for none or several."""
        lo, hi = _span(self.by_name, token)
        return self.by_name[lo][1] if hi - lo == 1 else None

    def starting(self, token: str, limit: int) -> tuple[list[tuple[str, str]], int]:
        """Up to `limit` flights (id, name) whose name or short id starts with `token`, those by
        name first, and how many there are in all."""
        if not token:
            return [(i, n) for n, i in self.by_name[:limit]], len(self.by_name)
        nlo, nhi = _span(self.by_name, token)
        slo, shi = _span(self.by_short, token)
        # a flight in both spans counts once: test the smaller span against the other's rule
        if nhi - nlo <= shi - slo:
            both = sum(1 for _, i in self.by_name[nlo:nhi] if short(i).startswith(token))
        else:
            both = sum(1 for _, _, n in self.by_short[slo:shi] if n.startswith(token))
        hits = [(i, n) for n, i in self.by_name[nlo : min(nhi, nlo + limit)]]
        for _, i, n in self.by_short[slo:shi]:
            if len(hits) >= limit:
                break
            if not n.startswith(token):
                hits.append((i, n))
        return hits, (nhi - nlo) + (shi - slo) - both


def _span(rows: list[tuple[str, str]] | list[tuple[str, str, str]], token: str) -> tuple[int, int]:
    """Where the rows whose first field starts with `token` begin and end."""
    return bisect_left(rows, token, key=_FIRST), bisect_left(rows, token + _LAST_CHAR, key=_FIRST)
