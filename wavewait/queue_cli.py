"""The task queue from a shell: `run-queue`, `enqueue`, `complete`, `handoffs`, `tasks`.

Each prints the JSON its MCP tool returns (`run-queue`: its summary) and exits 2 on bad
input or a guard trip. `run-queue` exits 0 only when every task is done, else 1, and 4 when
interrupted (core/exits.py). The queue
flags (`--queue`, `--task-types`, `--max-tasks`, `--max-depth`, `--max-attempts`) are
shared with `wavewait mcp`; each falls back to its WAVEWAIT_ variable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from pydantic import BaseModel

from .core import agents, budgets, waves
from .core.bus import Bus
from .core.errors import BadInput
from .core.exits import Exit
from .core.proc import settle_heap
from .core.runner import DEFAULT_MAX_PARALLEL, Runner, RunSummary, queue_wave
from .core.tasks import (
    HandoffList,
    Limits,
    TaskList,
    TaskQueue,
    bound_task_id,
    complete_task,
    enqueue_task,
    list_tasks,
    load_task_types,
    queue_name,
    read_handoffs,
    result_json,
    task_types_path,
)
from .core.waves import MAX_PARALLEL, parse_max_parallel
from .spawn_flags import add_budget_flags, at_least

AddCommand = Callable[[str, str], argparse.ArgumentParser]


def add_queue_flags(p: argparse.ArgumentParser, limits: bool = True) -> None:
    """--queue and --task-types, and (where guards or retries apply) the limits."""
    p.add_argument("--queue", metavar="NAME", help="the task queue (default: $WAVEWAIT_QUEUE)")
    p.add_argument("--task-types", metavar="FILE", help="task types TOML (default: $WAVEWAIT_TASK_TYPES)")
    if limits:
        p.add_argument(
            "--max-tasks",
            type=at_least(1),
            metavar="N",
            help="task budget of the queue (default 25; $WAVEWAIT_MAX_TASKS)",
        )
        p.add_argument(
            "--max-depth", type=at_least(0), metavar="N", help="deepest a child may be (default 4; $WAVEWAIT_MAX_DEPTH)"
        )
        p.add_argument(
            "--max-attempts",
            type=at_least(1),
            metavar="N",
            help="agent starts per task before it fails (default 2; $WAVEWAIT_MAX_ATTEMPTS)",
        )


def _limits(args: argparse.Namespace) -> Limits:
    return Limits.from_env(
        max_tasks=getattr(args, "max_tasks", None),
        max_depth=getattr(args, "max_depth", None),
        max_attempts=getattr(args, "max_attempts", None),
    )


def mcp_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The queue part of `wavewait mcp`'s Settings: none of it without a queue."""
    name = queue_name(args.queue)
    if name is None:
        return {}
    return {
        "queue": name,
        "task_types": task_types_path(args.task_types),
        "task_id": bound_task_id(),
        "limits": _limits(args),
    }


