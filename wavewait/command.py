"""One `wavewait` command, run in this process: the MCP front first for the stdio server.

A host gives a starting MCP server little time, and importing `wavewait.cli` (anyio, pydantic,
the core) takes 0.1 s idle and more under load before `run_mcp` could start the front. So
this module, standard library only, starts the front (wavewait/mcp/front.py) before that
import when the arguments plainly ask for the stdio server; anything else goes to
`wavewait.cli` as it is, and `run_mcp` starts the front itself when this did not. The entry
(wavewait/launch.py) runs a command here cold, and a warm process's child
(wavewait/warm.py) runs it here too: both import this module, neither imports the other.
"""

from __future__ import annotations

#: the options that may come before the command (wavewait/cli_parser.py), each with a value
GLOBAL_OPTIONS = ("--bus", "--agent", "--queue")


def command_at(argv: list[str]) -> int | None:
    """Where the command is in `argv`, after the options that may come before it; None for the
    TUI (no command) and for anything else before it (`-h`, an abbreviation)."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i].partition("=")[0] not in GLOBAL_OPTIONS:
            return None
        i += 1 if "=" in argv[i] else 2
    return i if i < len(argv) else None


def command_of(argv: list[str]) -> str | None:
    """The command `argv` names (`command_at`)."""
    i = command_at(argv)
    return None if i is None else argv[i]


def mcp_on_stdio(argv: list[str]) -> bool:
    """`wavewait [--bus X] mcp ...` serving on stdio, as a host starts it (nothing that only prints)."""
    at = command_at(argv)
    if at is None or argv[at] != "mcp":
        return False
    for i, a in enumerate(argv[at + 1 :], at + 1):
        if a in ("-h", "--help") or a.startswith("--print-config"):
            return False
        if a.startswith("--transport"):
            value = a.partition("=")[2] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
            if value != "stdio":
                return False
    return True


def run(argv: list[str]) -> None:
    """Run the command in this process (cold, or in a warm process's child)."""
    front = None
    if mcp_on_stdio(argv):
        from .mcp.front import start

        front = start()
    from .cli import main as cli_main

    cli_main(front=front)


def crashed() -> int:
    """Say the exception being handled (a bug: its traceback), and return the exit code of a
    command that failed so, which no result of a command has (docs/words.md, "Results")."""
    import traceback

    from .core.exits import Exit

    traceback.print_exc()
    return Exit.INTERNAL_ERROR
