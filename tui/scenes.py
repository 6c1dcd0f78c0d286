"""Fixed scenes of the TUI, shared by the snapshot tests and `screenshots.py`.

Every record has a fixed id and time and the app gets a frozen clock, so a scene renders
the same way every time (no uuids, no wall-clock times on screen).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from textual.css.query import NoMatches
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import RichLog

from ..core.agents import register
from ..core.bus import Bus
from ..core.model import Agent, ChangeSummary, Item, Usage, WaitRecord
from ..core.proc import hostname, me
from .app import WaveApp
from .demo import DemoPlan
from .screens.main import MainScreen

T0 = 1000.0  # records are dated from here
NOW = 1042.0  # the frozen clock

IDS = {
    "file-reader": "a1b2c3d4000000000000000000000001",
    "test-runner": "e5f6a7b8000000000000000000000002",
    "linter": "c3d4e5f6000000000000000000000003",
    "schema-check": "b7c8d9e0000000000000000000000004",
    "doc-writer": "f1e2d3c4000000000000000000000005",
    "migrator": "d5e6f7a8000000000000000000000006",
    # the coding wave: three Claude Code flights and two Codex flights
    "parser": "c0de0001000000000000000000000011",
    "lexer": "c0de0002000000000000000000000012",
    "docs": "c0de0003000000000000000000000013",
    "cli": "c0de0004000000000000000000000014",
    "api": "c0de0005000000000000000000000015",
    # a Claude Code flight spoken to (docs/conversations.md)
    "fixer": "7a1c0001000000000000000000000021",
}
MIRROR_WAIT = "9f8e7d6c000000000000000000000009"


def frozen_app(bus: Bus, **kwargs: Any) -> WaveApp:
    app = WaveApp(
        bus, me="orchestrator", clock=lambda: NOW, animate=False, bus_label="demo-bus", sweep_every=0, **kwargs
    )
    app.theme = "textual-dark"  # never the developer's TEXTUAL_THEME
    return app


async def put_flight(bus: Bus, name: str, i: int, **fields: Any) -> Agent:
    """A flight record with a fixed id and start time (no process: the sweep leaves it be)."""
    agent = Agent(id=IDS[name], name=name, wave="wave-1", parent_id="orchestrator", created_at=T0 + i, **fields)
    await bus.put_agent(agent)
    return agent


async def put_wave(bus: Bus) -> None:
    """A wave of five: two reported, one dead, two still running."""
    await register(bus, "orchestrator")
    await put_flight(bus, "file-reader", 1)
    await put_flight(bus, "test-runner", 2, last_message="42 of 120 tests run", last_message_at=T0 + 38)
    await put_flight(bus, "linter", 3, status="dead", reason="exited with code 1", ended_at=T0 + 9, exit_code=1)
    await put_flight(bus, "schema-check", 4)
    await put_flight(bus, "doc-writer", 5)
    for i, (name, kind, body, at) in enumerate(
        (
            ("file-reader", "message", "read 42 files; found 3 issues", T0 + 21),
            ("schema-check", "worker_complete", "14 foreign keys, 3 without an index", T0 + 33),
        )
    ):  # delivered as the core does, with fixed ids and times
        await bus.deliver(
            Item(
                id=f"0000000000000000000000000000010{i}",
                type=kind,
                to="orchestrator",
                sender=IDS[name],
                body=body,
                sent_at=at,
            )
        )
        await bus.update_agent(IDS[name], last_message=body, last_message_at=at)


async def put_coding_wave(bus: Bus) -> None:
    """A wave `refactor` of coding flights, as their supervisors record them: three Claude
    Code flights (tokens and money) and two Codex flights (tokens only), one of which asks
    for approval; an earlier wave `lint` beside it keeps its own totals."""
    await register(bus, "orchestrator")

    def usage(i: int, o: int, usd: float | None = None) -> Usage:
        return Usage(input_tokens=i, output_tokens=o, cost_usd=usd, turns=3)

    flights: list[tuple[str, str, dict[str, Any]]] = [
        (
            "parser",
            "refactor",
            {
                "status": "closed",
                "ended_at": T0 + 31,
                "last_message": "Split parse() into three; tests green.",
                "changes": ChangeSummary(files=3, added=120, deleted=45, final=True),
                "usage": usage(38_200, 4_100, 0.2114),
            },
        ),
        (
            "lexer",
            "refactor",
            {
                "changes": ChangeSummary(files=1, added=12, deleted=3),
                "usage": usage(9_000, 1_150, 0.0612),
                "last_message_at": T0 + 37,
            },
        ),
        (
            "docs",
            "refactor",
            {
                "question": 'permission: Bash {"command": "make docs"}. Answer allow, or deny and why.',
                "question_id": "00000000000000000000000000000300",
                "last_message_at": T0 + 35,
                "changes": ChangeSummary(files=2, added=40, deleted=0),
                "usage": usage(4_400, 600, 0.0231),
            },
        ),
        ("cli", "refactor", {"changes": ChangeSummary(files=1, added=8, deleted=8), "usage": usage(12_500, 900)}),
        (
            "api",
            "refactor",
            {
                "status": "dead",
                "ended_at": T0 + 29,
                "exit_code": 1,
                "reason": "exited with code 1; last: tool exec_command",
                "changes": ChangeSummary(files=0, final=True),
                "usage": usage(3_000, 200),
            },
        ),
        (
            "migrator",
            "lint",
            {
                "status": "closed",
                "ended_at": T0 + 12,
                "last_message": "No lint left.",
                "usage": usage(1_000, 100, 0.0050),
            },
        ),
    ]
    for i, (name, wave, fields) in enumerate(flights, 1):
        if "last_message" in fields:
            fields["last_message_at"] = fields.get("ended_at", T0 + 30)
        await bus.put_agent(
            Agent(id=IDS[name], name=name, wave=wave, parent_id="orchestrator", created_at=T0 + i, **fields)
        )


async def put_question(bus: Bus) -> None:
    """The wave, with doc-writer asking the person a question (it needs input)."""
    await put_wave(bus)
    await put_question_of(bus)


async def put_question_of(bus: Bus) -> None:
    """doc-writer asks the person a question (it needs input)."""
    qid = "00000000000000000000000000000200"
    await bus.deliver(
        Item(
            id=qid,
            type="question",
            to="orchestrator",
            sender=IDS["doc-writer"],
            body="put the guide in docs/ or in the wiki?",
            sent_at=T0 + 36,
            data={"question_id": qid},
        )
    )
    await bus.update_agent(
        IDS["doc-writer"], question="put the guide in docs/ or in the wiki?", question_id=qid, last_message_at=T0 + 36
    )


async def put_wave_and_slow(bus: Bus) -> None:
    """The wave plus migrator, a slow flight that keeps a wait on the wave running."""
    await put_wave(bus)
    await put_flight(bus, "migrator", 6)


async def put_demo_moment(bus: Bus) -> None:
    """The demo during its wait: six flights, and another process's wait mirrored below."""
    await put_mirror(bus)
    await put_flight(bus, "migrator", 6)


