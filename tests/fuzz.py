"""Hypothesis strategies for hostile input: text that breaks naive checks, wrong types, edge numbers."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

NASTY_TEXT = [
    "",
    " ",
    "a\n",
    "abc\n",
    "\x00",
    "\x1b[2J",
    "\u202e",
    "../../etc/passwd",
    "/etc/passwd",
    "**",
    "~",
    "orchestrator",
    "ORCHESTRATOR",
    "x" * 5000,
    "é" * 300,
    "-1",
    "nan",
    "inf",
    "1e400",
    "--help",
    "-h",
]

#: any character a UTF-8 wire can carry (lone surrogates cannot be sent at all)
chars = st.characters(codec="utf-8")
#: any text, weighted towards what breaks naive checks
text = st.one_of(
    st.sampled_from(NASTY_TEXT),
    st.text(alphabet=chars, max_size=200),
    st.text(alphabet=st.characters(codec="utf-8", categories=["Cc", "Zs", "Zl", "Cf"]), max_size=20),
)

#: any JSON value
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)

numbers = st.one_of(
    st.sampled_from([0, -1, -0.0, 1e308, float("inf"), float("-inf"), float("nan"), 2**63, True]),
    st.floats(),
    st.integers(),
)

#: timeouts that can never block a test long: tiny, or invalid
short_seconds = st.one_of(st.floats(min_value=0, max_value=0.2), st.sampled_from([-1, float("nan"), float("inf")]))


def for_property(prop: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A value for one JSON-schema property: usually of its type, sometimes anything."""
    options = prop.get("anyOf", [prop])
    typed: list[st.SearchStrategy[Any]] = []
    for o in options:
        t = o.get("type")
        if "enum" in o:
            typed.append(st.sampled_from(o["enum"]) | text)
        elif t == "string":
            typed.append(text)
        elif t in ("number", "integer"):
            typed.append(numbers)
        elif t == "array":
            typed.append(st.lists(text, max_size=5) | st.lists(json_values, max_size=3))
        elif t == "object":
            typed.append(st.dictionaries(text, text, max_size=3))
        elif t == "boolean":
            typed.append(st.booleans())
        elif t == "null":
            typed.append(st.none())
    return st.one_of(*typed, json_values) if typed else json_values


@st.composite
def arguments(draw: st.DrawFn, schema: dict[str, Any], fixed: dict[str, st.SearchStrategy[Any]]) -> dict[str, Any]:
    """Arguments for a tool: each property present or not (required ones too, sometimes
    missing), and now and then an unknown one; `fixed` overrides what must stay harmless."""
    args: dict[str, Any] = {}
    for name, prop in schema.get("properties", {}).items():
        if draw(st.integers(0, 9)) < 7:
            args[name] = draw(fixed[name] if name in fixed else for_property(prop))
    if draw(st.integers(0, 9)) == 0:
        args[draw(text)] = draw(json_values)
    return args
