"""The git steps of a merge, each in git alone: the repository and the target branch, what a
branch touched and would conflict in (`git merge-tree`, nothing moved), the scratch worktree
where a branch is merged, the compare-and-swap that moves the target, and the lock that lets
one merge of a repository run at a time."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from .. import git, worktrees
from ..errors import BadInput
from .outcome import MergeError
from .plan import Flight

FILES_KEPT = 200  # conflicting files kept per flight
LOCK_WAIT = 5.0  # seconds a merge waits for another merge of the same repository


def repo_of(flights: Sequence[Flight]) -> worktrees.Repo:
    repos = {f.agent.worktree.repo for f in flights if f.agent.worktree}
    if len(repos) > 1:
        raise BadInput(f"wave: its flights are in several repositories ({', '.join(sorted(repos))}); merge each alone")
    if not repos:
        raise BadInput("wave: none of its flights has a branch to merge")
    (path,) = repos
    repo = worktrees.find_repo(path) if os.path.isdir(path) else None
    if repo is None:
        raise BadInput(f"wave: its repository {path} is gone or not a git repository")
    return repo


def target_branch(repo: worktrees.Repo, into: str | None) -> str:
    """The branch to merge into: `into`, else the branch checked out in the main worktree."""
    if into is None:
        r = git.run(["symbolic-ref", "--quiet", "--short", "HEAD"], repo.main)
        if r.code != 0:
            raise BadInput(f"into: {repo.main} has no branch checked out (detached HEAD); name one with --into BRANCH")
        into = r.out.decode().strip()
    name = into.removeprefix("refs/heads/")
    if not name or name.startswith("-") or git.run(["check-ref-format", "--branch", name], repo.main).code != 0:
        raise BadInput(f"into: {into!r} is not a branch name")
    if git.run(["show-ref", "--verify", "--quiet", f"refs/heads/{name}"], repo.main).code != 0:
        raise BadInput(f"into: there is no branch {name!r} in {repo.main}; create it or name another with --into")
    return name


def sha(repo: worktrees.Repo, ref: str) -> str | None:
    r = git.run(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], repo.main)
    return r.out.decode().strip() if r.code == 0 else None


def is_ancestor(repo: worktrees.Repo, commit: str, of: str) -> bool:
    return git.run(["merge-base", "--is-ancestor", commit, of], repo.main).code == 0


def touched_files(repo: worktrees.Repo, target: str, tip: str) -> list[str]:
    base = git.run(["merge-base", target, tip], repo.main).out.decode().strip() or target
    raw = git.check(["diff", "--name-only", "-z", "--no-renames", base, tip], repo.main)
    return [p for p in raw.decode("utf-8", "replace").split("\0") if p]


def would_merge(repo: worktrees.Repo, onto: str, tip: str) -> tuple[str, list[str]]:
    """What merging `tip` onto `onto` would give, in git's objects alone (no worktree, no ref
    moves): the merged tree, and the files that would conflict (none: it merges cleanly).

    `git merge-tree --write-tree` runs the same merge (ort) as the `git merge` of a real run."""
    r = git.run(["merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", onto, tip], repo.main)
    if r.code not in (0, 1):  # 1: conflicts
        raise MergeError(f"git merge-tree of {tip[:12]} onto {onto[:12]} failed: {r.err.strip()[-600:]}")
    tree, *rest = r.out.decode("utf-8", "replace").split("\0")
    files = list(dict.fromkeys(p for p in rest if p))[:FILES_KEPT]
    if r.code == 1 and not files:
        raise MergeError(f"git merge-tree of {tip[:12]} failed without a conflict: {r.err.strip()[-600:]}")
    return tree.strip(), files


def commit_tree(repo: worktrees.Repo, tree: str, onto: str, tip: str) -> str:
    """A merge commit no ref points to: the target as a dry run plans it after one more merge
    (the next flight's merge base is found from it as the real run's would be)."""
    env = worktrees.identity_env(str(repo.main))
    r = git.run(
        ["-c", "commit.gpgsign=false", "commit-tree", tree, "-p", onto, "-p", tip, "-m", "wavewait merge plan"],
        repo.main,
        env=env,
    )
    if r.code != 0:
        raise MergeError(f"git commit-tree failed: {r.err.strip()[-600:]}")
    return r.out.decode().strip()


def _checked_out_at(repo: worktrees.Repo, branch: str) -> str | None:
    """The worktree where `branch` is checked out, if any (git refuses two)."""
    raw = git.check(["worktree", "list", "--porcelain", "-z"], repo.main).decode("utf-8", "replace")
    path = None
    for entry in raw.split("\0"):
        if entry.startswith("worktree "):
            path = entry.removeprefix("worktree ")
        elif entry == f"branch refs/heads/{branch}" and path is not None:
            return path
    return None


def _dirty(path: str) -> list[str]:
    r = git.run(["status", "--porcelain=v1", "-z", "--untracked-files=no"], path)
    if r.code != 0:
        raise MergeError(f"git status in {path} failed: {r.err.strip()[-400:]}")
    return [e[3:] for e in r.out.decode("utf-8", "replace").split("\0") if len(e) > 3]


def refuse_dirty(repo: worktrees.Repo, target: str) -> str | None:
    at = _checked_out_at(repo, target)
    if at is not None and (dirty := _dirty(at)):
        raise BadInput(
            f"into: {target} is checked out at {at} with uncommitted changes ({', '.join(dirty[:5])}); "
            "commit or discard them there, or merge into another branch with --into"
        )
    return at


def move_target(repo: worktrees.Repo, target: str, new: str, old: str, checked_out: str | None, name: str) -> None:
    """Move the target from `old` to `new`, only if it is still at `old` (compare-and-swap).

    Where the target is checked out, its worktree is fast-forwarded there (it must be clean),
    so the user's files follow the branch."""
    if checked_out is not None:
        if dirty := _dirty(checked_out):
            raise BadInput(
                f"into: {target} is checked out at {checked_out} with uncommitted changes ({', '.join(dirty[:5])}); "
                "commit or discard them there and run merge again"
            )
        head = git.text(["rev-parse", "HEAD"], checked_out)
        if head != old:
            raise MergeError(f"{target} moved during the merge (now {head[:12]}); run merge again to continue")
        git.check(["merge", "--ff-only", "--quiet", new], checked_out)
        return
    r = git.run(
        ["update-ref", "-m", f"wavewait merge: {name}", f"refs/heads/{target}", new, old],
        repo.main,
    )
    if r.code != 0:
        raise MergeError(f"{target} moved during the merge ({r.err.strip()[-300:]}); run merge again to continue")


