"""A start-up that cannot go on says what to do in one line and exits non-zero, never a traceback."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from wavewait.tui.app import WaveApp

from conftest import PYTHON, clean_env, until


def test_a_removed_working_folder_says_so_in_one_line(tmp_path: Path) -> None:
    """Started from a folder that was then removed: one line that says what to do, exit 2."""
    gone = tmp_path / "gone"
    gone.mkdir()
    line = f"cd {shlex.quote(str(gone))} && rmdir {shlex.quote(str(gone))} && exec {shlex.quote(PYTHON)} -m wavewait"
    env = clean_env() | {"PYTHONSAFEPATH": "1"}
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "wavewait: error: the current folder was removed; cd into one that exists and start again"
    ]
    assert not os.path.exists(gone)


@pytest.mark.anyio
async def test_a_bus_that_cannot_be_opened_ends_the_app_with_what_to_do(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    app = WaveApp(str(blocker / "bus"), animate=False, sweep_every=0)
    async with app.run_test(size=(80, 24)):
        await until(lambda: app.return_code is not None, what="the app to end")
    assert app.return_code == 2
    assert app.start_error is not None and "\n" not in app.start_error  # the entry prints it on one line
    assert app.start_error.startswith("cannot open the bus: cannot create the bus at "), app.start_error
    assert "pass --bus PATH" in app.start_error
