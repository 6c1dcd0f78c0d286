"""What only the directory bus has: Maildir delivery, modes, quarantine, one shared watcher."""

from __future__ import annotations

import json
import logging
import os
import stat

import anyio
import pytest
from watchfiles import Change, awatch

from wavewait.core import inotify, messages, wait, watch
from wavewait.core.bus.file import FileBus
from wavewait.core.ids import new_id
from wavewait.core.model import Item

from conftest import Background, has_waits, until
from coretools import crew, run_actor

pytestmark = pytest.mark.anyio


async def test_a_reader_never_sees_half_an_item_because_delivery_renames_from_tmp(file_bus):
    await crew(file_bus)
    box = file_bus.root / "inbox" / "orchestrator"
    seen: list[tuple[int, bool]] = []
    ready, stop = anyio.Event(), anyio.Event()

    async def watch_new() -> None:
        async for changes in awatch(box, stop_event=stop, step=1, debounce=5):
            for change, path in changes:
                if path.endswith("sentinel"):
                    ready.set()
                elif change == Change.added and os.path.dirname(path) == str(box / "new"):
                    data = open(path, "rb").read()
                    try:
                        json.loads(data)
                        seen.append((len(data), True))
                    except ValueError:
                        seen.append((len(data), False))

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_new)
        with anyio.fail_after(10):
            while not ready.is_set():  # until the watcher is live (it reports the sentinel)
                (box / "tmp" / "sentinel").write_text("x")
                with anyio.move_on_after(0.05):
                    await ready.wait()
        os.unlink(box / "tmp" / "sentinel")
        big = "x" * 200_000
        for _ in range(30):
            await messages.send(file_bus, "file-reader", "orchestrator", big)
        await until(lambda: len(seen) >= 30, what="the watcher to see every delivery")
        stop.set()
    assert all(ok and size > 200_000 for size, ok in seen), seen
    assert os.listdir(box / "tmp") == []


async def test_folders_are_0700_and_files_0600(file_bus, tmp_path):
    await crew(file_bus)
    await messages.send(file_bus, "file-reader", "orchestrator", "hi")
    await messages.send(file_bus, "linter", "orchestrator", "hi")
    assert (await wait.wait_next(file_bus, "orchestrator", 0)).status == "received"
    await wait.wait_agent(
        file_bus,
        "orchestrator",
        id="w1",
        agent_id="linter",
        kind="agent-idle",
        description="x",
        timeout_at="2000-01-01T00:00:00Z",
    )
    for dirpath, dirnames, filenames in os.walk(file_bus.root):
        assert stat.S_IMODE(os.stat(dirpath).st_mode) == 0o700, dirpath
        for f in filenames:
            assert stat.S_IMODE(os.stat(os.path.join(dirpath, f)).st_mode) == 0o600, f


async def test_malformed_and_foreign_files_go_to_quarantine_and_never_break_a_wait(file_bus, caplog):
    await crew(file_bus)
    new = file_bus.root / "inbox" / "orchestrator" / "new"
    (new / "README.txt").write_text("not an item")
    (new / f"{0:016d}~message~linter~deadbeef").write_text("{ broken json")
    (file_bus.root / "agents" / "ghost.json").write_text('{"v": 1}')
    (file_bus.root / "agents" / "notes.md").write_text("foreign")
    (file_bus.root / "waits" / "bogus.json").write_text("[]")
    await messages.send(file_bus, "file-reader", "orchestrator", "the real one")
    with caplog.at_level(logging.WARNING):
        r = await wait.wait_next(file_bus, "orchestrator", 5)
        assert {a.id for a in await file_bus.list_agents()} >= {"orchestrator", "file-reader"}
        assert await file_bus.list_waits() == []
    assert r.message == "the real one"
    quarantined = sorted(os.listdir(file_bus.root / "quarantine"))
    assert len(quarantined) == 5, quarantined
    assert any("deadbeef" in q for q in quarantined)
    assert any("README.txt" in q for q in quarantined) and any("ghost.json" in q for q in quarantined)
    assert "quarantine" in caplog.text
    # what was in the inbox is reported to its owner, once each; nothing else is left
    events = await file_bus.peek("orchestrator")
    assert sorted(e.data["reason"] for e in events) == ["bad-name", "malformed"]
    assert all(e.type == "item_quarantined" for e in events)


