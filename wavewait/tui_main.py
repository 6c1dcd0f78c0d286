"""Entry of the TUI faces (`wavewait`, `wavewait demo`); imports Textual only when used."""

from __future__ import annotations

import argparse
import sys


def run_tui(args: argparse.Namespace) -> int:
    print("wavewait: the TUI is not built yet; use the CLI commands (wavewait --help)", file=sys.stderr)
    return 2
