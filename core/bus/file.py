"""The directory bus: Maildir-style inboxes on a local file system.

Layout under the root (folders 0700, files 0600):

    agents/<id>.json                 agent records, replaced atomically (tmp/ + rename)
    inbox/<id>/tmp/                  items being written
    inbox/<id>/new/<seq>~<type>~<sender>~<item id>      delivered, FIFO by seq
    inbox/<id>/claims/<wait id>~<seq>   claimed by one wait (atomic rename: exactly once)
    inbox/<id>/cur/<at>~<seq>~<taker>   taken: who took it and when (bounded history)
    waits/<wait id>.json             waits in progress; <wait id>.interrupt is the flag
    resolutions/<key>.json           stored results of named waits (wait_agent ids)
    waves/<wave>/<kind>.json         per-wave documents (wave_docs.py): settings, merge progress
    mcptasks/<task id>.json          tasks of the MCP Tasks extension (status, result)
    logs/<agent id>.log              output of spawned agents
    quarantine/                      malformed or foreign files, moved aside with a warning
    locks/agent-<id>                 flock held while an agent record is read and replaced
    locks/inbox-<id>                 flock held while an item gets its seq; the file's
                                     content is the inbox's last seq (a decimal number)
    locks/mcptasks                   flock held while an MCP task's status is changed
    locks/wave-<wave>~<kind>         flock held while a wave document is read and replaced
    tmp/                             agent, wait and resolution records being written

agents/, inbox/ and waits/ are watched (`subscribe`), waves/ by `subscribe_waves`; the rest is not. A reader never sees
half an item: it is written under inbox/<id>/tmp/ and renamed into new/. The seq lives in
the file name, zero-padded, so FIFO order never depends on mtimes and a claim returned to
new/ lands back at its original place.

An item is one file from delivery to the end of its history: a claim, a take and a rotation
out of history are one rename or unlink each, never a folder made or removed (folders cost
the file system's journal most, and every message passes here). Earlier versions kept a
folder per claiming wait and per take; recovery still returns such claim folders, and
history still reads and rotates such take folders.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import itertools
import json
import logging
import os
import random
import shutil
import stat
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from .. import inotify, watch
from ..errors import BadInput, BusError
from ..ids import check_id, is_id, new_id
from ..limits import MAX_ITEM_FILE_BYTES
from ..model import SYSTEM_EVENTS_KEPT, SYSTEM_ITEM_TYPES, Agent, Item, ItemRef, McpTask, WaitRecord, now
from ..proc import alive, hostname
from . import wave_docs
from .file_tasks import FileTaskStore
from .keys import arrival_key, departure_key, inbox_key, interest

log = logging.getLogger(__name__)

SEP = "~"
HISTORY_KEPT = 1000
ROTATE_EVERY = 100
#: up to this many claims, `holds` checks each one; beyond, one listing of claims/ is cheaper
#: (a fan-in holding 10,000 claims: 10,000 stats cost more than its whole wake)
HOLDS_STATS = 16
#: a take of more claims than this renames them on a worker thread
TAKE_ON_LOOP = 64
PREVIEW_EVERY = 0.25  # seconds between writes of one sender's last-message preview
_WATCHED = ("agents", "inbox", "waits")
_DIRS = (*_WATCHED, "resolutions", "waves", "mcptasks", "logs", "quarantine", "locks", "tmp")
#: the event an inbox's owner gets when something in its inbox was moved to quarantine
QUARANTINED = "item_quarantined"
# retention of litter, in seconds: a temp file outlives any write in progress by far; a wait
# record of a dead process is kept a while for people looking; quarantine is kept for a week
TMP_KEPT = 600.0
DEAD_WAIT_KEPT = 3600.0
QUARANTINE_KEPT = 7 * 86400.0
TIDY_EVERY = 60.0  # at most one tidy-up per bus and minute, whoever opens it
#: the ended wait records a bus object keeps under tmp/ to write its next ones into (`_spares`)
SPARE_RECORDS = 32
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: flush every write to disk before it is published (fsync file, rename, fsync folder), so a
#: power cut cannot leave an empty item either. One sender on ext4 delivers 3-10x fewer
#: items per second with it (docs/reliability.md); WAVEWAIT_FSYNC=0 keeps the atomicity
#: (complete write, then rename: a killed process or a full disk leaves nothing half-written)
DURABLE = os.environ.get("WAVEWAIT_FSYNC", "1") != "0"


def _name(ref: ItemRef) -> str:
    return f"{ref.seq:016d}{SEP}{ref.type}{SEP}{ref.sender}{SEP}{ref.id}"


#: a name always means the same item: parse each once. Two generations of at most
#: REFS_KEPT names each, so what a process keeps is bounded (a long-lived server sees
#: millions of names) while the pending items a wait lists on every wake stay parsed
REFS_KEPT = 10_000
#: arrivals queued for an inbox's index that no read has merged: past this, the index is
#: dropped (the inbox is listed again on its next read), so nobody reading costs no memory
ARRIVALS_QUEUED = 100_000
_refs: dict[str, ItemRef] = {}
_refs_old: dict[str, ItemRef] = {}


def _parse_name(name: str) -> ItemRef | None:
    global _refs, _refs_old
    ref = _refs.get(name)
    if ref is None:
        ref = _refs_old.get(name)
        if ref is None:
            parts = name.split(SEP)
            if len(parts) != 4 or len(parts[0]) != 16 or not parts[0].isdigit():
                return None
            ref = ItemRef(int(parts[0]), parts[1], parts[2], parts[3])
        if len(_refs) >= REFS_KEPT:
            _refs, _refs_old = {}, _refs
        _refs[name] = ref
    return ref


class _Unfit(Exception):
    """A bus entry that is not a complete regular file of ours; `code` names why in a word."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def _kind(mode: int) -> str:
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


def _check_entry(st: os.stat_result, limit: int | None = None) -> None:
    """Raise `_Unfit` unless `st` (from lstat or fstat) is a regular file of this user."""
    if not stat.S_ISREG(st.st_mode):
        word = _kind(st.st_mode)
        raise _Unfit(word, f"a {word}, not a regular file (never opened or followed)")
    if st.st_uid != os.geteuid():
        raise _Unfit("foreign", f"owned by uid {st.st_uid}, not by the bus's user (uid {os.geteuid()})")
    if limit is not None and st.st_size > limit:
        raise _Unfit("too-large", f"{st.st_size:,} bytes, more than the {limit:,} an entry may hold")