def add_commands(cmd: AddCommand) -> None:
    """The queue's subcommands, on the CLI's subparser factory."""
    p = cmd("run-queue", "run a task queue: an agent for each task whose dependencies are done")
    add_queue_flags(p)
    p.add_argument(
        "--agent-command",
        metavar="CMD",
        help="the agent's command; the prompt is appended as its last argument (default: $WAVEWAIT_AGENT_COMMAND); "
        "not needed when every task type names a preset",
    )
    p.add_argument(
        "--presets",
        metavar="FILE",
        help="agent presets of your own for the task types' preset = ... (default: $WAVEWAIT_PRESETS)",
    )
    p.add_argument(
        "--max-parallel",
        metavar="N|auto",
        help=f"agents running at once (default {DEFAULT_MAX_PARALLEL}); given, it is also the limit of the queue's "
        "wave queue-NAME, kept on the bus; auto: as many as the machine's cores, free memory and load allow "
        "(docs/admission.md)",
    )
    add_budget_flags(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p = cmd("enqueue", "add a task: enqueue TYPE --input key=value ... --reason R")
    add_queue_flags(p)
    p.add_argument("type", help="a task type of the queue")
    p.add_argument("--input", action="append", default=[], metavar="KEY=VALUE", help="an input (repeatable)")
    p.add_argument("--inputs-json", metavar="JSON", help="inputs as a JSON object (--input adds to it)")
    p.add_argument("--reason", required=True, help="in a sentence, why the task is needed")
    p.add_argument(
        "--depends-on", action="append", default=[], metavar="ID", help="a task that must be done first (repeatable)"
    )
    p.add_argument("--model", help="a model for the task's agent")
    p = cmd("complete", "finish a task with its handoff (default: $WAVEWAIT_TASK_ID)")
    add_queue_flags(p, limits=False)
    p.add_argument("task_id", nargs="?", metavar="TASK_ID", help="the task (default: $WAVEWAIT_TASK_ID)")
    p.add_argument("--status", choices=("done", "failed"), required=True)
    p.add_argument("--goals", required=True, help="what the task was asked to achieve")
    p.add_argument("--did", required=True, help="what was done")
    p.add_argument("--for-next-agent", required=True, metavar="TEXT", help="what the next agent should know")
    p.add_argument("--file", action="append", default=[], help="a file touched (repeatable)")
    p = cmd("handoffs", "read handoffs: of a type, of a task, or (neither) of this task's dependencies")
    add_queue_flags(p, limits=False)
    p.add_argument("--type", help="every handoff of tasks of this type")
    p.add_argument("--task-id", help="the handoff of this task")
    p = cmd("tasks", "list the queue's tasks")
    add_queue_flags(p, limits=False)
    p.add_argument("--status", choices=("queued", "running", "done", "failed", "skipped"))


def _queue(bus: Bus, args: argparse.Namespace, need_types: bool = False) -> TaskQueue:
    name = queue_name(args.queue)
    if name is None:
        raise BadInput("no queue named: pass --queue NAME or set WAVEWAIT_QUEUE")
    path = task_types_path(args.task_types)
    if path is None and need_types:
        raise BadInput("no task types: pass --task-types FILE or set WAVEWAIT_TASK_TYPES")
    return TaskQueue.open(bus, name, load_task_types(path) if path else {}, _limits(args))


def _print(result: BaseModel) -> int:
    print(json.dumps(result_json(result), ensure_ascii=False))
    return Exit.OK


def _inputs(args: argparse.Namespace) -> dict[str, Any]:
    inputs: dict[str, Any] = {}
    if args.inputs_json is not None:
        try:
            inputs = json.loads(args.inputs_json)
        except json.JSONDecodeError as e:
            raise BadInput(f"--inputs-json: not valid JSON ({e})") from None
        if not isinstance(inputs, dict):
            raise BadInput('--inputs-json: must be a JSON object, e.g. \'{"topic": "auth"}\'')
    for item in args.input:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise BadInput(f"--input: give KEY=VALUE, got {item!r}")
        inputs[key] = value
    return inputs


async def cmd_enqueue(bus: Bus, args: argparse.Namespace) -> int:
    q = _queue(bus, args, need_types=True)
    r = await enqueue_task(
        q,
        agents.caller_id(args.agent),
        type=args.type,
        inputs=_inputs(args),
        reason=args.reason,
        depends_on=args.depends_on or None,
        model=args.model,
        bound=bound_task_id(),
    )
    return _print(r)


async def cmd_complete(bus: Bus, args: argparse.Namespace) -> int:
    handoff = {"goals": args.goals, "did": args.did, "forNextAgent": args.for_next_agent, "filesTouched": args.file}
    r = await complete_task(
        _queue(bus, args),
        agents.caller_id(args.agent),
        status=args.status,
        handoff=handoff,
        task_id=args.task_id,
        bound=bound_task_id(),
    )
    return _print(r)


async def cmd_handoffs(bus: Bus, args: argparse.Namespace) -> int:
    found = await read_handoffs(_queue(bus, args), type=args.type, task_id=args.task_id, bound=bound_task_id())
    return _print(HandoffList.model_validate(found))


async def cmd_tasks(bus: Bus, args: argparse.Namespace) -> int:
    return _print(TaskList.model_validate(await list_tasks(_queue(bus, args), args.status)))


def summary_text(s: RunSummary) -> str:
    """The summary for people: a headline, then one line per task."""
    head = (
        f"queue {s.queue}: {s.done} done, {s.failed} failed, {s.skipped} skipped; {s.agents_started} agent(s) started"
    )
    lines = [head + ("" if s.ok else " (not all done)")]
    for t in s.tasks:
        note = f"  {t.note}" if t.note else ""
        lines.append(f"  {t.status:<8} {t.type:<12} {t.id}  attempts {t.attempts}{note}")
    return "\n".join(lines)


async def cmd_run_queue(bus: Bus, args: argparse.Namespace) -> int:
    command = args.agent_command or os.environ.get("WAVEWAIT_AGENT_COMMAND")
    q = _queue(bus, args, need_types=True)
    flight_cap = budgets.flight_cap(args.flight_budget_tokens, args.flight_budget_usd)
    parallel = DEFAULT_MAX_PARALLEL
    if args.max_parallel is not None:  # the wave's limit; with auto, admission holds the agents back
        limit = parse_max_parallel(args.max_parallel)
        await waves.set_settings(bus, queue_wave(q.name), max_parallel=limit)
        parallel = MAX_PARALLEL if limit == "auto" else limit
    runner = Runner(
        q,
        shlex.split(command) if command else None,
        max_parallel=parallel,
        task_types_file=task_types_path(args.task_types),
        presets_file=args.presets or os.environ.get("WAVEWAIT_PRESETS") or None,
        runner_id=args.agent,
        flight_budget=flight_cap,
        report=lambda line: print(f"run-queue: {line}", file=sys.stderr, flush=True),
    )
    # the queue's flights are the wave queue-NAME: its budget is theirs (docs/budgets.md)
    await waves.set_settings(bus, queue_wave(q.name), budget_tokens=args.budget_tokens, budget_usd=args.budget_usd)
    settle_heap()
    loop = asyncio.get_running_loop()
    with anyio.CancelScope() as scope:  # Ctrl+C or SIGTERM: stop running the queue, say where it is
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, scope.cancel)
        try:
            summary = await runner.run()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    if scope.cancelled_caught:
        summary = await runner.summary()
        print(
            "run-queue: interrupted; agents already started keep running and their tasks still count; "
            "run 'wavewait run-queue' again to go on",
            file=sys.stderr,
            flush=True,
        )
    print(summary.model_dump_json(by_alias=True) if args.json else summary_text(summary), flush=True)
    if scope.cancelled_caught:
        return Exit.INTERRUPTED
    return Exit.OK if summary.ok else Exit.NOT_ALL_DONE


COMMANDS: dict[str, Callable[[Bus, argparse.Namespace], Awaitable[int]]] = {
    "run-queue": cmd_run_queue,
    "enqueue": cmd_enqueue,
    "complete": cmd_complete,
    "handoffs": cmd_handoffs,
    "tasks": cmd_tasks,
}
