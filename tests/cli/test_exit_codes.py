"""One meaning per exit code: every code a command leaves with is an `Exit` (core/exits.py),
listed where a user reads them (`wavewait --help`, docs/words.md), never a number of its own."""

from __future__ import annotations

import ast
import os
import re
import subprocess
from pathlib import Path

import wavewait
from wavewait.core.exits import SIGNALLED, Exit

from conftest import clean_env, wavewait_cmd

PACKAGE = Path(wavewait.__file__).resolve().parent
DOCS = Path(__file__).resolve().parents[2] / "docs"
EXIT_CALLS = {"_exit", "exit"}  # os._exit, sys.exit, App.exit(return_code=...)
#: not a wavewait command: the demo's stand-in for an agent, which dies as a Python program does (1)
NOT_OURS = {"demo_flight.py"}


def sources() -> list[Path]:
    """Every module of the package: the faces, the core and the TUI (symlinked or installed)."""
    found = []
    for root, dirs, files in os.walk(PACKAGE, followlinks=True):  # core/ and tui/ are links in a checkout
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found += [Path(root, f) for f in files if f.endswith(".py")]
    return sorted(found)


def numbers_as_exit_codes(path: Path) -> list[str]:
    """`os._exit(1)`, `sys.exit(2)`, `exit(return_code=2)`, `128 + sig`: an exit code written
    as a number (0 is allowed only where nothing reads it, and says so)."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    lines = path.read_text().splitlines()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name not in EXIT_CALLS:
                continue
            args = [*node.args, *(k.value for k in node.keywords if k.arg == "return_code")]
            for arg in args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, int) and not isinstance(arg.value, bool):
                    if arg.value == 0 and "nobody reads" in lines[node.lineno - 1]:
                        continue
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            if any(isinstance(side, ast.Constant) and side.value == SIGNALLED for side in (node.left, node.right)):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_exit_code_is_written_as_a_number():
    offenders = [
        hit for path in sources() if path.name not in ("exits.py", *NOT_OURS) for hit in numbers_as_exit_codes(path)
    ]
    assert len(sources()) > 100, "the scan sees the package"
    assert offenders == [], "use core/exits.py (Exit, signalled):\n" + "\n".join(offenders)


def test_the_help_lists_every_exit_code_by_its_name():
    done = subprocess.run(wavewait_cmd("--help"), capture_output=True, text=True, env=clean_env(COLUMNS="400"))
    assert done.returncode == Exit.OK, done.stderr
    listed = re.search(r"exit codes: (.*)", done.stdout)
    assert listed is not None, done.stdout
    for code in Exit:
        assert f"{code.value} {code.name.lower().replace('_', ' ')}" in listed.group(1), code


def test_the_words_page_names_every_exit_code():
    """docs/words.md's table of results has a row for each code, and no code it does not know."""
    page = (DOCS / "words.md").read_text()
    section = page.split("## Results", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\|[^|\n]*\| (\d+)(?: \+ N)? \|", section, re.M)
    assert sorted(int(r) for r in rows) == sorted([*(c.value for c in Exit), SIGNALLED])
