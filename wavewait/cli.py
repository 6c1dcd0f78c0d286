"""The `wavewait` command: the same core as the MCP tools, for people and shell-only agents.

Every command prints the JSON of the core result its tool returns and exits with that
result's `exit_code`: one of `core/exits.py: Exit` (docs/words.md, "Results"; `wavewait --help`
lists them, from the enum itself). The arguments are read by the one parser in cli_parser.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio

from .cli_parser import parse_args, seconds
from .core import admission, changes, conversation, flights, merge, messages, spawning, transcript, wait
from .core import agents as agents_mod
from .core.agents import agent_view
from .core.bus import Bus, bus_url, open_bus
from .core.delivery import ClaimLost, delivering, holding
from .core.errors import BadInput, WavewaitError
from .core.exits import Exit
from .core.limits import check_path
from .core.results import (
    AgentInfo,
    AgentList,
    AgentStatus,
    DiffStat,
    InterruptResult,
    KillResult,
    NotifyResult,
    OutputResult,
    PruneResult,
    Result,
    SendResult,
    TellResult,
    TranscriptResult,
    WaitList,
    iso,
)
from .queue_cli import COMMANDS as QUEUE_COMMANDS
from .queue_cli import mcp_settings
from .spawn_flags import spawn_request
from .words import said

if TYPE_CHECKING:
    from .mcp.front import Front


def _print(result: Result) -> int:
    """Every command's answer: the result's JSON on stdout; its exit code returned."""
    print(json.dumps(result.to_json(), ensure_ascii=False))
    return result.exit_code


async def _interruptible(run: Callable[[wait.Control], Awaitable[Result]]) -> int:
    """Run a wait; Ctrl+C interrupts it (partial result, exit 4) instead of killing it.

    What the wait took leaves the inbox only once its answer was flushed to stdout; if that
    fails (a closed pipe, a full disk) it goes back to the inbox and the command exits 5.
    """
    control = wait.Control(hold=True)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, control.interrupt)
    try:
        async with holding(lambda: control.delivery):
            result = await run(control)
            if control.delivery is not None:
                await control.delivery.confirm()
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    try:
        async with delivering(control.delivery):
            code = _print(result)
            sys.stdout.flush()
    except OSError as e:
        _silence_stdout()
        print(
            f"wavewait: error: could not write the result to stdout ({e.strerror or e}); "
            "nothing was consumed, the wait can be run again",
            file=sys.stderr,
        )
        return Exit.NOT_DELIVERED
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's own flush at exit cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


#: commands that only look at or act on what the bus holds: they never create a bus
NEEDS_A_BUS = {"agents", "waits", "kill", "close", "interrupt", "diff", "prune", "tell", "transcript"}


async def _run(args: argparse.Namespace) -> int:
    bus = await open_bus(args.bus, create=args.command not in NEEDS_A_BUS)
    try:
        return await COMMANDS[args.command](bus, args)
    finally:
        await bus.close()


async def cmd_send(bus: Bus, args: argparse.Namespace) -> int:
    item = await messages.send(bus, agents_mod.caller_id(args.agent), args.to, args.message)
    return _print(SendResult(message_id=item.id))


async def cmd_wait(bus: Bus, args: argparse.Namespace) -> int:
    request = wait.WaitRequest(
        timeout=wait.check_timeout(args.timeout),
        ids=args.ids or None,
        wave=args.wave,
        files=[wait.FilesTarget.parse(f, os.getcwd()) for f in args.files or ()],
        events=args.event or [],
        need=wait.parse_need(args.need),
        check=args.check,
        check_timeout=wait.check_timeout(args.check_timeout, "--check-timeout"),
        stop_rest=args.stop_rest,
        max_messages=args.max,
    )
    caller = agents_mod.caller_id(args.agent)
    return await _interruptible(lambda c: wait.wait_for(bus, caller, request, control=c))


async def cmd_wait_signal(bus: Bus, args: argparse.Namespace) -> int:
    pattern = os.path.abspath(check_path(args.glob, "glob"))
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
    """Report completion, once per round: a worker already idle (it reported, by the tool or an
    earlier hook, and got no new input since) or closed is not reported again. So a Stop hook
    after the model's own notify_completion sends nothing, and says so."""
    worker = agents_mod.caller_id(args.agent)
    known = await bus.get_agent(worker)
    if known is not None and known.status in ("idle", "closed"):
        print(
            f"wavewait notify: {worker} already reported this round (it is {known.status}); nothing sent",
            file=sys.stderr,
        )
        print(json.dumps({"success": True, "already_reported": True, "status": known.status}))
        return Exit.OK
    item = await messages.notify_completion(
        bus,
        worker,
        status=args.status,
        message=args.message or "",
        changes=args.change,
        session_id=args.session,
    )
    return _print(NotifyResult(success=True, event_id=item.id))


