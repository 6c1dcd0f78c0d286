"""The core imports no face: loading every core module pulls in no TUI, MCP or CLI code."""

from __future__ import annotations

import json
import subprocess

from conftest import PYTHON

FACES = ("textual", "mcp", "wavewait.tui", "wavewait.cli", "wavewait.cli_parser", "wavewait.mcp")

PROBE = """
import importlib, json, pkgutil, sys
import wavewait.core as core
for m in pkgutil.walk_packages(core.__path__, "wavewait.core."):
    importlib.import_module(m.name)
print(json.dumps(sorted(sys.modules)))
"""


def test_no_core_module_imports_a_face():
    done = subprocess.run([PYTHON, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert "wavewait.core.wait" in loaded and "wavewait.core.bus.file" in loaded
    offenders = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in FACES)]
    assert offenders == []
