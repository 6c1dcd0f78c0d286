"""What a flight changed: files and lines +/- against its base, and the diff itself.

Counted as git counts them (`git diff --numstat`), against the merge base of the flight's
base and its branch, including what is not committed yet: tracked changes and new files
that are not ignored. The new files are staged into a temporary copy of the worktree's
index, never its own, so counting does not touch what the agent sees. Once the worktree is
gone, the branch alone is compared.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from . import git
from .model import ChangeSummary, FileChange, WorktreeInfo

CHANGES_KEPT = 200  # files listed in a record; the totals count them all
DIFF_LIMIT = 4 << 20  # bytes of patch `wavewait diff` prints; more is cut with a note


@contextmanager
def _snapshot_index(info: WorktreeInfo) -> Iterator[dict[str, str]]:
    """An environment whose index is a copy of the worktree's with everything in it staged."""
    own = git.text(["rev-parse", "--git-path", "index"], info.path)
    own_path = own if os.path.isabs(own) else os.path.join(info.path, own)
    with tempfile.TemporaryDirectory(prefix="wavewait-index-") as tmp:
        index = os.path.join(tmp, "index")
        if os.path.exists(own_path):
            shutil.copyfile(own_path, index)  # its stat cache: only changed files are hashed again
        env = {"GIT_INDEX_FILE": index}
        git.check(["add", "--all"], info.path, env=env)
        yield env


def _merge_base(info: WorktreeInfo, cwd: str, tip: str) -> str:
    r = git.run(["merge-base", info.base, tip], cwd)
    return r.out.decode().strip() if r.code == 0 and r.out.strip() else info.base


def _parse_numstat(raw: bytes) -> list[FileChange]:
    """`git diff --numstat -z --no-renames`: `added TAB deleted TAB path NUL`; '-' for binary."""
    out = []
    for record in raw.split(b"\0"):
        if not record:
            continue
        added, deleted, path = record.decode("utf-8", "replace").split("\t", 2)
        out.append(
            FileChange(
                path=path,
                added=None if added == "-" else int(added),
                deleted=None if deleted == "-" else int(deleted),
            )
        )
    return out


def summarize(files: list[FileChange], *, final: bool = False) -> ChangeSummary:
    return ChangeSummary(
        files=len(files),
        added=sum(f.added or 0 for f in files),
        deleted=sum(f.deleted or 0 for f in files),
        paths=files[:CHANGES_KEPT],
        final=final,
    )


def count(info: WorktreeInfo, *, final: bool = False) -> ChangeSummary:
    """Files and lines the flight changed against its base (blocking: run it in a thread)."""
    args = ["diff", "--numstat", "-z", "--no-renames", "--no-color"]
    if os.path.isdir(info.path):
        with _snapshot_index(info) as env:
            base = _merge_base(info, info.path, "HEAD")
            raw = git.check([*args, "--cached", base], info.path, env=env)
    else:
        branch = f"refs/heads/{info.branch}"
        base = _merge_base(info, info.repo, branch)
        raw = git.check([*args, base, branch], info.repo)
    return summarize(_parse_numstat(raw), final=final)


def diff(info: WorktreeInfo, *, limit: int = DIFF_LIMIT) -> str:
    """The flight's patch against its base, uncommitted work included (blocking), at most `limit` bytes."""
    args = ["diff", "--no-color", "--no-ext-diff", "--no-renames"]
    if os.path.isdir(info.path):
        with _snapshot_index(info) as env:
            base = _merge_base(info, info.path, "HEAD")
            r = git.run([*args, "--cached", base], info.path, env=env, limit=limit)
            cwd = info.path
    else:
        branch = f"refs/heads/{info.branch}"
        base = _merge_base(info, info.repo, branch)
        r = git.run([*args, base, branch], info.repo, limit=limit)
        cwd = info.repo
    if r.code != 0 and not r.cut:
        raise git.GitError(f"git diff in {cwd} failed (exit {r.code}): {r.err.strip()[-800:]}")
    text = r.out.decode("utf-8", "replace")
    if r.cut:
        text += f"\n[wavewait: the diff is longer than {limit:,} bytes; the rest was cut]\n"
    return text