async def put_two(bus: Bus) -> None:
    await register(bus, "orchestrator")
    await put_flight(bus, "file-reader", 1)
    await put_flight(bus, "linter", 3)


async def put_mirror(bus: Bus) -> None:
    """The wave plus a wait that another process (a planner agent) makes on two flights."""
    await put_wave(bus)
    await bus.put_agent(Agent(id="planner", name="planner", created_at=T0 + 6))
    pid, start = me()  # alive, so the bus keeps the record
    await bus.register_wait(
        WaitRecord(
            id=MIRROR_WAIT,
            waiter="planner",
            kind="fan_in",
            tool="wait",
            targets=[IDS["file-reader"], IDS["test-runner"]],
            target_names=["file-reader", "test-runner"],
            description="a message from each",
            started_at=T0 + 30,
            deadline=NOW + 45,
            progress="1/2 received: file-reader · waiting on test-runner",
            host=hostname(),
            pid=pid,
            pid_start=start,
        )
    )


#: a conversation as its supervisor keeps it (core/transcript.py): kind, turn, by, text, data
TALK: list[tuple[str, int, str | None, str, dict[str, Any]]] = [
    ("user", 1, "prompt", "Make the parser accept trailing commas; add a test.", {}),
    ("turn", 1, None, "turn 1 started", {}),
    ("tool", 1, None, "Read src/parser.py", {"tool": "Read"}),
    ("result", 1, None, "def parse(tokens):\n    items = []\n    ...", {"error": False}),
    ("tool", 1, None, "Edit src/parser.py", {"tool": "Edit"}),
    ("tool", 1, None, "Bash python -m pytest -q tests/test_parser.py", {"tool": "Bash"}),
    ("result", 1, None, "1 failed, 11 passed in 0.41s", {"error": True}),
    ("agent", 1, None, "Trailing commas parse now; the new test passes, one old test expected an error.", {}),
    (
        "turn",
        1,
        None,
        "turn 1 success",
        {"status": "success", "usage": {"input_tokens": 18_400, "output_tokens": 1_250, "cost_usd": 0.0921}},
    ),
    ("user", 2, "orchestrator", "Keep the old test: a comma alone is still an error.", {}),
    ("turn", 2, None, "turn 2 started", {}),
    ("tool", 2, None, "Edit tests/test_parser.py", {"tool": "Edit"}),
]