@dataclass
class Scratch:
    """A detached worktree of ours where each branch is merged and checked before the target moves."""

    repo: worktrees.Repo
    path: str = ""

    def open(self) -> None:
        """A fresh scratch worktree; those a killed run left are removed first (the caller
        holds the merge lock, so no other run is using one)."""
        folder = worktrees.root() / self.repo.key / ".merge"
        folder.mkdir(parents=True, exist_ok=True)
        with git.repo_lock(worktrees.lock_file(self.repo)):
            for old in folder.glob("scratch-*"):
                if git.run(["worktree", "remove", "--force", str(old)], self.repo.main).code != 0:
                    shutil.rmtree(old, ignore_errors=True)
            git.run(["worktree", "prune"], self.repo.main)
        self.path = tempfile.mkdtemp(prefix=f"scratch-{os.getpid()}-", dir=folder)
        with git.repo_lock(worktrees.lock_file(self.repo)):
            git.check(["worktree", "add", "--quiet", "--detach", self.path, "HEAD"], self.repo.main, retry_locked=60)

    def close(self) -> None:
        if not self.path:
            return
        with git.repo_lock(worktrees.lock_file(self.repo)):
            r = git.run(["worktree", "remove", "--force", self.path], self.repo.main)
            if r.code != 0:
                shutil.rmtree(self.path, ignore_errors=True)
                git.run(["worktree", "prune"], self.repo.main)

    def merge(self, onto: str, tip: str, message: str) -> list[str] | None:
        """Merge `tip` onto `onto` here: None when it merged, else the conflicting files."""
        git.check(["checkout", "--quiet", "--force", "--detach", onto], self.path)
        git.check(["clean", "-fdq"], self.path)
        env = worktrees.identity_env(self.path)
        r = git.run(
            ["-c", "commit.gpgsign=false", "merge", "--no-ff", "--no-verify", "--quiet", "-m", message, tip],
            self.path,
            env=env,
        )
        if r.code == 0:
            return None
        raw = git.run(["diff", "--name-only", "-z", "--diff-filter=U"], self.path).out
        files = [p for p in raw.decode("utf-8", "replace").split("\0") if p][:FILES_KEPT]
        git.run(["merge", "--abort"], self.path)
        if not files:
            raise MergeError(f"git merge of {tip[:12]} failed without a conflict: {r.err.strip()[-600:]}")
        return files

    def head(self) -> str:
        return git.text(["rev-parse", "HEAD"], self.path)


@contextmanager
def merge_lock(repo: worktrees.Repo) -> Iterator[None]:
    """One merge per repository at a time (across processes)."""
    lock = worktrees.root() / repo.key / ".merge.lock"
    try:
        held = git.repo_lock(lock, deadline=LOCK_WAIT)
        held.__enter__()
    except git.GitError:
        raise MergeError(
            f"another wavewait merge of {repo.main} is running (it holds {lock}); wait for it to end"
        ) from None
    try:
        yield
    finally:
        held.__exit__(None, None, None)
