"""The directory bus: Maildir-style inboxes on a local file system.

Layout under the root (folders 0700, files 0600):

    agents/<id>.json                 agent records, replaced atomically (tmp/ + rename)
    inbox/<id>/tmp/                  items being written
    inbox/<id>/new/<seq>~<type>~<sender>~<item id>      delivered, FIFO by seq
    inbox/<id>/claims/<wait id>/...  claimed by one wait (atomic rename: exactly once)
    inbox/<id>/cur/<at>~<n>~<taker>~<wait id>/...  taken: a wait's claim folder, renamed
                                     whole; who took it and when (bounded history)
    waits/<wait id>.json             waits in progress; <wait id>.interrupt is the flag
    resolutions/<key>.json           stored results of named waits (wait_agent ids)
    logs/<agent id>.log              output of spawned agents
    quarantine/                      malformed or foreign files, moved aside with a warning
    locks/agent-<id>                 flock held while an agent record is read and replaced
    locks/inbox-<id>                 flock held while an item gets its seq; the file's
                                     content is the inbox's last seq (a decimal number)
    tmp/                             agent, wait and resolution records being written

agents/, inbox/ and waits/ are watched (`subscribe`); the rest is not. A reader never sees
half an item: it is written under inbox/<id>/tmp/ and renamed into new/. The seq lives in
the file name, zero-padded, so FIFO order never depends on mtimes and a claim returned to
new/ lands back at its original place.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .. import watch
from ..errors import BusError
from ..ids import check_id, new_id
from ..model import SYSTEM_EVENTS_KEPT, SYSTEM_ITEM_TYPES, Agent, Item, ItemRef, WaitRecord, now
from ..proc import alive, hostname

log = logging.getLogger(__name__)

SEP = "~"
HISTORY_KEPT = 1000
ROTATE_EVERY = 32
PREVIEW_EVERY = 0.25  # seconds between writes of one sender's last-message preview
_WATCHED = ("agents", "inbox", "waits")
_DIRS = (*_WATCHED, "resolutions", "logs", "quarantine", "locks", "tmp")


def _name(ref: ItemRef) -> str:
    return f"{ref.seq:016d}{SEP}{ref.type}{SEP}{ref.sender}{SEP}{ref.id}"


_refs: dict[str, ItemRef] = {}  # a name always means the same item: parse each once


def _parse_name(name: str) -> ItemRef | None:
    ref = _refs.get(name)
    if ref is not None:
        return ref
    parts = name.split(SEP)
    if len(parts) != 4 or len(parts[0]) != 16 or not parts[0].isdigit():
        return None
    if len(_refs) >= 200_000:
        _refs.clear()
    ref = _refs[name] = ItemRef(int(parts[0]), parts[1], parts[2], parts[3])
    return ref


class FileBus:
    """A bus in a directory. Cheap to open; safe for many processes at once."""

    multi_host = False  # one machine: pids decide liveness

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().absolute()
        self.url = str(self.root)
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
        self._keepalive: watch.Subscription | None = None
        self._boxes: dict[str, tuple[Path, str]] = {}  # inbox id -> (its folder, its new/ as str)
        self._agent_paths: dict[str, Path] = {}
        self._locks = str(self.root / "locks")
        self._takes_seen: dict[str, int] = {}
        self._claimed: dict[tuple[str, str], dict[str, Item]] = {}  # loaded at claim, for take
        self._previews: dict[str, dict[str, Any]] = {}  # last-message previews not yet written
        self._preview_at: dict[str, float] = {}

    # ------------------------------------------------------------------ files
    def _write_json(self, dest: Path, data: str) -> None:
        """Write `data` to `dest` atomically (tmp file + rename), mode 0600."""
        tmp = self.root / "tmp" / f"{dest.name}.{new_id()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data.encode())
        finally:
            os.close(fd)
        os.rename(tmp, dest)

    @contextlib.contextmanager
    def _lock(self, name: str) -> Iterator[int]:
        fd = os.open(f"{self._locks}/{name}", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)

    def _quarantine(self, path: Path, why: str) -> None:
        dest = self.root / "quarantine" / f"{int(time.time() * 1000)}-{path.parent.name}-{path.name}"
        try:
            os.rename(path, dest)
        except FileNotFoundError:
            return
        log.warning("wavewait: moved %s to %s: %s", path, dest, why)

    def _inbox(self, agent_id: str) -> Path:
        known = self._boxes.get(agent_id)  # hot: every send and every wake comes through here
        if known is not None and os.path.isdir(known[1]):
            return known[0]
        check_id(agent_id, "inbox")
        box = self.root / "inbox" / agent_id
        if not (box / "new").is_dir():
            for sub in ("", "tmp", "new", "claims", "cur"):
                (box / sub).mkdir(mode=0o700, exist_ok=True)
        self._boxes[agent_id] = (box, str(box / "new"))
        return box

    # ------------------------------------------------------------------ agents
    def _agent_path(self, agent_id: str) -> Path:
        path = self._agent_paths.get(agent_id)
        if path is None:
            path = self._agent_paths[agent_id] = self.root / "agents" / f"{check_id(agent_id, 'agent')}.json"
        return path

    def _read_agent(self, path: Path) -> Agent | None:
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        key = (st.st_mtime_ns, st.st_ino, st.st_size)
        cached = self._agent_cache.get(path.name)
        if cached and cached[0] == key:
            return cached[1]
        try:
            agent = Agent.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except (ValidationError, ValueError) as e:
            self._quarantine(path, f"not an agent record ({e.__class__.__name__})")
            return None
        self._agent_cache[path.name] = (key, agent)
        return agent

    async def put_agent(self, agent: Agent) -> None:
        with self._lock(f"agent-{agent.id}"):
            self._write_json(self._agent_path(agent.id), agent.model_dump_json())
        self._inbox(agent.id)

    async def get_agent(self, agent_id: str) -> Agent | None:
        return self._read_agent(self._agent_path(agent_id))

    async def list_agents(self) -> list[Agent]:
        agents = []
        with os.scandir(self.root / "agents") as it:
            for entry in it:
                if entry.name.endswith(".json"):
                    a = self._read_agent(Path(entry.path))
                    if a is not None:
                        agents.append(a)
                elif not entry.name.startswith("."):
                    self._quarantine(Path(entry.path), "foreign file in agents/")
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
        box = self._inbox(item.to)
        tmp = box / "tmp" / item.id
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, item.model_dump_json(exclude={"seq"}).encode())
        finally:
            os.close(fd)
        with self._lock(f"inbox-{item.to}") as lock:
            raw = os.pread(lock, 32, 0)
            seq = int(raw or b"0") + 1
            os.pwrite(lock, str(seq).encode().ljust(20), 0)
            ref = ItemRef(seq=seq, type=item.type, sender=item.sender, id=item.id)
            os.rename(tmp, box / "new" / _name(ref))
            if item.type in SYSTEM_ITEM_TYPES:
                self._trim_system_events(box)
        return item.model_copy(update={"seq": seq})

    def _trim_system_events(self, box: Path) -> None:
        refs = [r for r in self._scan(box / "new") if r.type in SYSTEM_ITEM_TYPES]
        for ref in refs[: max(0, len(refs) - SYSTEM_EVENTS_KEPT)]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(box / "new" / _name(ref))

    def _scan(self, folder: Path) -> list[ItemRef]:
        """The items in `folder`, FIFO. Names start with the zero-padded seq, so a name sort
        is a seq sort; this runs on every wake, so it stays a listdir, a sort and a split."""
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return []
        names.sort()
        refs = []
        for name in names:
            ref = _parse_name(name)
            if ref is None:
                self._quarantine(folder / name, "not an inbox item name")
            else:
                refs.append(ref)
        return refs

    def _load(self, path: Path, ref: ItemRef) -> Item | None:
        try:
            item = Item.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except (ValidationError, ValueError) as e:
            self._quarantine(path, f"not an inbox item ({e.__class__.__name__})")
            return None
        return item.model_copy(update={"seq": ref.seq})

    async def pending(self, inbox: str) -> list[ItemRef]:
        return self._scan(self._inbox(inbox) / "new")

    async def peek(self, inbox: str) -> list[Item]:
        box = self._inbox(inbox)
        items = [self._load(box / "new" / _name(r), r) for r in self._scan(box / "new")]
        return [i for i in items if i is not None]

    async def claim(self, inbox: str, ref: ItemRef, wait_id: str) -> Item | None:
        box = self._inbox(inbox)
        dest_dir = box / "claims" / check_id(wait_id, "wait")
        if (inbox, wait_id) not in self._claimed:  # the first claim of this wait makes its folder
            dest_dir.mkdir(mode=0o700, exist_ok=True)
        dest = dest_dir / _name(ref)
        try:
            os.rename(box / "new" / _name(ref), dest)
        except FileNotFoundError:
            return None  # another waiter got it first
        item = self._load(dest, ref)
        claimed = self._claimed.setdefault((inbox, wait_id), {})
        if item is not None:
            claimed[dest.name] = item
        return item

    async def release(self, inbox: str, wait_id: str) -> int:
        box = self._inbox(inbox)
        folder = box / "claims" / wait_id
        self._claimed.pop((inbox, wait_id), None)
        count = 0
        for ref in self._scan(folder):
            with contextlib.suppress(FileNotFoundError):
                os.rename(folder / _name(ref), box / "new" / _name(ref))
                count += 1
        with contextlib.suppress(FileNotFoundError, OSError):
            folder.rmdir()
        return count

    async def take(self, inbox: str, wait_id: str, taker: str) -> list[Item]:
        """Move a wait's claims into history in one rename of its claim folder.

        The folder lands as cur/<taken at ns>~<count>~<taker>~<wait id>, so a fan-in that
        took 1,000 items returns as fast as one that took one.
        """
        box = self._inbox(inbox)
        folder = box / "claims" / check_id(wait_id, "wait")
        known = self._claimed.pop((inbox, wait_id), {})
        try:
            names = sorted(os.listdir(folder))
        except FileNotFoundError:
            return []
        if not names:
            with contextlib.suppress(OSError):
                folder.rmdir()
            return []
        at = time.time_ns()
        dest = box / "cur" / SEP.join((f"{at:020d}", str(len(names)), check_id(taker, "taker"), wait_id))
        os.rename(folder, dest)
        taken = []
        for name in names:
            ref = _parse_name(name)
            item = known.get(name) or (self._load(dest / name, ref) if ref else None)
            if item is not None:
                taken.append(item.model_copy(update={"taken_by": taker, "taken_at": at / 1e9}))
        # rotating lists every history folder; do it on a process's first take of an inbox
        # and then every ROTATE_EVERY takes, so history stays near HISTORY_KEPT
        n = self._takes_seen.get(inbox, 0)
        self._takes_seen[inbox] = n + 1
        if n % ROTATE_EVERY == 0:
            self._rotate_history(box)
        return taken

    @staticmethod
    def _takes(box: Path) -> list[tuple[str, int, str, float]]:
        """History folders, oldest first: (folder name, item count, taker, taken at)."""
        takes = []
        for name in sorted(os.listdir(box / "cur")):
            parts = name.split(SEP)
            if len(parts) == 4 and parts[0].isdigit() and parts[1].isdigit():
                takes.append((name, int(parts[1]), parts[2], int(parts[0]) / 1e9))
        return takes

    def _rotate_history(self, box: Path) -> None:
        takes = self._takes(box)
        total = sum(n for _, n, _, _ in takes)
        for name, n, _, _ in takes:
            if total - n < HISTORY_KEPT:
                break
            shutil.rmtree(box / "cur" / name, ignore_errors=True)
            total -= n

    async def history(self, inbox: str, limit: int = 100) -> list[Item]:
        box = self._inbox(inbox)
        items: list[Item] = []
        counted = 0
        for name, n, taker, at in reversed(self._takes(box)):  # newest takes first
            if counted >= limit:
                break
            counted += n
            for ref in self._scan(box / "cur" / name):
                item = self._load(box / "cur" / name / _name(ref), ref)
                if item is not None:
                    items.append(item.model_copy(update={"taken_by": taker, "taken_at": at}))
        items.sort(key=lambda i: i.seq)
        return items[-limit:] if limit > 0 else []

    # ------------------------------------------------------------------ waits
    def _wait_path(self, wait_id: str, suffix: str = ".json") -> Path:
        return self.root / "waits" / f"{check_id(wait_id, 'wait')}{suffix}"

    async def register_wait(self, record: WaitRecord) -> None:
        self._write_json(self._wait_path(record.id), record.model_dump_json())

    async def update_wait(self, wait_id: str, progress: str) -> None:
        path = self._wait_path(wait_id)
        try:
            record = WaitRecord.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return
        if record.progress != progress:
            self._write_json(path, record.model_copy(update={"progress": progress}).model_dump_json())

    async def end_wait(self, wait_id: str) -> None:
        for suffix in (".json", ".interrupt"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._wait_path(wait_id, suffix))

    async def list_waits(self) -> list[WaitRecord]:
        records = []
        with os.scandir(self.root / "waits") as it:
            for entry in it:
                if not entry.name.endswith(".json"):
                    continue
                try:
                    rec = WaitRecord.model_validate_json(Path(entry.path).read_bytes())
                except FileNotFoundError:
                    continue
                except (ValidationError, ValueError):
                    self._quarantine(Path(entry.path), "not a wait record")
                    continue
                if rec.host == hostname() and not alive(rec.pid, rec.pid_start):
                    await self.end_wait(rec.id)  # its process died; the sweep returns its claims
                    continue
                records.append(rec)
        records.sort(key=lambda r: r.started_at)
        return records

    async def interrupt(self, wait_id: str) -> bool:
        if not self._wait_path(wait_id).exists():
            return False
        fd = os.open(self._wait_path(wait_id, ".interrupt"), os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        return True

    async def interrupted(self, wait_id: str) -> bool:
        return self._wait_path(wait_id, ".interrupt").exists()

    async def get_resolution(self, key: str) -> dict[str, Any] | None:
        path = self.root / "resolutions" / f"{check_id(key, 'id')}.json"
        try:
            value = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
        self._quarantine(path, "not a stored resolution")
        return None

    async def put_resolution(self, key: str, value: dict[str, Any]) -> None:
        self._write_json(self.root / "resolutions" / f"{check_id(key, 'id')}.json", json.dumps(value))

    # ------------------------------------------------------------------ changes, upkeep
    async def subscribe(
        self,
        *,
        inboxes: Sequence[str] = (),
        agents: bool = False,
        waits: bool = False,
        wait_id: str | None = None,
    ) -> watch.Subscription:
        prefixes: list[Path] = [self._inbox(i) / "new" for i in inboxes]
        if agents:
            prefixes.append(self.root / "agents")
        if waits:
            prefixes.append(self.root / "waits")
        if wait_id is not None:
            prefixes += [self._wait_path(wait_id), self._wait_path(wait_id, ".interrupt")]
        roots = [self.root / d for d in _WATCHED]
        if self._keepalive is None:  # keep the shared watcher warm while the bus is open
            self._keepalive = watch.subscribe(roots, prefixes=[])
        return watch.subscribe(roots, prefixes=prefixes)

    async def recover(self, inbox: str | None = None) -> int:
        """Return claims whose wait is gone or whose process died (the recovery sweep)."""
        boxes = [inbox] if inbox else [p.name for p in (self.root / "inbox").iterdir()]
        returned = 0
        for box_id in boxes:
            claims = self._inbox(box_id) / "claims"
            for folder in claims.iterdir():
                # a wait registers before it claims, so a folder without a live record is orphaned
                if self._wait_alive(folder.name):
                    continue
                n = await self.release(box_id, folder.name)
                if n:
                    log.warning("wavewait: returned %d claimed item(s) of ended wait %s to %s", n, folder.name, box_id)
                returned += n
        return returned

    def _wait_alive(self, wait_id: str) -> bool:
        try:
            rec = WaitRecord.model_validate_json(self._wait_path(wait_id).read_bytes())
        except (FileNotFoundError, ValidationError, ValueError):
            return False
        return rec.host != hostname() or alive(rec.pid, rec.pid_start)

    def log_path(self, agent_id: str) -> str:
        return str(self.root / "logs" / f"{check_id(agent_id, 'agent')}.log")

    async def close(self) -> None:
        for agent_id in list(self._previews):
            self._flush_preview(agent_id)
        if self._keepalive is not None:
            self._keepalive.close()
            self._keepalive = None
