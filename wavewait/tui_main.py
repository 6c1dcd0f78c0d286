"""Entry of the TUI faces (`wavewait`, `wavewait demo`); imports Textual only when used."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile


def run_tui(args: argparse.Namespace) -> int:
    """Run the TUI; print the last wait's result as JSON; return an `Exit`: the last wait's
    result's exit code (OK without one), BAD_INPUT if it could not start (`exits.signalled`
    after a signal's forced exit, which leaves from tui/app.py itself)."""
    from .core.agents import caller_id
    from .core.bus import bus_url
    from .core.errors import WavewaitError
    from .core.exits import Exit
    from .core.tasks import queue_name
    from .tui.app import WaveApp
    from .tui.demo import Teardown, plan

    try:
        os.getcwd()  # the bus path, the flights' folders and the worktrees are found from here
    except FileNotFoundError:
        print(
            "wavewait: error: the current folder was removed; cd into one that exists and start again", file=sys.stderr
        )
        return Exit.BAD_INPUT
    try:
        me = caller_id(args.agent)
    except WavewaitError as e:
        print(f"wavewait: error: {e}", file=sys.stderr)
        return Exit.BAD_INPUT
    demo = args.command == "demo"
    tmp = None
    url = args.bus
    if demo and not url:
        tmp = tempfile.mkdtemp(prefix="wavewait-demo-")
        url = tmp
    url = bus_url(url)
    queue_demo = demo and getattr(args, "queue_demo", False)
    try:
        queue = queue_name(getattr(args, "queue", None))
    except WavewaitError as e:
        print(f"wavewait: error: {e}", file=sys.stderr)
        return Exit.BAD_INPUT
    wave = plan(getattr(args, "seed", None)) if demo and not queue_demo else None
    # the demo's flights and temporary bus are the run's own; a person's flights are not
    teardown = Teardown(url, me, tmp) if demo else None
    app = WaveApp(url, me=me, demo=wave, queue=queue, queue_demo=queue_demo, teardown=teardown)
    try:
        result = app.run()
    finally:
        if teardown is not None:
            teardown()
    if app.start_error is not None:
        print(f"wavewait: error: {app.start_error}", file=sys.stderr)
    if result is not None:
        # the terminal may be gone (a hangup): no one is left to read it; the exit code says it
        with contextlib.suppress(OSError):
            print(json.dumps(result, ensure_ascii=False), flush=True)
    return app.return_code or Exit.OK
