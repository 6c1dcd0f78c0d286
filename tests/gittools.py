"""A real git repository on tmp_path, and wavewait's worktree folder kept inside tmp_path too."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Person",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test Person",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
}


def git(cwd: Path | str, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def make_repo(path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository with one commit (README and src/app.py), wavewait's worktrees beside it."""
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("WAVEWAIT_WORKTREES", str(path.parent / "worktrees"))
    path.mkdir(parents=True)
    git(path, "init", "--quiet", "-b", "main")
    (path / "README").write_text("hello\n")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("a = 1\nb = 2\n")
    git(path, "add", "--all")
    git(path, "commit", "--quiet", "-m", "first")
    return path


def status(repo: Path) -> str:
    """The user's `git status --porcelain`: what they would see as changed or new."""
    return git(repo, "status", "--porcelain=v1", "--untracked-files=all")


def branches(repo: Path) -> list[str]:
    return git(repo, "branch", "--format=%(refname:short)").split()
