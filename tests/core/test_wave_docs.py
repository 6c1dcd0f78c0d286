"""Per-wave documents: one read-modify-write at a time however many processes race."""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest

from wavewait.core.bus.file import FileBus
from wavewait.core.bus.wave_docs import MAX_WAVE_DOC_BYTES
from wavewait.core.errors import BadInput, BusError

from conftest import PYTHON, env_for

pytestmark = pytest.mark.anyio

#: a process that adds 1 to the wave's counter N times, each a separate update
BUMPER = """
import asyncio, sys
from wavewait.core.bus import open_bus

def bump(doc):
    doc = dict(doc or {})
    doc["n"] = doc.get("n", 0) + 1
    return doc

async def main(n):
    bus = await open_bus()
    try:
        for _ in range(n):
            await bus.update_wave_doc("wave-1", "settings", bump)
    finally:
        await bus.close()

asyncio.run(main(int(sys.argv[1])))
"""


async def test_a_document_is_none_until_written_then_kept(bus):
    assert await bus.get_wave_doc("wave-1", "settings") is None
    kept = await bus.update_wave_doc("wave-1", "settings", lambda doc: {"budget_tokens": 1000})
    assert kept == {"budget_tokens": 1000}
    assert await bus.get_wave_doc("wave-1", "settings") == {"budget_tokens": 1000}
    assert await bus.get_wave_doc("wave-1", "merge") is None  # kinds are separate
    assert await bus.get_wave_doc("wave-2", "settings") is None  # and waves


async def test_a_change_returning_none_leaves_the_document(bus):
    await bus.update_wave_doc("w", "settings", lambda doc: {"a": 1})
    seen = []

    def look(doc):
        seen.append(doc)

    assert await bus.update_wave_doc("w", "settings", look) == {"a": 1}
    assert seen == [{"a": 1}]


async def test_updates_from_four_processes_are_never_lost(bus):
    """Each update reads and writes under the lock: 4 × 25 increments make 100."""
    env = env_for(bus)
    procs = [subprocess.Popen([PYTHON, "-c", BUMPER, "25"], env=env, stderr=subprocess.PIPE) for _ in range(4)]
    for p in procs:
        _, err = await anyio.to_thread.run_sync(p.communicate)
        assert p.returncode == 0, err.decode()
    assert await bus.get_wave_doc("wave-1", "settings") == {"n": 100}


async def test_a_change_wakes_the_subscribers_of_that_wave(bus):
    on_one = await bus.subscribe_waves("wave-1")
    on_all = await bus.subscribe_waves()
    try:
        await bus.update_wave_doc("wave-1", "merge", lambda doc: {"step": 1})
        with anyio.fail_after(10):
            await on_one.wait()
            await on_all.wait()
        await bus.update_wave_doc("wave-2", "merge", lambda doc: {"step": 1})
        with anyio.fail_after(10):
            await on_all.wait()
    finally:
        on_one.close()
        on_all.close()


async def test_bad_names_and_oversized_documents_are_refused(bus):
    with pytest.raises(BadInput, match="wave"):
        await bus.get_wave_doc("../etc", "settings")
    with pytest.raises(BadInput, match="kind"):
        await bus.update_wave_doc("w", "a/b", lambda doc: {})
    with pytest.raises(BusError, match="over the"):
        await bus.update_wave_doc("w", "settings", lambda doc: {"x": "y" * MAX_WAVE_DOC_BYTES})
    with pytest.raises(BusError, match="JSON object"):
        await bus.update_wave_doc("w", "settings", lambda doc: ["not", "an", "object"])  # type: ignore[arg-type, return-value]
    assert await bus.get_wave_doc("w", "settings") is None


async def test_a_foreign_file_in_the_bus_is_quarantined_not_read(file_bus: FileBus):
    path = file_bus.root / "waves" / "w" / "settings.json"
    path.parent.mkdir()
    path.write_text("[1, 2]")
    assert await file_bus.get_wave_doc("w", "settings") is None
    assert not path.exists()
    assert any("settings.json" in p.name for p in (file_bus.root / "quarantine").iterdir())
    (file_bus.root / "waves" / "v").mkdir()
    (file_bus.root / "waves" / "v" / "settings.json").symlink_to(sys.executable)
    assert await file_bus.get_wave_doc("v", "settings") is None  # never followed
