"""`wavewait mcp`: the MCP server on stdio (default) or streamable HTTP.

    wavewait mcp [--bus URL] [--agent ID] [--max-block S] [--allow-path DIR ...]
                 [--agent-command CMD] [--transport stdio|http] [--host H] [--port N]
                 [--token T] [--progress-every S] [--print-config HOST]

The tools live in `wavewait.mcp`; this module only reads flags and environment, opens the
bus and runs a transport. Exit codes: 0 done, 2 bad flags or bad environment.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys

import anyio

from .cli import BAD_INPUT, Parser


def _seconds(value: str) -> float:
    from .core.errors import BadInput
    from .core.wait import check_timeout

    try:
        s = check_timeout(value, "seconds")
    except BadInput as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if s <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {value!r}")
    return s


def build_parser() -> argparse.ArgumentParser:
    from .mcp.hosts import HOSTS

    p = Parser(prog="wavewait mcp", description="MCP server: the wait tools an orchestrating agent calls.")
    p.add_argument("--bus", help="bus directory or postgresql:// URL (default: $WAVEWAIT_BUS or ./.wavebus)")
    p.add_argument("--agent", help="who calls the tools (default: $WAVEWAIT_AGENT_ID or 'orchestrator')")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP: address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="HTTP: port (0 picks a free one; default 8765)")
    p.add_argument("--token", help="HTTP: bearer token (default: $WAVEWAIT_MCP_TOKEN, else a new one on stderr)")
    p.add_argument(
        "--max-block",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="return longer waits at this point as a normal timeout (hosts that cut long calls)",
    )
    p.add_argument(
        "--allow-path",
        action="append",
        default=[],
        metavar="DIR",
        help="let wave_wait_for_signal watch under DIR too (repeatable)",
    )
    p.add_argument(
        "--agent-command",
        default=None,
        metavar="CMD",
        help="how spawn_agent runs a prompt, e.g. 'claude -p' (default: $WAVEWAIT_AGENT_COMMAND)",
    )
    p.add_argument(
        "--progress-every",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="progress beat while nothing changes (default 10; $WAVEWAIT_PROGRESS_EVERY)",
    )
    p.add_argument(
        "--print-config",
        choices=HOSTS,
        metavar="HOST",
        help=f"print set-up for an agent host and exit ({', '.join(HOSTS)})",
    )
    return p


def project_dir() -> str:
    """Where relative signal paths start: WAVEWAIT_PROJECT_DIR, else CLAUDE_PROJECT_DIR, else cwd."""
    d = os.environ.get("WAVEWAIT_PROJECT_DIR") or os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd()
    return os.path.realpath(os.path.expanduser(d))


def main(argv: list[str] | None = None, bus: str | None = None, agent: str | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .core import wait
    from .core.agents import caller_id
    from .core.bus import bus_url
    from .core.errors import WavewaitError

    url = bus_url(args.bus or bus)
    if args.print_config:
        from .mcp.hosts import render

        shown = url if "://" in url else os.path.abspath(os.path.expanduser(url))
        sys.stdout.write(render(args.print_config, shown, args.max_block))
        return 0
    progress = args.progress_every or os.environ.get("WAVEWAIT_PROGRESS_EVERY")
    try:
        if progress is not None:
            wait.PROGRESS_EVERY = _seconds(str(progress))
        from .mcp.tools import Settings

        settings = Settings(
            caller=caller_id(args.agent or agent),
            project_dir=project_dir(),
            max_block=args.max_block,
            allow_paths=args.allow_path,
            agent_command=args.agent_command or os.environ.get("WAVEWAIT_AGENT_COMMAND") or None,
        )
    except (WavewaitError, argparse.ArgumentTypeError) as e:
        print(f"wavewait mcp: error: {e}", file=sys.stderr)
        return BAD_INPUT
    token = None
    if args.transport == "http":
        token = args.token or os.environ.get("WAVEWAIT_MCP_TOKEN")
        if not token:
            token = secrets.token_urlsafe(32)
            print(
                f"wavewait mcp: bearer token (set WAVEWAIT_MCP_TOKEN to choose one): {token}",
                file=sys.stderr,
                flush=True,
            )
    try:
        anyio.run(_serve, url, settings, args.transport, args.host, args.port, token)
    except WavewaitError as e:
        print(f"wavewait mcp: error: {e}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt:
        pass
    return 0


async def _serve(url: str, settings, transport: str, host: str, port: int, token: str | None) -> None:
    from .core.bus import open_bus
    from .mcp.server import build, serve_http

    bus = await open_bus(url)
    try:
        server = build(bus, settings)
        if transport == "http":
            assert token is not None
            await serve_http(server, host, port, token)
        else:
            await server.run_stdio_async()
    finally:
        await bus.close()
