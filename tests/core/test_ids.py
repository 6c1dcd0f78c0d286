"""Ids and prefixes: ≥ 4 characters, an exact id wins, ambiguity names the candidates."""

from __future__ import annotations

import pytest

from wavewait.core import admission, agents, messages, wait
from wavewait.core.errors import AmbiguousId, BadInput, UnknownAgent
from wavewait.core.ids import MAX_ID_LEN, check_id, check_name, resolve

pytestmark = pytest.mark.anyio


async def test_a_unique_prefix_of_four_characters_works_everywhere(bus):
    await agents.register(bus, "orchestrator")
    await agents.register(bus, "a1b2c3d4e5", parent_id="orchestrator")
    await messages.send(bus, "orchestrator", "a1b2", "hello")
    assert (await wait.wait_next(bus, "a1b2c3d4e5", 0)).message == "hello"
    await messages.send(bus, "a1b2c3d4e5", "orch", "back")
    r = await wait.wait_fan_in(bus, "orchestrator", 0, ["a1b2c"])
    assert [(t.agent_id, t.message) for t in r.results] == [("a1b2c3d4e5", "back")]
    killed = await admission.kill(bus, await agents.resolve_agent(bus, "a1b2c3"))
    assert killed.status == "dead"


async def test_an_exact_id_wins_over_a_prefix_of_another(bus):
    await agents.register(bus, "abcd")
    await agents.register(bus, "abcdef")
    assert (await agents.resolve_agent(bus, "abcd")).id == "abcd"
    assert [a.id for a in await agents.resolve_agents(bus, ["abcd", "abcde", "abcd"])] == ["abcd", "abcdef"]


async def test_an_ambiguous_prefix_is_an_error_naming_both_candidates(bus):
    await agents.register(bus, "orchestrator")
    await agents.register(bus, "f00dcafe01")
    await agents.register(bus, "f00dcafe02")
    with pytest.raises(AmbiguousId, match="f00dcafe01, f00dcafe02"):
        await agents.resolve_agent(bus, "f00d")
    with pytest.raises(AmbiguousId, match="f00dcafe01, f00dcafe02"):
        await wait.wait_fan_in(bus, "orchestrator", 0, ["f00dcaf"])
    assert await bus.list_waits() == []


async def test_a_prefix_shorter_than_four_characters_is_refused(bus):
    await agents.register(bus, "f00dcafe01")
    with pytest.raises(UnknownAgent, match="at least 4 characters"):
        await agents.resolve_agent(bus, "f00")


def test_resolve_rules_without_a_bus():
    known = ["deadbeef00", "deadbeef11", "cafe"]
    assert resolve("cafe", known) == "cafe"
    assert resolve("deadbeef0", known) == "deadbeef00"
    with pytest.raises(AmbiguousId, match="deadbeef00, deadbeef11"):
        resolve("dead", known)
    with pytest.raises(UnknownAgent, match="no agent matches 'beef'"):
        resolve("beef", known)


@pytest.mark.parametrize(
    "bad",
    [
        "a/b",
        "..",
        "a..b",
        "../etc",
        "a\x00b",
        "a\nb",
        "a\tb",
        "x" * (MAX_ID_LEN + 1),
        "",
        " ",
        "-leading-dash",
        ".hidden",
        "a~b",
        None,
        42,
    ],
    ids=repr,
)
def test_unsafe_ids_are_refused_with_the_field_named(bad):
    with pytest.raises(BadInput, match=r"^agentId: "):
        check_id(bad, "agentId")


@pytest.mark.parametrize("good", ["orchestrator", "a" * MAX_ID_LEN, "wave-7.flight_2@host", "0abc"])
def test_safe_ids_pass(good):
    assert check_id(good) == good


@pytest.mark.parametrize("bad", ["a/b", "bell\x07", "line\nbreak", "", "   ", "n" * 101])
def test_unsafe_names_are_refused(bad):
    with pytest.raises(BadInput, match="name"):
        check_name(bad)


async def test_an_unsafe_id_never_reaches_the_bus(bus):
    for bad in ("../escape", "a/b", "x\x00"):
        with pytest.raises(BadInput):
            await agents.register(bus, bad)
        with pytest.raises(BadInput):
            await wait.wait_next(bus, bad, 0)
    assert await bus.list_agents() == []