async def test_all_waits_of_a_process_share_one_watcher(file_bus):
    await crew(file_bus)
    # by key (the folder each watches): the worker process may hold another test's watchers
    before = set(inotify._watchers), set(watch._watchers)
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        for i in range(50):
            bg.start(f"w{i}", wait.wait_next, file_bus, "orchestrator", 3600)
            bg.start(f"f{i}", wait.wait_fan_in, file_bus, "orchestrator", 3600, ["linter"])

        await until(lambda: has_waits(file_bus, 100), 30, "100 waits to register")
        # one inotify watcher more, of this bus's folder; no watchfiles watcher at all
        added = set(inotify._watchers) - before[0]
        assert added == {file_bus.url}, inotify._watchers.keys()
        assert set(watch._watchers) == before[1]
        for record in await file_bus.list_waits():
            await file_bus.interrupt(record.id)
        await until(lambda: len(bg.results) == 100, 30, "every wait to return")


async def test_interrupt_flags_leave_with_their_waits_and_no_flag_means_one_unlink(file_bus, monkeypatch):
    """end_wait removes a flag it saw being set, from another process too (the waits here are
    interrupted by a separate bus object, as `wavewait interrupt` would), and skips the
    unlink of a flag that was never set: one system call per ended wait, not two.
    (The record leaves by a rename: this bus object keeps it as a spare for its next wait.)"""
    await crew(file_bus)
    other = FileBus(file_bus.root)
    async with anyio.create_task_group() as tg:
        bg = Background(tg)
        for i in range(5):
            bg.start(f"w{i}", wait.wait_next, file_bus, "orchestrator", 3600)
        await until(lambda: has_waits(file_bus, 5), 30, "5 waits to register")
        for record in await other.list_waits():
            assert await other.interrupt(record.id)
        await until(lambda: len(bg.results) == 5, 30, "every wait to return")
    assert all(r.status == "interrupted" for r in bg.results.values())
    assert os.listdir(file_bus.root / "waits") == []  # records and flags gone
    removed: list[str] = []  # paths in waits/ that an unlink or a rename took away
    real_unlink, real_rename = os.unlink, os.rename

    def counting_unlink(path, *args, **kwargs):
        removed.append(str(path))
        return real_unlink(path, *args, **kwargs)

    def counting_rename(src, dst, *args, **kwargs):
        removed.append(str(src))
        return real_rename(src, dst, *args, **kwargs)

    await messages.send(file_bus, "linter", "orchestrator", "hello")
    with monkeypatch.context() as m:
        m.setattr(os, "unlink", counting_unlink)
        m.setattr(os, "rename", counting_rename)
        r = await wait.wait_next(file_bus, "orchestrator", 30)
    assert r.message == "hello"
    (record,) = [p for p in removed if "/waits/" in p]  # the record (kept as a spare); no flag to remove
    assert record.endswith(".json")
    assert os.listdir(file_bus.root / "waits") == []
    await other.close()


async def test_a_claim_of_a_dead_waiter_is_returned_by_the_recovery_sweep(file_bus):
    await crew(file_bus)
    await messages.send(file_bus, "file-reader", "orchestrator", "first")
    await messages.send(file_bus, "linter", "orchestrator", "second")
    box = file_bus.root / "inbox" / "orchestrator"
    # a claim whose wait record is gone: its owner died between claim and take
    first = sorted(os.listdir(box / "new"))[0]
    os.rename(box / "new" / first, box / "claims" / f"0123456789abcdef0123456789abcdef~{first[:16]}")
    assert await file_bus.recover("orchestrator") == 1
    assert sorted(os.listdir(box / "new"))[0] == first
    await run_actor(file_bus, "consume", "orchestrator")
    assert await file_bus.pending("orchestrator") == []


