"""A directory bus that cannot be poisoned, and writes that cannot half-happen.

Each hostile entry is put into a real inbox, then a normal message is sent and a wait in a
separate process must take exactly that message, in time (a FIFO that hung the wait would
fail the deadline, not the whole test run). The entry must land in quarantine/ with its
reason, untouched and unfollowed, and the inbox's owner must hear of it once.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from wavewait.core import messages, wait
from wavewait.core.admission import spawn
from wavewait.core.bus import fs as file_mod
from wavewait.core.bus.file import FileBus
from wavewait.core.errors import BusError
from wavewait.core.ids import new_id
from wavewait.core.model import Item, WaitRecord
from wavewait.core.proc import hostname

from conftest import PYTHON, until
from coretools import crew, run_actor

pytestmark = pytest.mark.anyio

NAME = f"{0:016d}~message~linter~{'e' * 32}"  # sorts first: the wait meets it before the real one


def _box(bus: FileBus, *parts: str) -> Path:
    return bus.root.joinpath("inbox", "orchestrator", *parts)


def _fifo(path: Path) -> None:
    os.mkfifo(path, 0o600)


def _symlink_to_passwd(path: Path) -> None:
    path.symlink_to("/etc/passwd")


def _directory(path: Path) -> None:
    path.mkdir(mode=0o700)
    (path / "inside").write_text("{}")


def _truncated(path: Path) -> None:
    whole = Item(id="e" * 32, type="message", to="orchestrator", sender="linter", body="x" * 500).model_dump_json()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, whole[: len(whole) // 2].encode())
    os.close(fd)


def _foreign(path: Path) -> None:
    item = Item(id="e" * 32, type="message", to="orchestrator", sender="linter", body="planted")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, item.model_dump_json().encode())
    os.close(fd)
    os.chown(path, 65534, 65534)  # nobody: a file the bus's user did not write


def _device(path: Path) -> None:
    os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers


HOSTILE: dict[str, tuple[Callable[[Path], None], str]] = {
    "fifo": (_fifo, "fifo"),
    "symlink to /etc/passwd": (_symlink_to_passwd, "symlink"),
    "directory": (_directory, "directory"),
    "truncated item": (_truncated, "truncated"),
    "foreign owner": (_foreign, "foreign"),
    "device": (_device, "device"),
}


def _quarantined(bus: FileBus) -> list[str]:
    return sorted(os.listdir(bus.root / "quarantine"))


@pytest.mark.parametrize("kind", list(HOSTILE))
async def test_a_hostile_entry_in_new_is_quarantined_and_the_next_message_still_arrives(file_bus, kind, caplog):
    if kind in ("foreign owner", "device") and os.geteuid() != 0:
        pytest.skip("needs root to chown or mknod")  # the bus's user cannot make such entries itself
    make, code = HOSTILE[kind]
    await crew(file_bus)
    passwd = os.lstat("/etc/passwd")
    make(_box(file_bus, "new", NAME))
    await messages.send(file_bus, "file-reader", "orchestrator", "the real one")

    done = await run_actor(file_bus, "consume", "orchestrator", timeout=30)

    assert json.loads(done.stdout) == ["the real one"]
    moved = _quarantined(file_bus)
    assert len(moved) == 1 and moved[0].endswith(f"~orchestrator~{code}~{NAME}"), moved
    assert os.lstat("/etc/passwd") == passwd  # never moved, never written
    events = await file_bus.peek("orchestrator")
    assert [(e.type, e.data["reason"]) for e in events] == [("item_quarantined", code)]
    # reported once: reading the inbox again moves and reports nothing more
    await run_actor(file_bus, "consume", "orchestrator", timeout=30)
    assert _quarantined(file_bus) == moved
    assert len(await file_bus.peek("orchestrator")) == 1


async def test_a_fifo_is_never_opened_so_a_wait_in_this_process_does_not_hang(file_bus):
    """The same FIFO, read by the bus in this very process: a blocking open would freeze the
    event loop (no deadline could fire), so this test would hang instead of failing."""
    await crew(file_bus)
    os.mkfifo(_box(file_bus, "new", NAME), 0o600)
    await messages.send(file_bus, "file-reader", "orchestrator", "the real one")
    assert (await wait.wait_next(file_bus, "orchestrator", 5)).message == "the real one"
    assert [e.type for e in await file_bus.peek("orchestrator")] == ["item_quarantined"]


async def test_malformed_entries_in_claims_are_quarantined_never_followed(file_bus, tmp_path):
    await crew(file_bus)
    claims = _box(file_bus, "claims")
    (claims / "not-a-claim").write_text("junk")
    outside = tmp_path / "outside"  # a folder outside the bus that a symlink points into
    outside.mkdir()
    (outside / "keep-me").write_text("not the bus's")
    (claims / ("a" * 32)).symlink_to(outside, target_is_directory=True)
    (claims / "bad name!").mkdir()
    os.mkfifo(claims / ("b" * 32), 0o600)
    await messages.send(file_bus, "file-reader", "orchestrator", "the real one")

    done = await run_actor(file_bus, "consume", "orchestrator", timeout=30)

    assert json.loads(done.stdout) == ["the real one"]
    assert sorted(os.listdir(outside)) == ["keep-me"]  # the symlinked folder was not touched
    reasons = sorted(name.split("~")[3] for name in _quarantined(file_bus))
    assert reasons == ["bad-name", "bad-name", "fifo", "symlink"], _quarantined(file_bus)
    assert os.listdir(claims) == []
    assert sorted(e.data["reason"] for e in await file_bus.peek("orchestrator")) == reasons


# ------------------------------------------------------------------ writes that can't half-happen
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, so a full disk is real: mounting needs root (CAP_SYS_ADMIN)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot mount a small tmpfs: {done.stderr.decode().strip()}")
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def _fill(folder: Path, leave: int) -> Path:
    """Fill the file system of `folder`, then free `leave` bytes (rounded to pages)."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                os.write(fd, b"\0" * 65536)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    finally:
        os.close(fd)
    return filler


