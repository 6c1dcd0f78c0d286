"""One wait entry for the faces (core/wait/entry.py): the CLI's `wait`, the MCP `wait` tool and
the TUI's `/wait` refuse the same combinations with the same words (each face's names for the
fields) and wait the same way for a wave."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

from wavewait.core import agents, messages
from wavewait.core.agents import register

from conftest import env_for, until, wavewait_cmd
from mcptools import data, error_text, mcp_client
from tuitools import (
    IDS,
    deterministic_textual,  # noqa: F401  (a fixture, used by name)
    put_flight,
    running,
    scrollback,
    type_command,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("deterministic_textual"), pytest.mark.one_bus]

ROOT = Path(__file__).resolve().parents[2]


def cli(bus, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        wavewait_cmd("wait", *args), env=env_for(bus, WAVEWAIT_AGENT_ID="orchestrator"),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


async def tool(bus, **arguments):
    async with mcp_client(bus, "--agent", "orchestrator") as client:
        return await client.call_tool("wait", arguments)


async def tui(bus, line: str):
    """Run `line` in the TUI: its result, or None and the refusal it printed."""
    async with running(bus) as (app, pilot):
        await type_command(pilot, line)
        await until(
            lambda: app.main.last_result is not None or "usage: /wait" in scrollback(app), what=f"{line!r} to end"
        )
        if app.main.last_result is None:
            assert not app.main.waiting and await bus.list_waits() == []
            return None, " ".join(scrollback(app).split())  # as one line: the log wraps it
        return app.main.last_result.model_dump(mode="json", exclude_none=True), ""


NO_TARGETS_CLI = (
    "--need, --check, --check-timeout, --stop-rest: name the targets (ids, --wave, --files, --event) they apply to"
)
NO_TARGETS_TOOL = (
    "need, check, check_timeout, stop_rest: name the targets (from_agents, wave, files, events) they apply to"
)


@pytest.mark.parametrize(
    "flags, arguments, said_cli, said_tool",
    [
        (["--need", "any"], {"need": "any"}, NO_TARGETS_CLI, NO_TARGETS_TOOL),
        (["--check-timeout", "5"], {"check_timeout": 5}, NO_TARGETS_CLI, NO_TARGETS_TOOL),
        (
            ["--wave", "nosuch"],
            {"wave": "nosuch"},
            "--wave: nosuch has no flights (or omit every target for the next message)",
            "wave: nosuch has no flights (or omit every target for the next message)",
        ),
    ],
    ids=["need-without-targets", "check-timeout-without-targets", "a-wave-without-flights"],
)
async def test_a_bad_wait_is_refused_alike_by_every_face(bus, flags, arguments, said_cli, said_tool):
    await register(bus, "orchestrator")
    await put_flight(bus, "file-reader", 1)  # in wave-1: a target there is, but not named

    done = cli(bus, "5", *flags)
    assert (done.returncode, done.stderr, done.stdout) == (2, f"wavewait wait: error: {said_cli}\n", "")

    assert error_text(await tool(bus, timeout=5, **arguments)) == f"wait: {said_tool}"

    result, shown = await tui(bus, " ".join(["/wait", "5", *flags]))
    assert result is None and f"{said_cli} usage: /wait" in shown, shown


async def test_max_with_targets_is_refused_in_each_face_s_words(bus):
    await register(bus, "orchestrator")
    await put_flight(bus, "file-reader", 1)
    done = cli(bus, "5", "--wave", "wave-1", "--max", "2")
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr == "wavewait wait: error: --max: applies without ids; a fan-in takes one message per listed agent\n"
    )
    said = error_text(await tool(bus, timeout=5, wave="wave-1", max_messages=2))
    assert said == "wait: max_messages: applies without from_agents; a fan-in takes one message per listed agent"


async def test_a_wave_only_wait_is_the_same_fan_in_from_every_face(bus):
    """`wait 30 --wave wave-1` from the CLI, the tool and the TUI: one entry per flight of the
    wave, its report taken, the dead one listed as dead."""
    await register(bus, "orchestrator")
    for i, name in enumerate(("file-reader", "test-runner", "linter"), 1):
        await put_flight(bus, name, i)
    await agents.mark_dead(bus, IDS["linter"], "exited with code 1")

    async def report() -> None:
        for name in ("file-reader", "test-runner"):
            await messages.send(bus, IDS[name], "orchestrator", f"{name} done")

    def shape(r: dict) -> tuple:
        return r["status"], [(e["name"], e["status"], e.get("message")) for e in r["results"]]

    want = (
        "complete",
        [
            ("file-reader", "received", "file-reader done"),
            ("test-runner", "received", "test-runner done"),
            ("linter", "dead", None),
        ],
    )
    await report()
    done = cli(bus, "30", "--wave", "wave-1")
    assert done.returncode == 0, done.stderr
    assert shape(json.loads(done.stdout)) == want

    await report()
    assert shape(data(await tool(bus, timeout=30, wave="wave-1"))) == want

    await report()
    result, shown = await tui(bus, "/wait 30 --wave wave-1")
    assert result is not None, shown
    assert shape(result) == want


#: where each face takes a wait: its parsing and its presentation, no choice of wait
FACES = ("wavewait/cli.py", "wavewait/mcp/tools.py", "tui/slash.py", "tui/widgets/own_wait.py", "tui/screens/main.py")


@pytest.mark.parametrize("path", FACES)
def test_no_face_builds_a_join_or_picks_the_kind_of_wait(path):
    """The join, and next message versus fan-in, are the entry's (core/wait/entry.py)."""
    tree = ast.parse((ROOT / path).read_text())
    named = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    named |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    named |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert not named & {"Join", "wait_fan_in", "wait_next"}, path