async def cmd_spawn(bus: Bus, args: argparse.Namespace) -> int:
    """A plain command, or a preset's agent on a prompt (the words after --); in its own
    worktree by default for a preset in a repository (docs/coding-waves.md)."""
    agent = await spawning.spawn(bus, spawn_request(args, agents_mod.caller_id(args.agent)))
    if args.quiet:  # the id alone, for a shell to collect: ids="$ids $(wavewait spawn -q ...)"
        print(agent.id)
        return Exit.OK
    return _print(agents_mod.spawn_result(agent))


async def cmd_diff(bus: Bus, args: argparse.Namespace) -> int:
    """A flight's patch against its base (uncommitted work included), or with --stat its counts as JSON."""
    agent = await agents_mod.resolve_agent(bus, args.id, "agent")
    if args.stat:
        if agent.worktree is None:
            raise BadInput(f"agent: {agent.name} ({agent.id[:8]}) has no worktree, so nothing to count")
        summary = await asyncio.to_thread(changes.count, agent.worktree, final=agent.finished)
        return _print(DiffStat(agent_id=agent.id, name=agent.name, worktree=agent.worktree, changes=summary))
    patch = await flights.diff(agent)
    if not patch:  # an empty patch on stdout, and a word on stderr so an empty screen is not a riddle
        print(f"wavewait diff: {agent.name} ({agent.id[:8]}) has no changes against its base", file=sys.stderr)
    sys.stdout.write(patch)
    return Exit.OK


async def cmd_prune(bus: Bus, args: argparse.Namespace) -> int:
    done = await flights.prune(bus, force=args.force, wave=args.wave)
    return _print(PruneResult(**done))


async def cmd_merge(bus: Bus, args: argparse.Namespace) -> int:
    """Merge a wave's branches in order onto a branch (docs/merging.md); exit 6 if one stopped."""
    result = await merge.merge_wave(
        bus,
        args.wave,
        caller=agents_mod.caller_id(args.agent),
        into=args.into,
        check=args.check,
        dry_run=args.dry_run,
        resolve_with=args.resolve_with,
        presets_file=args.presets or os.environ.get("WAVEWAIT_PRESETS") or None,
    )
    return _print(result)


async def cmd_agents(bus: Bus, args: argparse.Namespace) -> int:
    found = await admission.list_wave(bus, args.wave)
    return _print(AgentList(agents=[AgentInfo(**agent_view(a)) for a in found]))


async def cmd_kill(bus: Bus, args: argparse.Namespace) -> int:
    before = await agents_mod.resolve_agent(bus, args.id, "agent")
    agent = await admission.kill(bus, before, by=agents_mod.caller_id(args.agent))
    return _print(KillResult(agent_id=agent.id, status=agent.status, hint=agents_mod.kill_said(before, agent)))


async def cmd_output(bus: Bus, args: argparse.Namespace) -> int:
    agent = await agents_mod.resolve_agent(bus, args.id, "agent")
    lines = await agents_mod.read_output(bus, agent, args.lines)
    return _print(OutputResult(agent_id=agent.id, name=agent.name, state=agent.state, lines=lines))


