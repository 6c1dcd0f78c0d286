"""Not collected by the suite (no `test_` prefix): test_warm.py runs it in a pytest of its own,
to see that the session's end stops the warm process its spawn started (tests/leftovers.py)."""

from __future__ import annotations

import subprocess

import pytest

from wavewait import warm_procs

from conftest import clean_env, until, wavewait_cmd

pytestmark = pytest.mark.anyio


async def test_a_spawn_starts_a_warm_process_that_outlives_it(tmp_path):
    env = clean_env(WAVEWAIT_BUS=str(tmp_path / "bus"), WAVEWAIT_WARM="1")
    done = subprocess.run(wavewait_cmd("spawn", "-q", "probe", "--", "true"), env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    await until(lambda: warm_procs.running() != [], 60, "the warm process the spawn started")
