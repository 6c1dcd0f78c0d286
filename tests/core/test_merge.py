"""The merge queue on a real repository, with five real flights on a real bus: the order,
the overlap, conflicts and failing checks that stop one flight and not the wave, a second
run that moves nothing, and a run after a fix that continues."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from wavewait.core import flights, merge, messages
from wavewait.core.errors import BadInput
from wavewait.core.exits import Exit

from conftest import until
from gittools import git, make_repo
from mergetools import CHECK, WAVE, first_parents, five_flights, flight, preset_file, subjects

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = make_repo(tmp_path / "project", monkeypatch)
    (r / ".git" / "info" / "exclude").write_text(".wavebus/\n")
    return r


def statuses(result: merge.MergeResult) -> list[tuple[str, str]]:
    return [(f.name, f.status) for f in result.flights]


def would(f: merge.FlightMerge) -> str:
    """A dry run's verdict as the run gives it: `pending` that would be merged is `merged`."""
    return "merged" if f.status == "pending" and (f.why or "").startswith("it would be merged") else f.status


def passes_check(repo: Path, commit: str, tmp: Path) -> bool:
    """The check, run for real on a checkout of `commit`."""
    where = tmp / f"at-{commit[:12]}"
    git(repo, "worktree", "add", "--quiet", "--detach", str(where), commit)
    try:
        return subprocess.run(["/bin/sh", "-c", CHECK], cwd=where, capture_output=True).returncode == 0
    finally:
        git(repo, "worktree", "remove", "--force", str(where))


@pytest.mark.both_buses
async def test_five_branches_merge_in_report_order_and_two_need_input_then_a_fix_continues(bus, repo, tmp_path) -> None:
    fl = await five_flights(bus, repo, preset_file(tmp_path))
    start = git(repo, "rev-parse", "main").strip()

    planned = await merge.merge_wave(bus, WAVE, caller="orchestrator", check=CHECK, dry_run=True)
    assert planned.status == "planned" and planned.target == "main"
    assert [f.name for f in planned.flights] == ["alpha", "pair-one", "broken", "pair-two", "omega"]
    assert [(o.path, o.flights) for o in planned.overlap] == [("src/app.py", ["pair-one", "pair-two"])]
    assert git(repo, "rev-parse", "main").strip() == start  # a dry run moves nothing

    first = await merge.merge_wave(bus, WAVE, caller="orchestrator", check=CHECK)
    assert first.status == "needs_input" and first.exit_code == Exit.NEEDS_INPUT
    assert first.method == "merge --no-ff"
    assert statuses(first) == [
        ("alpha", "merged"),
        ("pair-one", "merged"),
        ("broken", "check_failed"),
        ("pair-two", "conflict"),
        ("omega", "merged"),
    ]
    by = {f.name: f for f in first.flights}
    assert by["pair-two"].files == ["src/app.py"]
    assert "broken.flag: the build is broken" in (by["broken"].output or "")
    # three merge commits on main, in order, each one flight's, each passing the check
    assert subjects(repo)[:3] == [
        "Merge wavewait/w5/omega (omega) into main",
        "Merge wavewait/w5/pair-one (pair-one) into main",
        "Merge wavewait/w5/alpha (alpha) into main",
    ]
    merges = first_parents(repo)[:3]
    assert first_parents(repo)[3] == start
    assert all(passes_check(repo, c, tmp_path) for c in merges)
    assert (repo / "alpha.txt").read_text() == "alpha\n"  # main is checked out: its files followed
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    # the progress is on the bus: per flight, and the whole result for any view
    doc = await merge.stored(bus, WAVE)
    kept = doc["targets"]["main"]["flights"]
    assert kept[fl["broken"].id]["status"] == "check_failed" and kept[fl["alpha"].id]["status"] == "merged"
    assert kept[fl["alpha"].id]["commit"] == first_parents(repo)[2]
    assert doc["result"]["done"] is True and [f["status"] for f in doc["result"]["flights"]] == [
        f.status for f in first.flights
    ]
    # the two that stopped need input, with the files / the check's lines as their question
    two = await bus.get_agent(fl["pair-two"].id)
    broken = await bus.get_agent(fl["broken"].id)
    assert two.state == "needs_input" and "src/app.py" in two.question
    assert broken.state == "needs_input" and broken.asked_by == "merge"
    asked = [i for i in await bus.peek("orchestrator") if i.type == "question"]
    assert {i.sender for i in asked} == {fl["pair-two"].id, fl["broken"].id}
    assert any("broken.flag: the build is broken" in i.body for i in asked)
    with pytest.raises(BadInput, match="stopped by the merge queue"):
        await messages.answer(bus, "orchestrator", fl["broken"].id, "ok")

    # a second run moves nothing and asks nothing again
    tip = git(repo, "rev-parse", "main").strip()
    again = await merge.merge_wave(bus, WAVE, caller="orchestrator", check=CHECK)
    assert statuses(again) == statuses(first)
    assert git(repo, "rev-parse", "main").strip() == tip
    assert len([i for i in await bus.peek("orchestrator") if i.type == "question"]) == 2

    # fix the broken branch (a commit on it), run again: it merges, and only it
    wt = Path(fl["broken"].worktree.path)
    git(wt, "rm", "--quiet", "broken.flag")
    (wt / "fixed.txt").write_text("fixed\n")
    git(wt, "add", "fixed.txt")
    git(wt, "commit", "--quiet", "-m", "broken: fixed")
    third = await merge.merge_wave(bus, WAVE, caller="orchestrator", check=CHECK)
    assert dict(statuses(third)) == {
        "alpha": "merged",
        "pair-one": "merged",
        "broken": "merged",
        "pair-two": "conflict",
        "omega": "merged",
    }
    assert subjects(repo)[0] == "Merge wavewait/w5/broken (broken) into main"
    assert first_parents(repo)[1] == tip  # one new merge commit: nothing merged twice
    assert passes_check(repo, first_parents(repo)[0], tmp_path)
    assert (await bus.get_agent(fl["broken"].id)).state == "closed"  # its question withdrawn
    assert (await bus.get_agent(fl["pair-two"].id)).state == "needs_input"


