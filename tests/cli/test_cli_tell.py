"""`wavewait tell` refuses what it cannot do, with exit 2, and changes nothing (docs/conversations.md)."""

from __future__ import annotations

import json
import subprocess

import anyio
import pytest
from anyio.streams.text import TextReceiveStream

from wavewait.core import admission, conversation

from conftest import env_for, register_crew, wavewait_cmd
from talktools import start_talker

pytestmark = [pytest.mark.anyio, pytest.mark.both_buses]


def run(bus, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(wavewait_cmd(*args), env=env_for(bus), capture_output=True, text=True, timeout=60)


async def test_tell_refuses_a_flight_without_a_conversation_bad_input_and_unknown_ids(bus):
    await register_crew(bus, "f00dcafe01", "f00dcafe02")
    plain = run(bus, "spawn", "-q", "sleeper", "--", "sleep", "60")
    assert plain.returncode == 0, plain.stderr
    sleeper = plain.stdout.strip()
    try:
        cases = [
            ((sleeper, "go on"), "runs a plain command; `send` puts a message in its inbox instead"),
            ((sleeper, "  "), "message: must be a non-empty string"),
            ((sleeper, "x" * (101 << 10)), "message:"),
            (("nobody-here", "hi"), "agent: no agent matches 'nobody-here'"),
            (("f00dcafe", "hi"), "fits 2 agents"),
        ]
        for args, said in cases:
            p = run(bus, "tell", *args)
            assert p.returncode == 2, (args[:1], p.stdout, p.stderr)
            assert said in p.stderr, (args[:1], p.stderr)
        # nothing was kept for the flight's supervisor, and its record is as it was
        assert await bus.pending(f"{sleeper}.tell") == []
        agents = {a["id"]: a for a in json.loads(run(bus, "agents").stdout)["agents"]}
        assert agents[sleeper]["status"] == "running" and agents[sleeper]["conversation"] is None
    finally:
        run(bus, "kill", sleeper)


async def test_spawn_keep_open_applies_only_to_a_preset_that_holds_a_conversation(bus):
    p = run(bus, "spawn", "x", "--keep-open", "30", "--", "sleep", "1")
    assert p.returncode == 2 and "keep_open: applies to a preset's agent" in p.stderr, p.stderr
    p = run(bus, "spawn", "x", "--keep-open", "-1", "--", "sleep", "1")
    assert p.returncode == 2 and "--keep-open" in p.stderr, p.stderr


async def test_transcript_follow_prints_each_entry_as_the_flight_is_told_and_answers(bus, tmp_path):
    """`transcript --follow` on a real conversation (the stand-in agent that speaks Claude
    Code's stream-json): the first turn at once, then a tell and its answer as they come."""
    a = await start_talker(bus, tmp_path, "talky", "hello there")
    got: list[str] = []
    try:
        async with await anyio.open_process(
            wavewait_cmd("transcript", a.id, "--follow"), env=env_for(bus), stderr=subprocess.DEVNULL
        ) as proc:
            assert proc.stdout is not None
            out = TextReceiveStream(proc.stdout)
            rest = [""]  # a line not ended yet

            async def read_until(line: str) -> None:
                with anyio.fail_after(60):
                    while line not in got:
                        *whole, rest[0] = (rest[0] + await out.receive()).split("\n")
                        got.extend(whole)

            try:
                await read_until("[1] agent: You said: hello there")
                assert got[0] == "[1] prompt: hello there"
                said = await conversation.tell(bus, a.id, "and then?", by="orchestrator")
                assert (said["told"], said["turn"]) == ("next_turn", 2)
                await read_until("[2] · turn 2 success")  # the line whole, as printed
            finally:
                proc.terminate()
        told = got.index("[2] told by orchestrator: and then?")
        assert got.index("[2] · turn 2 started") > told
        assert got.index("[2] agent: You said: and then?") > told
    finally:
        await admission.kill(bus, await bus.get_agent(a.id), by="orchestrator")