def _read_file(path: str | os.PathLike[str], limit: int = MAX_ITEM_FILE_BYTES) -> bytes:
    """Read a file found in the bus without trusting it.

    lstat before open (a FIFO or device is never opened), open with O_NOFOLLOW |
    O_NONBLOCK (a symlink is never followed, nothing blocks even if the entry is swapped
    between the two calls), fstat to check the same regular file of ours, bounded read.
    FileNotFoundError passes through (another process moved it: not an error).
    """
    _check_entry(os.lstat(path), limit)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise _Unfit("swapped", f"replaced while being opened ({e.strerror})") from None
        if e.errno in (errno.EACCES, errno.EPERM):
            raise _Unfit("unreadable", f"cannot be read ({e.strerror})") from None
        raise
    try:
        _check_entry(os.fstat(fd), limit)
        chunks = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:
                raise _Unfit("too-large", f"grew past the {limit:,} bytes an entry may hold")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write_new(path: str | Path, data: bytes, *, durable: bool = True) -> None:
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


def _rewrite(path: str, data: bytes) -> bool:
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


def _claim_path(box: str, wait_id: str, seq: int) -> str:
    return f"{box}/claims/{wait_id}{SEP}{seq:016d}"


class _Taken(NamedTuple):
    """One history entry: an item file, or a take folder of an earlier version."""

    name: str
    n: int
    taker: str
    at: float
    folder: bool


def _remove_history_folder(path: Path) -> None:
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


def _sync_dir(folder: str | Path) -> None:
    """Make a rename into `folder` durable (the directory entry itself is data)."""
    if not DURABLE:
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_older(folder: Path, before: float) -> int:
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


