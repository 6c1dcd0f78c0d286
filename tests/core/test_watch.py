"""What core/watch.py relies on in watchfiles' private `RustNotify` (see its docstring).

If an upgrade of watchfiles breaks one of these, the adapter `_RootWatcher` needs a look.
"""

from __future__ import annotations

import subprocess

import anyio
import pytest

from wavewait.core import watch

from conftest import PYTHON, until

pytestmark = pytest.mark.anyio

RENAME = "import os, sys; os.rename(sys.argv[1], sys.argv[2])"


async def test_a_rename_by_another_process_right_after_subscribing_wakes_the_subscriber(tmp_path):
    """The watches are in place when `subscribe` returns: nothing happens in between here."""
    inbox, spool = tmp_path / "new", tmp_path / "tmp"
    inbox.mkdir()
    spool.mkdir()
    (spool / "item").write_text("x")
    sub = watch.subscribe([inbox])
    try:
        subprocess.run([PYTHON, "-c", RENAME, str(spool / "item"), str(inbox / "item")], check=True)
        with anyio.fail_after(10):
            await anext(sub)
    finally:
        sub.close()


async def test_changes_outside_the_prefixes_do_not_wake_and_wakes_can_go_to_another_stream(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    target = watch.Wakeup()
    sub = watch.subscribe([tmp_path], prefixes=[tmp_path / "b"], wakes=target)
    quiet = watch.subscribe([tmp_path], prefixes=[tmp_path / "a"])
    try:
        (tmp_path / "b" / "done").write_text("x")
        with anyio.fail_after(10):
            await anext(target)
        assert not quiet._event.is_set() and not sub._event.is_set()
    finally:
        sub.close()
        quiet.close()


async def test_the_watcher_thread_stops_soon_after_its_last_subscriber_leaves(tmp_path):
    sub = watch.subscribe([tmp_path])
    (watcher,) = sub._watchers
    assert watcher._thread.is_alive()
    sub.close()
    assert tmp_path.as_posix() not in {r for key in watch._watchers for r in key}
    # the thread looks at its stop flag every TIMEOUT_MS
    await until(lambda: not watcher._thread.is_alive(), 5 * watch.TIMEOUT_MS / 1000, "the watcher thread to end")