async def test_claim_and_take_folders_of_an_earlier_version_are_returned_and_read(file_bus):
    """Earlier versions kept a folder per claiming wait and per take: a bus they used still
    gives back what a dead wait of theirs claimed, and shows their history."""
    await crew(file_bus)
    for body in ("old take", "old claim", "new"):
        await messages.send(file_bus, "linter", "orchestrator", body)
    box = file_bus.root / "inbox" / "orchestrator"
    taken, claimed, _ = sorted(os.listdir(box / "new"))
    take_folder = box / "cur" / "00000000000000000001~1~orchestrator~0123456789abcdef0123456789abcdef"
    take_folder.mkdir(mode=0o700)
    os.rename(box / "new" / taken, take_folder / taken)
    claim_folder = box / "claims" / "fedcba9876543210fedcba9876543210"
    claim_folder.mkdir(mode=0o700)
    os.rename(box / "new" / claimed, claim_folder / claimed)
    assert await file_bus.recover("orchestrator") == 1
    assert os.listdir(box / "claims") == []
    assert (await wait.wait_next(file_bus, "orchestrator", 0)).message == "old claim"
    assert [i.body for i in await file_bus.history("orchestrator")] == ["old take", "old claim"]


async def test_history_keeps_who_took_what_in_order_and_is_rotated(file_bus, monkeypatch):
    from wavewait.core.bus import file_history as file_mod

    monkeypatch.setattr(file_mod, "HISTORY_KEPT", 3)
    monkeypatch.setattr(file_mod, "ROTATE_EVERY", 1)
    await crew(file_bus)
    for i in range(5):
        await messages.send(file_bus, "file-reader", "orchestrator", f"m{i}")
    fan = await wait.wait_fan_in(file_bus, "orchestrator", 0, ["file-reader", "linter"])
    assert fan.results[0].message == "m0"
    for _ in range(4):
        assert (await wait.wait_next(file_bus, "orchestrator", 0)).status == "received"
    history = await file_bus.history("orchestrator", 100)
    assert [i.body for i in history] == ["m2", "m3", "m4"]
    assert all(i.taken_by == "orchestrator" and i.taken_at for i in history)
    assert [i.body for i in await file_bus.history("orchestrator", 1)] == ["m4"]
    assert os.listdir(file_bus.root / "inbox" / "orchestrator" / "claims") == []
    cur = file_bus.root / "inbox" / "orchestrator" / "cur"  # rotated on the bus's worker thread
    await until(lambda: len(os.listdir(cur)) == 3, 10, "history rotated down to HISTORY_KEPT")


def test_removing_a_history_folder_never_follows_a_link(tmp_path):
    from wavewait.core.bus.file_history import remove_history_folder as _remove_history_folder

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    cur = tmp_path / "cur"
    cur.mkdir()
    (cur / "link").symlink_to(outside)
    real = cur / "00000000000000000001~2~me~w1"
    real.mkdir()
    (real / "a").write_text("x")
    (real / "nested").mkdir()  # not a plain item file: removed by the link-safe walk
    _remove_history_folder(cur / "link")
    _remove_history_folder(real)
    assert (outside / "precious").read_text() == "keep" and (cur / "link").is_symlink()
    assert not real.exists()


async def test_a_backlog_is_listed_once_for_many_claims_not_once_per_claim(file_bus, monkeypatch):
    await crew(file_bus)
    for i in range(300):
        await messages.send(file_bus, "linter", "orchestrator", f"job {i}")
    sub = await file_bus.subscribe(inboxes=["orchestrator"])  # the process's watcher runs
    listings: list[str] = []
    real_listdir = os.listdir

    def counting_listdir(path=".", *args):
        if str(path).endswith("/new"):
            listings.append(str(path))
        return real_listdir(path, *args)

    monkeypatch.setattr(os, "listdir", counting_listdir)
    got = []
    for i in range(300):
        (item,) = await file_bus.claim_next("orchestrator", f"{i:032x}", ["message"], 1)
        got.append(item.body)
    assert got == [f"job {i}" for i in range(300)]  # FIFO
    assert len(listings) <= 3  # was one listing of the whole backlog per claim
    sub.close()


