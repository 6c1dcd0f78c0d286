"""File-system primitives of the directory bus: atomic writes, flushes, reads that never
follow or block on what they find, and the bus's folder with its locks and quarantine.

Everything here is about files, not about what they hold: the rooms of the bus (inbox,
records, upkeep) and the task store beside it write and read through these.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import BadInput, BusError
from ..ids import check_id, new_id
from ..limits import MAX_ITEM_FILE_BYTES
from ..model import Item

log = logging.getLogger(__name__)

SEP = "~"
#: the event an inbox's owner gets when something in its inbox was moved to quarantine
QUARANTINED = "item_quarantined"
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: flush every write to disk before it is published (fsync file, rename, fsync folder), so a
#: power cut cannot leave an empty item either. A sender delivers several times fewer items
#: per second with it (docs/reliability.md); WAVEWAIT_FSYNC=0 keeps the atomicity (complete
#: write, then rename: a killed process or a full disk leaves nothing half-written)
DURABLE = os.environ.get("WAVEWAIT_FSYNC", "1") != "0"


class Unfit(Exception):
    """A bus entry that is not a complete regular file of ours; `code` names why in a word."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def kind(mode: int) -> str:
    """What an entry of this mode is, in a word."""
    for test, word in (
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "device"),
        (stat.S_ISBLK, "device"),
    ):
        if test(mode):
            return word
    return "file" if stat.S_ISREG(mode) else "special"


def check_entry(st: os.stat_result, limit: int | None = None) -> None:
    """Raise `Unfit` unless `st` (from lstat or fstat) is a regular file of this user."""
    if not stat.S_ISREG(st.st_mode):
        word = kind(st.st_mode)
        raise Unfit(word, f"a {word}, not a regular file (never opened or followed)")
    if st.st_uid != os.geteuid():
        raise Unfit("foreign", f"owned by uid {st.st_uid}, not by the bus's user (uid {os.geteuid()})")
    if limit is not None and st.st_size > limit:
        raise Unfit("too-large", f"{st.st_size:,} bytes, more than the {limit:,} an entry may hold")


