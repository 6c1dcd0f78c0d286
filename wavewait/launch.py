"""The `wavewait` command's entry: for `wavewait mcp` on stdio, start the front first.

A host gives a starting MCP server little time, and importing `wavewait.cli` (anyio, pydantic,
the core) takes 0.1 s idle and more under load before `run_mcp` could start the front. So this
module, standard library only, starts the front (wavewait/mcp/front.py) before that import when
the arguments plainly ask for the stdio server; anything else goes to `wavewait.cli` as it is,
and `run_mcp` starts the front itself when this did not. `wavewait mcp` on stdio and
`wavewait spawn` run in a warm process's child when there is one (wavewait/warm.py).
"""

from __future__ import annotations

import sys


def _mcp_on_stdio(argv: list[str]) -> bool:
    """`wavewait mcp ...` serving on stdio, as a host starts it (nothing that only prints)."""
    if not argv or argv[0] != "mcp":
        return False
    for i, a in enumerate(argv[1:], 1):
        if a in ("-h", "--help") or a.startswith("--print-config"):
            return False
        if a.startswith("--transport"):
            value = a.partition("=")[2] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
            if value != "stdio":
                return False
    return True


def run_cli(argv: list[str]) -> None:
    """The command, started here (cold) or in a warm process's child (wavewait/warm.py)."""
    front = None
    if _mcp_on_stdio(argv):
        from .mcp.front import start

        front = start()
    from .cli import main as cli_main

    cli_main(front=front)


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["spawn"] or _mcp_on_stdio(argv):
        from . import warm

        if warm.wanted(argv):
            try:
                warm.run(argv)  # exits as the command does, if a warm process ran it
            except Exception as e:
                print(f"wavewait: starting cold: the warm start failed: {e!r}", file=sys.stderr)
    run_cli(argv)
