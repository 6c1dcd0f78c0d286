"""The `wavewait` command line: one argument parser for every command and face.

`cli.py` runs what it parses; `parse_args` keeps a spawn's own command (after `--`) whole.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

from .core import wait
from .core.agents import OUTPUT_LINES
from .core.errors import BadInput
from .core.exits import Exit
from .mcp.hosts import HOSTS
from .queue_cli import add_commands as add_queue_commands
from .queue_cli import add_queue_flags
from .spawn_flags import add_spawn_flags


class Parser(argparse.ArgumentParser):
    """Bad arguments exit 2 (the bad-input code), naming the command and the fault."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        command = self.prog.partition(" ")[2]  # "" for the top-level parser
        self.exit(Exit.BAD_INPUT, f"wavewait{' ' + command if command else ''}: error: {message}\n")


def exit_codes() -> str:
    """Every exit code with its name, read from `Exit` itself: "0 ok, 1 not all done, ..."."""
    return ", ".join(f"{code.value} {code.name.lower().replace('_', ' ')}" for code in Exit)


def build_parser() -> argparse.ArgumentParser:
    def globals_(default: object) -> Parser:
        g = Parser(add_help=False)
        g.add_argument(
            "--bus", default=default, help="bus directory or postgresql:// URL (default: $WAVEWAIT_BUS or ./.wavebus)"
        )
        g.add_argument(
            "--agent",
            default=default,
            help="who is calling (default: $WAVEWAIT_AGENT_ID, else the flight it runs in, else 'orchestrator')",
        )
        return g

    p = Parser(
        prog="wavewait",
        parents=[globals_(None)],
        description="Fan work out to agents, then sit still until they report. With no command, "
        "'wavewait' opens the TUI (a live panel of every flight, /wait, /help) on the bus; "
        "'wavewait demo' shows it with a simulated wave.",
        epilog=f"exit codes: {exit_codes()} (docs/words.md, 'Results')",
    )
    p.add_argument(
        "--queue", metavar="NAME", help="the task queue the TUI's tasks view shows (default: $WAVEWAIT_QUEUE)"
    )
    sub = p.add_subparsers(dest="command", parser_class=Parser)
    # given after the command too; SUPPRESS keeps a value given before it (`--bus X agents`)
    common = globals_(argparse.SUPPRESS)

    def cmd(name: str, help: str, description: str | None = None) -> Parser:
        return sub.add_parser(name, help=help, parents=[common], description=description or help)

    s = cmd("demo", "TUI with a simulated wave (fan-out, messages, a death, a wait)")
    s.add_argument("--seed", type=int, default=None, help="make the simulated wave repeatable")
    s.add_argument("--queue", dest="queue_demo", action="store_true", help="a task graph run by run-queue instead")
    s = cmd(
        "mcp",
        "MCP server (stdio by default; 'wavewait mcp --help' for its options)",
        "MCP server: the wait tools an orchestrating agent calls.",
    )
    s.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    s.add_argument("--host", default="127.0.0.1", help="HTTP: address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8765, help="HTTP: port (0 picks a free one; default 8765)")
    s.add_argument("--token", help="HTTP: bearer token (default: $WAVEWAIT_MCP_TOKEN, else a new one on stderr)")
    s.add_argument(
        "--max-block",
        type=seconds,
        metavar="SECONDS",
        help="return longer waits at this point as a normal timeout that says to call again "
        "(default 240, below Codex's 300 s; $WAVEWAIT_MAX_BLOCK; never above Claude Code's $MCP_TOOL_TIMEOUT)",
    )
    s.add_argument(
        "--output-budget",
        type=whole(1000, 10_000_000, "a whole number of characters ≥ 1000"),
        metavar="CHARS",
        help="most characters one result's entries carry; the rest stays queued for the next call "
        "(default 30000, what both Claude Code and Codex show whole; $WAVEWAIT_OUTPUT_BUDGET)",
    )
    s.add_argument(
        "--allow-path",
        action="append",
        default=[],
        metavar="DIR",
        help="let wave_wait_for_signal watch under DIR too (repeatable)",
    )
    s.add_argument(
        "--agent-command",
        metavar="CMD",
        help="how spawn_agent runs a prompt, e.g. 'claude -p' (default: $WAVEWAIT_AGENT_COMMAND)",
    )
    s.add_argument(
        "--presets",
        metavar="FILE",
        help="a TOML file that changes or adds spawn_agent's agent presets (default: $WAVEWAIT_PRESETS)",
    )
    s.add_argument(
        "--progress-every",
        type=seconds,
        metavar="SECONDS",
        help="progress beat while nothing changes (default 10; $WAVEWAIT_PROGRESS_EVERY)",
    )
    s.add_argument(
        "--print-config",
        choices=HOSTS,
        metavar="HOST",
        help=f"print set-up for an agent host and exit ({', '.join(HOSTS)})",
    )
    add_queue_flags(s)  # with a queue, the task-queue tools too
    s = cmd(
        "serve",
        "serve the TUI in a browser: 'wavewait demo' by default, the TUI on a bus with "
        "--bus ($WAVEWAIT_BUS alone does not switch); needs pip install 'wavewait[serve]'",
    )
    s.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1, this machine only); any other "
        "address exposes the TUI, and with it the bus, to the network with no "
        "authentication",
    )
    s.add_argument(
        "--port", type=whole(1, 65535, "a port number 1-65535"), default=8000, help="port to listen on (default 8000)"
    )
    s.add_argument(
        "--public-url",
        help="URL browsers reach the server at, if not http://HOST:PORT (behind a proxy, or with --host 0.0.0.0)",
    )
    s.add_argument(
        "--demo",
        action="store_true",
        help="serve 'wavewait demo', one temporary bus per session (the default without --bus)",
    )
    s.add_argument("--seed", type=int, default=None, help="make the demo's wave repeatable")
    s = cmd("send", "send a message to an agent")
    s.add_argument("to", help="recipient id or unique prefix (≥ 4 characters)")
    s.add_argument("message")
    s = cmd(
        "wait",
        "wait for the next message, or join: one message from each listed agent, files, events (docs/joins.md)",
    )
    s.add_argument("timeout", help="seconds; 0 is an instant check")
    s.add_argument("ids", nargs="*", help="agents to fan in on (ids or prefixes)")
    s.add_argument("--wave", help="every flight of this wave too, queued ones included")
    s.add_argument("--files", action="append", metavar="GLOB[:N]", help="met once N files match (default 1)")
    s.add_argument("--event", action="append", metavar="TYPE", help="met by one event of this type (repeatable)")
    s.add_argument("--need", default="all", help="all (default), any, or K: how many targets must be met")
    s.add_argument("--check", metavar="CMD", help="a flight counts once CMD passes in its worktree (sh -c)")
    s.add_argument("--check-timeout", default="600", metavar="S", help="seconds a check may run (default 600)")
    s.add_argument("--stop-rest", action="store_true", help="once the need is met, stop the flights left")
    s.add_argument(
        "--max",
        type=whole(1, wait.MAX_MESSAGES, f"a whole number from 1 to {wait.MAX_MESSAGES}"),
        default=1,
        help="without ids: take up to this many queued messages at once (the rest in 'more')",
    )
    s = cmd("wait-signal", "wait until files matching a glob appear")
    s.add_argument("glob")
    s.add_argument("--min-count", type=whole(1, sys.maxsize, "a whole number ≥ 1"), default=1)
    s.add_argument("--timeout", default="1800", help="seconds (default 1800)")
    s = cmd("wait-event", "take one event of the given types from your inbox")
    s.add_argument("--type", action="append", help="event type (repeatable; default: all)")
    s.add_argument("--timeout", default="300", help="seconds (default 300; 0 is an instant check)")
    s = cmd("notify", "report completion to your parent (works as an agent host's stop hook)")
    s.add_argument("--status", choices=("success", "error"), default="success")
    s.add_argument("--message", default="")
    s.add_argument("--change", action="append", default=[], help="a file changed (repeatable)")
    s.add_argument("--session", help="who to report to (default: $WAVEWAIT_PARENT_ID)")
    s.add_argument(
        "--hook",
        action="store_true",
        help="run as a stop hook: outside a flight there is nothing to report (exit 0, not 5), and a "
        "failure exits 5, never 2 (which a host reads as 'do not stop')",
    )
    s = cmd(
        "spawn",
        "run a command, or a coding agent on a prompt, as a supervised flight: "
        "spawn NAME [--preset claude|codex] [--wave W] -- CMD ... | PROMPT",
    )
    add_spawn_flags(s)
    s.add_argument("-q", "--quiet", action="store_true", help="print only the flight's id, not the JSON")
    s = cmd("diff", "show what a flight changed against its base (its worktree, uncommitted work included)")
    s.add_argument("id", help="flight id or unique prefix")
    s.add_argument("--stat", action="store_true", help="files and lines +/- as JSON instead of the patch")
    s = cmd("prune", "remove the worktrees of ended flights, and their branches once merged")
    s.add_argument("--wave", help="only flights of this wave")
    s.add_argument("--force", action="store_true", help="also uncommitted worktrees and branches not merged")
    s = cmd("merge", "merge a wave's branches, in order, onto a branch; a check after each (docs/merging.md)")
    s.add_argument("wave", nargs="?", help="the wave (default: the only wave with branches)")
    s.add_argument("--into", metavar="BRANCH", help="the branch to merge into (default: the one checked out)")
    s.add_argument(
        "--check", metavar="CMD", help="a shell command run after each merge; the branch moves only if it passes"
    )
    s.add_argument("--dry-run", action="store_true", help="only show the order and the overlap; move nothing")
    s.add_argument(
        "--resolve-with", metavar="PRESET", help="hand each conflict to a new flight of this preset (claude, codex)"
    )
    s.add_argument(
        "--presets", metavar="FILE", help="a TOML file that changes or adds presets (default: $WAVEWAIT_PRESETS)"
    )
    s = cmd("agents", "list agents")
    s.add_argument("--wave")
    s = cmd("kill", "kill an agent's process group and mark it dead")
    s.add_argument("id")
    s = cmd("close", "mark an agent closed (done for good: its conversation ends, a later tell is refused)")
    s.add_argument("id")
    s = cmd("tell", "tell a flight's agent something: into its running turn, as its next turn, or resumed")
    s.add_argument("id", help="flight id or unique prefix")
    s.add_argument("message")
    s.add_argument("--now", action="store_true", help="interrupt its running turn first")
    s = cmd("transcript", "print a flight's conversation: what it was told, said and did, turn by turn")
    s.add_argument("id", help="flight id or unique prefix")
    s.add_argument("--json", action="store_true", help="one JSON object per entry")
    s.add_argument("--follow", action="store_true", help="keep printing entries as they come (Ctrl+C ends)")
    s.add_argument("--tail", type=whole(1, 1000, "a whole number 1-1000"), default=200, help="the last N entries")
    s.add_argument("--before", type=whole(1, 2**62, "an entry's seq"), help="page back: entries before this seq")
    s = cmd("interrupt", "interrupt a wait in progress (it returns its partial state)")
    s.add_argument("wait", help="wait id or unique prefix (see 'wavewait waits')")
    cmd("waits", "list waits in progress (with their ages)")
    s = cmd(
        "warm",
        "show or stop this user's warm processes (docs/cli.md, 'The warm process')",
        "The warm process: 'wavewait mcp' and 'wavewait spawn' run in a fork of it (it ends by itself "
        "after $WAVEWAIT_WARM_IDLE seconds, 900, without a command; WAVEWAIT_WARM=0 turns it off).",
    )
    s.add_argument("action", choices=("status", "stop"), help="status: list them; stop: end them")
    s = cmd("output", "show a flight's recent output (stdout and stderr, the last lines)")
    s.add_argument("id", help="flight id or unique prefix")
    s.add_argument("--lines", type=whole(1, OUTPUT_LINES, "a whole number 1-1000"), default=50)
    s = cmd("ask", "as a flight: ask your parent a question and wait for the answer (you need input meanwhile)")
    s.add_argument("question")
    s.add_argument("--timeout", default="1800", help="seconds (default 1800)")
    s.add_argument("--to", help="who to ask (default: $WAVEWAIT_PARENT_ID)")
    s = cmd("reply", "answer a flight's open question: reply ID ANSWER")
    s.add_argument("id", help="the asking flight's id or unique prefix")
    s.add_argument("answer")
    add_queue_commands(cmd)
    return p


def whole(lo: int, hi: int, words: str) -> Callable[[str], int]:
    """An argparse type: a whole number from `lo` to `hi`; anything else is refused in `words`."""

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            n = lo - 1
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"must be {words}, got {value!r}")
        return n

    return parse


def seconds(value: str) -> float:
    try:
        s = wait.check_timeout(value, "seconds")
    except BadInput as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if s <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {value!r}")
    return s


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


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line as `main` reads it: a spawn's command (after --) kept whole."""
    parser = build_parser()
    whole = list(argv)
    spawn_cmd = _split_spawn(argv)
    args = parser.parse_args(argv)
    if spawn_cmd is not None:
        if args.command == "spawn":
            args.cmd = [*args.cmd, *spawn_cmd]
        else:  # "spawn" was a word of another command (a message, say): nothing to cut
            args = parser.parse_args(whole)
    return args
