"""`wavewait serve`: the TUI in a browser, one fresh process per browser session.

textual-serve runs the command through a shell for every session that connects and
pipes its screen over a websocket; it is an optional extra (`wavewait[serve]`).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from typing import TYPE_CHECKING, Any

from .core.agents import caller_id
from .core.errors import WavewaitError
from .core.exits import Exit
from .core.proc import python_module

if TYPE_CHECKING:
    from textual_serve.server import Server

INSTALL_HINT = "pip install 'wavewait[serve]'"


def session_command(args: argparse.Namespace) -> list[str]:
    """What each browser session runs: this same Python's wavewait, so the venv matches.

    The TUI on the bus given by `--bus`; otherwise the demo, on a temporary bus of its own
    per session, so a newcomer (or an inherited $WAVEWAIT_BUS) never lands on a live bus.
    """
    cmd = python_module("wavewait")
    if args.agent:
        cmd += ["--agent", args.agent]
    if args.bus:
        return [*cmd, "--bus", args.bus]
    return [*cmd, "demo", *(["--seed", str(args.seed)] if args.seed is not None else [])]


def run_serve(args: argparse.Namespace) -> int:
    """Serve until Ctrl+C or SIGTERM; 2 when textual-serve is missing or the port is unusable."""
    if args.bus and (args.demo or args.seed is not None):
        print(
            "wavewait serve: error: --demo runs on a temporary bus of its own; "
            "drop --bus, or drop --demo/--seed to serve the TUI on that bus",
            file=sys.stderr,
        )
        return Exit.BAD_INPUT
    try:  # every session would fail on a bad --agent; say so before serving
        caller_id(args.agent)
    except WavewaitError as e:
        print(f"wavewait serve: error: {e}", file=sys.stderr)
        return Exit.BAD_INPUT
    try:
        server_class = _server_class()
    except ImportError as e:
        print(
            f"wavewait serve: error: serving in a browser needs textual-serve ({e}); install it with: {INSTALL_HINT}",
            file=sys.stderr,
        )
        return Exit.BAD_INPUT
    server = server_class(
        shlex.join(session_command(args)),
        host=args.host,
        port=args.port,
        title="wavewait" if args.bus else "wavewait demo",
        public_url=args.public_url,
    )
    try:
        server.serve()
    except OSError as e:  # the address is taken or cannot be bound
        print(f"wavewait serve: error: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return Exit.BAD_INPUT
    return Exit.OK


def _server_class() -> type[Server]:
    """textual-serve's Server, ending open sessions as soon as the server is asked to stop.

    Left alone, aiohttp keeps a session's websocket, and so its TUI, running for up to its
    60 s shutdown timeout after Ctrl+C or SIGTERM. Cancelling the session's handler is the
    path textual-serve already takes at that timeout: it quits the TUI, which cleans up
    (the demo stops its flights and removes its bus) before the server exits.
    """
    from aiohttp import web
    from textual_serve.server import Server

    class SessionEndingServer(Server):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._sessions: set[asyncio.Task[Any]] = set()

        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            task = asyncio.current_task()
            assert task is not None
            self._sessions.add(task)
            try:
                return await super().handle_websocket(request)
            finally:
                self._sessions.discard(task)

        async def on_shutdown(self, app: web.Application) -> None:
            for task in self._sessions:
                task.cancel()

    return SessionEndingServer
