"""The directory bus's own inotify watcher (core/inotify.py): real folders, real kernel events."""

from __future__ import annotations

import os
import threading

import anyio
import pytest

from wavewait.core import inotify
from wavewait.core.bus.file import FileBus
from wavewait.core.ids import new_id
from wavewait.core.model import Item

from conftest import until

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(not inotify.AVAILABLE, reason="inotify is Linux only")]


def item(to: str, body: str = "hi") -> Item:
    return Item(id=new_id(), type="message", to=to, sender="someone", body=body)


async def next_change(changes, within: float = 10) -> set[str] | None:
    with anyio.fail_after(within):
        await anext(changes)
    return changes.changed()


async def test_an_inbox_made_after_the_watcher_started_wakes_its_waits(tmp_path):
    bus = FileBus(tmp_path / "bus")
    changes = await bus.subscribe(inboxes=["newcomer"])  # no such inbox yet
    try:
        await bus.deliver(item("newcomer"))  # makes the inbox, its new/, and the item at once
        assert "i:newcomer" in (await next_change(changes) or {"i:newcomer"})
        await bus.deliver(item("newcomer", "second"))  # and its new/ is watched from then on
        assert "i:newcomer" in (await next_change(changes) or {"i:newcomer"})
    finally:
        changes.close()
        await bus.close()


async def test_claims_and_history_wake_nobody_but_an_interrupt_wakes_its_wait(tmp_path):
    bus = FileBus(tmp_path / "bus")
    await bus.deliver(item("box"))
    changes = await bus.subscribe(inboxes=["box"], wait_id="w1", waits=True)
    seen: list[set[str]] = []
    calls = threading.Event()

    def record(paths: set[str]) -> None:
        seen.append(paths)
        calls.set()

    watch = inotify.watch_bus(bus.url, record)
    try:
        ref = (await bus.pending("box"))[0]
        await bus.claim("box", ref, "w1")  # new/ loses the item: one event there
        await bus.take("box", "w1", "box")  # claims/ and cur/: not watched
        await bus.interrupt("w1")  # no record: refused, writes nothing
        (tmp_path / "bus" / "waits" / "w1.interrupt").touch()
        keys = await next_change(changes)
        while keys is not None and "x:w1" not in keys:
            keys = await next_change(changes)
        everything = [p for batch in seen for p in batch]
        assert not [p for p in everything if "/claims" in p or "/cur" in p]
    finally:
        watch.close()
        changes.close()
        await bus.close()


async def test_a_queue_overflow_in_the_kernel_makes_every_wait_read_everything(tmp_path):
    """The kernel drops events past its queue (16,384 by default) and says so once; the
    watcher turns that into "anything may have changed" instead of losing the change."""
    limit = int(open("/proc/sys/fs/inotify/max_queued_events").read())
    bus = FileBus(tmp_path / "bus")
    await bus.deliver(item("box"))
    held, release = threading.Event(), threading.Event()

    def hold_the_thread(paths: set[str]) -> None:
        held.set()
        release.wait(60)  # the watcher's thread stops reading; the kernel queues and drops

    changes = await bus.subscribe(inboxes=["box"])
    hold = inotify.watch_bus(bus.url, hold_the_thread)
    try:
        new = tmp_path / "bus" / "inbox" / "box" / "new"
        (new / "first").touch()
        await until(held.is_set, 10, "the watcher's thread to be held")
        for n in range(limit + 100):  # past the kernel's queue
            os.close(os.open(new / f"x{n}", os.O_CREAT | os.O_WRONLY, 0o600))
        changes.changed()  # what came before the overflow is not the point
        release.set()
        keys = await next_change(changes, 30)
        while keys is not None:  # until the overflow's "everything" arrives
            keys = await next_change(changes, 30)
        assert keys is None
    finally:
        release.set()
        hold.close()
        changes.close()
        await bus.close()


async def test_the_watcher_stops_with_its_last_subscription(tmp_path):
    bus = FileBus(tmp_path / "bus")
    first = await bus.subscribe(inboxes=["a"])
    watcher = inotify._watchers[bus.url]
    second = inotify.watch_bus(bus.url, lambda paths: None)
    assert inotify._watchers[bus.url] is watcher  # shared
    first.close()
    await bus.close()
    assert watcher._thread.is_alive()  # the other subscriber still holds it
    second.close()
    await until(lambda: not watcher._thread.is_alive(), 10, "the watcher's thread to end")
    assert bus.url not in inotify._watchers


async def test_without_inotify_the_bus_falls_back_to_watchfiles(tmp_path, monkeypatch):
    """Where the kernel's inotify cannot be reached (another system), watchfiles watches the bus."""
    monkeypatch.setattr(inotify, "AVAILABLE", False)
    bus = FileBus(tmp_path / "bus")
    changes = await bus.subscribe(inboxes=["box"])
    try:
        assert bus.url not in inotify._watchers
        await bus.deliver(item("box"))
        assert "i:box" in (await next_change(changes) or {"i:box"})
    finally:
        changes.close()
        await bus.close()


async def test_only_the_inboxes_subscribed_to_are_watched_and_the_others_are_listed_at_each_read(tmp_path):
    """Two watches per inbox of the bus ran out of the user's inotify watches past ~96,000
    flights, in every process that subscribed to anything: a process watches the inboxes its
    subscriptions name, and claims from another by listing it."""
    bus = FileBus(tmp_path / "bus")
    for name in ("other", "third"):
        await bus.deliver(item(name))
    changes = await bus.subscribe(inboxes=["mine"], agents=True)
    try:
        watcher = inotify._watchers[bus.url]
        inbox = os.path.join(bus.url, "inbox")
        assert sorted(p for p in watcher._paths.values() if p.startswith(inbox + os.sep)) == [
            os.path.join(inbox, "mine"),
            os.path.join(inbox, "mine", "new"),
        ]
        assert bus.dir.watches("mine") and not bus.dir.watches("other")
        first = await bus.claim_next("other", "w1")
        await bus.deliver(item("other", "second"))  # no watch saw it: the next claim lists again
        second = await bus.claim_next("other", "w2")
        assert [i.body for i in first + second] == ["hi", "second"]
        later = await bus.subscribe(inboxes=["other"])  # now watched too, from the subscription on
        assert bus.dir.watches("other")
        await bus.deliver(item("other", "third"))
        assert "i:other" in (await next_change(later) or {"i:other"})
        later.close()
    finally:
        changes.close()
        await bus.close()
