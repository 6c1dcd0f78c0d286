"""A folder named `wavewait` where wavewait runs (a checkout of another version, a flight's
worktree of a project that has one) is never the code that runs: the processes wavewait
starts of its own (a flight's supervisor, the check runner, the warm process) are started
with `-P` (core/proc.py, `python_module`), so their working folder is not first on sys.path."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import env_for

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]

CLI = os.path.join(os.path.dirname(sys.executable), "wavewait")


async def test_a_wavewait_folder_in_the_working_folder_is_not_imported(bus, tmp_path):
    work = tmp_path / "work"
    (work / "wavewait").mkdir(parents=True)
    imported = tmp_path / "imported"
    (work / "wavewait" / "__init__.py").write_text(f"open({str(imported)!r}, 'w').close()\nraise SystemExit(97)\n")

    # as a user's shell has it: the suite's PYTHONSAFEPATH (tests/conftest.py) would hide the case
    env = {k: v for k, v in env_for(bus).items() if k != "PYTHONSAFEPATH"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([CLI, *args], cwd=work, env=env, capture_output=True, text=True, timeout=120)

    spawned = cli("spawn", "-q", "probe", "--", CLI, "notify", "--message", "done")
    assert spawned.returncode == 0, spawned.stderr
    waited = cli("wait", "60", spawned.stdout.strip(), "--check", "true")
    assert waited.returncode == 0, waited.stderr
    r = json.loads(waited.stdout)
    assert (r["status"], [(e["name"], e["status"], e["message"]) for e in r["results"]]) == (
        "complete",
        [("probe", "received", "done")],
    ), r
    assert not imported.exists(), "the working folder's wavewait was imported"
