"""The `wavewait` command's entry (__main__.py runs it), standard library only.

A command runs in a warm process's child when one is up (wavewait/warm.py: `mcp` on stdio and
`spawn` start one when none is; the TUI, `demo`, `serve` and `warm` always run here); else it
runs here (wavewait/command.py: the MCP front first for the stdio server).
"""

from __future__ import annotations

import sys

from .command import command_of, crashed, mcp_on_stdio, run


def main() -> None:
    argv = sys.argv[1:]
    if command_of(argv) != "mcp" or mcp_on_stdio(argv):  # `mcp --http` serves many clients: cold
        from . import warm

        if warm.wanted(argv):
            try:
                warm.run(argv)  # exits as the command does, if a warm process ran it
            except Exception as e:
                print(f"wavewait: starting cold: the warm start failed: {e!r}", file=sys.stderr)
    try:
        run(argv)
    except Exception:  # a bug: its traceback, and an exit code no result has (not Python's 1)
        sys.exit(crashed())
