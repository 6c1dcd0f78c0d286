"""Upkeep of the directory bus: the recovery sweep (claims of waits that ended go back to
their inbox) and the tidy-up of litter (old temp files, records of dead waits, quarantine).

Anything found where only the bus's own entries belong is moved to quarantine, never
followed or opened.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import time
from pathlib import Path

from pydantic import ValidationError

from ..errors import BadInput
from ..ids import check_id, is_id
from ..model import WaitRecord
from ..proc import alive, hostname
from .file_inbox import FileInbox
from .file_records import FileWaits
from .fs import SEP, BusDir, Unfit, kind, read_file, remove_older

log = logging.getLogger(__name__)

# retention of litter, in seconds: a temp file outlives any write in progress by far; a wait
# record of a dead process is kept a while for people looking; quarantine is kept for a week
TMP_KEPT = 600.0
DEAD_WAIT_KEPT = 3600.0
QUARANTINE_KEPT = 7 * 86400.0
TIDY_EVERY = 60.0  # at most one tidy-up per bus and minute, whoever opens it


class FileUpkeep:
    def __init__(self, bus: BusDir, inbox: FileInbox, waits: FileWaits) -> None:
        self.bus = bus
        self.inbox = inbox
        self.waits = waits

    async def recover(self, inbox: str | None = None) -> int:
        """Return claims whose wait is gone or whose process died (the recovery sweep).

        Only regular files named `<wait id>~<seq>` (and the claim folders of earlier
        versions, real folders named like a wait id) are claims; anything else in claims/ (a
        symlink, a FIFO, a stranger's file or folder) is quarantined, never followed.
        """
        self.tidy()
        boxes = [inbox] if inbox else self.inbox_ids()
        returned = 0
        for box_id in boxes:
            for wait_id in self._claiming_waits(self.bus.box(box_id)):
                # a wait registers before it claims, so a claim without a live record is orphaned
                if self.waits.alive(wait_id):
                    continue
                n = await self.inbox.release(box_id, wait_id)
                if n:
                    log.warning("wavewait: returned %d claimed item(s) of ended wait %s to %s", n, wait_id, box_id)
                returned += n
        return returned

    def inbox_ids(self) -> list[str]:
        """The inboxes of the bus; what is no inbox folder in inbox/ goes to quarantine."""
        ids = []
        with os.scandir(self.bus.root / "inbox") as it:
            entries = list(it)
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                try:
                    word = kind(entry.stat(follow_symlinks=False).st_mode)
                except FileNotFoundError:
                    continue
                self.bus.quarantine(Path(entry.path), word, f"a {word} in inbox/, where only inbox folders belong")
                continue
            try:
                ids.append(check_id(entry.name))
            except BadInput:
                self.bus.quarantine(Path(entry.path), "bad-name", "a folder in inbox/ not named like an agent id")
        return ids

    def _claiming_waits(self, box: str) -> set[str]:
        """The waits holding claims in the inbox; what is no claim of ours goes to quarantine."""
        with os.scandir(f"{box}/claims") as it:
            entries = list(it)
        waits = set()
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # taken or returned meanwhile
            wait_id, _, seq = entry.name.partition(SEP)
            word = kind(st.st_mode)
            if st.st_uid != os.geteuid():
                code, detail = "foreign", f"a {word} in claims/ owned by uid {st.st_uid}, not by the bus's user"
            elif stat.S_ISREG(st.st_mode) and len(seq) == 16 and seq.isdigit() and is_id(wait_id):
                waits.add(wait_id)
                continue
            elif stat.S_ISDIR(st.st_mode) and not seq and is_id(wait_id):
                waits.add(wait_id)  # a claim folder of an earlier version
                continue
            elif word in ("file", "directory"):
                code, detail = "bad-name", f"a {word} in claims/ not named like a claim"
            else:
                code, detail = word, f"a {word} in claims/, where only claims belong"
            self.bus.quarantine(Path(entry.path), code, detail)
        return waits

    def tidy(self, *, force: bool = False) -> None:
        """Remove litter older than its retention: temp files, records of dead waits, old
        quarantine. Runs at open and on the recovery sweep, at most once per TIDY_EVERY per
        bus (a marker file's mtime says when), so opening the bus stays cheap."""
        root = self.bus.root
        marker = root / "locks" / "tidied"
        t = time.time()
        try:
            if not force and t - os.stat(marker).st_mtime < TIDY_EVERY:
                return
        except FileNotFoundError:
            pass  # never tidied
        try:
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
            os.utime(marker, (t, t))
        except OSError as e:
            log.warning("wavewait: skipped tidying the bus at %s: %s", root, e.strerror)
            return
        try:
            removed = remove_older(root / "tmp", t - TMP_KEPT)
            removed += remove_older(root / "quarantine", t - QUARANTINE_KEPT)
            for box_id in self.inbox_ids():
                removed += remove_older(root / "inbox" / box_id / "tmp", t - TMP_KEPT)
            removed += self._remove_dead_waits(t)
        except OSError as e:  # upkeep must never stop the bus from opening
            log.warning("wavewait: could not finish tidying the bus at %s: %s", root, e)
            return
        if removed:
            log.info("wavewait: tidied %d old temp file(s), wait record(s) and quarantined item(s)", removed)

    def _remove_dead_waits(self, t: float) -> int:
        """Wait records of a dead process here, or past their deadline by DEAD_WAIT_KEPT
        (a process elsewhere we cannot see); interrupt flags left without a record."""
        removed = 0
        waits = self.bus.root / "waits"
        with os.scandir(waits) as it:
            entries = list(it)
        records = {e.name.removesuffix(".json") for e in entries if e.name.endswith(".json")}
        for entry in entries:
            stem, _, suffix = entry.name.rpartition(".")
            try:
                if suffix == "interrupt" and stem not in records:
                    if entry.stat(follow_symlinks=False).st_mtime < t - TMP_KEPT:
                        os.unlink(entry.path)
                        removed += 1
                    continue
                if suffix != "json":
                    continue
                rec = WaitRecord.model_validate_json(read_file(entry.path))
            except (OSError, Unfit, ValidationError, ValueError):
                continue  # gone, or not a record: list_waits quarantines those
            here_dead = rec.host == hostname() and not alive(rec.pid, rec.pid_start)
            expired = rec.deadline is not None and rec.deadline < t - DEAD_WAIT_KEPT
            if here_dead or expired:
                for end in (".json", ".interrupt"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(waits / f"{stem}{end}")
                removed += 1
        return removed