async def test_an_item_returned_before_the_kept_names_is_claimed_first(file_bus):
    """claim_next keeps the rest of a listing; an item returned to its place ahead of them,
    by this process or by another one (seen by the watcher), still goes out first."""
    await crew(file_bus)
    for i in range(5):
        await messages.send(file_bus, "linter", "orchestrator", f"job {i}")
    sub = await file_bus.subscribe(inboxes=["orchestrator"])
    wait_a, wait_b, wait_c = "a" * 32, "b" * 32, "c" * 32
    (first,) = await file_bus.claim_next("orchestrator", wait_a, ["message"], 1)
    assert first.body == "job 0"
    # returned by this process
    assert await file_bus.release("orchestrator", wait_a) == 1
    (again,) = await file_bus.claim_next("orchestrator", wait_b, ["message"], 1)
    assert again.body == "job 0"
    # returned by another process (another bus object on the folder): the watcher sees it
    other = FileBus(file_bus.root)
    (taken,) = await other.claim_next("orchestrator", wait_c, ["message"], 1)
    assert taken.body == "job 1"
    (later,) = await file_bus.claim_next("orchestrator", "d" * 32, ["message"], 1)
    assert later.body == "job 2"  # job 1 was gone when tried: dropped from the kept names
    assert await other.release("orchestrator", wait_c) == 1  # job 1 back, before the kept 3, 4
    await until(lambda: "orchestrator" in file_bus.inbox.kept.stale, 10, "the watcher to see the return")
    (back,) = await file_bus.claim_next("orchestrator", "e" * 32, ["message"], 1)
    assert back.body == "job 1"
    rest = await file_bus.claim_next("orchestrator", "f" * 32, ["message"], 10)
    assert [i.body for i in rest] == ["job 3", "job 4"]
    sub.close()
    await other.close()


async def test_a_take_of_many_claims_moves_each_once_into_history_in_order(file_bus):
    """Beyond TAKE_ON_LOOP claims the renames run on a worker thread: the same result."""
    from wavewait.core.bus import file_inbox as file_mod

    await crew(file_bus)
    n = file_mod.TAKE_ON_LOOP * 2 + 1
    for i in range(n):
        await messages.send(file_bus, "linter", "orchestrator", f"m{i}")
    got = await file_bus.claim_next("orchestrator", "0123456789abcdef0123456789abcdef", None, n)
    assert len(got) == n
    taken = await file_bus.take("orchestrator", "0123456789abcdef0123456789abcdef", "orchestrator")
    assert [i.body for i in taken] == [f"m{i}" for i in range(n)]
    assert os.listdir(file_bus.root / "inbox" / "orchestrator" / "claims") == []
    assert [i.body for i in await file_bus.history("orchestrator", n)] == [f"m{i}" for i in range(n)]