@pytest.mark.parametrize("durable", [True, False], ids=["fsync", "no-fsync"])
async def test_a_send_on_a_full_disk_fails_clearly_and_leaves_nothing_to_deliver(small_disk, monkeypatch, durable):
    monkeypatch.setattr(file_mod, "DURABLE", durable)
    bus = FileBus(small_disk / "bus")
    monkeypatch.setenv("WAVEWAIT_BUS", bus.url)
    try:
        await crew(bus)
        filler = _fill(small_disk, leave=64 * 1024)
        with pytest.raises(BusError) as err:
            await messages.send(bus, "file-reader", "orchestrator", "x" * 300_000)
        assert "full" in str(err.value) and "nothing was written" in str(err.value), err.value
        box = bus.root / "inbox" / "orchestrator"
        assert os.listdir(box / "new") == [] and os.listdir(box / "tmp") == []
        os.unlink(filler)
        await messages.send(bus, "file-reader", "orchestrator", "after the disk was freed")
        done = await run_actor(bus, "consume", "orchestrator", timeout=30)
        assert json.loads(done.stdout) == ["after the disk was freed"]
        assert _quarantined(bus) == []  # nothing half-written was ever published
    finally:
        await bus.close()


async def test_a_failed_record_write_is_a_bus_error_and_leaves_no_temp_file(small_disk):
    bus = FileBus(small_disk / "bus")
    try:
        _fill(small_disk, leave=0)
        with pytest.raises(BusError, match="full"):
            await bus.put_resolution("key", {"big": "y" * 200_000})
        assert os.listdir(bus.root / "tmp") == []
        assert await bus.get_resolution("key") is None
    finally:
        await bus.close()


# ------------------------------------------------------------------ hygiene
async def test_stale_temp_files_dead_wait_records_and_old_quarantine_are_cleaned_at_open(file_bus):
    await crew(file_bus)
    root = file_bus.root
    old = 1_000_000_000.0  # 2001: older than every retention
    stale = [root / "tmp" / "agent.json.123", _box(file_bus, "tmp", new_id()), root / "quarantine" / "1~x~old"]
    fresh = _box(file_bus, "tmp", new_id())  # a write in progress: kept
    for p in [*stale, fresh]:
        p.write_text("partial")
    for p in stale:
        os.utime(p, (old, old))
    ended = subprocess.Popen(["true"])
    ended.wait()
    dead = root / "waits" / f"{'c' * 32}.json"  # the record of a wait whose process is gone
    record = WaitRecord(
        id="c" * 32, waiter="orchestrator", kind="next", tool="wave_wait", host=hostname(), pid=ended.pid
    )
    dead.write_text(record.model_dump_json())

    os.utime(root / "locks" / "tidied", (old, old))  # the last tidy-up was long ago
    FileBus(root)  # so the next open tidies

    assert [p.exists() for p in stale] == [False, False, False]
    assert fresh.exists() and not dead.exists()


async def test_a_read_only_open_of_a_missing_bus_creates_nothing(tmp_path):
    missing = tmp_path / "nowhere" / ".wavebus"
    with pytest.raises(BusError, match="no bus at"):
        FileBus(missing, create=False)
    assert not missing.exists() and not missing.parent.exists()


async def test_a_read_only_open_of_an_existing_bus_works(file_bus):
    await crew(file_bus)
    assert {a.id for a in await FileBus(file_bus.root, create=False).list_agents()} >= {"orchestrator"}


async def test_an_agent_log_is_0600_whatever_the_umask(file_bus):
    await crew(file_bus)
    old = os.umask(0o022)
    try:
        agent = await spawn(file_bus, "talker", [PYTHON, "-c", "print('private')"], parent_id="orchestrator")
    finally:
        os.umask(old)

    async def ended() -> bool:
        a = await file_bus.get_agent(agent.id)
        return a is not None and a.exit_code is not None

    await until(ended, 30, "the agent to end")
    assert agent.log_path
    assert stat.S_IMODE(os.stat(agent.log_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(agent.log_path)).st_mode) == 0o700
    assert Path(agent.log_path).read_text() == "private\n"
