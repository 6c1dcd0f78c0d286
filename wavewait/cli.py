"""The `wavewait` command: the same core as the MCP tools, for people and shell-only agents.

Every command prints the JSON its tool returns. Exit codes: 0 satisfied, 2 bad input,
3 timed out, 4 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from .core import agents as agents_mod
from .core import messages, wait
from .core.agents import agent_view
from .core.bus import Bus, open_bus
from .core.errors import WavewaitError
from .core.results import Result

EXIT = {"satisfied": 0, "timeout": 3, "interrupted": 4}
BAD_INPUT = 2


class Parser(argparse.ArgumentParser):
    """Bad arguments exit 2 (DESIGN's bad-input code), naming the command and the fault."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        command = self.prog.partition(" ")[2]  # "" for the top-level parser
        self.exit(BAD_INPUT, f"wavewait{' ' + command if command else ''}: error: {message}\n")


def _print(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False))


async def _interruptible(run: Callable[[wait.Control], Awaitable[Result]]) -> int:
    """Run a wait; Ctrl+C interrupts it (partial result, exit 4) instead of killing it."""
    control = wait.Control()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, control.interrupt)
    try:
        result = await run(control)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    _print(result.to_json())
    return EXIT[result.outcome()]


async def _run(args: argparse.Namespace) -> int:
    bus = await open_bus(args.bus)
    try:
        return await COMMANDS[args.command](bus, args)
    finally:
        await bus.close()


async def cmd_send(bus: Bus, args: argparse.Namespace) -> int:
    item = await messages.send(bus, agents_mod.caller_id(args.agent), args.to, args.message)
    _print({"message_id": item.id})
    return 0


async def cmd_wait(bus: Bus, args: argparse.Namespace) -> int:
    caller = agents_mod.caller_id(args.agent)
    timeout = wait.check_timeout(args.timeout)
    if args.ids:
        return await _interruptible(lambda c: wait.wait_fan_in(bus, caller, timeout, args.ids, control=c))
    return await _interruptible(lambda c: wait.wait_next(bus, caller, timeout, control=c))


async def cmd_wait_signal(bus: Bus, args: argparse.Namespace) -> int:
    pattern = os.path.abspath(args.glob)
    return await _interruptible(
        lambda c: wait.wait_signal(
            bus,
            agents_mod.caller_id(args.agent),
            pattern,
            timeout=wait.check_timeout(args.timeout),
            min_count=args.min_count,
            control=c,
        )
    )


async def cmd_wait_event(bus: Bus, args: argparse.Namespace) -> int:
    return await _interruptible(
        lambda c: wait.wait_event(
            bus,
            agents_mod.caller_id(args.agent),
            wait.check_timeout(args.timeout, "timeout"),
            args.type or None,
            control=c,
        )
    )


async def cmd_notify(bus: Bus, args: argparse.Namespace) -> int:
    item = await messages.notify_completion(
        bus,
        agents_mod.caller_id(args.agent),
        status=args.status,
        message=args.message or "",
        changes=args.change,
        session_id=args.session,
    )
    _print({"success": True, "event_id": item.id})
    return 0


async def cmd_spawn(bus: Bus, args: argparse.Namespace) -> int:
    parent = agents_mod.caller_id(args.agent)
    await agents_mod.ensure_agent(bus, parent)
    agent = await agents_mod.spawn(bus, args.name, args.cmd, wave=args.wave, parent_id=parent)
    _print({"agent_id": agent.id, "name": agent.name, "pid": agent.pid})
    return 0


async def cmd_agents(bus: Bus, args: argparse.Namespace) -> int:
    found = await agents_mod.list_swept(bus, args.wave)
    _print({"agents": [agent_view(a) for a in found]})
    return 0


async def cmd_kill(bus: Bus, args: argparse.Namespace) -> int:
    agent = await agents_mod.resolve_agent(bus, args.id, "agent")
    agent = await agents_mod.kill(bus, agent, by=agents_mod.caller_id(args.agent))
    _print({"agent_id": agent.id, "status": agent.status})
    return 0