def read_file(
    path: str | os.PathLike[str], limit: int = MAX_ITEM_FILE_BYTES, *, lstat: os.stat_result | None = None
) -> bytes:
    """Read a file found in the bus without trusting it.

    lstat before open (a FIFO or device is never opened; `lstat`: the caller's, taken just
    before), open with O_NOFOLLOW | O_NONBLOCK (a symlink is never followed, nothing blocks
    even if the entry is swapped between the two calls), fstat to check the same regular file
    of ours, bounded read: one read of the size fstat gave and a byte more, since a short read
    of a regular file is its end (the bus's files are complete when published: tmp, rename),
    so the read that would return nothing is not made. FileNotFoundError passes through
    (another process moved it: not an error).
    """
    check_entry(os.lstat(path) if lstat is None else lstat, limit)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise Unfit("swapped", f"replaced while being opened ({e.strerror})") from None
        if e.errno in (errno.EACCES, errno.EPERM):
            raise Unfit("unreadable", f"cannot be read ({e.strerror})") from None
        raise
    try:
        st = os.fstat(fd)
        check_entry(st, limit)
        chunks = []
        size = 0
        want = min(st.st_size, limit) + 1
        while chunk := os.read(fd, want):
            size += len(chunk)
            if size > limit:
                raise Unfit("too-large", f"grew past the {limit:,} bytes an entry may hold")
            chunks.append(chunk)
            if len(chunk) < want:
                break
            want = 1 << 20
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_new(path: str | Path, data: bytes, *, durable: bool = True) -> None:
    """Create `path` holding all of `data`, flushed to disk, or leave no file at all.

    os.write may write less than asked (a full disk does that first): loop until all is
    written or an error says why; then fsync, so a crash after the rename that publishes
    it cannot leave an empty or partial item behind.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if DURABLE and durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)


def rewrite(path: str, data: bytes) -> bool:
    """Replace the content of `path`, a file of ours under tmp/, with `data`; False (nothing
    written) unless it is still our own plain file with no other name (never a symlink
    followed, nor a FIFO or device opened for long)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
            return False
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def sync_dir(folder: str | Path) -> None:
    """Make a rename into `folder` durable (the directory entry itself is data)."""
    if not DURABLE:
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sorted_names(folder: str | Path) -> list[str]:
    """The names in `folder`, sorted; none when it is gone."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    names.sort()
    return names


def remove_older(folder: Path, before: float) -> int:
    """Remove entries of `folder` last changed before `before` (never following a link)."""
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return 0
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
            if st.st_mtime >= before:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed += 1
        except FileNotFoundError:
            continue
        except OSError as e:
            log.warning("wavewait: could not remove old %s: %s", entry.path, e.strerror)
    return removed


class BusDir:
    """The bus's folder: where a write goes, how a failed one is told, its locks, its
    quarantine. Every room of the bus shares one."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = str(root)
        self._locks = str(root / "locks")
        self._boxes: dict[str, tuple[str, str]] = {}  # inbox id -> (its folder, its new/)
        #: a watcher of this process sees the bus's folders (`FileBus.subscribe`): what the
        #: rooms keep from a listing is then kept up to date from its events
        self.watched = False
        #: of the inboxes (by folder), those it sees into (`watches`): the ones subscribed to
        self.sees_inbox: Callable[[str], bool] = lambda _box: True
        #: delivers the note that tells an inbox's owner of a quarantined entry (the inbox's
        #: own delivery, set by the bus that composes both)
        self.tell: Callable[[Item], Any] | None = None

    def watches(self, inbox: str) -> bool:
        """Whether a watcher of this process sees what arrives in `inbox` (then a listing of
        it may be kept and brought up to date from its events)."""
        return self.watched and self.sees_inbox(f"{self.url}/inbox/{inbox}")  # `box`'s folder, not made

    def gone(self) -> BusError:
        """The bus's folder (or its inbox/ folder) was removed while this process used it."""
        return BusError(
            f"the bus at {self.root} is gone: its folder was removed while in use, so nothing can be "
            "read or written there any more; restore it, or start again on a new bus"
        )

    def write_failed(self, e: OSError, what: str) -> BusError:
        """A write error as something a user can act on; nothing was left half-written."""
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            why, todo = "the disk holding it is full", "free space there (or point --bus elsewhere) and try again"
        elif e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            why, todo = f"it is not writable ({e.strerror})", "fix its permissions or point --bus to a writable folder"
        elif e.errno == errno.ENOENT:
            if not self.root.is_dir():
                return self.gone()
            why, todo = "a folder of it is gone (was the bus deleted?)", "check --bus / WAVEWAIT_BUS and try again"
        else:
            why, todo = e.strerror or str(e), "check the bus folder and try again"
        return BusError(f"could not write {what} to the bus at {self.root}: {why}; nothing was written; {todo}")

    def create(self, path: Path, data: bytes, what: str) -> None:
        """A new file holding `data`, flushed (`write_new`); a failure is the `BusError` of
        `write_failed`, naming `what`."""
        try:
            write_new(path, data)
        except OSError as e:
            raise self.write_failed(e, what) from e

    def write_json(self, dest: str | Path, data: str, *, durable: bool = True) -> None:
        """Replace `dest` atomically (complete tmp file, fsync, rename, folder fsync), mode 0600.

        `durable=False` skips the fsyncs (still atomic): for wait records, which describe a
        running process and mean nothing after a power cut that ended it."""
        name = os.path.basename(dest)
        tmp = f"{self.url}/tmp/{name}.{new_id()}"
        try:
            write_new(tmp, data.encode(), durable=durable)
            try:
                os.rename(tmp, dest)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            if durable:
                sync_dir(os.path.dirname(dest))
        except OSError as e:
            raise self.write_failed(e, name) from e

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[int]:
        """Hold the flock locks/<name> (its file descriptor, for what the lock file keeps)."""
        try:
            fd = os.open(f"{self._locks}/{name}", os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            raise self.gone() from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)

    def box(self, agent_id: str) -> str:
        """The inbox's folder (made if missing), as a string: every send and every wake comes
        through here, and the hot paths join strings rather than build Path objects."""
        known = self._boxes.get(agent_id)
        if known is not None and os.path.isdir(known[1]):
            return known[0]
        check_id(agent_id, "inbox")
        box = self.root / "inbox" / agent_id
        if not (box / "new").is_dir():
            try:
                for sub in ("", "tmp", "new", "claims", "cur"):
                    (box / sub).mkdir(mode=0o700, exist_ok=True)
            except FileNotFoundError:
                raise self.gone() from None
        self._boxes[agent_id] = (str(box), str(box / "new"))
        return str(box)

    def quarantine(self, path: Path, code: str, detail: str, name: str | None = None) -> None:
        """Move an entry that must not be read aside, once, and say so.

        The entry is renamed (never opened or followed) to quarantine/<ms>~<token>~<where>~
        <why>~<name>; `where` is the inbox (or folder) it was in, `name` its name there or
        the item name it was delivered under (a claim). An entry in an inbox is also
        reported to the inbox's owner as an `item_quarantined` event (`tell`).
        """
        rel = path.relative_to(self.root).parts if path.is_relative_to(self.root) else (path.name,)
        inbox = rel[1] if len(rel) > 2 and rel[0] == "inbox" else None
        where = inbox or (rel[0] if len(rel) > 1 else "root")
        stamp = f"{int(time.time() * 1000)}{SEP}{new_id()[:8]}"
        dest = self.root / "quarantine" / SEP.join((stamp, where[:100], code, (name or path.name)[:100]))
        try:
            os.rename(path, dest)
        except FileNotFoundError:
            return  # another process moved it first and reported it
        except OSError as e:
            log.error("wavewait: could not move %s to quarantine (%s): %s", path, detail, e.strerror)
            return
        log.warning("wavewait: moved %s to quarantine as %s: %s", path, dest.name, detail)
        if inbox is None or self.tell is None:
            return
        note = Item(
            id=new_id(),
            type=QUARANTINED,
            to=inbox,
            sender="bus",
            body=f"{'/'.join(rel[2:])} in the inbox of {inbox} was moved to quarantine: {detail}",
            data={"path": str(path), "quarantined_as": str(dest), "reason": code},
        )
        try:
            self.tell(note)
        except (BusError, BadInput) as e:
            log.error("wavewait: could not tell %s about the quarantined %s: %s", inbox, path.name, e)
