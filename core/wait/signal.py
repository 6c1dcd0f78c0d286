"""A signal: at least `min_count` files matching a glob, watched where the waiting process runs."""

from __future__ import annotations

import os

from .. import signals
from ..bus import Bus
from ..errors import BadInput
from ..limits import check_path, shown
from ..results import (
    Signal,
)
from ..signals import glob_base, scan_root
from .engine import (
    Condition,
    Control,
    Ending,
    ProgressFn,
    Waiting,
    WaitSettings,
    check_timeout,
    run,
)


class SignalCondition(Condition[Signal]):
    """Until at least `min_count` files match `pattern` (an absolute path or glob)."""

    kind = "signal"
    tool = "wave_wait_for_signal"

    def __init__(self, pattern: str, min_count: int) -> None:
        base = glob_base(pattern)
        super().__init__(f"{min_count} file(s) matching {pattern}", other_targets=[pattern], watch_dirs=[base])
        self.pattern, self.min_count = pattern, min_count
        self.root = scan_root(pattern)
        self.found: list[str] = []
        self.note: str | None = None  # why the last scan may have missed files

    async def step(self, w: Waiting) -> Signal | None:
        # off the event loop, never following a link, bounded in entries and by the deadline
        res = await signals.scan_async(self.pattern, root=self.root, deadline=w.deadline)
        self.found, self.note = res.matched, res.note()
        return Signal(matched=self.found, elapsed_sec=w.elapsed) if len(self.found) >= self.min_count else None

    def progress(self) -> str:
        return f"{len(self.found)}/{self.min_count} files" + (f" ({self.note})" if self.note else "")

    def ended(self, why: Ending, w: Waiting) -> Signal:
        if why == "interrupted":
            return Signal(interrupted=True, partial_matches=self.found, elapsed_sec=w.elapsed)
        return Signal(timed_out=True, partial_matches=self.found, elapsed_sec=w.elapsed)


async def wait_signal(
    bus: Bus,
    caller: str,
    pattern: str,
    *,
    timeout: float = 1800,
    min_count: int = 1,
    on_progress: ProgressFn | None = None,
    control: Control | None = None,
    settings: WaitSettings | None = None,
) -> Signal:
    """Until at least `min_count` files match `pattern` (an absolute path or glob)."""
    timeout = check_timeout(timeout, "timeout_sec")
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        raise BadInput(f"min_count: must be a whole number ≥ 1, got {min_count!r}")
    if not os.path.isabs(check_path(pattern, "signal_path")):
        raise BadInput(f"signal_path: {shown(pattern, 300)} must be absolute here (faces resolve relative paths)")
    signals.check_pattern(pattern, scan_root(pattern))  # its levels and names bounded before the wait starts
    return await run(
        bus,
        caller,
        SignalCondition(pattern, min_count),
        timeout=timeout,
        on_progress=on_progress,
        control=control,
        settings=settings,
    )