async def cmd_close(bus: Bus, args: argparse.Namespace) -> int:
    agent = await agents_mod.resolve_agent(bus, args.id, "agentId")
    agent = await agents_mod.close(bus, agent)
    _print({"agentId": agent.id, "status": agent.status})
    return 0


async def cmd_interrupt(bus: Bus, args: argparse.Namespace) -> int:
    from .core.ids import resolve

    waits = {w.id: w for w in await bus.list_waits()}
    wait_id = resolve(args.wait, waits, "wait", what="wait")
    await bus.interrupt(wait_id)
    _print({"wait_id": wait_id, "interrupted": True})
    return 0


async def cmd_waits(bus: Bus, args: argparse.Namespace) -> int:
    _print({"waits": [w.model_dump(mode="json") for w in await bus.list_waits()]})
    return 0


COMMANDS: dict[str, Callable[[Bus, argparse.Namespace], Awaitable[int]]] = {
    "send": cmd_send,
    "wait": cmd_wait,
    "wait-signal": cmd_wait_signal,
    "wait-event": cmd_wait_event,
    "notify": cmd_notify,
    "spawn": cmd_spawn,
    "agents": cmd_agents,
    "kill": cmd_kill,
    "close": cmd_close,
    "interrupt": cmd_interrupt,
    "waits": cmd_waits,
}


def build_parser() -> argparse.ArgumentParser:
    def globals_(default: object) -> argparse.ArgumentParser:
        g = argparse.ArgumentParser(add_help=False)
        g.add_argument(
            "--bus", default=default, help="bus directory or postgresql:// URL (default: $WAVEWAIT_BUS or ./.wavebus)"
        )
        g.add_argument(
            "--agent", default=default, help="who is calling (default: $WAVEWAIT_AGENT_ID or 'orchestrator')"
        )
        return g

    p = Parser(
        prog="wavewait",
        parents=[globals_(None)],
        description="Fan work out to agents, then sit still until they report.",
    )
    sub = p.add_subparsers(dest="command", parser_class=Parser)
    # given after the command too; SUPPRESS keeps a value given before it (`--bus X agents`)
    common = globals_(argparse.SUPPRESS)

    def cmd(name: str, help: str, **kw: object) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, parents=[common], description=help, **kw)

    s = cmd("demo", "TUI with a simulated wave (fan-out, messages, a death, a wait)")
    s.add_argument("--seed", type=int, default=None, help="make the simulated wave repeatable")
    s = cmd(
        "mcp", "MCP server (stdio by default; `wavewait mcp --help` for its options)", add_help=False
    )  # --help goes on to the server's own parser
    s.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    s = cmd(
        "serve",
        "serve the TUI in a browser: `wavewait demo` by default, the TUI on a bus with "
        "--bus ($WAVEWAIT_BUS alone does not switch); needs pip install 'wavewait[serve]'",
    )
    s.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1, this machine only); any other "
        "address exposes the TUI, and with it the bus, to the network with no "
        "authentication",
    )
    s.add_argument("--port", type=_port, default=8000, help="port to listen on (default 8000)")
    s.add_argument(
        "--public-url",
        help="URL browsers reach the server at, if not http://HOST:PORT (behind a proxy, or with --host 0.0.0.0)",
    )
    s.add_argument(
        "--demo",
        action="store_true",
        help="serve `wavewait demo`, one temporary bus per session (the default without --bus)",
    )
    s.add_argument("--seed", type=int, default=None, help="make the demo's wave repeatable")
    s = cmd("send", "send a message to an agent")
    s.add_argument("to", help="recipient id or unique prefix (≥ 4 characters)")
    s.add_argument("message")
    s = cmd("wait", "wait for the next message, or for one message from each listed agent")
    s.add_argument("timeout", help="seconds; 0 is an instant check")
    s.add_argument("ids", nargs="*", help="agents to fan in on (ids or prefixes)")
    s = cmd("wait-signal", "wait until files matching a glob appear")
    s.add_argument("glob")
    s.add_argument("--min-count", type=_positive_int, default=1)
    s.add_argument("--timeout", default="1800", help="seconds (default 1800)")
    s = cmd("wait-event", "take one event of the given types from your inbox")
    s.add_argument("--type", action="append", help="event type (repeatable; default: all)")
    s.add_argument("--timeout", default="300", help="seconds (default 300; 0 is an instant check)")
    s = cmd("notify", "report completion to your parent (works as an agent host's stop hook)")
    s.add_argument("--status", choices=("success", "error"), default="success")
    s.add_argument("--message", default="")
    s.add_argument("--change", action="append", default=[], help="a file changed (repeatable)")
    s.add_argument("--session", help="who to report to (default: $WAVEWAIT_PARENT_ID)")
    s = cmd("spawn", "run a command as a supervised agent: spawn NAME [--wave W] -- CMD ...")
    s.add_argument("name")
    s.add_argument("--wave")
    s.add_argument("cmd", nargs="*", help="the command (everything after --)")
    s = cmd("agents", "list agents")
    s.add_argument("--wave")
    s = cmd("kill", "kill an agent's process group and mark it dead")
    s.add_argument("id")
    s = cmd("close", "mark an agent closed (done for good)")
    s.add_argument("id")
    s = cmd("interrupt", "interrupt a wait in progress (it returns its partial state)")
    s.add_argument("wait", help="wait id or unique prefix (see `wavewait waits`)")
    cmd("waits", "list waits in progress")
    return p


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number ≥ 1, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number ≥ 1, got {value!r}")
    return n