async def put_talk(bus: Bus) -> None:
    """fixer, a Claude Code flight in its second turn, told by the person after its first."""
    await register(bus, "orchestrator")
    await put_flight(
        bus,
        "fixer",
        1,
        preset="claude",
        conversation="claude",
        events="claude",
        session_id="5e551000-0000-4000-8000-000000000001",
        turn=2,
        usage=Usage(input_tokens=18_400, output_tokens=1_250, cost_usd=0.0921, turns=1),
        last_message="Trailing commas parse now; the new test passes, one old test expected an error.",
        last_message_at=T0 + 20,
    )
    agent_id = IDS["fixer"]
    for n, (kind, turn, by, text, data) in enumerate(TALK):
        fields = {"kind": kind, "turn": turn, "data": data} | ({"by": by} if by else {})
        await bus.deliver(
            Item(
                id=f"7a1c00000000000000000000000002{n:02d}",
                type="transcript",
                to=f"{agent_id}.talk",
                sender=agent_id,
                body=text,
                sent_at=T0 + 2 + n,
                data=fields,
            )
        )


async def until(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    import anyio

    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"scene: timed out waiting for {what}")
        with anyio.move_on_after(0.01):
            await anyio.Event().wait()


AppPilot = Pilot[dict[str, Any] | None]


def toasts(app: WaveApp) -> list[Widget]:
    """The toasts shown on the current screen (Textual keeps them out of plain queries)."""
    try:
        rack = app.screen.get_child_by_id("textual-toastrack")
    except NoMatches:
        return []
    return [toast for holder in rack.children for toast in holder.children]


def app_of(pilot: AppPilot) -> WaveApp:
    assert isinstance(pilot.app, WaveApp)
    return pilot.app


def main_of(pilot: AppPilot) -> MainScreen:
    return app_of(pilot).main


async def ready(pilot: AppPilot, rows: int) -> None:
    await until(lambda: main_of(pilot).read_count > 0 and len(main_of(pilot).flights()) == rows, "the first read")
    await pilot.pause()


async def start_fan_in(pilot: AppPilot) -> None:
    await ready(pilot, 5)
    await pilot.press(*"/wait 60 a1b2 e5f6 c3d4", "enter")
    await until(lambda: IDS["file-reader"] in main_of(pilot).own_wait.received, "the first message claimed")
    await pilot.pause()


async def after_escape(pilot: AppPilot) -> None:
    await start_fan_in(pilot)
    await pilot.press("escape")
    main = main_of(pilot)
    await until(lambda: not main.waiting and main.last_result is not None, "the result")
    await pilot.pause()


async def a_death(pilot: AppPilot) -> None:
    await ready(pilot, 2)
    app = app_of(pilot)
    await app.bus.transition(
        IDS["linter"],
        "dead",
        ("running",),
        reason="exited with code 1; last output:\nTraceback (most recent call last):\nRuntimeError: ruff crashed",
        ended_at=T0 + 9,
        exit_code=1,
    )
    await until(lambda: any(a.status == "dead" for a in app.main.agents), "the death")
    await until(lambda: bool(app.notices), "the toast")
    await pilot.pause()


async def mirror(pilot: AppPilot) -> None:
    await ready(pilot, 6)
    await until(lambda: bool(main_of(pilot).waits), "the mirrored wait")
    await pilot.pause()


async def help_screen(pilot: AppPilot) -> None:
    await ready(pilot, 0)
    await pilot.press(*"/help", "enter")
    await pilot.pause()


async def needs_input(pilot: AppPilot) -> None:
    await ready(pilot, 5)
    await until(lambda: bool(app_of(pilot).notices), "the notice")
    await pilot.pause()


async def waiting_with_mirror(pilot: AppPilot) -> None:
    """A wait of the person's own while another process's wait is mirrored, a line being typed."""
    await ready(pilot, 6)
    await until(lambda: bool(main_of(pilot).waits), "the mirrored wait")
    await pilot.press(*"/wait 60 a1b2 e5f6 c3d4", "enter")
    await until(lambda: IDS["file-reader"] in main_of(pilot).own_wait.received, "the first message claimed")
    await pilot.press(*"/send e5f6 typed during the wait")
    await pilot.pause()


