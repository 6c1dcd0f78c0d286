"""An inbox's history on the directory bus: what was taken, by whom and when, bounded.

    inbox/<id>/cur/<at>~<seq>~<taker>   taken: one file per item, renamed from its claim

Earlier versions filed a take as a folder, `<at>~<count>~<taker>~<wait id>`, holding its
items: such folders are still read and rotated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from ..model import Item
from .file_items import claim_path, item_name, load, scan
from .fs import SEP, BusDir

log = logging.getLogger(__name__)

HISTORY_KEPT = 1000
ROTATE_EVERY = 100


class Taken(NamedTuple):
    """One history entry: an item file, or a take folder of an earlier version."""

    name: str
    n: int
    taker: str
    at: float
    folder: bool


def remove_history_folder(path: Path) -> None:
    """Delete one take folder of an earlier version, its item files first, never following
    a link: opened with O_NOFOLLOW, its entries unlinked relative to it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return  # gone, or no longer a real folder: nothing of ours to remove
    odd = False
    try:
        for name in os.listdir(fd):
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                pass  # removed meanwhile
            except OSError:
                odd = True  # not a plain file (a folder someone put there)
    finally:
        os.close(fd)
    if odd:
        shutil.rmtree(path, ignore_errors=True)  # its own link-safe walk
    else:
        with contextlib.suppress(OSError):
            os.rmdir(path)


def entries(box: str) -> list[Taken]:
    """History, oldest first: item files `<at>~<seq>~<taker>`, and the take folders of
    earlier versions, `<at>~<count>~<taker>~<wait id>`. Only those: read, never followed."""
    out = []
    with os.scandir(f"{box}/cur") as it:
        found = sorted((e.name, e.is_file(follow_symlinks=False), e.is_dir(follow_symlinks=False)) for e in it)
    for name, is_file, is_dir in found:
        parts = name.split(SEP)
        if not (parts[0].isdigit() and len(parts) > 2 and parts[1].isdigit()):
            continue
        at = int(parts[0]) / 1e9
        if is_file and len(parts) == 3:
            out.append(Taken(name, 1, parts[2], at, False))
        elif is_dir and len(parts) == 4:
            out.append(Taken(name, int(parts[1]), parts[2], at, True))
    return out


class History:
    """Takes into history, reads of it, and its rotation down to HISTORY_KEPT."""

    def __init__(self, bus: BusDir) -> None:
        self.bus = bus
        self._takes_seen: dict[str, int] = {}
        self._rotator: ThreadPoolExecutor | None = None  # history rotations, off the event loop
        self._rotations: set[str] = set()  # inbox folders with a rotation queued, not started

    def move(
        self, box: str, wait_id: str, taker: str, seqs: list[int], known: dict[int, tuple[str, Item]]
    ) -> list[Item]:
        """Rename the wait's claims `seqs` into history, taken by `taker` now; the items taken
        (`known`: those this process claimed, not read again)."""
        at = time.time_ns()
        taken = []
        for seq in seqs:
            dest = f"{box}/cur/{at:020d}{SEP}{seq:016d}{SEP}{taker}"
            try:
                os.rename(claim_path(box, wait_id, seq), dest)
            except FileNotFoundError:
                continue  # returned meanwhile (a recovery that judged this wait ended)
            item = known[seq][1] if seq in known else load(self.bus, dest, seq)
            if item is not None:
                taken.append(item.model_copy(update={"taken_by": taker, "taken_at": at / 1e9}))
        return taken

    def rotate_when_due(self, inbox: str, box: str) -> None:
        """Rotating lists the history: do it on a process's first take of an inbox, then
        every ROTATE_EVERY takes, so history stays near HISTORY_KEPT. The count starts at a
        random phase: inboxes fed in step (a server of many waits under a steady load) would
        otherwise all rotate at the same take.

        The rotation runs on a worker thread: its unlinks wait on the file system's journal
        (each frees an inode and a block), and on the event loop every wait of the process
        would wait with them."""
        n = self._takes_seen.get(inbox)
        self._takes_seen[inbox] = (random.randrange(ROTATE_EVERY) if n is None else n) + 1
        if (n is None or self._takes_seen[inbox] % ROTATE_EVERY == 0) and box not in self._rotations:
            if self._rotator is None:
                self._rotator = ThreadPoolExecutor(1, thread_name_prefix="wavewait-history")
            self._rotations.add(box)
            self._rotator.submit(self._rotate, box)

    def _rotate(self, box: str) -> None:
        self._rotations.discard(box)  # from now on a rotation that comes due queues another
        try:
            found = entries(box)
            total = sum(t.n for t in found)
            for t in found:
                if total - t.n < HISTORY_KEPT:
                    break
                if t.folder:
                    remove_history_folder(Path(box, "cur", t.name))
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(f"{box}/cur/{t.name}")
                total -= t.n
        except OSError as e:  # the next rotation tries again
            log.warning("wavewait: could not rotate the history in %s: %s", box, e)
        except Exception:  # on a worker thread: nobody else would ever see it
            log.exception("wavewait: rotating the history in %s failed", box)

    def read(self, box: str, limit: int) -> list[Item]:
        """The newest `limit` items taken from the inbox in `box`, in their original order."""
        items: list[Item] = []
        counted = 0
        for t in reversed(entries(box)):  # newest takes first
            if counted >= limit:
                break
            counted += t.n
            path = f"{box}/cur/{t.name}"
            if t.folder:
                found = [load(self.bus, f"{path}/{item_name(r)}", r.seq) for r in scan(self.bus, path)]
            else:
                found = [load(self.bus, path, int(t.name.split(SEP)[1]))]
            items += [i.model_copy(update={"taken_by": t.taker, "taken_at": t.at}) for i in found if i is not None]
        items.sort(key=lambda i: i.seq)
        keep = min(limit, HISTORY_KEPT)  # what a rotation still running is about to remove, left out
        return items[-keep:] if keep > 0 else []

    async def close(self) -> None:
        if self._rotator is not None:
            await asyncio.to_thread(self._rotator.shutdown)
            self._rotator = None
