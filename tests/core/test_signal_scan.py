"""The signal-glob scanner: same answers as glob for ordinary trees, safe on hostile ones."""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
import threading
import time
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wavewait.core import signals
from wavewait.core.errors import BadInput

from conftest import until


def glob_matches(pattern: str) -> list[str]:
    """The reference: what `glob.glob` finds (it follows links, which the scanner must not)."""
    return sorted(os.path.abspath(p) for p in glob.glob(pattern, recursive=True))


pytestmark = pytest.mark.anyio


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """An ordinary project: nested folders, hidden entries, files of several kinds."""
    root = tmp_path / "proj"
    for rel in [
        "done.flag",
        "a/one.done",
        "a/two.txt",
        "a/b/three.done",
        "a/b/c/four.done",
        "a/.hidden/five.done",
        ".top.done",
        "x[1]/six.done",
        "out/w1.json",
        "out/w2.json",
        "out/w10.json",
    ]:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    return root


ORDINARY = [
    "done.flag",
    "missing.flag",
    "*.flag",
    "*.done",
    ".*.done",
    "a/*.done",
    "a/*",
    "a/**",
    "a/**/*.done",
    "**/*.done",
    "**",
    "a/.hidden/*.done",
    "out/w?.json",
    "out/w[0-9]*.json",
    "x[[]1]/*.done",
    "*/b/*.done",
    "a/b",
    "a/**/c",
]


@pytest.mark.parametrize("pattern", ORDINARY)
def test_ordinary_patterns_match_as_glob_did(tree, pattern):
    assert signals.scan(str(tree / pattern), root=tree).matched == glob_matches(str(tree / pattern))
    assert signals.scan(pattern, root=tree).matched == glob_matches(str(tree / pattern))  # relative


def test_a_double_star_over_a_symlink_loop_finishes_fast(tree):
    (tree / "a" / "loop").symlink_to(tree, target_is_directory=True)
    (tree / "a" / "b" / "up").symlink_to("..", target_is_directory=True)
    started = time.monotonic()
    found = signals.scan(str(tree / "**" / "*.done"), root=tree)
    assert time.monotonic() - started < 2
    assert found.complete and found.scanned < 100
    assert not any("loop" in p or "/up" in p for p in found.matched)
    assert str(tree / "a" / "b" / "c" / "four.done") in found.matched


def test_a_symlink_to_etc_passwd_is_not_reported(tree):
    (tree / "passwd.done").symlink_to("/etc/passwd")
    (tree / "etc").symlink_to("/etc", target_is_directory=True)
    assert signals.scan(str(tree / "*.done"), root=tree).matched == []
    assert signals.scan(str(tree / "passwd.done"), root=tree).matched == []
    assert signals.scan(str(tree / "etc" / "passwd"), root=tree).matched == []
    assert signals.scan(str(tree / "**" / "passwd"), root=tree).matched == []


@pytest.mark.parametrize("pattern", ["/etc/passwd", "../*", "a/../../*", "/*"])
def test_a_pattern_outside_the_project_is_refused(tree, pattern):
    with pytest.raises(BadInput, match="outside the project folder"):
        signals.scan(pattern, root=tree)


def test_a_10_mb_pattern_is_refused_before_any_work(tree):
    started = time.monotonic()
    with pytest.raises(BadInput, match="signal_path: at most 4096 bytes"):
        signals.scan(str(tree) + "/" + "*" * 10_000_000, root=tree)
    assert time.monotonic() - started < 0.5


def test_the_entries_scanned_are_capped_and_the_result_says_so(tree):
    for i in range(50):
        (tree / "a" / f"f{i}.done").write_text("x")
    found = signals.scan(str(tree / "**" / "*.done"), root=tree, max_entries=20)
    assert found.capped and not found.complete and found.scanned == 21
    assert "cap" in (found.note() or "")


def test_the_deadline_is_honoured(tree):
    for i in range(600):
        (tree / "a" / f"g{i}").mkdir()
    found = signals.scan(str(tree / "**" / "*.done"), root=tree, deadline=time.monotonic() - 1)
    assert found.timed_out and "deadline" in (found.note() or "")


async def test_scan_async_runs_off_the_event_loop(tree, monkeypatch):
    """While a scan is held up in its thread (a slow disk), the event loop serves other work;
    on the loop, the gate would block everything for 10 s and the result would be there."""
    gate = threading.Event()
    real = signals._Scanner._entries

    def slow_entries(self: signals._Scanner, folder: str) -> list[tuple[str, bool, bool]]:
        gate.wait(10)
        return real(self, folder)

    monkeypatch.setattr(signals._Scanner, "_entries", slow_entries)
    result: list[signals.Scan] = []

    async def run() -> None:
        result.append(await signals.scan_async(str(tree / "**" / "*.done"), root=tree))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await anyio.sleep(0)  # let the scan start
        assert not result  # and we are still running, beside it
        gate.set()
    assert str(tree / "a" / "one.done") in result[0].matched


def test_a_fifo_matched_by_a_pattern_is_reported_without_being_opened(tree):
    os.mkfifo(tree / "ready.done")
    assert signals.scan(str(tree / "*.done"), root=tree).matched == [str(tree / "ready.done")]