async def cmd_ask(bus: Bus, args: argparse.Namespace) -> int:
    """Ask the parent a question, then wait for the answer (the flight needs input meanwhile)."""
    me = agents_mod.caller_id(args.agent)
    timeout = wait.check_timeout(args.timeout)
    await messages.ask(bus, me, args.question, to=args.to)
    return await _interruptible(lambda c: wait.wait_event(bus, me, timeout, [messages.ANSWER], control=c))


async def cmd_reply(bus: Bus, args: argparse.Namespace) -> int:
    item = await messages.answer(bus, agents_mod.caller_id(args.agent), args.id, args.answer)
    return _print(SendResult(message_id=item.id))


async def cmd_close(bus: Bus, args: argparse.Namespace) -> int:
    agent = await agents_mod.resolve_agent(bus, args.id, "agent")
    agent = await admission.close(bus, agent)
    return _print(AgentStatus(agent_id=agent.id, status=agent.status))


async def cmd_tell(bus: Bus, args: argparse.Namespace) -> int:
    said = await conversation.tell(bus, args.id, args.message, by=agents_mod.caller_id(args.agent), interrupt=args.now)
    return _print(TellResult(**said))


async def cmd_transcript(bus: Bus, args: argparse.Namespace) -> int:
    """The conversation as text (one line an entry) or JSON; `--follow` goes on as it grows."""
    agent = await agents_mod.resolve_agent(bus, args.id, "agent")
    items = await transcript.read(bus, agent.id, tail=args.tail, before=args.before)
    entries = [transcript.entry_view(i) for i in items]
    if args.json and not args.follow:
        first = entries[0]["seq"] if entries else None
        more = first is not None and bool(await transcript.read(bus, agent.id, tail=1, before=first))
        return _print(
            TranscriptResult(
                agent_id=agent.id, name=agent.name, state=agent.state, turn=agent.turn, entries=entries, more=more
            )
        )
    for e in entries:
        print(json.dumps(e, ensure_ascii=False) if args.json else transcript.line(e), flush=True)
    if not args.follow:
        return Exit.OK
    after = entries[-1]["seq"] if entries else 0
    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        async for batch in transcript.follow(bus, agent.id, after):
            for e in map(transcript.entry_view, batch):
                print(json.dumps(e, ensure_ascii=False) if args.json else transcript.line(e), flush=True)
    return Exit.OK


async def cmd_interrupt(bus: Bus, args: argparse.Namespace) -> int:
    from .core.ids import resolve

    waits = {w.id: w for w in await bus.list_waits()}
    wait_id = resolve(args.wait, waits, "wait", what="wait")
    await bus.interrupt(wait_id)
    return _print(InterruptResult(wait_id=wait_id, interrupted=True))


async def cmd_waits(bus: Bus, args: argparse.Namespace) -> int:
    """Waits in progress, with their ages and ISO times rather than epoch seconds."""
    waits = await bus.list_waits()
    t = time.time()
    shown = []
    for w in waits:
        view = w.model_dump(mode="json")
        view["started_at"] = iso(w.started_at)
        view["age_sec"] = round(max(0.0, t - w.started_at), 1)
        view["deadline"] = iso(w.deadline)
        view["left_sec"] = None if w.deadline is None else round(max(0.0, w.deadline - t), 1)
        shown.append(view)
    print(json.dumps({"waits": shown}, ensure_ascii=False))
    return WaitList(waits=waits).exit_code