async def test_flights_that_did_not_report_or_died_are_left_out_and_listed(bus, repo, tmp_path) -> None:
    presets = preset_file(tmp_path)
    from wavewait.core import admission, agents, flights

    await agents.register(bus, "orchestrator")
    done = await flight(bus, repo, presets, "done", {"done.txt": "x\n"})
    plan = '{"events": "claude-success.jsonl", "lines": 1, "then": "block", "write": {"w.txt": "w"}}'
    running = await flights.start(
        bus, "running", parent_id="orchestrator", preset="replay", presets_file=presets, prompt=plan, cwd=str(repo),
        wave=WAVE,
    )  # fmt: skip
    killed = await flights.start(
        bus, "killed", parent_id="orchestrator", preset="replay", presets_file=presets, prompt=plan, cwd=str(repo),
        wave=WAVE,
    )  # fmt: skip
    await admission.kill(bus, killed)
    try:
        result = await merge.merge_wave(bus, WAVE, caller="orchestrator")
        by = {f.name: f for f in result.flights}
        assert by["done"].status == "merged"
        assert by["running"].status == "skipped" and "did not report" in (by["running"].why or "")
        assert by["killed"].status == "skipped" and (by["killed"].why or "").startswith("dead")
        assert result.status == "merged" and result.exit_code == 0
        assert git(repo, "merge-base", "--is-ancestor", done.worktree.branch, "main") == ""
    finally:
        await admission.kill(bus, running)


async def test_a_dirty_checked_out_target_is_refused_before_anything_moves(bus, repo, tmp_path) -> None:
    await five_flights(bus, repo, preset_file(tmp_path))
    (repo / "README").write_text("changed here\n")
    start = git(repo, "rev-parse", "main").strip()
    with pytest.raises(BadInput, match=r"checked out at .* with uncommitted changes \(README\)"):
        await merge.merge_wave(bus, WAVE, caller="orchestrator")
    assert git(repo, "rev-parse", "main").strip() == start
    # into another branch, not checked out anywhere: the ref alone moves
    git(repo, "branch", "integration")
    result = await merge.merge_wave(bus, WAVE, caller="orchestrator", into="integration")
    assert result.target == "integration"
    assert dict(statuses(result))["pair-two"] == "conflict"
    assert git(repo, "rev-parse", "main").strip() == start
    assert len(first_parents(repo, "integration")) == 5  # the first commit and four merges


