"""One git worktree per flight: made at spawn, committed at its end, removed by close or prune.

A flight in a git repository gets a new worktree on a new branch `wavewait/<wave>/<name>`
(from HEAD, or the base the spawner names), so flights of one wave never edit the same
files. The worktrees live outside the repository's tree, under wavewait's own folder
(`$WAVEWAIT_WORKTREES`, else `$XDG_STATE_HOME/wavewait/worktrees`, else
`~/.local/state/wavewait/worktrees`), so they never show in the user's `git status`; git
itself knows them (`git worktree list`). Every change runs under one lock of ours per
repository (core/git.py), so twenty flights started at once all get their worktree.
When the flight ends, what it left uncommitted is committed on its branch: the branch is
its result.

A branch's name is not its flight: once a branch is deleted (`wavewait prune`), a later
flight of the same name and wave gets the same name. So git keeps, with each branch, the id
of the flight it was made for (`branch.<branch>.wavewait-flight` in the repository's config,
removed by git with the branch), and a flight is matched to its branch by that id.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from . import git
from .errors import BadInput
from .git import GitError
from .model import Agent, WorktreeInfo

BRANCH_PREFIX = "wavewait"
NO_WAVE = "no-wave"  # the branch folder of flights without a wave
PART_LEN = 60  # characters of a name or wave in a branch name
OWNER_KEY = "wavewait-flight"  # git config branch.<branch>.wavewait-flight = the flight's id
MAX_SUFFIX = 1000  # wavewait/w/name-2 … -1000 when the name is taken
COMMIT_SUBJECT = 200  # characters of the report's first line in the commit message
IDENTITY = {
    "GIT_AUTHOR_NAME": "wavewait flight",
    "GIT_AUTHOR_EMAIL": "wavewait@localhost",
    "GIT_COMMITTER_NAME": "wavewait flight",
    "GIT_COMMITTER_EMAIL": "wavewait@localhost",
}


@dataclass(frozen=True)
class Repo:
    """A git repository as seen from a folder in it."""

    top: Path  # the worktree the folder is in (its top level)
    common: Path  # the repository's common git dir (shared by all its worktrees)
    prefix: str  # the folder's path inside `top` ("" at the top), so a flight starts in the same place

    @property
    def main(self) -> Path:
        """The main worktree (where the user works), or the common dir of a bare repository."""
        return self.common.parent if self.common.name == ".git" else self.common

    @property
    def key(self) -> str:
        """A folder name for this repository under wavewait's worktrees: readable and unique."""
        digest = hashlib.sha256(str(self.common).encode()).hexdigest()[:10]
        return f"{ref_part(self.main.name)}-{digest}"


def find_repo(folder: str | Path) -> Repo | None:
    """The git repository `folder` is in, or None (not a repository, or git is missing)."""
    try:
        r = git.run(["rev-parse", "--show-toplevel", "--git-common-dir", "--show-prefix"], folder)
    except git.GitError:
        return None
    lines = r.out.decode("utf-8", "replace").splitlines()
    if r.code != 0 or len(lines) < 2:
        return None
    top = Path(lines[0])
    common = Path(lines[1]) if os.path.isabs(lines[1]) else Path(folder, lines[1])
    return Repo(top=top.resolve(), common=common.resolve(), prefix=lines[2] if len(lines) > 2 else "")


def root() -> Path:
    """wavewait's folder for worktrees (never inside a repository's tree)."""
    given = os.environ.get("WAVEWAIT_WORKTREES")
    if given:
        return Path(given).expanduser().resolve()
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state, "wavewait", "worktrees").resolve()


def lock_file(repo: Repo) -> Path:
    return root() / repo.key / ".lock"


_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def ref_part(text: str) -> str:
    """`text` as one component of a branch name that git accepts (check-ref-format), bounded.

    Names and waves are labels for people (spaces, any letters); a branch takes fewer
    characters, so the others become '-'.
    """
    part = _BAD.sub("-", text)
    part = re.sub(r"\.{2,}", ".", part).strip(".-")
    while part.endswith(".lock"):
        part = part[: -len(".lock")].rstrip(".-")
    part = part[:PART_LEN].rstrip(".-")
    return part or "flight"


def branch_for(wave: str | None, name: str) -> str:
    return f"{BRANCH_PREFIX}/{ref_part(wave) if wave else NO_WAVE}/{ref_part(name)}"


def _branch_exists(repo: Repo, branch: str) -> bool:
    return git.run(["show-ref", "--verify", "--quiet", f"refs/heads/{branch}"], repo.top).code == 0


def _free_branch(repo: Repo, wanted: str) -> str:
    """`wanted`, or `wanted-2`, `-3`, … if a branch of that name exists (under our lock)."""
    if not _branch_exists(repo, wanted):
        return wanted
    for n in range(2, MAX_SUFFIX + 1):
        if not _branch_exists(repo, f"{wanted}-{n}"):
            return f"{wanted}-{n}"
    raise BadInput(f"name: branches {wanted} to {wanted}-{MAX_SUFFIX} all exist; prune them or pick another name")


