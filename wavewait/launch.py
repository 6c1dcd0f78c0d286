"""The `wavewait` command's entry (__main__.py runs it), standard library only.

`wavewait mcp` on stdio and `wavewait spawn` run in a warm process's child when there is one
(wavewait/warm.py); every other command, and those when no warm process can take them, run
here (wavewait/command.py: the MCP front first for the stdio server).
"""

from __future__ import annotations

import sys

from .command import crashed, mcp_on_stdio, run


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["spawn"] or mcp_on_stdio(argv):
        from . import warm  # imported only by the commands it may take

        if warm.wanted(argv):
            try:
                warm.run(argv)  # exits as the command does, if a warm process ran it
            except Exception as e:
                print(f"wavewait: starting cold: the warm start failed: {e!r}", file=sys.stderr)
    try:
        run(argv)
    except Exception:  # a bug: its traceback, and an exit code no result has (not Python's 1)
        sys.exit(crashed())