def _port(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number 1-65535, got {value!r}") from None
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 1-65535, got {value!r}")
    return n


def _notify_hook_guard(args: argparse.Namespace) -> int | None:
    """As a stop hook, `notify` must never block the host: no ids → say so, exit 0."""
    if args.command != "notify":
        return None
    if not (args.agent or os.environ.get("WAVEWAIT_AGENT_ID")):
        print(
            "wavewait notify: WAVEWAIT_AGENT_ID is not set, so there is no worker to report; "
            "nothing sent (run under `wavewait spawn`, or pass --agent)",
            file=sys.stderr,
        )
        return 0
    if not (args.session or os.environ.get("WAVEWAIT_PARENT_ID")):
        print(
            "wavewait notify: WAVEWAIT_PARENT_ID is not set, so there is no one to report to; "
            "nothing sent (pass --session)",
            file=sys.stderr,
        )
        return 0
    return None


def _split_spawn(argv: list[str]) -> list[str] | None:
    """Cut `spawn NAME [--wave W] -- CMD ...` at the `--`, so CMD's options stay CMD's.

    Returns CMD (and shortens `argv` in place), or None when there is no spawn with `--`.
    """
    if "spawn" not in argv or "--" not in argv or argv.index("--") < argv.index("spawn"):
        return None
    cut = argv.index("--")
    cmd = argv[cut + 1 :]
    del argv[cut:]
    return cmd


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    whole = list(argv)
    spawn_cmd = _split_spawn(argv)
    args, extra = parser.parse_known_args(argv)  # `mcp` takes its own options (see mcp_server)
    if spawn_cmd is not None:
        if args.command == "spawn":
            args.cmd = [*args.cmd, *spawn_cmd]
        else:  # "spawn" was a word of another command (a message, say): nothing to cut
            args, extra = parser.parse_known_args(whole)
    if extra and args.command != "mcp":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command in (None, "demo"):
        from .tui_main import run_tui

        sys.exit(run_tui(args))
    if args.command == "serve":
        from .serve import run_serve

        sys.exit(run_serve(args))
    if args.command == "mcp":
        from .mcp_server import main as mcp_main

        sys.exit(mcp_main([*extra, *args.rest], bus=args.bus, agent=args.agent))
    if args.command == "spawn" and not args.cmd:
        print("wavewait spawn: error: give the command after --: spawn NAME -- CMD ...", file=sys.stderr)
        sys.exit(BAD_INPUT)
    if (code := _notify_hook_guard(args)) is not None:
        sys.exit(code)
    try:
        sys.exit(asyncio.run(_run(args)))
    except WavewaitError as e:
        if args.command == "notify":
            print(f"wavewait notify: {e}; nothing sent", file=sys.stderr)
            sys.exit(0)
        print(f"wavewait {args.command}: error: {e}", file=sys.stderr)
        sys.exit(BAD_INPUT)
