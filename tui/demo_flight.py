"""One simulated flight of `wavewait demo`: `python -m wavewait.tui.demo_flight ROLE DELAY MESSAGE [LINGER]`.

It runs under the supervisor like any spawned agent (WAVEWAIT_BUS, WAVEWAIT_AGENT_ID and
WAVEWAIT_PARENT_ID are set), writes its work to stdout (the flight's output log) and
reports through the same paths real agents use.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

from ..core import messages, wait
from ..core.bus import open_bus
from ..core.proc import python_module

STEPS = ("reading the task", "looking around the repository", "working", "checking the result")


def work(delay: float) -> None:
    """Pretend to work for `delay` seconds, saying what it does (the output log)."""
    end = time.monotonic() + delay
    i = 0
    while (left := end - time.monotonic()) > 0:
        print(f"[{i:02d}] {STEPS[min(i, len(STEPS) - 1)]} …", flush=True)
        time.sleep(min(left, 0.7))
        i += 1


async def report(message: str) -> None:
    bus = await open_bus()
    try:
        await messages.notify_completion(bus, os.environ["WAVEWAIT_AGENT_ID"], status="success", message=message)
    finally:
        await bus.close()


def linger(seconds: float) -> None:
    """Stay idle a while after the report, as an agent that keeps its session does (`◌ idle`)."""
    if seconds > 0:
        print(f"reported; idle for {seconds:g} s", flush=True)
        time.sleep(seconds)


async def slow(message: str) -> None:
    """Make a wait of its own (mirrored by the TUI); report how it ended."""
    bus = await open_bus()
    me = os.environ["WAVEWAIT_AGENT_ID"]
    try:
        print(f"{message}: waiting up to 120 s for a message", flush=True)
        result = await wait.wait_next(bus, me, 120)
        print(f"my wait ended: {result.status}", flush=True)
        text = f"go-ahead: {result.message}" if result.message else f"my wait was {result.status}; stopping"
        await messages.notify_completion(bus, me, status="success", message=text)
    finally:
        await bus.close()


async def ask(question: str) -> None:
    """Ask the person a question (the flight needs input), wait for the answer, report it."""
    bus = await open_bus()
    me = os.environ["WAVEWAIT_AGENT_ID"]
    try:
        await messages.ask(bus, me, question)
        print(f"asked: {question}", flush=True)
        got = await wait.wait_event(bus, me, 300, [messages.ANSWER])
        answer = getattr(got, "body", None)
        print(f"answer: {answer}" if answer else f"no answer ({got.type})", flush=True)
        text = f"wrote the guide ({answer})" if answer else "no answer; wrote nothing"
        await messages.notify_completion(bus, me, status="success" if answer else "error", message=text)
    finally:
        await bus.close()


def main() -> None:
    role, delay, message = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    idle = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    print(f"flight {os.environ.get('WAVEWAIT_AGENT_ID', '?')[:8]}: role {role}", flush=True)
    work(delay)
    if role == "report":
        asyncio.run(report(message))
        linger(idle)
    elif role == "report-cli":  # as a shell-only agent would, through the CLI
        subprocess.run([*python_module("wavewait"), "notify", "--status", "success", "--message", message], check=True)
    elif role == "ask":
        asyncio.run(ask(message))
    elif role == "die":
        print(f"Traceback (most recent call last):\n  ...\nRuntimeError: {message}", flush=True)
        sys.exit(1)
    elif role == "slow":
        asyncio.run(slow(message))
    print("done", flush=True)


if __name__ == "__main__":
    main()
