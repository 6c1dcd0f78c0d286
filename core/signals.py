"""Signal files: which files match a glob, found without trusting the file system.

`wave_wait_for_signal` re-evaluates its glob on every wake. `glob.glob` follows symlinks
(a `**` over a symlink loop never ends, a link to /etc/passwd is reported), may leave the
project through `..` or a link, and runs on the event loop, where one slow scan stalls
every other call of the server. `scan` does the same matching for ordinary patterns, but:

- it never follows a symlink: a link is neither reported nor entered, so a `**` over a
  loop ends;
- it never leaves `root` (the project folder): the pattern must name a path under it;
- it stops after `max_entries` directory entries or at `deadline` (time.monotonic), and
  says so in its result;
- it is plain blocking code meant to run in a worker thread (`scan_async` does that), so
  no call can stall another; cancelling the wait that awaits it ends it within 256 entries;
- the pattern is bounded before any work (`check_pattern`): 4 KiB, 200 folder levels, 255
  characters a part (turning a part into a regular expression costs the square of its
  length), and each part is turned into one once per scan, not once per folder visited.

Matching follows `glob.glob(pattern, recursive=True)`: `*`, `?` and `[...]` within one
name, `**` for any depth of folders, names starting with `.` only for a pattern part that
starts with `.`; results are absolute paths, sorted.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from .errors import BadInput
from .limits import MAX_SCAN_ENTRIES, check_path, shown

_MAGIC = re.compile(r"[*?[]")
MAX_PARTS = 200  # folder levels in a pattern: deeper than any real tree, small enough to recurse
MAX_PART_CHARS = 255  # one folder or file name of a pattern: as long as any file system's longest name


@dataclass(frozen=True)
class Scan:
    """What one evaluation of a signal glob found."""

    matched: list[str] = field(default_factory=list)
    scanned: int = 0  # directory entries looked at
    capped: bool = False  # stopped at max_entries: `matched` may be incomplete
    timed_out: bool = False  # stopped at the deadline: `matched` may be incomplete

    @property
    def complete(self) -> bool:
        return not (self.capped or self.timed_out)

    def note(self) -> str | None:
        """A sentence for the caller when the scan was cut short, else None."""
        if self.capped:
            return (
                f"stopped after scanning {self.scanned:,} entries (the cap); matches may be missing: "
                "narrow the pattern (fewer `**`, a deeper literal folder)"
            )
        if self.timed_out:
            return f"stopped at the deadline after scanning {self.scanned:,} entries; matches may be missing"
        return None


def check_pattern(pattern: object, root: str | os.PathLike[str], field: str = "signal_path") -> tuple[str, list[str]]:
    """Validate `pattern` before any work; return (the root, the pattern's parts under it).

    The pattern must be a path of at most 4 KiB, absolute or relative to `root`, that stays
    under `root` once `.` and `..` are resolved (lexically: nothing is looked up here).
    Consecutive `**` parts are one (they match the same paths).
    """
    pattern = check_path(pattern, field)
    base = os.path.abspath(os.fspath(root))
    full = os.path.normpath(os.path.join(base, pattern))
    if full != base and not full.startswith(base.rstrip(os.sep) + os.sep):
        raise BadInput(
            f"{field}: {shown(pattern, 300)} is outside the project folder {base}; signal files must be inside it"
        )
    rel = os.path.relpath(full, base)
    parts = [] if rel == "." else rel.split(os.sep)
    parts = [p for i, p in enumerate(parts) if not (p == "**" and i and parts[i - 1] == "**")]
    if len(parts) > MAX_PARTS:
        raise BadInput(f"{field}: at most {MAX_PARTS} folder levels below the project folder, got {len(parts)}")
    longest = max(parts, key=len, default="")
    if len(longest) > MAX_PART_CHARS:
        raise BadInput(
            f"{field}: a folder or file name in the pattern is at most {MAX_PART_CHARS} characters; one has "
            f"{len(longest):,}: shorten it"
        )
    return base, parts


class _Stop(Exception):
    """The cap or the deadline was reached."""


class _Scanner:
    def __init__(
        self, parts: list[str], max_entries: int, deadline: float | None, cancelled: Callable[[], object] | None
    ) -> None:
        self.max_entries = max_entries
        self.deadline = deadline
        self.cancelled = cancelled
        self.scanned = 0
        self.capped = False
        self.timed_out = False
        self.found: set[str] = set()
        # each magic part's matcher, made once (fnmatch.translate is quadratic in a part's length)
        self.matchers: dict[str, Callable[[str], re.Match[str] | None]] = {
            p: re.compile(fnmatch.translate(p)).match for p in parts if p != "**" and _MAGIC.search(p)
        }

    def _count(self) -> None:
        self.scanned += 1
        if self.scanned > self.max_entries:
            self.capped = True
            raise _Stop
        if self.scanned % 256 == 0:
            if self.cancelled is not None:
                self.cancelled()  # raises when the wait awaiting this scan was cancelled
            if self.deadline is not None and time.monotonic() > self.deadline:
                self.timed_out = True
                raise _Stop

    def _entries(self, folder: str) -> list[tuple[str, bool, bool]]:
        """(name, is a real folder, is a symlink) of each entry; unreadable folders are empty."""
        out = []
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    self._count()
                    try:
                        is_link = entry.is_symlink()
                        is_dir = not is_link and entry.is_dir(follow_symlinks=False)
                    except OSError:
                        continue
                    out.append((entry.name, is_dir, is_link))
        except OSError:
            return []
        return out

    def walk(self, folder: str, parts: list[str], i: int) -> None:
        """Match parts[i:] under `folder`, a real folder (never reached through a link)."""
        if i == len(parts):
            self.found.add(folder)
            return
        part, last = parts[i], i == len(parts) - 1
        if part == "**":
            self._double_star(folder, parts, i, last)
        elif _MAGIC.search(part):
            match = self.matchers[part]
            hidden_ok = part.startswith(".")
            for name, is_dir, is_link in self._entries(folder):
                if is_link or (name.startswith(".") and not hidden_ok) or not match(name):
                    continue
                path = os.path.join(folder, name)
                if last:
                    self.found.add(path)
                elif is_dir:
                    self.walk(path, parts, i + 1)
        else:
            path = os.path.join(folder, part)
            self._count()
            try:
                st = os.lstat(path)
            except OSError:
                return
            if stat.S_ISLNK(st.st_mode):
                return  # never followed, never reported
            if last:
                self.found.add(path)
            elif stat.S_ISDIR(st.st_mode):
                self.walk(path, parts, i + 1)

    def _double_star(self, folder: str, parts: list[str], i: int, last: bool) -> None:
        """`**`: this folder and every real folder below it (hidden ones skipped, as glob
        does); as the last part it matches every entry below, files included."""
        stack = [folder]
        while stack:
            current = stack.pop()
            if last:
                self.found.add(current)
            else:
                self.walk(current, parts, i + 1)
            for name, is_dir, is_link in self._entries(current):
                if name.startswith(".") or is_link:
                    continue
                path = os.path.join(current, name)
                if is_dir:
                    stack.append(path)
                elif last:
                    self.found.add(path)


def scan(
    pattern: str,
    *,
    root: str | os.PathLike[str],
    deadline: float | None = None,
    max_entries: int = MAX_SCAN_ENTRIES,
    cancelled: Callable[[], object] | None = None,
) -> Scan:
    """The files and folders under `root` matching `pattern`, without following any symlink.

    Blocking: call it in a worker thread (`scan_async`). `deadline` is on time.monotonic();
    `cancelled` is called every 256 entries and ends the scan by raising.
    Raises BadInput for a pattern that is too long or leaves `root`, before any work.
    """
    base, parts = check_pattern(pattern, root)
    s = _Scanner(parts, max_entries, deadline, cancelled)
    try:
        if os.path.isdir(base):
            s.walk(base, parts, 0)
    except _Stop:
        pass
    return Scan(matched=sorted(s.found), scanned=s.scanned, capped=s.capped, timed_out=s.timed_out)


async def scan_async(
    pattern: str,
    *,
    root: str | os.PathLike[str],
    deadline: float | None = None,
    max_entries: int = MAX_SCAN_ENTRIES,
) -> Scan:
    """`scan` in a worker thread, so the event loop keeps serving other calls meanwhile; when
    the caller is cancelled (its wait ends, the server stops), the scan stops too, so no
    thread outlives it (the process would wait for that thread before it exits)."""
    return await anyio.to_thread.run_sync(
        lambda: scan(
            pattern,
            root=root,
            deadline=deadline,
            max_entries=max_entries,
            cancelled=anyio.from_thread.check_cancelled,
        )
    )


def check_brackets(pattern: str, field: str = "signal_path") -> str:
    """Refuse a `[` that opens no class: `glob` would take it as a literal `[` and wait for a
    file of that name, which is never what was meant. Each name is its own (a `/` ends it)."""
    for part in pattern.split(os.sep):
        i = part.find("[")
        while i >= 0:
            j = i + 1
            j += j < len(part) and part[j] == "!"
            j += j < len(part) and part[j] == "]"
            j = part.find("]", j)
            if j < 0:
                raise BadInput(
                    f"{field}: {shown(pattern, 300)}: a '[' opens a class of characters its name does not close: "
                    "close it ('[abc]'), or write a literal '[' as '[[]'"
                )
            i = part.find("[", j + 1)
    return pattern


def glob_base(pattern: str, field: str = "signal_path") -> str:
    """The deepest folder of `pattern` without glob characters: what to watch. Its length is
    checked first: splitting a megabyte of `a/` into names takes a second."""
    check_path(pattern, field)
    parts = []
    for part in pattern.split(os.sep):
        if glob.has_magic(part):
            break
        parts.append(part)
    base = os.sep.join(parts) or os.sep
    return base if not os.path.isfile(base) or base != pattern else os.path.dirname(base)


def scan_root(pattern: str, field: str = "signal_path") -> str:
    """The folder a scan of `pattern` starts in and never leaves: its literal folders (its
    length checked first, as `glob_base`'s)."""
    check_path(pattern, field)
    parts = pattern.split(os.sep)
    literal = next((i for i, part in enumerate(parts) if glob.has_magic(part)), len(parts) - 1)
    return os.sep.join(parts[:literal]) or os.sep