async def test_a_fan_ins_read_finds_its_senders_arrivals_without_listing_the_backlog(tmp_path, monkeypatch):
    """Once an inbox is listed, what arrives is taken from the watcher's events: a read for
    one sender does not list a backlog of 200 items of others again. An item another
    process took is skipped at its claim; an item that came back is listed again."""
    bus = FileBus(tmp_path / "bus")
    other = FileBus(tmp_path / "bus")  # another process, for what this one cannot see
    listings = [0]
    real_scan = bus.inbox._scan

    def counted(folder):
        listings[0] += 1
        return real_scan(folder)

    monkeypatch.setattr(bus.inbox, "_scan", counted)
    observer = await bus.subscribe(inboxes=["orchestrator"])  # the watcher runs from here on

    def message(sender: str, body: str) -> Item:
        return Item(id=new_id(), type="message", to="orchestrator", sender=sender, body=body)

    for i in range(200):
        await other.deliver(message("flight-b", f"b{i}"))
    assert await bus.pending("orchestrator", {"flight-a"}) == []
    assert listings[0] == 1
    await other.deliver(message("flight-a", "a0"))
    await other.deliver(message("flight-a", "a1"))

    async def both() -> bool:
        return len(await bus.pending("orchestrator", {"flight-a"})) == 2

    await until(both, what="flight-a's two items, read from the watcher's arrivals")
    refs = await bus.pending("orchestrator", {"flight-a"})
    assert [r.sender for r in refs] == ["flight-a", "flight-a"] and refs[0].seq < refs[1].seq
    assert listings[0] == 1, "a read for flight-a listed the inbox's backlog again"
    # taken by another process: still named here, its claim fails, then it is named no more
    assert [i.body for i in await other.claim_many("orchestrator", refs[:1], new_id())] == ["a0"]
    here = new_id()
    assert await bus.claim("orchestrator", refs[0], here) is None
    assert await bus.pending("orchestrator", {"flight-a"}) == refs[1:]
    got = await bus.claim("orchestrator", refs[1], here)
    assert got is not None and got.body == "a1"
    assert await bus.pending("orchestrator", {"flight-a"}) == []
    assert listings[0] == 1
    # returned by this process: the inbox is listed again, and the item found there
    assert await bus.release("orchestrator", here) == 1
    assert [r.seq for r in await bus.pending("orchestrator", {"flight-a"})] == [refs[1].seq]
    assert listings[0] == 2
    observer.close()
    await bus.close()
    await other.close()


async def test_ended_wait_records_are_rewritten_for_the_next_waits_never_through_a_swapped_spare(file_bus, tmp_path):
    """A wait's record leaves waits/ into tmp/ as a spare, and the next wait of the same bus
    object is written into it (no file made and removed per wait). What other processes see
    is unchanged: each record whole, then gone. A spare someone replaced by a symlink or a
    FIFO is never written through: the record goes to a new file, the target stays as it was."""
    await crew(file_bus)
    other = FileBus(file_bus.root)
    tmp = file_bus.root / "tmp"
    for i in range(3):
        await messages.send(file_bus, "linter", "orchestrator", f"m{i}")
        r = await wait.wait_next(file_bus, "orchestrator", 30)
        assert r.message == f"m{i}"
        assert await other.list_waits() == [] and os.listdir(file_bus.root / "waits") == []
    (spare,) = [p for p in os.listdir(tmp) if p.startswith("spare-wait.")]  # one file, reused three times

    async with anyio.create_task_group() as tg:  # a record written into the spare reads whole
        bg = Background(tg)
        bg.start("w", wait.wait_next, file_bus, "orchestrator", 30)
        await until(lambda: has_waits(file_bus, 1), 30, "the wait to register")
        (record,) = await other.list_waits()
        assert record.kind == "next" and record.waiter == "orchestrator"
        assert not (tmp / spare).exists()  # it is the record now
        await messages.send(file_bus, "linter", "orchestrator", "last")
        await until(lambda: "w" in bg.results, 30, "the wait to return")

    (spare,) = [p for p in os.listdir(tmp) if p.startswith("spare-wait.")]
    target = tmp_path / "not-the-bus.txt"
    target.write_text("untouched")
    os.unlink(tmp / spare)
    os.symlink(target, tmp / spare)
    await messages.send(file_bus, "linter", "orchestrator", "through a symlink?")
    assert (await wait.wait_next(file_bus, "orchestrator", 30)).message == "through a symlink?"
    assert target.read_text() == "untouched" and not (tmp / spare).exists()
    (spare,) = [p for p in os.listdir(tmp) if p.startswith("spare-wait.")]
    os.unlink(tmp / spare)
    os.mkfifo(tmp / spare)
    await messages.send(file_bus, "linter", "orchestrator", "through a FIFO?")
    assert (await wait.wait_next(file_bus, "orchestrator", 30)).message == "through a FIFO?"
    await file_bus.close()
    assert [p for p in os.listdir(tmp) if p.startswith("spare-wait.")] == []  # closed: none left
    await other.close()
