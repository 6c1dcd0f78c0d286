"""The inbox of the directory bus: the life of an item, from delivery to history.

    inbox/<id>/tmp/      items being written
    inbox/<id>/new/      delivered (`file_items.py` names them), FIFO by seq
    inbox/<id>/claims/   claimed by one wait (atomic rename: exactly once)
    inbox/<id>/cur/      taken (`file_history.py`)
    locks/inbox-<id>     flock held while an item gets its seq; the file's content is the
                         inbox's last seq (a decimal number)

What a process lists of an inbox it keeps, so a wake does not list a backlog again: the
items by sender (`SenderIndex`, a fan-in's read) and the names not yet tried
(`KeptNames`, a next-message claim). Both are kept up to date from the watcher's events.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from ..ids import check_id
from ..model import SYSTEM_EVENTS_KEPT, SYSTEM_ITEM_TYPES, Item, ItemRef
from .file_history import History
from .file_items import claim_path, item_name, load, parse_name, scan
from .file_records import FileWaits
from .fs import SEP, BusDir, sorted_names, sync_dir, write_new

#: up to this many claims, `holds` checks each one; beyond, one listing of claims/ is cheaper
#: (a fan-in holding thousands of claims: a stat each costs more than its whole wake)
HOLDS_STATS = 16
#: a take of more claims than this renames them on a worker thread
TAKE_ON_LOOP = 64
#: arrivals queued for an inbox's index that no read has merged: past this, the index is
#: dropped (the inbox is listed again on its next read), so nobody reading costs no memory
ARRIVALS_QUEUED = 100_000


class SenderIndex:
    """Per inbox, its pending items by sender (seq -> ref), made from one listing and then
    kept up to date from the watcher's arrivals (which its thread queues, for the loop to
    merge), so a fan-in's read costs its senders' items, not the inbox's backlog. An inbox
    is listed again when the watcher may have missed something (`renew_all`: an overflow)
    or items came back to it (`renew`)."""

    def __init__(self) -> None:
        self._ticks = itertools.count(1)
        self._epoch = 0
        self._renewed: dict[str, int] = {}
        self._index: dict[str, tuple[tuple[int, int], dict[str, dict[int, ItemRef]]]] = {}
        self._arrived_lock = threading.Lock()
        self._arrived: dict[str, list[ItemRef]] = {}  # only for indexed inboxes

    def read(self, inbox: str, senders: Collection[str] | None, listing: Callable[[], list[ItemRef]]) -> list[ItemRef]:
        """The inbox's items (from `senders`, FIFO); `listing` lists the inbox when the
        index cannot say (no senders, never listed, or renewed since)."""
        when = (self._epoch, self._renewed.get(inbox, 0))  # before the listing: a change after renews it
        kept = self._index.get(inbox)
        if senders is None or kept is None or kept[0] != when:
            with self._arrived_lock:  # from now on the watcher queues this inbox's arrivals
                self._arrived[inbox] = []
            refs = listing()
            by_sender: dict[str, dict[int, ItemRef]] = {}
            for ref in refs:
                by_sender.setdefault(ref.sender, {})[ref.seq] = ref
            self._index[inbox] = (when, by_sender)
            return refs if senders is None else [r for r in refs if r.sender in senders]
        by_sender = kept[1]
        with self._arrived_lock:
            arrived, self._arrived[inbox] = self._arrived.get(inbox, []), []
        for ref in arrived:  # the listing may hold some of them already: by seq, once
            by_sender.setdefault(ref.sender, {})[ref.seq] = ref
        if len(by_sender) <= len(senders):
            refs = [r for sender, rs in by_sender.items() if sender in senders for r in rs.values()]
        else:
            refs = [r for sender in senders for r in by_sender.get(sender, {}).values()]
        refs.sort(key=lambda r: r.seq)
        return refs

    def arrival(self, inbox: str, name: str) -> None:
        """(The watcher's thread) an item named `name` arrived in `inbox`: queued for its index."""
        ref = parse_name(name)
        with self._arrived_lock:
            queued = self._arrived.get(inbox)
            if queued is None:
                return  # not indexed: its first read lists it
            if ref is None or len(queued) >= ARRIVALS_QUEUED:  # nobody reads it: list it again when one does
                del self._arrived[inbox]
                self._index.pop(inbox, None)
                return
            queued.append(ref)

    def forget(self, inbox: str, ref: ItemRef) -> None:
        """`ref` is gone from new/ (or about to be): no read names it again."""
        kept = self._index.get(inbox)
        if kept is not None:
            listed = kept[1].get(ref.sender)
            if listed is not None and listed.pop(ref.seq, None) is not None and not listed:
                del kept[1][ref.sender]

    def renew(self, inbox: str) -> None:
        """What was listed of `inbox` may miss items (some came back): list it again."""
        self._renewed[inbox] = next(self._ticks)

    def renew_all(self) -> None:
        """Every listing may miss something (the watcher may have missed events)."""
        self._epoch = next(self._ticks)


class KeptNames:
    """claim_next's kept listing: per inbox, the names of new/ not yet tried, oldest first,
    and the newest of that listing; `stale`: inboxes where an item came back before it."""

    def __init__(self) -> None:
        self._queued: dict[str, list[str]] = {}
        self._last: dict[str, str] = {}
        self.stale: set[str] = set()

    def names(self, inbox: str, new: Callable[[], str], *, relist: bool, watched: bool) -> tuple[list[str], bool]:
        """The names in the inbox's new/ folder (`new()` says where), oldest first, and
        whether they were listed just now."""
        if not relist and watched and inbox not in self.stale:
            names = self._queued.get(inbox)
            if names:
                return names, False
        self.stale.discard(inbox)  # before the listing: a return seen after it marks it again
        names = sorted_names(new())
        if names and watched:
            self._queued[inbox], self._last[inbox] = names, names[-1]
        else:
            self._queued.pop(inbox, None)
            self._last.pop(inbox, None)
        return names, True

    def arrival(self, inbox: str, name: str) -> None:
        if name <= self._last.get(inbox, ""):
            self.stale.add(inbox)  # an item came (back) before the kept names

    def all_stale(self) -> None:
        self.stale.update(list(self._queued))


class FileInbox:
    """Every inbox of one bus: deliver, list, claim, return, take, read history."""

    def __init__(self, bus: BusDir, waits: FileWaits) -> None:
        self.bus = bus
        self.waits = waits
        self.history = History(bus)
        self.index = SenderIndex()
        self.kept = KeptNames()
        #: per (inbox, wait): seq -> (new/ name, item), of the claims this process made, for take
        self._claimed: dict[tuple[str, str], dict[int, tuple[str, Item]]] = {}

    def _scan(self, folder: str | Path) -> list[ItemRef]:
        return scan(self.bus, folder)

    def deliver(self, item: Item) -> Item:
        """Write the item whole and flushed under tmp/, then publish it by a rename into new/.

        Any write error (a full disk above all) removes the temp file and raises a BusError:
        the send fails, and nothing a wait could deliver is left behind.
        """
        data = item.model_dump_json(exclude={"seq"}).encode()
        tmp: str | None = None
        try:
            box = self.bus.box(item.to)
            tmp = f"{box}/tmp/{item.id}"
            write_new(tmp, data)
            with self.bus.lock(f"inbox-{item.to}") as lock:
                raw = os.pread(lock, 32, 0)
                seq = int(raw or b"0") + 1
                os.pwrite(lock, str(seq).encode().ljust(20), 0)
                ref = ItemRef(seq=seq, type=item.type, sender=item.sender, id=item.id)
                os.rename(tmp, f"{box}/new/{item_name(ref)}")
                tmp = None
            sync_dir(f"{box}/new")
        except OSError as e:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise self.bus.write_failed(e, f"a {item.type} for {item.to}") from e
        if item.type in SYSTEM_ITEM_TYPES:  # not under the lock: a quarantine while trimming delivers
            self._trim_system_events(box)
        return item.model_copy(update={"seq": seq})

    def _trim_system_events(self, box: str) -> None:
        refs = [r for r in self._scan(f"{box}/new") if r.type in SYSTEM_ITEM_TYPES]
        for ref in refs[: max(0, len(refs) - SYSTEM_EVENTS_KEPT)]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{box}/new/{item_name(ref)}")

    def arrival(self, inbox: str, name: str) -> None:
        """(The watcher's thread) an item named `name` arrived in the inbox's new/."""
        self.index.arrival(inbox, name)  # before the dispatch: the waits it wakes find it
        self.kept.arrival(inbox, name)

    def renew(self, inbox: str) -> None:
        self.index.renew(inbox)

    def renew_all(self) -> None:
        self.kept.all_stale()
        self.index.renew_all()

    def _came_back(self, inbox: str) -> None:
        """Items return to the inbox from this process: what was listed and kept is stale."""
        self.kept.stale.add(inbox)  # returned items go back before what claim_next kept
        self.index.renew(inbox)

    async def pending(self, inbox: str, senders: Collection[str] | None = None) -> list[ItemRef]:
        """The items in the inbox, FIFO; with `senders`, only theirs.

        With `senders` (a fan-in's read), from the inbox's index by sender: listed once, then
        kept from the watcher's arrivals, so many fan-ins on an inbox with a large backlog
        each read their own senders' few items, not the backlog. The index may still
        name an item that left since (taken by another process: its claim then fails, and
        the sender's next is tried); it never misses one that arrived, as every arrival is
        queued for it before the wait it wakes reads, and what the watcher may have missed
        (an overflow, an item come back) makes a new listing. Without `senders` (a rescan,
        the backstop for lost changes) the inbox is listed, and the index made again."""
        if not self.bus.watches(inbox):
            refs = self._scan(f"{self.bus.box(inbox)}/new")
            return refs if senders is None else [r for r in refs if r.sender in senders]
        return self.index.read(inbox, senders, lambda: self._scan(f"{self.bus.box(inbox)}/new"))

    async def peek(self, inbox: str, after: int = 0) -> list[Item]:
        new = f"{self.bus.box(inbox)}/new"  # listed (names carry the seq), then only the new read
        items = [load(self.bus, f"{new}/{item_name(r)}", r.seq) for r in self._scan(new) if r.seq > after]
        return [i for i in items if i is not None]

    async def claim(self, inbox: str, ref: ItemRef, wait_id: str) -> Item | None:
        box = self.bus.box(inbox)
        name = item_name(ref)
        dest = claim_path(box, check_id(wait_id, "wait"), ref.seq)
        self.index.forget(inbox, ref)  # gone from new/ after this (or already): no read tries it again
        try:
            os.rename(f"{box}/new/{name}", dest)
        except FileNotFoundError:
            return None  # another waiter got it first
        item = load(self.bus, dest, ref.seq, name)
        claimed = self._claimed.setdefault((inbox, wait_id), {})
        if item is not None:
            claimed[ref.seq] = (name, item)
        return item

    async def claim_many(self, inbox: str, refs: Sequence[ItemRef], wait_id: str) -> list[Item]:
        got = []
        for ref in sorted(refs, key=lambda r: r.seq):
            item = await self.claim(inbox, ref, wait_id)
            if item is not None:
                got.append(item)
        return got

    async def claim_each(
        self, inbox: str, wait_id: str, senders: Collection[str], types: Sequence[str], *, relist: bool = False
    ) -> list[Item]:
        """From the inbox's index by sender (`pending`), a rename per item; where another wait
        took one first, that sender's next."""
        wanted = set(types)
        queued: dict[str, list[ItemRef]] = {}
        for ref in await self.pending(inbox, None if relist else senders):
            if ref.sender in senders and ref.type in wanted:
                queued.setdefault(ref.sender, []).append(ref)
        got: list[Item] = []
        while queued:
            for sender, refs in list(queued.items()):
                item = await self.claim(inbox, refs.pop(0), wait_id)
                if item is not None:
                    got.append(item)
                if item is not None or not refs:
                    del queued[sender]
        got.sort(key=lambda i: i.seq)
        return got

    async def claim_next(
        self, inbox: str, wait_id: str, types: Sequence[str] | None = None, limit: int = 1
    ) -> list[Item]:
        """Claim up to `limit` of the oldest items (of `types`), FIFO.

        The names of the inbox's last listing not yet tried are kept (`KeptNames`), so a
        backlog is listed once, not once per claim (a claim would cost a listing of the
        whole backlog, and a drain by several processes would crawl). A new item always
        sorts after them (seq is a counter), so they are tried first; the folder is listed
        again when none of them is left or fits, and when an item came back to a place
        before them (returned by this process, or seen so by the watcher). Without a
        watcher nothing would say so: every claim lists."""
        wanted = None if types is None else set(types)
        got: list[Item] = []

        def new() -> str:
            return f"{self.bus.box(inbox)}/new"

        names, fresh = self.kept.names(inbox, new, relist=False, watched=self.bus.watches(inbox))
        while True:
            i = 0
            while i < len(names) and len(got) < limit:
                ref = parse_name(names[i])
                if ref is None:
                    self.bus.quarantine(Path(new(), names[i]), "bad-name", "not an inbox item name")
                elif wanted is not None and ref.type not in wanted:
                    i += 1
                    continue
                elif item := await self.claim(inbox, ref, wait_id):  # None: another waiter got it
                    got.append(item)
                del names[i]
            if len(got) >= limit or fresh:
                return got
            names, fresh = self.kept.names(inbox, new, relist=True, watched=self.bus.watches(inbox))

    def _claims_of(self, box: str, wait_id: str) -> list[int]:
        """The seqs `wait_id` holds claimed in the inbox, oldest first (a listing of claims/)."""
        prefix = f"{wait_id}{SEP}"
        try:
            names = os.listdir(f"{box}/claims")
        except FileNotFoundError:
            return []
        tails = (n[len(prefix) :] for n in names if n.startswith(prefix))
        return sorted(int(t) for t in tails if len(t) == 16 and t.isdigit())

    async def holds(self, inbox: str, wait_id: str) -> int | None:
        if not os.path.exists(self.waits.path(wait_id)):
            return None
        box = self.bus.box(inbox)
        known = self._claimed.get((inbox, wait_id))
        if known and len(known) <= HOLDS_STATS:  # what this process claimed, still where it put it
            return sum(os.path.exists(claim_path(box, wait_id, seq)) for seq in known)
        return len(self._claims_of(box, wait_id))

    async def release(self, inbox: str, wait_id: str) -> int:
        box = self.bus.box(inbox)
        check_id(wait_id, "wait")
        known = self._claimed.pop((inbox, wait_id), {})
        self._came_back(inbox)
        self._flatten_folder(box, wait_id)
        count = 0
        for seq in self._claims_of(box, wait_id):
            claim = claim_path(box, wait_id, seq)
            name = known[seq][0] if seq in known else self._item_name(claim, seq)
            if name is None:
                continue  # not an item: quarantined
            with contextlib.suppress(FileNotFoundError):
                os.rename(claim, f"{box}/new/{name}")
                count += 1
        return count

    def _item_name(self, path: str, seq: int) -> str | None:
        """The new/ name of a claimed item that this process did not claim: read from it."""
        item = load(self.bus, path, seq)
        return None if item is None else item_name(ItemRef(seq, item.type, item.sender, item.id))

    def _flatten_folder(self, box: str, wait_id: str) -> None:
        """Turn the claim folder an earlier version made for `wait_id`, if any, into claims
        of this layout, so releasing and taking them needs no case of its own."""
        folder = f"{box}/claims/{wait_id}"
        if not os.path.isdir(folder) or os.path.islink(folder):
            return
        for ref in self._scan(folder):
            with contextlib.suppress(FileNotFoundError):
                os.rename(f"{folder}/{item_name(ref)}", claim_path(box, wait_id, ref.seq))
        with contextlib.suppress(OSError):
            os.rmdir(folder)

    async def unclaim(self, inbox: str, ref: ItemRef, wait_id: str) -> bool:
        """Return one claim of `wait_id` to the inbox (a wait that took more than it can hand on)."""
        box = self.bus.box(inbox)
        self._claimed.get((inbox, wait_id), {}).pop(ref.seq, None)
        self._came_back(inbox)
        try:
            os.rename(claim_path(box, check_id(wait_id, "wait"), ref.seq), f"{box}/new/{item_name(ref)}")
        except FileNotFoundError:
            return False
        return True

    async def take(self, inbox: str, wait_id: str, taker: str) -> list[Item]:
        """Move a wait's claims into history, a rename each. Beyond TAKE_ON_LOOP claims the
        renames run on a worker thread, so a fan-in's thousands do not hold up the process's
        other waits."""
        box = self.bus.box(inbox)
        check_id(wait_id, "wait")
        check_id(taker, "taker")
        # what this process claimed for the wait is what it holds (only this wait claims
        # under its name); a wait whose claims were not made here lists claims/
        known = self._claimed.pop((inbox, wait_id), None)
        if known is None and wait_id in self.waits.mine:
            return []  # a wait of this process that claimed nothing here
        known = known or {}
        if not known:
            self._flatten_folder(box, wait_id)
        seqs = sorted(known) if known else self._claims_of(box, wait_id)
        if len(seqs) > TAKE_ON_LOOP:
            taken = await asyncio.to_thread(self.history.move, box, wait_id, taker, seqs, known)
        else:
            taken = self.history.move(box, wait_id, taker, seqs, known)
        self.history.rotate_when_due(inbox, box)
        return taken

    async def read_history(self, inbox: str, limit: int) -> list[Item]:
        return self.history.read(self.bus.box(inbox), limit)