def create(
    folder: str | Path, *, name: str, flight_id: str, wave: str | None = None, base: str | None = None
) -> WorktreeInfo:
    """A new worktree for flight `flight_id` of the repository `folder` is in, on a new branch.

    Blocking (git runs in this thread): call it through `asyncio.to_thread`.
    """
    repo = find_repo(folder)
    if repo is None:
        raise BadInput(f"worktree: {folder} is not in a git repository; run without --worktree, or in a repository")
    base_ref = base or "HEAD"
    if base_ref.startswith("-") or "\0" in base_ref or len(base_ref) > 256:
        raise BadInput(f"base: {base_ref!r} is not a commit, branch or tag name")
    place = root() / repo.key / (ref_part(wave) if wave else NO_WAVE) / f"{ref_part(name)}-{flight_id[:8]}"
    with git.repo_lock(lock_file(repo)):
        r = git.run(["rev-parse", "--verify", "--quiet", f"{base_ref}^{{commit}}"], repo.top)
        if r.code != 0:
            raise BadInput(
                f"base: {base_ref!r} is not a commit of {repo.main}"
                + ("; the repository has no commit yet: commit once first" if base_ref == "HEAD" else "")
            )
        sha = r.out.decode().strip()
        branch = _free_branch(repo, branch_for(wave, name))
        place.parent.mkdir(parents=True, exist_ok=True)
        git.check(
            ["worktree", "add", "--quiet", "-b", branch, str(place), sha],
            repo.top,
            retry_locked=git.LOCK_DEADLINE,
        )
        git.check(["config", f"branch.{branch}.{OWNER_KEY}", flight_id], repo.top, retry_locked=git.LOCK_DEADLINE)
    return WorktreeInfo(path=str(place), branch=branch, base=sha, base_ref=base_ref, repo=str(repo.main))


def start_dir(info: WorktreeInfo, folder: str | Path) -> str:
    """Where the flight starts in its worktree: the same subfolder `folder` is in its repository."""
    repo = find_repo(folder)
    sub = Path(info.path, repo.prefix) if repo is not None and repo.prefix else Path(info.path)
    return str(sub if sub.is_dir() else Path(info.path))


def _identity(cwd: str) -> dict[str, str]:
    """An author for the closing commit only where the user's git has none (theirs wins,
    from their git config or from GIT_AUTHOR_* / GIT_COMMITTER_* in the environment)."""
    config = {key: git.run(["config", key], cwd).code == 0 for key in ("user.name", "user.email")}
    return {
        k: v
        for k, v in IDENTITY.items()
        if not os.environ.get(k) and not config["user.name" if k.endswith("NAME") else "user.email"]
    }


def identity_env(cwd: str) -> dict[str, str]:
    """The environment for a commit wavewait makes in `cwd` (a merge, say): the user's git
    identity where they have one, else a neutral one."""
    return _identity(cwd)


def commit_subject(report: str, fallback: str) -> str:
    first = next((line.strip() for line in report.splitlines() if line.strip()), "")
    subject = first or fallback
    return subject if len(subject) <= COMMIT_SUBJECT else subject[: COMMIT_SUBJECT - 1] + "…"


def commit_leftovers(info: WorktreeInfo, message: str) -> str | None:
    """Commit what the flight left uncommitted in its worktree on its branch; the new commit's
    id, or None when there was nothing to commit (or the worktree is gone).

    Hooks are skipped and signing is off: this commit records what the flight left, for the
    person to review before merging, and must not stall or fail on the way.
    """
    if not os.path.isdir(info.path):
        return None
    repo = find_repo(info.path)
    if repo is None:
        return None
    with git.repo_lock(lock_file(repo)):
        git.check(["add", "--all"], info.path, retry_locked=git.LOCK_DEADLINE)
        if git.run(["diff", "--cached", "--quiet"], info.path).code == 0:
            return None
        git.check(
            ["-c", "commit.gpgsign=false", "-c", "gc.auto=0", "commit", "--quiet", "--no-verify", "-m", message],
            info.path,
            env=_identity(info.path),
            retry_locked=git.LOCK_DEADLINE,
        )
        return git.text(["rev-parse", "HEAD"], info.path)


def is_clean(info: WorktreeInfo) -> bool:
    """No modified tracked file and no untracked file (ignored files do not count)."""
    r = git.run(["status", "--porcelain=v1", "-z", "--untracked-files=all"], info.path)
    return r.code == 0 and not r.out


def remove(info: WorktreeInfo, *, force: bool = False) -> bool:
    """Remove the flight's worktree (its branch stays); False if it is not clean and not `force`.

    A worktree whose folder is already gone is forgotten by git (`worktree prune`).
    """
    repo_dir = info.repo if os.path.isdir(info.repo) else None
    if repo_dir is None:
        return False
    repo = find_repo(repo_dir)
    if repo is None:
        return False
    if not os.path.isdir(info.path):
        with git.repo_lock(lock_file(repo)):
            git.check(["worktree", "prune"], repo.top, retry_locked=git.LOCK_DEADLINE)
        return True
    if not force and not is_clean(info):
        return False
    with git.repo_lock(lock_file(repo)):
        git.check(
            ["worktree", "remove", *(["--force"] if force else []), info.path],
            repo.top,
            retry_locked=git.LOCK_DEADLINE,
        )
    _remove_empty_parents(Path(info.path).parent, root())
    return True