async def test_resolve_with_hands_a_conflict_to_a_new_flight_and_retries_it(bus, repo, tmp_path) -> None:
    from wavewait.core import agents

    presets = preset_file(tmp_path)
    resolver = Path(__file__).with_name("resolve_agent.py")
    with open(presets, "a") as f:
        f.write(
            f'\n[presets.resolver]\nprogram = "{sys.executable}"\nargs = ["{resolver}", "{{prompt}}"]\nevents = "none"\n'
        )
    await agents.register(bus, "orchestrator")
    one = await flight(bus, repo, presets, "pair-one", {"src/app.py": "a = 10\nb = 2\n"})
    two = await flight(bus, repo, presets, "pair-two", {"src/app.py": "a = 20\nb = 2\n"})
    result = await merge.merge_wave(
        bus, WAVE, caller="orchestrator", check=CHECK, resolve_with="resolver", presets_file=presets
    )
    assert statuses(result) == [("pair-one", "merged"), ("pair-two", "merged")], result
    fixers = [a for a in await bus.list_agents() if a.wave == f"{WAVE}-merge"]
    assert [(a.name, a.status) for a in fixers] == [("pair-two-resolve", "closed")]
    assert fixers[0].command[-1].startswith(f"The git branch {two.worktree.branch} (checked out here) conflicts")
    assert (repo / "src" / "app.py").read_text() == "a = 20\na = 10\nb = 2\n"  # both sides, as it resolved them
    assert subjects(repo)[:2] == [
        f"Merge {two.worktree.branch} (pair-two) into main",
        f"Merge {one.worktree.branch} (pair-one) into main",
    ]
    assert (await bus.get_agent(two.id)).state == "closed"  # never asked: the conflict was resolved


async def test_queue_flights_merge_in_dependency_order_and_a_stopped_one_holds_back_its_dependents(
    bus, repo, tmp_path
) -> None:
    from wavewait.core import agents
    from wavewait.core.model import Task

    presets = preset_file(tmp_path)
    wave = "queue-q1"
    await agents.register(bus, "orchestrator")
    # they report app, docs, lib; app's task depends on lib's
    app = await flight(bus, repo, presets, "app", {"app.txt": "app\n"}, wave=wave)
    docs = await flight(bus, repo, presets, "docs", {"docs.txt": "docs\n"}, wave=wave)
    lib = await flight(bus, repo, presets, "lib", {"src/app.py": "a = 'lib'\nb = 2\n"}, wave=wave)
    store = bus.tasks("q1")
    ids = {"app": "a" * 32, "lib": "b" * 32, "docs": "c" * 32}
    for name, flight_, deps in (("app", app, [ids["lib"]]), ("lib", lib, []), ("docs", docs, [])):
        task = Task(id=ids[name], queue="q1", type="code", inputs={"n": name}, depends_on=deps, agent_id=flight_.id)
        assert await store.add(task, 100) is None
        assert await store.update(task.id, ("queued",), status="done") is not None
    # main moved meanwhile, on the line lib changes
    (repo / "src" / "app.py").write_text("a = 'main'\nb = 2\n")
    git(repo, "commit", "--quiet", "-am", "main moved")

    planned = await merge.merge_wave(bus, wave, caller="orchestrator", dry_run=True)
    assert [f.name for f in planned.flights] == ["lib", "app", "docs"]  # dependencies first, then enqueue order

    first = await merge.merge_wave(bus, wave, caller="orchestrator")
    assert statuses(first) == [("lib", "conflict"), ("app", "pending"), ("docs", "merged")]
    assert first.flights[1].why == "it depends on lib, not merged yet"
    assert first.status == "needs_input"

    # lib's fix: main merged into its branch, the conflict resolved there
    wt = Path(lib.worktree.path)
    subprocess.run(["git", "merge", "--quiet", "main"], cwd=wt, capture_output=True)
    (wt / "src" / "app.py").write_text("a = 'lib'\nb = 2\n")
    git(wt, "commit", "--quiet", "-am", "lib: main merged")
    second = await merge.merge_wave(bus, wave, caller="orchestrator")
    assert statuses(second) == [("lib", "merged"), ("app", "merged"), ("docs", "merged")]
    assert second.status == "merged" and second.exit_code == 0
    assert subjects(repo)[:3] == [
        f"Merge {app.worktree.branch} (app) into main",
        f"Merge {lib.worktree.branch} (lib) into main",
        f"Merge {docs.worktree.branch} (docs) into main",
    ]