COMMANDS: dict[str, Callable[[Bus, argparse.Namespace], Awaitable[int]]] = {
    "send": cmd_send,
    "wait": cmd_wait,
    "wait-signal": cmd_wait_signal,
    "wait-event": cmd_wait_event,
    "notify": cmd_notify,
    "spawn": cmd_spawn,
    "diff": cmd_diff,
    "prune": cmd_prune,
    "merge": cmd_merge,
    "agents": cmd_agents,
    "kill": cmd_kill,
    "close": cmd_close,
    "tell": cmd_tell,
    "transcript": cmd_transcript,
    "interrupt": cmd_interrupt,
    "waits": cmd_waits,
    "output": cmd_output,
    "ask": cmd_ask,
    "reply": cmd_reply,
    **QUEUE_COMMANDS,
}


def _notify_hook_guard(args: argparse.Namespace) -> int | None:
    """`notify` outside a flight (no ids): nothing to report, said on stderr. Run by hand that
    is a report not delivered (5); as a stop hook (`--hook`), run in every session of the host,
    the orchestrator's too, it is the hook's whole job done (0)."""
    if args.command != "notify":
        return None
    missing = None
    if not (args.agent or os.environ.get("WAVEWAIT_AGENT_ID")):
        missing = "WAVEWAIT_AGENT_ID is not set, so there is no worker to report (run under 'wavewait spawn', or pass --agent)"
    elif not (args.session or os.environ.get("WAVEWAIT_PARENT_ID")):
        missing = "WAVEWAIT_PARENT_ID is not set, so there is no one to report to (pass --session)"
    if missing is None:
        return None
    print(f"wavewait notify: {missing}; nothing sent", file=sys.stderr)
    return Exit.OK if args.hook else Exit.NOT_DELIVERED


def run_mcp(args: argparse.Namespace, front: Front | None = None) -> int:
    """`wavewait mcp`: one `Settings` from flags and environment, then the server (or its set-up text)."""
    url = bus_url(args.bus)
    if args.print_config:
        from .mcp.hosts import render

        shown = url if "://" in url else os.path.abspath(os.path.expanduser(url))
        sys.stdout.write(render(args.print_config, shown, args.max_block, os.getcwd()))
        return Exit.OK
    if args.transport == "stdio" and front is None:  # answer the host's first requests while the SDK imports
        from .mcp.front import start as start_front  # (wavewait/command.py starts it sooner)

        front = start_front()
    from .mcp.server import serve
    from .mcp.settings import PROGRESS_GAP, Settings

    try:
        settings = Settings(
            bus=url,
            caller=agents_mod.caller_id(args.agent),
            project_dir=_project_dir(),
            max_block=_max_block(args.max_block),
            output_budget=args.output_budget or _env_whole("WAVEWAIT_OUTPUT_BUDGET") or 30_000,
            allow_paths=tuple(args.allow_path),
            agent_command=args.agent_command or os.environ.get("WAVEWAIT_AGENT_COMMAND") or None,
            presets=args.presets or os.environ.get("WAVEWAIT_PRESETS") or None,
            progress_every=args.progress_every or _env_seconds("WAVEWAIT_PROGRESS_EVERY"),
            progress_gap=_env_seconds("WAVEWAIT_PROGRESS_GAP") or PROGRESS_GAP,
            ack_grace=_env_seconds("WAVEWAIT_ACK_GRACE"),
            transport=args.transport,
            host=args.host,
            port=args.port,
            token=_token(args.token) if args.transport == "http" else "",
            **mcp_settings(args),
        )
        anyio.run(serve, settings, front)
    except WavewaitError as e:
        print(f"wavewait mcp: error: {e}", file=sys.stderr)
        return Exit.BAD_INPUT
    except KeyboardInterrupt:
        pass
    return Exit.OK


def _project_dir() -> str:
    """Where relative signal paths start: WAVEWAIT_PROJECT_DIR, else CLAUDE_PROJECT_DIR, else cwd."""
    d = os.environ.get("WAVEWAIT_PROJECT_DIR") or os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd()
    return os.path.realpath(os.path.expanduser(d))


