"""One git worktree per flight, with real git: made, committed at the end, removed, pruned."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wavewait.core import changes, worktrees
from wavewait.core.errors import BadInput
from wavewait.core.ids import new_id

from gittools import branches, git, make_repo, status


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return make_repo(tmp_path / "project", monkeypatch)


def test_a_flight_gets_its_own_worktree_on_its_own_branch_that_the_user_never_sees(repo: Path) -> None:
    info = worktrees.create(repo, name="file reader", flight_id=new_id(), wave="wave-7")
    assert info.branch == "wavewait/wave-7/file-reader"
    assert info.base == git(repo, "rev-parse", "HEAD").strip()
    assert info.repo == str(repo.resolve())
    assert (Path(info.path) / "src" / "app.py").read_text() == "a = 1\nb = 2\n"
    assert git(info.path, "branch", "--show-current").strip() == info.branch
    (Path(info.path) / "new.txt").write_text("made by the flight\n")
    assert status(repo) == ""  # nothing of the flight's in the user's git status
    assert repo.resolve() not in Path(info.path).resolve().parents
    listed = git(repo, "worktree", "list", "--porcelain")
    assert f"worktree {Path(info.path).resolve()}" in listed


def test_names_and_waves_become_branch_names_git_accepts(repo: Path) -> None:
    for text in ["a b/c", "..x..", "x.lock", "-lead", "émile", "@{1}", "a" * 300, "~^:?*[\\", "."]:
        part = worktrees.ref_part(text)
        assert 0 < len(part) <= worktrees.PART_LEN
        git(repo, "check-ref-format", "--branch", f"wavewait/{part}/{part}")


def test_a_taken_branch_name_gets_a_suffix_and_the_base_can_be_named(repo: Path) -> None:
    first = git(repo, "rev-parse", "HEAD").strip()
    (repo / "README").write_text("second\n")
    git(repo, "commit", "--quiet", "-am", "second")
    a = worktrees.create(repo, name="w", flight_id=new_id())
    b = worktrees.create(repo, name="w", flight_id=new_id(), base=first)
    assert (a.branch, b.branch) == ("wavewait/no-wave/w", "wavewait/no-wave/w-2")
    assert b.base == first and b.base_ref == first
    assert (Path(b.path) / "README").read_text() == "hello\n"


def test_bad_bases_and_folders_outside_a_repository_are_refused(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="base: 'no-such-branch' is not a commit"):
        worktrees.create(repo, name="w", flight_id=new_id(), base="no-such-branch")
    with pytest.raises(BadInput, match="base"):
        worktrees.create(repo, name="w", flight_id=new_id(), base="--upload-pack=evil")
    outside = tmp_path / "plain"
    outside.mkdir()
    with pytest.raises(BadInput, match="not in a git repository"):
        worktrees.create(outside, name="w", flight_id=new_id())
    assert branches(repo) == ["main"]


def test_a_flight_started_in_a_subfolder_starts_in_the_same_subfolder_of_its_worktree(repo: Path) -> None:
    info = worktrees.create(repo / "src", name="w", flight_id=new_id())
    assert worktrees.start_dir(info, repo / "src") == str(Path(info.path) / "src")
    assert worktrees.start_dir(info, repo) == info.path


def test_twenty_flights_started_at_once_get_twenty_worktrees(repo: Path) -> None:
    """Twenty processes, each making its worktree at the same moment: git's locks never trip one."""
    code = (
        "import json, sys\n"
        "from wavewait.core import worktrees\n"
        "i = sys.argv[1]\n"
        "info = worktrees.create(sys.argv[2], name=f'flight {i}', flight_id=f'{int(i):08d}cafe', wave='big')\n"
        "print(json.dumps(info.model_dump()))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(i), str(repo)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for i in range(20)
    ]
    made = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err.decode()
        made.append(json.loads(out))
    assert len({m["path"] for m in made}) == 20
    assert sorted(m["branch"] for m in made) == sorted(f"wavewait/big/flight-{i}" for i in range(20))
    listed = git(repo, "worktree", "list", "--porcelain").count("\nworktree ") + 1
    assert listed == 21  # the main worktree and twenty of ours
    for m in made:
        assert git(m["path"], "branch", "--show-current").strip() == m["branch"]
    assert status(repo) == ""


def test_leftovers_are_committed_on_the_branch_with_the_reports_first_line(repo: Path) -> None:
    info = worktrees.create(repo, name="w", flight_id=new_id(), wave="w1")
    assert worktrees.commit_leftovers(info, "nothing done") is None  # nothing to commit
    (Path(info.path) / "src" / "app.py").write_text("a = 1\nb = 3\nc = 4\n")
    (Path(info.path) / "notes.md").write_text("one\ntwo\n")
    subject = worktrees.commit_subject("\n  Fixed the parser.\nDetails follow.", "fallback")
    sha = worktrees.commit_leftovers(info, subject)
    assert sha == git(repo, "rev-parse", info.branch).strip()
    assert git(repo, "log", "-1", "--format=%s", info.branch).strip() == "Fixed the parser."
    assert git(repo, "log", "-1", "--format=%an", info.branch).strip() == "Test Person"  # the user's identity
    assert worktrees.is_clean(info)
    assert status(repo) == ""
    assert git(repo, "rev-parse", "HEAD").strip() == info.base  # the user's branch did not move


