"""The README's tour, read from README.md itself and run by bash in a fresh folder.

The folder stands for a fresh clone after the README's install: its `.venv` is this
installation's venv (making a venv and installing into it is too slow for the suite). The shell
starts with the system's PATH only, as a newcomer's does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from wavewait.core.exits import SIGNALLED, Exit

from conftest import clean_env

README = Path(__file__).resolve().parents[2] / "README.md"
CLI_PAGE = README.parent / "docs" / "cli.md"
VENV = sys.prefix
#: passes only when the `python3` found on PATH is no venv's: the user's own Python
SYSTEM_PYTHON = "python3 -c 'import sys; sys.exit(sys.prefix != sys.base_prefix)'"


def section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def tour() -> str:
    """The tour's shell block: the fenced block of "A 60-second tour" that makes a wave."""
    blocks = re.findall(r"^```(?:sh)?\n(.*?)^```$", section(README.read_text(), "A 60-second tour"), re.M | re.S)
    (block,) = [b for b in blocks if "wavewait wait" in b]
    return block


def fresh_clone(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A folder with the README's install done, and a newcomer's environment (no venv on PATH)."""
    clone = tmp_path / "clone"
    (clone / ".venv").mkdir(parents=True)
    for part in os.listdir(VENV):  # bin, lib, pyvenv.cfg: its python3 is a venv's, as after an install
        (clone / ".venv" / part).symlink_to(os.path.join(VENV, part))
    path = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if os.path.isdir(p))
    env = {k: v for k, v in clean_env().items() if k not in ("VIRTUAL_ENV", "PYTHONSAFEPATH")}
    return clone, env | {"PATH": path, "TMPDIR": str(tmp_path)}


def run_script(script: str, clone: Path, env: dict[str, str]) -> list[dict]:
    done = subprocess.run(["bash", "-c", script], cwd=clone, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_the_readme_tour_runs_as_written_in_a_fresh_folder(tmp_path: Path):
    clone, env = fresh_clone(tmp_path)
    (answer,) = run_script(tour(), clone, env)
    by_name = {r["name"]: r for r in answer["results"]}
    assert by_name["reader"]["status"] == "received" and by_name["reader"]["message"] == "found 3 issues"
    assert by_name["tester"]["status"] == "received"
    assert by_name["crasher"]["status"] == "dead" and "exited with code 7" in by_name["crasher"]["reason"]


def test_a_check_after_the_tours_path_line_runs_the_users_python(tmp_path: Path):
    """The tour's PATH puts `wavewait` alone on it: a check's `python3` is the system's, not
    the venv's (which has no pytest after the README's install)."""
    clone, env = fresh_clone(tmp_path)
    (path_line,) = [line for line in tour().splitlines() if line.startswith("export PATH=")]
    setup = tour().split(path_line, 1)[0] + path_line
    checked = f"""{setup}
command -v wavewait >/dev/null || {{ echo "no wavewait on the tour's PATH" >&2; exit 1; }}
id="$(wavewait spawn -q checked -- sh -c 'wavewait notify --message done')"
wavewait wait 60 "$id" --check "{SYSTEM_PYTHON}"
"""
    (answer,) = run_script(checked, clone, env)
    (entry,) = answer["results"]
    assert entry["status"] == "received", f"the check ran the venv's python3: {entry}"


def exit_code_sentence(text: str) -> str:
    found = re.search(r"[Ee]xit codes?:? (0 satisfied.*?)(?:; Ctrl|\(\[words)", text, re.S)
    assert found is not None, "no list of exit codes"
    return " ".join(found.group(1).split())


def test_the_readme_and_the_cli_page_list_every_exit_code():
    for page, text in (
        ("README.md", section(README.read_text(), "The three faces")),
        ("docs/cli.md", CLI_PAGE.read_text()),
    ):
        listed = exit_code_sentence(text)
        missing = [f"{c.value} {c.name}" for c in Exit if not re.search(rf"(?<![\d+] ){c.value} [a-z]", listed)]
        assert missing == [], f"{page} does not list {missing}: {listed}"
        assert f"{SIGNALLED} + N" in listed, page
