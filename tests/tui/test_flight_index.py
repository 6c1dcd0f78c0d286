"""The command line's index of flights (tui/flight_index.py) answers as a look at every flight
would: the same short id completed, the same one name expanded, the same flights offered."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from wavewait.core.ids import short
from wavewait.tui.flight_index import FlightIndex

ids = st.text("0123abc", min_size=9, max_size=12)  # few letters: short ids and names share prefixes
names = st.text("ab0-", min_size=1, max_size=6)
flights = st.lists(st.tuples(ids, names), max_size=40, unique_by=lambda f: f[0])
tokens = st.text("ab0c1-", max_size=4)


@given(flights, tokens)
def test_the_index_answers_as_a_look_at_every_flight(pairs: list[tuple[str, str]], token: str) -> None:
    index = FlightIndex(pairs)
    assert len(index) == len(pairs)
    longer = sorted(s for i, _ in pairs if (s := short(i)).startswith(token) and s != token)
    assert index.complete_id(token) == (longer[0] if longer else None)
    named = [i for i, n in pairs if n.startswith(token)]
    assert index.only_name(token) == (named[0] if len(named) == 1 else None)
    hits = [(i, n) for i, n in pairs if n.startswith(token) or short(i).startswith(token)]
    shown, count = index.starting(token, 4)
    assert count == len(hits)
    assert len(shown) == min(4, len(hits)) and set(shown) <= set(hits) and len(set(shown)) == len(shown)
    by_name = sorted((n, i) for i, n in hits if n.startswith(token))
    assert shown[: len(by_name)] == [(i, n) for n, i in by_name[:4]]  # those by name first, in name order


def test_the_index_of_a_hundred_thousand_flights() -> None:
    """The size the index is for (its time is bench/bench_tui.py's)."""
    pairs = [(f"{n:032x}", f"flight-{n:06d}") for n in range(100_000)]
    index = FlightIndex(pairs)
    assert index.complete_id("0000000") == "00000000"
    assert index.only_name("flight-009999") == f"{9999:032x}"
    assert index.only_name("flight-00999") is None  # ten flights' names start so
    shown, count = index.starting("flight-00999", 4)
    assert count == 10 and [n for _, n in shown] == [f"flight-{n:06d}" for n in range(9990, 9994)]
    shown, count = index.starting("", 4)
    assert count == 100_000 and len(shown) == 4