def test_a_double_star_under_a_missing_folder_matches_nothing(tree):
    """glob.glob('missing/**') answers ['missing/'], so a signal on it fired at once."""
    assert glob_matches(str(tree / "missing" / "**")) == [str(tree / "missing")]
    assert signals.scan(str(tree / "missing" / "**"), root=tree).matched == []


_NAMES = st.sampled_from(["a", "b", ".h", "a.done", "b.txt", "x1", "ab"])
_PARTS = st.sampled_from(["*", "**", "?", "a", "b", "*.done", "a*", ".*", "[ab]", "x?", "[!a]*"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_NAMES, min_size=1, max_size=4), max_size=12), st.lists(_PARTS, min_size=1, max_size=4))
def test_random_trees_and_patterns_match_as_glob_did(tree_paths, parts):
    """Same answers as glob on random trees, but for glob's `X/` answer to `X/**` where X is
    no folder: a missing one, or a file named by a literal part (`*/a/**` matched the file
    `a/a`, while `*/*/**` did not)."""
    with tempfile.TemporaryDirectory() as root:
        for p in tree_paths:
            full = os.path.join(root, *p)
            with contextlib.suppress(FileExistsError, NotADirectoryError, IsADirectoryError):
                os.makedirs(os.path.dirname(full), exist_ok=True)
                Path(full).touch(exist_ok=True)
        pattern = os.path.join(root, *parts)
        found = glob.glob(pattern, recursive=True)
        expected = sorted({os.path.abspath(p) for p in found if not p.endswith(os.sep) or os.path.isdir(p)})
        assert signals.scan(pattern, root=root).matched == expected


def test_a_long_name_in_a_pattern_is_refused_before_any_work(tree):
    """Turning a part into a regular expression costs the square of its length (0.5 s for 4 KiB of '[')."""
    started = time.monotonic()
    with pytest.raises(BadInput, match="a folder or file name in the pattern is at most 255 characters"):
        signals.scan(str(tree / "a" / ("[" * 4000)), root=tree)
    assert time.monotonic() - started < 0.1
    assert signals.scan(str(tree / "a" / ("?" * 255)), root=tree).matched == []  # the longest name is fine


def test_a_run_of_double_stars_is_one(tree):
    """`**/**` matches what `**` does; a run of them is one, not one more level of search each."""
    one = signals.scan(str(tree / "**" / "*.done"), root=tree)
    many = signals.scan(str(tree) + "/" + "**/" * 1300 + "*.done", root=tree)
    assert many.matched == one.matched == glob_matches(str(tree / "**" / "*.done"))
    assert many.scanned == one.scanned


def test_a_scan_asks_every_256_entries_whether_to_stop(tree):
    for i in range(600):
        (tree / "a" / f"h{i}").write_text("x")
    asked = []

    class Stopped(Exception):
        pass

    def cancelled() -> None:
        asked.append(1)
        if len(asked) == 2:
            raise Stopped

    with pytest.raises(Stopped):
        signals.scan(str(tree / "**" / "*.done"), root=tree, cancelled=cancelled)
    assert len(asked) == 2


async def test_a_scan_ends_when_the_wait_awaiting_it_is_cancelled(tree, monkeypatch):
    """A scan is never abandoned in its thread: the process would wait for that thread before
    it exits. Cancelled (its wait ended, the server stopped), it stops within 256 entries."""
    started = threading.Event()

    def endless(self: signals._Scanner, folder: str) -> list[tuple[str, bool, bool]]:
        started.set()
        while True:  # a folder that never ends: only the cap, the deadline or a cancellation stops it
            self._count()

    monkeypatch.setattr(signals._Scanner, "_entries", endless)
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: signals.scan_async(str(tree / "*.done"), root=tree, max_entries=20_000_000))
            await until(started.is_set, what="the scan to start")
            cancelled_at = time.monotonic()
            scope.cancel()
    took = time.monotonic() - cancelled_at
    assert took < 1.0, f"the scan went on {took:.2f} s after its wait was cancelled"


@pytest.mark.parametrize("shape", ["a/" * 500_000, "/" + "a/" * 500_000 + "*.done", "a" * 1_000_000])
def test_a_megabyte_pattern_is_refused_by_its_length_before_any_path_work(shape):
    """Where a wait starts (`scan_root`), what it watches (`glob_base`) and the check itself each
    measure the pattern first: splitting a megabyte of `a/` into names took a second."""
    for work in (signals.scan_root, signals.glob_base, lambda p: signals.check_pattern(p, signals.scan_root(p))):
        with pytest.raises(BadInput, match=r"signal_path: at most 4096 bytes"):
            work(shape)


@pytest.mark.parametrize("pattern", ["/w/[unclosed", "/w/dist/a[/]b", "/w/[!", "/w/[]"])
def test_a_bracket_that_opens_no_class_is_refused_with_what_to_write(pattern):
    with pytest.raises(BadInput, match=r"write a literal '\[' as '\[\[\]'"):
        signals.check_brackets(pattern)


@pytest.mark.parametrize("pattern", ["/w/[ab]c", "/w/[!a]", "/w/[]]", "/w/[[]x", "/w/x[:]y", "/w/plain"])
def test_a_closed_class_or_a_literal_bracket_is_taken(pattern):
    assert signals.check_brackets(pattern) == pattern