async def notices_during_a_wait(pilot: AppPilot) -> None:
    """The demo's moment at 80x24: a fan-in wait runs when a flight it does not name asks a
    question (one it names would end it: needs_input) and another dies; both notices are up
    while the status says what the wait still waits for."""
    await ready(pilot, 6)
    await pilot.press(*"/wait 60 a1b2 e5f6 b7c8 d5e6", "enter")
    await _question_and_death(pilot)


async def _question_and_death(pilot: AppPilot) -> None:
    app = app_of(pilot)
    await until(lambda: IDS["file-reader"] in app.main.own_wait.received, "the first message claimed")
    await put_question_of(app.bus)
    await app.bus.transition(
        IDS["test-runner"],
        "dead",
        ("running",),
        reason="exited with code 1; last output:\n[03] checking the result …\nTraceback (most recent call last):\n"
        "  ...\nRuntimeError: ruff crashed: config error",
        ended_at=T0 + 40,
        exit_code=1,
    )
    await until(lambda: len(app.notices) >= 2, "the two notices")
    await until(lambda: len(toasts(app)) >= 2, "the two toasts")
    await pilot.pause()


async def demo_moment(pilot: AppPilot) -> None:
    """The demo's moment at 80x24 with the mirror: a wait on five flights when the sixth asks
    a question (a flight it names would end it: needs_input) and another dies; the panel keeps
    five flights in view, the status summarises."""
    await ready(pilot, 7)
    await until(lambda: bool(main_of(pilot).waits), "the mirrored wait")
    await pilot.press(*"/wait 60 a1b2 e5f6 c3d4 b7c8 d5e6", "enter")
    await _question_and_death(pilot)


async def flight_detail(pilot: AppPilot) -> None:
    await ready(pilot, 5)
    main_of(pilot).open_flight(IDS["file-reader"])
    await pilot.pause()
    await until(
        lambda: "read 42 files" in str(pilot.app.screen.query_one("#flight-items", RichLog).lines[:1]),
        "the flight's messages",
    )
    await until(lambda: len(pilot.app.screen.query_one("#flight-output", RichLog).lines) > 0, "the output pane")
    await pilot.pause()


async def talk(pilot: AppPilot) -> None:
    """The flight's screen of fixer: its conversation, the line that tells it at the foot."""
    await ready(pilot, 1)
    main_of(pilot).open_flight(IDS["fixer"])
    await pilot.pause()
    shown = f"[2]   ↳ {TALK[-1][3]}"
    await until(
        lambda: shown in str([s.text for s in pilot.app.screen.query_one("#flight-talk", RichLog).lines]),
        "the conversation",
    )
    await pilot.pause()


async def empty(pilot: AppPilot) -> None:
    await ready(pilot, 0)


async def wave(pilot: AppPilot) -> None:
    await ready(pilot, 5)


async def coding(pilot: AppPilot) -> None:
    await ready(pilot, 6)


Scene = tuple[Callable[[Bus], Awaitable[None]] | None, Callable[[AppPilot], Awaitable[None]]]
SCENES: dict[str, Scene] = {
    "empty-bus": (None, empty),
    "running-wave": (put_wave, wave),
    "waiting": (put_wave, start_fan_in),
    "after-escape": (put_wave, after_escape),
    "dead-flight": (put_two, a_death),
    "mirror": (put_mirror, mirror),
    "help": (None, help_screen),
    "help-80": (None, help_screen),
    "flight-detail": (put_wave, flight_detail),
    "needs-input": (put_question, needs_input),
    "small-terminal": (put_mirror, waiting_with_mirror),
    "notices-during-a-wait": (put_wave_and_slow, notices_during_a_wait),
    "coding-wave": (put_coding_wave, coding),
    "coding-wave-80": (put_coding_wave, coding),
    "demo-at-80x24": (put_demo_moment, demo_moment),
    "talk-80": (put_talk, talk),
}
#: scenes of `wavewait demo`'s screen (its guide above the command line), over the scene's records
OPTIONS: dict[str, dict[str, Any]] = {"demo-at-80x24": {"demo": DemoPlan(seed=None)}}
#: scenes shown at another size than the default (a newcomer's 80x24 terminal)
SIZES: dict[str, tuple[int, int]] = {
    "small-terminal": (80, 24),
    "notices-during-a-wait": (80, 24),
    "coding-wave": (140, 30),
    "coding-wave-80": (80, 24),
    "demo-at-80x24": (80, 24),
    "help-80": (80, 24),
    "talk-80": (80, 24),
}