def owners(repo_dir: str | Path) -> dict[str, str]:
    """Each branch made for a flight, and that flight's id, as git keeps them (one git run)."""
    r = git.run(["config", "-z", "--get-regexp", rf"^branch\..*\.{OWNER_KEY}$"], repo_dir)
    if r.code not in (0, 1):  # 1: no such key
        raise GitError(f"git config in {repo_dir} failed: {r.err.strip()[-400:]}")
    found = {}
    for entry in r.out.decode("utf-8", "replace").split("\0"):
        key, _, value = entry.partition("\n")
        if key.startswith("branch.") and key.endswith(f".{OWNER_KEY}"):
            found[key[len("branch.") : -len(OWNER_KEY) - 1]] = value.strip()
    return found


def taken_branches(flights: Iterable[Agent]) -> dict[str, str]:
    """Of `flights`, those whose recorded branch is now another flight's: their id, and the
    id of the flight the branch was made for.

    A branch is its flight's when git says it was made for that flight's id (OWNER_KEY). A
    branch made before git kept that (an older wavewait) is taken as the newest of these
    flights that names it: a name is reused only once the older branch was deleted.
    Blocking (git runs in this thread)."""
    with_branch = [(a, a.worktree) for a in flights if a.worktree is not None]
    newest: dict[tuple[str, str], Agent] = {}
    for a, wt in with_branch:
        key = (wt.repo, wt.branch)
        if key not in newest or newest[key].created_at < a.created_at:
            newest[key] = a
    known: dict[str, dict[str, str]] = {}
    taken: dict[str, str] = {}
    for a, wt in with_branch:
        if wt.repo not in known:
            known[wt.repo] = owners(wt.repo) if os.path.isdir(wt.repo) else {}
        holder = known[wt.repo].get(wt.branch) or newest[(wt.repo, wt.branch)].id
        if holder != a.id:
            taken[a.id] = holder
    return taken


#: what is left of a repository's folder under wavewait's root once its worktrees went: the
#: lock of its git steps, the merge queue's lock (core/merge/git_steps.py) and scratch folder
LEFT_WHEN_EMPTY = (".lock", ".merge.lock", ".merge")


def tidy_repo_folder(repo_dir: str | Path) -> bool:
    """Remove the repository's folder under wavewait's root once nothing but its locks and an
    empty scratch folder is left; True if it went.

    Both locks are held meanwhile (a merge or git step running keeps it all, and is not waited
    for), and a locker checks that the file it locked is still at its path (`git.repo_lock`),
    so a removed lock file never lets two processes hold the lock at once.
    """
    repo = find_repo(repo_dir)
    if repo is None:
        return False
    folder = root() / repo.key
    if not folder.is_dir():
        return False
    try:
        with git.repo_lock(folder / ".merge.lock", deadline=0), git.repo_lock(lock_file(repo), deadline=0):
            left = {p.name for p in folder.iterdir()}
            scratch = folder / ".merge"
            if not left <= set(LEFT_WHEN_EMPTY) or (scratch.is_dir() and any(scratch.iterdir())):
                return False
            if scratch.is_dir():
                scratch.rmdir()
            for name in (".merge.lock", ".lock"):
                (folder / name).unlink(missing_ok=True)
            folder.rmdir()
    except git.GitError:  # held: a merge or another wavewait is at work there, and keeps it
        return False
    except OSError:  # something arrived meanwhile (a new worktree): it stays
        return False
    return True


def _remove_empty_parents(folder: Path, stop: Path) -> None:
    """Tidy the wave's folder once its last worktree went (never above wavewait's root)."""
    while folder != stop and stop in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def is_merged(info: WorktreeInfo) -> bool:
    """True if every commit of the flight's branch is in the repository's HEAD (or it has none)."""
    r = git.run(["merge-base", "--is-ancestor", f"refs/heads/{info.branch}", "HEAD"], info.repo)
    return r.code == 0


def branch_exists(info: WorktreeInfo) -> bool:
    repo = find_repo(info.repo)
    return repo is not None and _branch_exists(repo, info.branch)


def delete_branch(info: WorktreeInfo, *, force: bool = False) -> bool:
    """Delete the flight's branch if it is merged into HEAD (or with `force`); False if kept."""
    repo = find_repo(info.repo)
    if repo is None or not _branch_exists(repo, info.branch):
        return False
    if not force and not is_merged(info):
        return False
    with git.repo_lock(lock_file(repo)):
        r = git.run(["branch", "-D", info.branch], repo.top)
    if r.code != 0:
        raise GitError(f"git branch -D {info.branch} failed: {r.err.strip()[-400:]}")
    return True


__all__ = [
    "GitError",
    "Repo",
    "branch_for",
    "commit_leftovers",
    "commit_subject",
    "create",
    "delete_branch",
    "find_repo",
    "identity_env",
    "is_clean",
    "is_merged",
    "owners",
    "ref_part",
    "remove",
    "root",
    "start_dir",
    "taken_branches",
]