def test_the_closing_commit_has_an_author_even_when_the_user_set_none(
    repo: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for k in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path / "empty-home"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    info = worktrees.create(repo, name="w", flight_id=new_id())
    (Path(info.path) / "x").write_text("x\n")
    assert worktrees.commit_leftovers(info, "made x") is not None
    assert git(repo, "log", "-1", "--format=%an <%ae>", info.branch).strip() == "wavewait flight <wavewait@localhost>"


def test_remove_takes_a_clean_worktree_and_keeps_its_branch_but_never_a_dirty_one(repo: Path) -> None:
    info = worktrees.create(repo, name="w", flight_id=new_id(), wave="w1")
    (Path(info.path) / "x").write_text("x\n")
    assert worktrees.remove(info) is False  # uncommitted work stays
    assert Path(info.path).is_dir()
    worktrees.commit_leftovers(info, "x")
    assert worktrees.remove(info) is True
    assert not Path(info.path).exists()
    assert info.branch in branches(repo)
    assert git(repo, "show", f"{info.branch}:x") == "x\n"
    assert worktrees.remove(info) is True  # gone already: git forgets it, no error


def test_a_branch_is_deleted_only_when_merged_unless_forced(repo: Path) -> None:
    empty = worktrees.create(repo, name="idle", flight_id=new_id())
    busy = worktrees.create(repo, name="busy", flight_id=new_id())
    (Path(busy.path) / "x").write_text("x\n")
    worktrees.commit_leftovers(busy, "x")
    for info in (empty, busy):
        assert worktrees.remove(info)
    assert worktrees.delete_branch(empty) is True  # no commit of its own: merged
    assert worktrees.delete_branch(busy) is False  # its commit is not in HEAD
    assert busy.branch in branches(repo)
    git(repo, "merge", "--quiet", "--ff-only", busy.branch)
    assert worktrees.delete_branch(busy) is True
    other = worktrees.create(repo, name="other", flight_id=new_id())
    (Path(other.path) / "y").write_text("y\n")
    worktrees.commit_leftovers(other, "y")
    worktrees.remove(other)
    assert worktrees.delete_branch(other, force=True) is True
    assert branches(repo) == ["main"]


def test_changes_count_committed_uncommitted_and_new_files_against_the_base(repo: Path) -> None:
    info = worktrees.create(repo, name="w", flight_id=new_id())
    wt = Path(info.path)
    assert changes.count(info).files == 0
    (wt / "src" / "app.py").write_text("a = 1\nb = 3\nc = 4\n")  # 2 added, 1 deleted
    git(wt, "commit", "--quiet", "-am", "edit")
    (wt / "README").write_text("hello\nworld\n")  # uncommitted: 1 added
    (wt / "new.txt").write_text("1\n2\n3\n")  # untracked: 3 added
    (wt / "blob.bin").write_bytes(b"\0\1\2")  # binary: no line counts
    (wt / ".gitignore").write_text("ignored.log\n")  # 1 added
    (wt / "ignored.log").write_text("never counted\n")
    got = changes.count(info)
    by_path = {f.path: (f.added, f.deleted) for f in got.paths}
    assert by_path == {
        "src/app.py": (2, 1),
        "README": (1, 0),
        "new.txt": (3, 0),
        "blob.bin": (None, None),
        ".gitignore": (1, 0),
    }
    assert (got.files, got.added, got.deleted) == (5, 7, 1)
    # the agent's own index was not touched: its new files are still untracked, its edit unstaged
    assert git(wt, "status", "--porcelain=v1").splitlines() == [
        " M README",
        "?? .gitignore",
        "?? blob.bin",
        "?? new.txt",
    ]
    patch = changes.diff(info)
    assert "+world" in patch and "+++ b/new.txt" in patch and "b/ignored.log" not in patch
    # once the worktree is gone, the branch alone is compared
    worktrees.commit_leftovers(info, "the rest")
    worktrees.remove(info)
    after = changes.count(info, final=True)
    assert {f.path: (f.added, f.deleted) for f in after.paths} == by_path and after.final
    assert "+world" in changes.diff(info)


def test_a_long_diff_is_cut_with_a_note(repo: Path) -> None:
    info = worktrees.create(repo, name="w", flight_id=new_id())
    (Path(info.path) / "big.txt").write_text("line\n" * 50_000)
    patch = changes.diff(info, limit=10_000)
    assert len(patch.encode()) < 10_200
    assert "the rest was cut" in patch


def test_the_closing_commit_takes_the_users_identity_from_the_environment_without_a_git_config(
    repo: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "empty-home"))  # GIT_AUTHOR_* and GIT_COMMITTER_* set, no config
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    info = worktrees.create(repo, name="w", flight_id=new_id())
    (Path(info.path) / "x").write_text("x\n")
    assert worktrees.commit_leftovers(info, "made x") is not None
    assert git(repo, "log", "-1", "--format=%an <%ae> / %cn", info.branch).strip() == (
        "Test Person <test@example.invalid> / Test Person"
    )