def _max_block(given: float | None) -> float:
    """--max-block, else $WAVEWAIT_MAX_BLOCK, else 240 s; kept below Claude Code's $MCP_TOOL_TIMEOUT.

    Claude Code passes its environment to the server and, at MCP_TOOL_TIMEOUT, drops the call
    without telling the server (no notifications/cancelled): a wait still running then could
    take a report nobody sees. So every wait returns before that cut.
    """
    from .mcp.hosts import DEFAULT_MAX_BLOCK

    block = given or _env_seconds("WAVEWAIT_MAX_BLOCK") or DEFAULT_MAX_BLOCK
    raw = os.environ.get("MCP_TOOL_TIMEOUT", "")
    if raw.isdigit() and int(raw) >= 1000:  # milliseconds; the host ignores values below 1 s
        cut = int(raw) / 1000
        block = min(block, max(cut * 0.5, cut - max(1.0, cut * 0.1)))
    return block


def _env_whole(name: str) -> int | None:
    value = os.environ.get(name)
    if not value:
        return None
    if not value.isdigit() or int(value) < 1000:
        raise BadInput(f"{name}: must be a whole number of characters ≥ 1000, got {value!r}")
    return int(value)


def _env_seconds(name: str) -> float | None:
    value = os.environ.get(name)
    try:
        return seconds(value) if value else None
    except argparse.ArgumentTypeError as e:
        raise BadInput(f"{name}: {e}") from None


def _token(given: str | None) -> str:
    """The HTTP bearer token: --token, else $WAVEWAIT_MCP_TOKEN, else a new one shown on stderr."""
    token = given or os.environ.get("WAVEWAIT_MCP_TOKEN")
    if not token:
        token = secrets.token_urlsafe(32)
        print(
            f"wavewait mcp: bearer token (set WAVEWAIT_MCP_TOKEN to choose one): {token}", file=sys.stderr, flush=True
        )
    return token


def run_warm(action: str) -> int:
    """`wavewait warm status|stop`: this user's warm processes, listed or asked to end."""
    from . import warm_procs

    if action == "status":
        print(json.dumps({"folder": warm_procs.folder(), "warm": warm_procs.running()}))
    else:
        print(json.dumps(warm_procs.stop()))
    return Exit.OK


def main(argv: list[str] | None = None, front: Front | None = None) -> None:
    """The `wavewait` command; `front` is the MCP front `wavewait.command` already started, if any."""
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command in (None, "demo"):
        from .tui_main import run_tui

        sys.exit(run_tui(args))
    if args.command == "warm":
        sys.exit(run_warm(args.action))
    if args.command == "serve":
        from .serve import run_serve

        sys.exit(run_serve(args))
    if args.command == "mcp":
        sys.exit(run_mcp(args, front))
    if args.command == "spawn" and not args.cmd:
        what = (
            "the prompt after --: spawn NAME --preset P -- PROMPT"
            if args.preset
            else "the command after --: spawn NAME -- CMD ..."
        )
        print(f"wavewait spawn: error: give {what}", file=sys.stderr)
        sys.exit(Exit.BAD_INPUT)
    if (code := _notify_hook_guard(args)) is not None:
        sys.exit(code)
    try:
        sys.exit(asyncio.run(_run(args)))
    except ClaimLost as e:
        print(f"wavewait {args.command}: {e}", file=sys.stderr)
        sys.exit(Exit.NOT_DELIVERED)
    except merge.MergeError as e:
        print(f"wavewait {args.command}: error: {e}", file=sys.stderr)
        sys.exit(Exit.MERGE_ERROR)
    except WavewaitError as e:
        if args.command == "notify" and args.hook:  # never 2: Claude Code reads a hook's 2 as "do not stop"
            print(f"wavewait notify: {said(e)}; nothing sent", file=sys.stderr)
            sys.exit(Exit.NOT_DELIVERED)
        print(f"wavewait {args.command}: error: {said(e)}", file=sys.stderr)
        sys.exit(Exit.BAD_INPUT)
