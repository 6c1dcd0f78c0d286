"""A join's file targets (docs/joins.md, `--files GLOB[:N]`): met once N files match.

Files are watched where the waiting process runs; a change under a target's folder wakes the
wait with its own key (`FILES_KEY`), so its step scans the files alone. Once met, a target
stays met: an artifact that was there counts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from .. import signals
from ..errors import BadInput
from ..limits import check_path, shown
from ..signals import scan_root


class FilesTarget(BaseModel):
    """`--files GLOB[:N]` / `files: [{glob, min_count}]`: met once `min_count` files match."""

    glob: str
    min_count: int = Field(default=1, ge=1)

    @classmethod
    def parse(cls, text: str, folder: str) -> FilesTarget:
        """`GLOB[:N]` as a person types it; a relative glob is taken from `folder`. A ':' in
        the last name, outside `[...]`, is followed by the count: anything else there is
        refused, not taken as part of the glob (a name with ':' is written `[:]`)."""
        check_path(text, "--files")
        glob, colon, count = text.rpartition(":")
        if not colon or os.sep in count or glob.rfind("[") > glob.rfind("]"):
            glob, count = text, "1"  # no count: the ':' (if any) is in a folder's name or a [...]
        elif not glob or not count.isdigit() or int(count) < 1:
            raise BadInput(
                f"--files: {shown(text)}: write GLOB:N, N the number of files (a whole number ≥ 1), "
                "e.g. 'dist/*.whl:2'; to match a ':' in a file name, write it as '[:]'"
            )
        signals.check_brackets(glob, "--files")
        return cls(glob=os.path.join(folder, os.path.expanduser(glob)), min_count=int(count))


@dataclass
class FileTarget:
    """One file target's state: the absolute pattern, and what its last scan found."""

    pattern: str
    min_count: int
    shown: str  # as the caller wrote it
    root: str = ""
    found: list[str] = field(default_factory=list)
    met: bool = False  # sticky: an artifact that was there counts

    def __post_init__(self) -> None:
        self.root = scan_root(self.pattern)


def file_targets(files: Sequence[FilesTarget]) -> list[FileTarget]:
    """The file targets checked (bounded, absolute: faces resolve relative ones) before the
    wait starts; a target named twice is one."""
    out: list[FileTarget] = []
    for i, f in enumerate(files):
        pattern = check_path(f.glob, f"files[{i}]")
        if not os.path.isabs(pattern):
            raise BadInput(f"files[{i}]: {shown(pattern, 300)} must be absolute here (faces resolve relative paths)")
        signals.check_pattern(pattern, scan_root(pattern))  # bounded before the wait starts
        signals.check_brackets(pattern, f"files[{i}]")
        if all((pattern, f.min_count) != (o.pattern, o.min_count) for o in out):  # named twice: one target
            out.append(FileTarget(pattern, f.min_count, f.glob))
    return out


async def scan(targets: Sequence[FileTarget], deadline: float | None) -> None:
    """Scan the targets not met yet (bounded, off the loop: core/signals.py)."""
    for f in targets:
        if not f.met:
            res = await signals.scan_async(f.pattern, root=f.root, deadline=deadline)
            f.found = res.matched
            f.met = len(f.found) >= f.min_count