async def test_a_target_moved_during_the_check_is_never_overwritten(bus, repo, tmp_path) -> None:
    import anyio

    from wavewait.core import agents

    presets = preset_file(tmp_path)
    await agents.register(bus, "orchestrator")
    alpha = await flight(bus, repo, presets, "alpha", {"alpha.txt": "alpha\n"})
    git(repo, "branch", "integration")
    running, gate = tmp_path / "running", tmp_path / "gate"
    check = f"touch {running}; while [ ! -e {gate} ]; do sleep 0.05; done"  # holds the merge in its check
    failed: list[BaseException] = []

    async def run() -> None:
        try:
            await merge.merge_wave(bus, WAVE, caller="orchestrator", into="integration", check=check)
        except merge.MergeError as e:
            failed.append(e)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await until(running.exists, 30, "the check to start")
        (repo / "other.txt").write_text("someone else\n")
        git(repo, "add", "other.txt")
        git(repo, "commit", "--quiet", "-m", "someone else")
        someone = git(repo, "rev-parse", "HEAD").strip()
        git(repo, "update-ref", "refs/heads/integration", someone)  # the target moves under the merge
        gate.write_text("")
    assert failed and "integration moved during the merge" in str(failed[0])
    assert git(repo, "rev-parse", "integration").strip() == someone  # not overwritten
    assert (await merge.stored(bus, WAVE))["result"]["error"].startswith("integration moved")
    # run again: it merges onto where the target is now
    again = await merge.merge_wave(bus, WAVE, caller="orchestrator", into="integration", check=check)
    assert statuses(again) == [("alpha", "merged")]
    assert git(repo, "rev-parse", "integration^1").strip() == someone
    assert git(repo, "rev-parse", "integration^2").strip() == git(repo, "rev-parse", alpha.worktree.branch).strip()


@pytest.mark.long
@pytest.mark.both_buses
async def test_a_dry_run_plans_what_the_merge_does_with_pruned_flights_and_reused_names(bus, repo, tmp_path) -> None:
    """Five flights merged (pair-two conflicts), pruned (the four merged branches deleted),
    then two later flights of the same names: alpha with a change, omega with none. The dry
    run's plan is the merge's outcome flight by flight, and the pruned flights are never
    matched to the new flights' branches."""
    presets = preset_file(tmp_path)
    old = await five_flights(bus, repo, presets)
    first = await merge.merge_wave(bus, WAVE, caller="orchestrator")
    assert [s for _, s in statuses(first)] == ["merged", "merged", "merged", "conflict", "merged"]
    pruned = await flights.prune(bus, wave=WAVE)
    assert {e["name"] for e in pruned["branches_deleted"]} == {"alpha", "pair-one", "broken", "omega"}
    new_alpha = await flight(bus, repo, presets, "alpha", {"alpha.txt": "alpha, again\n"})
    new_omega = await flight(bus, repo, presets, "omega", {})  # no change: nothing to merge
    assert new_alpha.worktree.branch == old["alpha"].worktree.branch == "wavewait/w5/alpha"  # the name, made again
    assert new_omega.worktree.branch == old["omega"].worktree.branch
    tip = git(repo, "rev-parse", "main").strip()

    planned = await merge.merge_wave(bus, WAVE, caller="orchestrator", dry_run=True)
    assert git(repo, "rev-parse", "main").strip() == tip  # a dry run moves nothing
    real = await merge.merge_wave(bus, WAVE, caller="orchestrator")
    assert [f.agent_id for f in planned.flights] == [f.agent_id for f in real.flights]
    assert [would(f) for f in planned.flights] == [f.status for f in real.flights]
    assert statuses(real) == [
        ("alpha", "skipped"),
        ("pair-one", "skipped"),
        ("broken", "skipped"),
        ("pair-two", "conflict"),
        ("omega", "skipped"),
        ("alpha", "merged"),
        ("omega", "merged"),
    ]
    plan, got = ({f.agent_id: f for f in r.flights} for r in (planned, real))
    for aid, f in got.items():  # the same words where the plan knows them for sure
        if f.status in ("skipped", "conflict"):
            assert (plan[aid].why, plan[aid].files) == (f.why, f.files) or f.status == "conflict"
    assert plan[old["pair-two"].id].files == got[old["pair-two"].id].files == ["src/app.py"]
    # the pruned flights: their own branches are gone, whoever has the name now
    assert got[old["alpha"].id].why == (
        f"its branch wavewait/w5/alpha is gone: that name is now the branch of alpha ({new_alpha.id[:8]})"
    )
    assert got[old["pair-one"].id].why == "its branch wavewait/w5/pair-one is gone"
    assert got[old["alpha"].id].commit is None
    # the new alpha merged once, as itself; the new omega had nothing to merge
    assert plan[new_alpha.id].why == "it would be merged" and plan[new_alpha.id].files == ["alpha.txt"]
    assert got[new_alpha.id].commit == git(repo, "rev-parse", "main").strip()
    assert subjects(repo)[0] == "Merge wavewait/w5/alpha (alpha) into main" and first_parents(repo)[1] == tip
    assert (repo / "alpha.txt").read_text() == "alpha, again\n"
    assert plan[new_omega.id].why == "its branch is already in the target: nothing would be merged"
    assert got[new_omega.id].why == "its branch is already in the target" and got[new_omega.id].commit is None

    # nor does a pruned flight's diff show the new one's work
    with pytest.raises(BadInput, match=f"wavewait/w5/alpha is now the branch of flight {new_alpha.id[:8]}"):
        await flights.diff(await bus.get_agent(old["alpha"].id))
    assert "alpha, again" in await flights.diff(await bus.get_agent(new_alpha.id))

    # a branch made before git kept its flight (the key unset): the newest flight of the name has it
    git(repo, "config", "--unset", "branch.wavewait/w5/alpha.wavewait-flight")
    again = await merge.merge_wave(bus, WAVE, caller="orchestrator", dry_run=True)
    rerun = await merge.merge_wave(bus, WAVE, caller="orchestrator")
    assert [would(f) for f in again.flights] == [f.status for f in rerun.flights] == [f.status for f in real.flights]
    assert git(repo, "rev-parse", "main").strip() == got[new_alpha.id].commit  # nothing merged twice
    # and prune deletes each branch for its own flight only
    pruned = await flights.prune(bus, wave=WAVE)
    assert {(e["agent_id"], e["branch"]) for e in pruned["branches_deleted"]} == {
        (new_alpha.id, "wavewait/w5/alpha"),
        (new_omega.id, "wavewait/w5/omega"),
    }