class FileBus:
    """A bus in a directory. Cheap to open; safe for many processes at once.

    `create=False` is for read-only commands: a bus that does not exist is an error then,
    instead of a new empty `.wavebus` left wherever the command was run.
    """

    multi_host = False  # one machine: pids decide liveness
    recovers_all_at_once = False  # a sweep of every inbox lists every claims/ folder
    reliable_changes = False  # the kernel drops events past its queue's size, unreported

    def __init__(self, root: str | os.PathLike[str], *, create: bool = True) -> None:
        self.root = Path(root).expanduser().absolute()
        self.url = str(self.root)
        if not create and not (self.root / "inbox").is_dir():
            raise BusError(
                f"no bus at {self.root}: nothing was spawned or sent there yet; "
                "pass --bus PATH (or set WAVEWAIT_BUS) to the bus you mean"
            )
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            for d in _DIRS:
                (self.root / d).mkdir(mode=0o700, exist_ok=True)
        except OSError as e:
            raise BusError(
                f"cannot create the bus at {self.root}: {e.strerror}; "
                "pass --bus PATH (or set WAVEWAIT_BUS) to a writable folder"
            ) from e
        self._agent_cache: dict[str, tuple[tuple[int, int, int], Agent]] = {}
        self._watcher: inotify.Watch | watch.Subscription | None = None  # one per bus, for every subscription
        self._fanout = watch.Fanout()
        #: waits of this process, registered and not ended: their records, kept so a progress
        #: update neither reads nor parses the file (a fan-in's record names every target)
        self._my_waits: dict[str, WaitRecord] = {}
        self._flagged: set[str] = set()  # ids whose interrupt flag the watcher saw (end_wait removes it)
        #: files under tmp/ that held ended wait records of this object: the next registration
        #: rewrites one and renames it in. A file made and removed per wait cost the kernel's
        #: inode allocator (ext4 skips the inodes freed in the last seconds) 0.1 ms per
        #: message with 200 fan-ins on one inbox, a sixth of the waiting process's CPU
        self._spares: list[str] = []
        self._boxes: dict[str, tuple[str, str]] = {}  # inbox id -> (its folder, its new/)
        self._waits_dir = str(self.root / "waits")
        self._agent_paths: dict[str, Path] = {}
        self._locks = str(self.root / "locks")
        self._takes_seen: dict[str, int] = {}
        self._rotator: ThreadPoolExecutor | None = None  # history rotations, off the event loop
        self._rotations: set[str] = set()  # inbox folders with a rotation queued, not started
        #: per (inbox, wait): seq -> (new/ name, item), of the claims this process made, for take
        self._claimed: dict[tuple[str, str], dict[int, tuple[str, Item]]] = {}
        # claim_next's kept listing: per inbox, the names of new/ not yet tried, oldest first,
        # and the newest of that listing; `_stale`: inboxes where an item came back before it
        self._queued: dict[str, list[str]] = {}
        self._queued_last: dict[str, str] = {}
        self._stale: set[str] = set()
        # pending(senders=...)'s index: per inbox, its items by sender (seq -> ref), made from
        # one listing and then kept up to date from the watcher's arrivals (which its thread
        # queues in `_arrived`, for the loop to merge), so a fan-in's read costs its senders'
        # items, not the inbox's backlog. It is listed again when the watcher may have missed
        # something (`_epoch`, an overflow) or items came back (`_renewed`, by inbox)
        self._ticks = itertools.count(1)
        self._epoch = 0
        self._renewed: dict[str, int] = {}
        self._index: dict[str, tuple[tuple[int, int], dict[str, dict[int, ItemRef]]]] = {}
        self._arrived_lock = threading.Lock()
        self._arrived: dict[str, list[ItemRef]] = {}  # only for indexed inboxes
        self._previews: dict[str, dict[str, Any]] = {}  # last-message previews not yet written
        self._preview_at: dict[str, float] = {}
        self.tidy()

    # ------------------------------------------------------------------ files
    def _write_failed(self, e: OSError, what: str) -> BusError:
        """A write error as something a user can act on; nothing was left half-written."""
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            why, todo = "the disk holding it is full", "free space there (or point --bus elsewhere) and try again"
        elif e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            why, todo = f"it is not writable ({e.strerror})", "fix its permissions or point --bus to a writable folder"
        elif e.errno == errno.ENOENT:
            if not self.root.is_dir():
                return self._gone()
            why, todo = "a folder of it is gone (was the bus deleted?)", "check --bus / WAVEWAIT_BUS and try again"
        else:
            why, todo = e.strerror or str(e), "check the bus folder and try again"
        return BusError(f"could not write {what} to the bus at {self.root}: {why}; nothing was written; {todo}")

    def _write_json(self, dest: str | Path, data: str, *, durable: bool = True) -> None:
        """Replace `dest` atomically (complete tmp file, fsync, rename, folder fsync), mode 0600.

        `durable=False` skips the fsyncs (still atomic): for wait records, which describe a
        running process and mean nothing after a power cut that ended it."""
        name = os.path.basename(dest)
        tmp = f"{self.url}/tmp/{name}.{new_id()}"
        try:
            _write_new(tmp, data.encode(), durable=durable)
            try:
                os.rename(tmp, dest)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            if durable:
                _sync_dir(os.path.dirname(dest))
        except OSError as e:
            raise self._write_failed(e, name) from e

    @contextlib.contextmanager
    def _lock(self, name: str) -> Iterator[int]:
        try:
            fd = os.open(f"{self._locks}/{name}", os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            raise self._gone() from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)

    def _quarantine(self, path: Path, code: str, detail: str, name: str | None = None) -> None:
        """Move an entry that must not be read aside, once, and say so.

        The entry is renamed (never opened or followed) to quarantine/<ms>~<token>~<where>~
        <why>~<name>; `where` is the inbox (or folder) it was in, `name` its name there or
        the item name it was delivered under (a claim). An entry in an inbox is also
        reported to the inbox's owner as an `item_quarantined` event.
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
        if inbox is None:
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
            self._deliver(note)
        except (BusError, BadInput) as e:
            log.error("wavewait: could not tell %s about the quarantined %s: %s", inbox, path.name, e)

    def _inbox(self, agent_id: str) -> Path:
        return Path(self._box(agent_id))

    def _box(self, agent_id: str) -> str:
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
                raise self._gone() from None
        self._boxes[agent_id] = (str(box), str(box / "new"))
        return str(box)

    def _gone(self) -> BusError:
        """The bus's folder (or its inbox/ folder) was removed while this process used it."""
        return BusError(
            f"the bus at {self.root} is gone: its folder was removed while in use, so nothing can be "
            "read or written there any more; restore it, or start again on a new bus"
        )

    # ------------------------------------------------------------------ agents
    def _agent_path(self, agent_id: str) -> Path:
        path = self._agent_paths.get(agent_id)
        if path is None:
            path = self._agent_paths[agent_id] = self.root / "agents" / f"{check_id(agent_id, 'agent')}.json"
        return path

    def _read_agent(self, path: Path) -> Agent | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        key = (st.st_mtime_ns, st.st_ino, st.st_size)
        cached = self._agent_cache.get(path.name)
        if cached and cached[0] == key:
            return cached[1]
        try:
            agent = Agent.model_validate_json(_read_file(path))
        except FileNotFoundError:
            return None
        except _Unfit as e:
            self._quarantine(path, e.code, e.detail)
            return None
        except (ValidationError, ValueError) as e:
            self._quarantine(path, "malformed", f"not an agent record ({e.__class__.__name__})")
            return None
        self._agent_cache[path.name] = (key, agent)
        return agent

    async def put_agent(self, agent: Agent) -> None:
        with self._lock(f"agent-{agent.id}"):
            self._write_json(self._agent_path(agent.id), agent.model_dump_json())
        self._inbox(agent.id)

    async def get_agent(self, agent_id: str) -> Agent | None:
        return self._read_agent(self._agent_path(agent_id))

    async def get_agents(self, agent_ids: Sequence[str]) -> dict[str, Agent]:
        found = {}
        for agent_id in agent_ids:
            agent = self._read_agent(self._agent_path(agent_id))
            if agent is not None:
                found[agent_id] = agent
        return found

    async def list_agents(self) -> list[Agent]:
        agents = []
        with os.scandir(self.root / "agents") as it:
            for entry in it:
                if entry.name.endswith(".json"):
                    a = self._read_agent(Path(entry.path))
                    if a is not None:
                        agents.append(a)
                elif not entry.name.startswith("."):
                    self._quarantine(Path(entry.path), "foreign", "not an agent record (a foreign name)")
        agents.sort(key=lambda a: (a.created_at, a.id))
        return agents

    async def update_agent(self, agent_id: str, **changes: Any) -> Agent | None:
        """Change fields of an agent under its lock; None if there is no such agent."""
        return self._modify(agent_id, None, None, changes)

    async def note_preview(self, agent_id: str, **changes: Any) -> None:
        """A sender's last-message preview (for people): written at once, then at most every
        PREVIEW_EVERY with the newest value (and on `close`). On ext4, replacing a file by
        rename flushes its data first (auto_da_alloc, ~2 ms), which a burst of sends must
        not pay on each message."""
        t = time.monotonic()
        pending = self._previews.get(agent_id)
        if pending is not None:
            pending.update(changes)
        elif t - self._preview_at.get(agent_id, -PREVIEW_EVERY) >= PREVIEW_EVERY:
            self._preview_at[agent_id] = t
            self._modify(agent_id, None, None, changes)
        else:
            self._previews[agent_id] = dict(changes)
            asyncio.get_running_loop().call_later(PREVIEW_EVERY, self._flush_preview, agent_id)

    def _flush_preview(self, agent_id: str) -> None:
        if (changes := self._previews.pop(agent_id, None)) is None:
            return
        self._preview_at[agent_id] = time.monotonic()
        try:
            self._modify(agent_id, None, None, changes)
        except Exception:
            log.exception("wavewait: could not write the last-message preview of %s", agent_id)

    async def transition(self, agent_id: str, status: str, only_from: Sequence[str], **changes: Any) -> Agent | None:
        """Move an agent to `status` if it is in `only_from`; None when nothing changed.

        The guard makes each transition happen once (one `agent_dead` event, no resurrection).
        """
        return self._modify(agent_id, status, only_from, changes)

    def _modify(
        self,
        agent_id: str,
        status: str | None,
        only_from: Sequence[str] | None,
        changes: dict[str, Any],
    ) -> Agent | None:
        path = self._agent_path(agent_id)
        changes = self._previews.pop(agent_id, {}) | changes  # a pending preview rides along
        with self._lock(f"agent-{agent_id}"):
            agent = self._read_agent(path)
            if agent is None or (only_from is not None and agent.status not in only_from):
                return None
            data = agent.model_dump() | changes | {"updated_at": now()}
            if status is not None:
                data["status"] = status
            agent = Agent.model_validate(data)
            self._write_json(path, agent.model_dump_json())
            return agent

    # ------------------------------------------------------------------ items
    async def deliver(self, item: Item) -> Item:
        return self._deliver(item)

    def _deliver(self, item: Item) -> Item:
        """Write the item whole and flushed under tmp/, then publish it by a rename into new/.

        Any write error (a full disk above all) removes the temp file and raises a BusError:
        the send fails, and nothing a wait could deliver is left behind.
        """
        data = item.model_dump_json(exclude={"seq"}).encode()
        tmp: str | None = None
        try:
            box = self._box(item.to)
            tmp = f"{box}/tmp/{item.id}"
            _write_new(tmp, data)
            with self._lock(f"inbox-{item.to}") as lock:
                raw = os.pread(lock, 32, 0)
                seq = int(raw or b"0") + 1
                os.pwrite(lock, str(seq).encode().ljust(20), 0)
                ref = ItemRef(seq=seq, type=item.type, sender=item.sender, id=item.id)
                os.rename(tmp, f"{box}/new/{_name(ref)}")
                tmp = None
            _sync_dir(f"{box}/new")
        except OSError as e:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise self._write_failed(e, f"a {item.type} for {item.to}") from e
        if item.type in SYSTEM_ITEM_TYPES:  # not under the lock: a quarantine while trimming delivers
            self._trim_system_events(Path(box))
        return item.model_copy(update={"seq": seq})

    def _trim_system_events(self, box: Path) -> None:
        refs = [r for r in self._scan(box / "new") if r.type in SYSTEM_ITEM_TYPES]
        for ref in refs[: max(0, len(refs) - SYSTEM_EVENTS_KEPT)]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(box / "new" / _name(ref))

    def _scan(self, folder: Path) -> list[ItemRef]:
        """The items in `folder`, FIFO. Names start with the zero-padded seq, so a name sort
        is a seq sort; this runs on every wake, so it stays a listdir, a sort and a split."""
        return list(self._in_order(folder))

    def _in_order(self, folder: str | Path) -> Iterator[ItemRef]:
        """The items in `folder`, FIFO, each name parsed only when reached."""
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return
        names.sort()
        for name in names:
            ref = _parse_name(name)
            if ref is None:
                self._quarantine(Path(folder, name), "bad-name", "not an inbox item name")
            else:
                yield ref

    def _load(self, path: str | Path, seq: int, name: str | None = None) -> Item | None:
        """The item at `path` (delivered as `name`, when it was claimed); None when gone or
        not an item (then quarantined)."""
        try:
            item = Item.model_validate_json(_read_file(path))
        except FileNotFoundError:
            return None
        except _Unfit as e:
            self._quarantine(Path(path), e.code, e.detail, name)
            return None
        except (ValidationError, ValueError) as e:
            word = "truncated" if isinstance(e, ValidationError) and "EOF" in str(e) else "malformed"
            self._quarantine(Path(path), word, f"not a complete inbox item ({e.__class__.__name__}: {word})", name)
            return None
        return item.model_copy(update={"seq": seq})

    async def pending(self, inbox: str, senders: Collection[str] | None = None) -> list[ItemRef]:
        """The items in the inbox, FIFO; with `senders`, only theirs.

        With `senders` (a fan-in's read), from the inbox's index by sender: listed once, then
        kept from the watcher's arrivals, so 200 fan-ins on an inbox with a backlog of
        10,000 each read their own senders' few items, not the 10,000. The index may still
        name an item that left since (taken by another process: its claim then fails, and
        the sender's next is tried); it never misses one that arrived, as every arrival is
        queued for it before the wait it wakes reads, and what the watcher may have missed
        (an overflow, an item come back) makes a new listing. Without `senders` (a rescan,
        the backstop for lost changes) the inbox is listed, and the index made again."""
        if self._watcher is None:
            refs = self._scan(self._inbox(inbox) / "new")
            return refs if senders is None else [r for r in refs if r.sender in senders]
        when = (self._epoch, self._renewed.get(inbox, 0))  # before the listing: a change after renews it
        kept = self._index.get(inbox)
        if senders is None or kept is None or kept[0] != when:
            with self._arrived_lock:  # from now on the watcher queues this inbox's arrivals
                self._arrived[inbox] = []
            refs = self._scan(self._inbox(inbox) / "new")
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

    def _arrival(self, box: str, name: str) -> None:
        """(The watcher's thread) an item named `name` arrived in `box`: queued for its index."""
        ref = _parse_name(name)
        with self._arrived_lock:
            queued = self._arrived.get(box)
            if queued is None:
                return  # not indexed: its first read lists it
            if ref is None or len(queued) >= ARRIVALS_QUEUED:  # nobody reads it: list it again when one does
                del self._arrived[box]
                self._index.pop(box, None)
                return
            queued.append(ref)

    def _came_back(self, inbox: str) -> None:
        """Items return to the inbox from this process: what was listed and kept is stale."""
        self._stale.add(inbox)  # returned items go back before what claim_next kept
        self._renewed[inbox] = next(self._ticks)

    async def peek(self, inbox: str) -> list[Item]:
        box = self._inbox(inbox)
        items = [self._load(box / "new" / _name(r), r.seq) for r in self._scan(box / "new")]
        return [i for i in items if i is not None]

    async def claim(self, inbox: str, ref: ItemRef, wait_id: str) -> Item | None:
        box = self._box(inbox)
        name = _name(ref)
        dest = _claim_path(box, check_id(wait_id, "wait"), ref.seq)
        kept = self._index.get(inbox)
        if kept is not None:  # gone from new/ after this (or already): no read tries it again
            listed = kept[1].get(ref.sender)
            if listed is not None and listed.pop(ref.seq, None) is not None and not listed:
                del kept[1][ref.sender]
        try:
            os.rename(f"{box}/new/{name}", dest)
        except FileNotFoundError:
            return None  # another waiter got it first
        item = self._load(dest, ref.seq, name)
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

        The names of the inbox's last listing not yet tried are kept (`_queued`), so a
        backlog is listed once, not once per claim (a claim would cost a listing of the
        whole backlog: 8 processes draining 20,000 items took 193 a second). A new item
        always sorts after them (seq is a counter), so they are tried first; the folder is
        listed again when none of them is left or fits, and when an item came back to a
        place before them (returned by this process, or seen so by the watcher). Without a
        watcher nothing would say so: every claim lists."""
        wanted = None if types is None else set(types)
        got: list[Item] = []
        names, fresh = self._pending_names(inbox, relist=False)
        while True:
            i = 0
            while i < len(names) and len(got) < limit:
                ref = _parse_name(names[i])
                if ref is None:
                    self._quarantine(Path(self._box(inbox), "new", names[i]), "bad-name", "not an inbox item name")
                elif wanted is not None and ref.type not in wanted:
                    i += 1
                    continue
                elif item := await self.claim(inbox, ref, wait_id):  # None: another waiter got it
                    got.append(item)
                del names[i]
            if len(got) >= limit or fresh:
                return got
            names, fresh = self._pending_names(inbox, relist=True)

    def _pending_names(self, inbox: str, *, relist: bool) -> tuple[list[str], bool]:
        """The names in the inbox's new/, oldest first, and whether they were listed just now."""
        if not relist and self._watcher is not None and inbox not in self._stale:
            names = self._queued.get(inbox)
            if names:
                return names, False
        self._stale.discard(inbox)  # before the listing: a return seen after it marks it again
        try:
            names = sorted(os.listdir(f"{self._box(inbox)}/new"))
        except FileNotFoundError:
            names = []
        if names and self._watcher is not None:
            self._queued[inbox], self._queued_last[inbox] = names, names[-1]
        else:
            self._queued.pop(inbox, None)
            self._queued_last.pop(inbox, None)
        return names, True

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
        if not os.path.exists(self._wait_path(wait_id)):
            return None
        box = self._box(inbox)
        known = self._claimed.get((inbox, wait_id))
        if known and len(known) <= HOLDS_STATS:  # what this process claimed, still where it put it
            return sum(os.path.exists(_claim_path(box, wait_id, seq)) for seq in known)
        return len(self._claims_of(box, wait_id))

    async def release(self, inbox: str, wait_id: str) -> int:
        box = self._box(inbox)
        check_id(wait_id, "wait")
        known = self._claimed.pop((inbox, wait_id), {})
        self._came_back(inbox)
        self._flatten_folder(box, wait_id)
        count = 0
        for seq in self._claims_of(box, wait_id):
            claim = _claim_path(box, wait_id, seq)
            name = known[seq][0] if seq in known else self._item_name(claim, seq)
            if name is None:
                continue  # not an item: quarantined
            with contextlib.suppress(FileNotFoundError):
                os.rename(claim, f"{box}/new/{name}")
                count += 1
        return count

    def _item_name(self, path: str, seq: int) -> str | None:
        """The new/ name of a claimed item that this process did not claim: read from it."""
        item = self._load(path, seq)
        return None if item is None else _name(ItemRef(seq, item.type, item.sender, item.id))

    def _flatten_folder(self, box: str, wait_id: str) -> None:
        """Turn the claim folder an earlier version made for `wait_id`, if any, into claims
        of this layout, so releasing and taking them needs no case of its own."""
        folder = f"{box}/claims/{wait_id}"
        if not os.path.isdir(folder) or os.path.islink(folder):
            return
        for ref in self._scan(Path(folder)):
            with contextlib.suppress(FileNotFoundError):
                os.rename(f"{folder}/{_name(ref)}", _claim_path(box, wait_id, ref.seq))
        with contextlib.suppress(OSError):
            os.rmdir(folder)

    async def unclaim(self, inbox: str, ref: ItemRef, wait_id: str) -> bool:
        """Return one claim of `wait_id` to the inbox (a wait that took more than it can hand on)."""
        box = self._box(inbox)
        self._claimed.get((inbox, wait_id), {}).pop(ref.seq, None)
        self._came_back(inbox)
        try:
            os.rename(_claim_path(box, check_id(wait_id, "wait"), ref.seq), f"{box}/new/{_name(ref)}")
        except FileNotFoundError:
            return False
        return True

    async def take(self, inbox: str, wait_id: str, taker: str, *, end: bool = False) -> list[Item]:
        """Move a wait's claims into history, a rename each (and then end the wait, `end`).
        Beyond TAKE_ON_LOOP claims the renames run on a worker thread, so a fan-in's 10,000
        (0.2 s of renames) do not hold up the process's other waits."""
        try:
            box = self._box(inbox)
            check_id(wait_id, "wait")
            check_id(taker, "taker")
            # what this process claimed for the wait is what it holds (only this wait claims
            # under its name); a wait whose claims were not made here lists claims/
            known = self._claimed.pop((inbox, wait_id), None)
            if known is None and wait_id in self._my_waits:
                return []  # a wait of this process that claimed nothing here
            known = known or {}
            if not known:
                self._flatten_folder(box, wait_id)
            seqs = sorted(known) if known else self._claims_of(box, wait_id)
            if len(seqs) > TAKE_ON_LOOP:
                taken = await asyncio.to_thread(self._to_history, box, wait_id, taker, seqs, known)
            else:
                taken = self._to_history(box, wait_id, taker, seqs, known)
            self._rotate_when_due(inbox, box)
            return taken
        finally:
            if end:
                await self.end_wait(wait_id)

    def _to_history(
        self, box: str, wait_id: str, taker: str, seqs: list[int], known: dict[int, tuple[str, Item]]
    ) -> list[Item]:
        at = time.time_ns()
        taken = []
        for seq in seqs:
            dest = f"{box}/cur/{at:020d}{SEP}{seq:016d}{SEP}{taker}"
            try:
                os.rename(_claim_path(box, wait_id, seq), dest)
            except FileNotFoundError:
                continue  # returned meanwhile (a recovery that judged this wait ended)
            item = known[seq][1] if seq in known else self._load(dest, seq)
            if item is not None:
                taken.append(item.model_copy(update={"taken_by": taker, "taken_at": at / 1e9}))
        return taken

    def _rotate_when_due(self, inbox: str, box: str) -> None:
        """Rotating lists the history: do it on a process's first take of an inbox, then
        every ROTATE_EVERY takes, so history stays near HISTORY_KEPT. The count starts at a
        random phase: inboxes fed in step (a server of 200 waits under a steady load) would
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
            self._rotator.submit(self._rotate_history, box)

    def _rotate_history(self, box: str) -> None:
        self._rotations.discard(box)  # from now on a rotation that comes due queues another
        try:
            entries = self._history_entries(box)
            total = sum(t.n for t in entries)
            for t in entries:
                if total - t.n < HISTORY_KEPT:
                    break
                if t.folder:
                    _remove_history_folder(Path(box, "cur", t.name))
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(f"{box}/cur/{t.name}")
                total -= t.n
        except OSError as e:  # the next rotation tries again
            log.warning("wavewait: could not rotate the history in %s: %s", box, e)
        except Exception:  # on a worker thread: nobody else would ever see it
            log.exception("wavewait: rotating the history in %s failed", box)

    @staticmethod
    def _history_entries(box: str) -> list[_Taken]:
        """History, oldest first: item files `<at>~<seq>~<taker>`, and the take folders of
        earlier versions, `<at>~<count>~<taker>~<wait id>`. Only those: read, never followed."""
        out = []
        with os.scandir(f"{box}/cur") as it:
            entries = sorted((e.name, e.is_file(follow_symlinks=False), e.is_dir(follow_symlinks=False)) for e in it)
        for name, is_file, is_dir in entries:
            parts = name.split(SEP)
            if not (parts[0].isdigit() and len(parts) > 2 and parts[1].isdigit()):
                continue
            at = int(parts[0]) / 1e9
            if is_file and len(parts) == 3:
                out.append(_Taken(name, 1, parts[2], at, False))
            elif is_dir and len(parts) == 4:
                out.append(_Taken(name, int(parts[1]), parts[2], at, True))
        return out

    async def history(self, inbox: str, limit: int = 100) -> list[Item]:
        box = self._box(inbox)
        items: list[Item] = []
        counted = 0
        for t in reversed(self._history_entries(box)):  # newest takes first
            if counted >= limit:
                break
            counted += t.n
            path = f"{box}/cur/{t.name}"
            if t.folder:
                found = [self._load(f"{path}/{_name(r)}", r.seq) for r in self._scan(Path(path))]
            else:
                found = [self._load(path, int(t.name.split(SEP)[1]))]
            items += [i.model_copy(update={"taken_by": t.taker, "taken_at": t.at}) for i in found if i is not None]
        items.sort(key=lambda i: i.seq)
        keep = min(limit, HISTORY_KEPT)  # what a rotation still running is about to remove, left out
        return items[-keep:] if keep > 0 else []

    # ------------------------------------------------------------------ waits
    def _wait_path(self, wait_id: str, suffix: str = ".json") -> str:
        return f"{self._waits_dir}/{check_id(wait_id, 'wait')}{suffix}"

    async def register_wait(
        self,
        record: WaitRecord,
        *,
        claim_from: str | None = None,
        types: Sequence[str] | None = None,
        limit: int = 1,
    ) -> list[Item]:
        self._write_wait(self._wait_path(record.id), record.model_dump_json())
        self._my_waits[record.id] = record
        return [] if claim_from is None else await self.claim_next(claim_from, record.id, types, limit)

    async def update_wait(self, wait_id: str, progress: str) -> None:
        path = self._wait_path(wait_id)
        record = self._my_waits.get(wait_id)
        if record is not None and not os.path.exists(path):
            return  # ended meanwhile: never bring a record back
        if record is None:
            try:
                record = WaitRecord.model_validate_json(_read_file(path))
            except (FileNotFoundError, _Unfit, ValidationError, ValueError):
                return  # gone, or not ours: list_waits quarantines what is not a wait record
        if record.progress != progress:
            record = record.model_copy(update={"progress": progress})
            if wait_id in self._my_waits:
                self._my_waits[wait_id] = record
            self._write_json(path, record.model_dump_json(), durable=False)

    async def end_wait(self, wait_id: str) -> None:
        """Remove the wait's record, and its interrupt flag if one may exist: a wait of this
        process flagged while the watcher ran was seen being flagged (`_flagged`); any other
        may have one. A flag the watcher had not yet reported is left to `tidy`."""
        ours = self._my_waits.pop(wait_id, None) is not None
        self._remove_wait(self._wait_path(wait_id), spare=ours)
        if not ours or self._watcher is None or wait_id in self._flagged:
            self._flagged.discard(wait_id)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._wait_path(wait_id, ".interrupt"))

    def _write_wait(self, dest: str, data: str) -> None:
        """Publish a wait record (atomic, not flushed: it describes a running process) in a
        spare file when one is left, else in a new one (`_write_json`)."""
        while self._spares:
            spare = self._spares.pop()
            if _rewrite(spare, data.encode()):
                try:
                    os.rename(spare, dest)
                    return
                except OSError:  # tidied away meanwhile: the next spare, or a new file
                    pass
            with contextlib.suppress(OSError):  # gone (tidied) or not ours to reuse: never mind it
                os.unlink(spare)
        self._write_json(dest, data, durable=False)

    def _remove_wait(self, path: str, *, spare: bool) -> None:
        """Take a wait record out of waits/: into tmp/ as a spare (a record this object wrote,
        while it keeps fewer than SPARE_RECORDS), else gone."""
        if spare and len(self._spares) < SPARE_RECORDS:
            kept = f"{self.url}/tmp/spare-wait.{new_id()}"
            try:
                os.rename(path, kept)
                self._spares.append(kept)
            except FileNotFoundError:
                pass
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    async def list_waits(self) -> list[WaitRecord]:
        records = []
        with os.scandir(self.root / "waits") as it:
            for entry in it:
                if not entry.name.endswith(".json"):
                    continue
                try:
                    rec = WaitRecord.model_validate_json(_read_file(entry.path))
                except FileNotFoundError:
                    continue
                except _Unfit as e:
                    self._quarantine(Path(entry.path), e.code, e.detail)
                    continue
                except (ValidationError, ValueError):
                    self._quarantine(Path(entry.path), "malformed", "not a wait record")
                    continue
                if rec.host == hostname() and not alive(rec.pid, rec.pid_start):
                    await self.end_wait(rec.id)  # its process died; the sweep returns its claims
                    continue
                records.append(rec)
        records.sort(key=lambda r: r.started_at)
        return records

    async def interrupt(self, wait_id: str) -> bool:
        if not os.path.exists(self._wait_path(wait_id)):
            return False
        fd = os.open(self._wait_path(wait_id, ".interrupt"), os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        return True

    async def interrupted(self, wait_id: str) -> bool:
        return os.path.exists(self._wait_path(wait_id, ".interrupt"))

    def _read_object(self, path: Path, what: str, limit: int = MAX_ITEM_FILE_BYTES) -> dict[str, Any] | None:
        """The JSON object at `path`; None when there is none, or it is not `what` (then quarantined)."""
        try:
            value = json.loads(_read_file(path, limit))
        except FileNotFoundError:
            return None
        except _Unfit as e:
            self._quarantine(path, e.code, e.detail)
            return None
        except ValueError:
            self._quarantine(path, "malformed", f"not {what}")
            return None
        if not isinstance(value, dict):
            self._quarantine(path, "malformed", f"not {what} (not an object)")
            return None
        return value

    async def get_resolution(self, key: str) -> dict[str, Any] | None:
        return self._read_object(self.root / "resolutions" / f"{check_id(key, 'id')}.json", "a stored resolution")

    async def put_resolution(self, key: str, value: dict[str, Any]) -> None:
        self._write_json(self.root / "resolutions" / f"{check_id(key, 'id')}.json", json.dumps(value))

    # ------------------------------------------------------------------ wave documents
    def _wave_doc_path(self, wave: str, kind: str) -> Path:
        wave, kind = wave_docs.doc_key(wave, kind)
        return self.root / "waves" / wave / f"{kind}.json"

    def _read_wave_doc(self, path: Path) -> dict[str, Any] | None:
        return self._read_object(path, "a wave document", wave_docs.MAX_WAVE_DOC_BYTES)

    async def get_wave_doc(self, wave: str, kind: str) -> dict[str, Any] | None:
        return self._read_wave_doc(self._wave_doc_path(wave, kind))

    async def update_wave_doc(self, wave: str, kind: str, change: wave_docs.DocChange) -> dict[str, Any] | None:
        path = self._wave_doc_path(wave, kind)
        (self.root / "waves").mkdir(mode=0o700, exist_ok=True)  # a bus made before wave documents
        path.parent.mkdir(mode=0o700, exist_ok=True)
        with self._lock(f"wave-{wave}{SEP}{kind}"):
            current = self._read_wave_doc(path)
            new = change(current)
            if new is None or new == current:
                return current
            self._write_json(path, wave_docs.encode(new, wave, kind))
            return new

    async def subscribe_waves(self, wave: str | None = None) -> watch.Subscription:
        folder = self.root / "waves"
        folder.mkdir(mode=0o700, exist_ok=True)
        prefix = folder / check_id(wave, "wave") if wave is not None else folder
        return watch.subscribe([folder], prefixes=[prefix])

    # ------------------------------------------------------------------ MCP tasks
    def _mcp_task_path(self, task_id: str) -> Path:
        return self.root / "mcptasks" / f"{check_id(task_id, 'taskId')}.json"

    def _read_mcp_task(self, task_id: str) -> McpTask | None:
        path = self._mcp_task_path(task_id)
        try:
            return McpTask.model_validate_json(_read_file(path, 4 * MAX_ITEM_FILE_BYTES))
        except FileNotFoundError:
            return None
        except _Unfit as e:
            self._quarantine(path, e.code, e.detail)
        except ValidationError:
            self._quarantine(path, "malformed", "not an MCP task record")
        return None

    async def put_mcp_task(self, task: McpTask) -> None:
        self._write_json(self._mcp_task_path(task.id), task.model_dump_json())

    async def get_mcp_task(self, task_id: str) -> McpTask | None:
        return self._read_mcp_task(task_id)

    async def transition_mcp_task(
        self, task_id: str, status: str, only_from: Sequence[str], **changes: Any
    ) -> McpTask | None:
        with self._lock("mcptasks"):  # no await inside: read, check, replace as one step
            task = self._read_mcp_task(task_id)
            if task is None or task.status not in only_from:
                return None
            task = McpTask.model_validate(
                task.model_dump() | changes | {"status": status, "updated_at": max(now(), task.updated_at)}
            )
            self._write_json(self._mcp_task_path(task_id), task.model_dump_json())
            return task

    async def delete_mcp_task(self, task_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._mcp_task_path(task_id))

    # ------------------------------------------------------------------ changes, upkeep
    async def subscribe(
        self,
        *,
        inboxes: Sequence[str] = (),
        agents: bool | Sequence[str] = False,
        waits: bool = False,
        wait_id: str | None = None,
        senders: Sequence[str] | None = None,
        claim_group: str | None = None,
    ) -> watch.Keyed:
        """Changes by key, from the bus's one watcher (shared by every wait of this bus)."""
        spec = interest(
            inboxes=inboxes, agents=agents, waits=waits, wait_id=wait_id, senders=senders, claim_group=claim_group
        )
        for i in inboxes:
            self._inbox(i)  # its new/ must exist for the watcher to see into it
        sub = self._fanout.add(
            watch.Keyed(self._fanout, spec.keys, spec.prefixes, routes=spec.routes, trees=spec.trees, pool=spec.pool)
        )
        if self._watcher is None:  # before the caller reads: the inotify watches are in place
            if inotify.AVAILABLE:
                self._watcher = inotify.watch_bus(self.url, self._changed_paths)
            else:
                self._watcher = watch.subscribe([self.root / d for d in _WATCHED], on_paths=self._changed_paths)
        return sub

    def _changed_paths(self, paths: set[str]) -> None:
        """Paths the watcher saw (in its thread) as keys for the fan-out; a path of no
        known shape (a root itself, say) means anything may have changed.

        An item's name says who sent it, so its arrival is dispatched as `arrival_key`, once
        per item (a pool wakes one waiter per item); an inbox folder itself (a new inbox)
        means anything in it may have changed; its new/ folder, that an item left."""
        keys: list[str] = []
        root = self.url + os.sep
        for path in paths:
            parts = path[len(root) :].split(os.sep) if path.startswith(root) else []
            if len(parts) == 2 and parts[0] == "agents" and parts[1].endswith(".json"):
                keys.append(f"a:{parts[1][:-5]}")
            elif len(parts) >= 2 and parts[0] == "inbox":
                box = parts[1]
                if len(parts) == 2:
                    keys.append(inbox_key(box))
                    self._renewed[box] = next(self._ticks)
                elif parts[2] != "new":
                    continue
                elif len(parts) == 3:
                    keys.append(departure_key(box))
                else:
                    fields = parts[3].split(SEP)
                    keys.append(arrival_key(box, fields[2]) if len(fields) == 4 else inbox_key(box))
                    self._arrival(box, parts[3])  # before the dispatch: the waits it wakes find it
                    if parts[3] <= self._queued_last.get(box, ""):
                        self._stale.add(box)  # an item came (back) before claim_next's kept names
            elif len(parts) == 2 and parts[0] == "waits":
                wait_id, _, suffix = parts[1].rpartition(".")
                keys.append(f"w:{wait_id}")
                if suffix == "interrupt":
                    keys.append(f"x:{wait_id}")
                    self._flagged.add(wait_id)
            else:
                keys.append(watch.EVERYTHING)
                self._flagged.update(list(self._my_waits))  # any of them may have been flagged
                self._stale.update(list(self._queued))
                self._epoch = next(self._ticks)  # every kept listing may miss something
        if keys:
            self._fanout.dispatch(keys)

    async def recover(self, inbox: str | None = None) -> int:
        """Return claims whose wait is gone or whose process died (the recovery sweep).

        Only regular files named `<wait id>~<seq>` (and the claim folders of earlier
        versions, real folders named like a wait id) are claims; anything else in claims/ (a
        symlink, a FIFO, a stranger's file or folder) is quarantined, never followed.
        """
        self.tidy()
        boxes = [inbox] if inbox else self._inbox_ids()
        returned = 0
        for box_id in boxes:
            for wait_id in self._claiming_waits(self._box(box_id)):
                # a wait registers before it claims, so a claim without a live record is orphaned
                if self._wait_alive(wait_id):
                    continue
                n = await self.release(box_id, wait_id)
                if n:
                    log.warning("wavewait: returned %d claimed item(s) of ended wait %s to %s", n, wait_id, box_id)
                returned += n
        return returned

    def _inbox_ids(self) -> list[str]:
        ids = []
        with os.scandir(self.root / "inbox") as it:
            entries = list(it)
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                try:
                    kind = _kind(entry.stat(follow_symlinks=False).st_mode)
                except FileNotFoundError:
                    continue
                self._quarantine(Path(entry.path), kind, f"a {kind} in inbox/, where only inbox folders belong")
                continue
            try:
                ids.append(check_id(entry.name))
            except BadInput:
                self._quarantine(Path(entry.path), "bad-name", "a folder in inbox/ not named like an agent id")
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
            kind = _kind(st.st_mode)
            if st.st_uid != os.geteuid():
                code, detail = "foreign", f"a {kind} in claims/ owned by uid {st.st_uid}, not by the bus's user"
            elif stat.S_ISREG(st.st_mode) and len(seq) == 16 and seq.isdigit() and is_id(wait_id):
                waits.add(wait_id)
                continue
            elif stat.S_ISDIR(st.st_mode) and not seq and is_id(wait_id):
                waits.add(wait_id)  # a claim folder of an earlier version
                continue
            elif kind in ("file", "directory"):
                code, detail = "bad-name", f"a {kind} in claims/ not named like a claim"
            else:
                code, detail = kind, f"a {kind} in claims/, where only claims belong"
            self._quarantine(Path(entry.path), code, detail)
        return waits

    def _wait_alive(self, wait_id: str) -> bool:
        if wait_id in self._my_waits:  # registered by this process and not ended: no read, no /proc
            return True
        try:
            rec = WaitRecord.model_validate_json(_read_file(self._wait_path(wait_id)))
        except (FileNotFoundError, _Unfit, ValidationError, ValueError):
            return False
        return rec.host != hostname() or alive(rec.pid, rec.pid_start)

    def tidy(self, *, force: bool = False) -> None:
        """Remove litter older than its retention: temp files, records of dead waits, old
        quarantine. Runs at open and on the recovery sweep, at most once per TIDY_EVERY per
        bus (a marker file's mtime says when), so opening the bus stays cheap."""
        marker = self.root / "locks" / "tidied"
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
            log.warning("wavewait: skipped tidying the bus at %s: %s", self.root, e.strerror)
            return
        try:
            removed = _remove_older(self.root / "tmp", t - TMP_KEPT)
            removed += _remove_older(self.root / "quarantine", t - QUARANTINE_KEPT)
            for box_id in self._inbox_ids():
                removed += _remove_older(self.root / "inbox" / box_id / "tmp", t - TMP_KEPT)
            removed += self._remove_dead_waits(t)
        except OSError as e:  # upkeep must never stop the bus from opening
            log.warning("wavewait: could not finish tidying the bus at %s: %s", self.root, e)
            return
        if removed:
            log.info("wavewait: tidied %d old temp file(s), wait record(s) and quarantined item(s)", removed)

    def _remove_dead_waits(self, t: float) -> int:
        """Wait records of a dead process here, or past their deadline by DEAD_WAIT_KEPT
        (a process elsewhere we cannot see); interrupt flags left without a record."""
        removed = 0
        with os.scandir(self.root / "waits") as it:
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
                rec = WaitRecord.model_validate_json(_read_file(entry.path))
            except (OSError, _Unfit, ValidationError, ValueError):
                continue  # gone, or not a record: list_waits quarantines those
            here_dead = rec.host == hostname() and not alive(rec.pid, rec.pid_start)
            expired = rec.deadline is not None and rec.deadline < t - DEAD_WAIT_KEPT
            if here_dead or expired:
                for end in (".json", ".interrupt"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.root / "waits" / f"{stem}{end}")
                removed += 1
        return removed

    def log_path(self, agent_id: str) -> str:
        return str(self.root / "logs" / f"{check_id(agent_id, 'agent')}.log")

    def tasks(self, queue: str) -> FileTaskStore:
        return FileTaskStore(self, queue)

    def _create(self, path: Path, data: bytes, what: str) -> None:
        """A new file holding `data`, flushed (`_write_new`), for the task store beside this
        bus; a failure is the `BusError` of `_write_failed`, naming `what`."""
        try:
            _write_new(path, data)
        except OSError as e:
            raise self._write_failed(e, what) from e

    async def close(self) -> None:
        for spare in self._spares:
            with contextlib.suppress(OSError):
                os.unlink(spare)
        self._spares.clear()
        for agent_id in list(self._previews):
            self._flush_preview(agent_id)
        if self._rotator is not None:
            await asyncio.to_thread(self._rotator.shutdown)
            self._rotator = None
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