@pytest.mark.both_buses
async def test_a_dry_run_plans_each_stop_and_wait_the_merge_then_gives(bus, repo, tmp_path) -> None:
    """With the check: the plan knows the conflict before any merge (git merge-tree), and
    after a run, the failed check that a second run would give again without running it."""
    await five_flights(bus, repo, preset_file(tmp_path))
    planned = await merge.merge_wave(bus, WAVE, caller="orchestrator", check=CHECK, dry_run=True)
    assert [(f.name, f.status) for f in planned.flights] == [
        ("alpha", "pending"),
        ("pair-one", "pending"),
        ("broken", "pending"),  # its check is not run by a plan
        ("pair-two", "conflict"),
        ("omega", "pending"),
    ]
    assert all(f.why == "it would be merged, if the check passes" for f in planned.flights if f.status == "pending")
    assert planned.flights[3].files == ["src/app.py"]
    assert "would conflict" in planned.summary() and "planned" in planned.summary()
    first = await merge.merge_wave(bus, WAVE, caller="orchestrator", check=CHECK)
    assert [f.status for f in first.flights] == ["merged", "merged", "check_failed", "conflict", "merged"]
    # omega moved the target after broken failed: a second run tries broken's check again, and
    # a plan cannot say how a check it does not run ends
    between = await merge.merge_wave(bus, WAVE, caller="orchestrator", check=CHECK, dry_run=True)
    assert [would(f) for f in between.flights] == ["merged", "merged", "merged", "conflict", "merged"]
    second = await merge.merge_wave(bus, WAVE, caller="orchestrator", check=CHECK)
    assert [f.status for f in second.flights] == [f.status for f in first.flights]
    # now it failed on this very target: a run would repeat that stop, and the plan says so
    again = await merge.merge_wave(bus, WAVE, caller="orchestrator", check=CHECK, dry_run=True)
    third = await merge.merge_wave(bus, WAVE, caller="orchestrator", check=CHECK)
    assert [f.status for f in again.flights] == [f.status for f in third.flights] == [f.status for f in first.flights]
    assert "it would stop the same way" in (again.flights[2].why or "")
    assert again.flights[2].output == third.flights[2].output
    assert [f.why for f in again.flights[:2]] == ["its branch is already in the target: nothing would be merged"] * 2
